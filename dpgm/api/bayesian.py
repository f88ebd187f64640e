"""Bayesian networks: complete-data MLE / Dirichlet estimates and EM with latent variables."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from dpgm.algorithms.bayesian import (
    bayesian_network_estimate,
    family_loglik,
    log_marginal_likelihood,
    n_free_parameters,
)
from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.goodness import deviance_and_pearson
from dpgm.algorithms.result import FitResult
from dpgm.api.checks import complete_counts, saturated_scope
from dpgm.api.em_control import em_result, initial_models, maybe_persist, run_em, total_rows
from dpgm.api.labels import StateOrder, align
from dpgm.api.results import fit_result
from dpgm.api.spec_checks import check_latent_not_observed, edge_pairs
from dpgm.cpt import PRIORS, random_tables
from dpgm.errors import DataError, SpecError
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.stats.source import DataSource


def _bn_joint(model: BayesianNetwork, order: Sequence[str]) -> np.ndarray:
    letters = {v: chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i, v in enumerate(order)}
    operands, subscripts = [], []
    for v in model.variables:
        table = model.cpds[v]
        operands.append(table.values)
        subscripts.append("".join(letters[d] for d in table.dims))
    return np.einsum(",".join(subscripts) + "->" + "".join(letters[v] for v in order), *operands)


def _check_prior(prior, equivalent_sample_size) -> None:
    if prior is not None and prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    if prior != "BDeu":
        return
    if not isinstance(equivalent_sample_size, numbers.Real) or isinstance(equivalent_sample_size, bool):
        raise TypeError(f"equivalent_sample_size must be a number, got {equivalent_sample_size!r}")
    if not (math.isfinite(equivalent_sample_size) and equivalent_sample_size > 0):
        raise ValueError(f"equivalent_sample_size must be finite and positive, got {equivalent_sample_size!r}")


def _complete_data_fit(model, source: DataSource, method, prior, equivalent_sample_size, pseudo_counts):
    """``(method, prior, model, order, pseudo_counts)`` of a complete-data fit: the method and prior checked
    (``mle`` with a prior is ``bayes``; ``bayes`` without one BDeu), the model and the pseudo-counts in the
    data's order of the labels."""
    methods = ("mle", "bayes")
    if method not in methods:
        raise ValueError(f"unknown method {method!r} for a BayesianNetwork; expected one of {methods} (or 'em')")
    if method == "bayes" and prior is None:
        prior = "BDeu"
    if method == "mle" and prior is not None:
        method = "bayes"
    _check_prior(prior, equivalent_sample_size)
    states = source.states
    model, order = align(model, source.data, states=states)
    pseudo_counts = order.tables(pseudo_counts, dict(zip(model.variables, model.families, strict=True)), states)
    return method, prior, model, order, pseudo_counts


def fit_bayesian_network(model, source: DataSource, method, *, prior=None, equivalent_sample_size=5.0,
                          pseudo_counts=None, goodness_of_fit=True) -> FitResult:
    method, prior, model, order, pseudo_counts = _complete_data_fit(model, source, method, prior,
                                                                    equivalent_sample_size, pseudo_counts)
    states = source.states
    families = model.families
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    scopes = families + ([saturated] if saturated else [])
    tables = complete_counts(source, scopes)
    estimate, info = bayesian_network_estimate(
        model, tables, prior=prior, equivalent_sample_size=equivalent_sample_size,
        pseudo_counts_by_variable=pseudo_counts,
    )
    score = None if prior is None else log_marginal_likelihood(
        model, tables, prior=prior, equivalent_sample_size=equivalent_sample_size,
        pseudo_counts_by_variable=pseudo_counts,
    )  # the same family counts: no further pass over the data
    n_params = n_free_parameters(estimate)
    g2 = pearson = df = None
    if saturated:
        observed = tables[saturated].values
        g2, pearson = deviance_and_pearson(observed, _bn_joint(estimate, saturated))
        df = int(observed.size - 1 - n_params)
    return order.restore(fit_result(estimate, method, loglik=family_loglik(estimate, tables),
                                    n_rows=float(tables.n_rows), n_params=n_params, info=info,
                                    log_marginal_likelihood=score, g2=g2, pearson=pearson, df=df))


def bayesian_network_replicates(model, source: DataSource, method, *, prior=None, equivalent_sample_size=5.0,
                                pseudo_counts=None, goodness_of_fit=True) -> tuple[dict[str, tuple], np.ndarray]:
    """Every bootstrap replicate's complete-data fit at once, from their stacked family counts.

    ``source`` is a replicate's (``source.resampling`` set): the counts of all the replicates come
    from one kernel per chunk (:func:`dpgm.stats.counts.replicate_count_arrays`) and are normalised
    together (:func:`~dpgm.algorithms.bayesian.replicate_estimates`); replicate ``b``'s tables and
    log-likelihood are :func:`fit_bayesian_network`'s on the data weighted by its Poisson weights.
    The tables counted are those of :func:`fit_bayesian_network` (the saturated table too, with
    ``goodness_of_fit``, where it is small): the fit on the data, its source's replicate -1, takes
    its tables from the same kernel (no replicate reports a goodness of fit).

    Returns
    -------
    (dict, numpy.ndarray)
        ``"table:<variable>"`` -> ``(dims, values)``: its tables over ``dims`` = ``("replicate",
        variable, *parents)``, each in the order of the data's labels (``source.states``); and each
        replicate's log-likelihood.

    Raises
    ------
    DataError
        Rows with missing values in a family (as :func:`dpgm.api.checks.complete_counts`).
    """
    from dpgm.algorithms.bayesian import replicate_estimates
    from dpgm.cpt import pseudo_counts as family_pseudo_counts
    from dpgm.stats.counts import replicate_count_arrays

    method, prior, model, _, pseudo_counts = _complete_data_fit(model, source, method, prior,
                                                               equivalent_sample_size, pseudo_counts)
    states = source.states
    families = model.families
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = replicate_count_arrays(source, families + ([saturated] if saturated else []))
    for scope, missing in tables.n_missing.items():
        worst = int(np.argmax(missing))
        if missing[worst] > 1e-9 * max(float(tables.n_rows[worst]), 1.0):
            raise DataError(
                f"{missing[worst]:,} rows have missing values in {scope!r} (replicate {worst}); complete-data "
                "methods refuse them rather than drop them: fit with method='em'")
    counts = [tables[f] for f in families]
    alphas = [family_pseudo_counts(f, c.shape[1:], prior, equivalent_sample_size, (pseudo_counts or {}).get(f[0]))
              for f, c in zip(families, counts, strict=True)]
    estimates, loglik = replicate_estimates(counts, alphas)
    return {f"table:{f[0]}": (("replicate", *f), theta) for f, theta in zip(families, estimates, strict=True)}, loglik


def _family_plan(model: BayesianNetwork):
    from dpgm.inference.families import FamilyPlan

    return FamilyPlan(model.variables, {v: model.cardinality(v) for v in model.variables},
                      {v: model.parents(v) for v in model.variables})


def _random_starts(model: BayesianNetwork, plan, n_init: int, random_state,
                   order: StateOrder | None = None) -> list[np.ndarray]:
    """The parameters of ``[model.randomized(rng) for _ in range(n_init)]``: the same draw, flattened.

    The draw is in ``model``'s order of its labels, then permuted into the data's
    (``order``), so a seed gives the same starts, by label, whatever the data's order.
    """
    rng = np.random.default_rng(random_state)
    shapes = {v: table.shape for v, table in model.cpds.items()}
    starts = []
    for _ in range(n_init):
        tables = random_tables(rng, shapes)
        if order:
            tables = {v: order.array(t, model.cpds[v].dims) for v, t in tables.items()}
        starts.append(plan.flatten(tables))
    return starts


class BayesianNetworkEM(EMFamily):
    """EM on raw arrays: the parameters are one vector (:class:`~dpgm.inference.families.FamilyPlan`'s
    layout), the E step returns expected family counts in the same layout, the M step normalizes
    them; labels are attached only for checkpoints and the result. SQUAREM works on the
    log-probabilities, renormalised per parent configuration."""

    def __init__(self, model: BayesianNetwork, plan, source: DataSource, observed, pseudo):
        self.model, self.plan, self.source, self.observed = model, plan, source, observed
        self.pseudo = pseudo

    def estep(self, thetas, iteration, rows=None):
        from dpgm.cluster import iteration_span
        from dpgm.inference.families import FamilyParameters
        from dpgm.stats.expected import expected_counts

        with iteration_span("dpgm-em", iteration):
            results = expected_counts(self.source, [FamilyParameters(self.plan, t) for t in thetas], self.observed,
                                      rows=rows)
        if any(s["tree_rows"] for _, s in results) and not self.plan.has_tree:
            self.plan.build_tree()  # once, here: later passes ship it instead of each worker building it
        return results

    def mstep(self, theta: np.ndarray, statistics: dict) -> np.ndarray:
        counts = statistics["counts"]
        return self.plan.normalize(counts if self.pseudo is None else counts + self.pseudo)[0]

    def vector(self, theta: np.ndarray) -> np.ndarray:
        return theta

    def unconstrained(self, theta: np.ndarray) -> np.ndarray:
        from dpgm.algorithms.squarem import group_log

        return group_log(theta)

    def constrained(self, vector: np.ndarray, like: np.ndarray) -> np.ndarray:
        from dpgm.algorithms.squarem import group_softmax

        return group_softmax(vector, self.plan.column, self.plan.n_columns)

    def from_model(self, network: BayesianNetwork) -> np.ndarray:
        return self.plan.flatten({v: network.cpds[f[0]].transpose(*f).values
                                  for v, f in zip(self.model.variables, self.model.families, strict=True)})

    def to_model(self, theta: np.ndarray) -> BayesianNetwork:
        tables = self.plan.tables(theta)
        return BayesianNetwork({v: self.model.cpds[v].copy(deep=False, data=tables[v].copy())
                                for v in self.model.variables})

    def add(self, first: dict, second: dict) -> dict:
        return {k: first[k] + second[k] for k in first}

    def subtract(self, total: dict, part: dict) -> dict:
        return {k: total[k] - part[k] for k in total}

    def row_blocks(self, n_blocks: int):
        from dpgm.stats.expected import row_blocks

        return row_blocks(self.source, self.observed, n_blocks)


def fit_bayesian_network_em(model: BayesianNetwork, source: DataSource, *, tol, max_iter, callback,
                             n_init: int = 1, random_state=None, init=None, checkpoint=None, resume=None,
                             persist: bool = False, prior=None, equivalent_sample_size: float = 5.0,
                             pseudo_counts=None, accelerate="squarem", incremental=False,
                             prune_restarts=False) -> FitResult:
    """EM for a Bayesian network with latent variables and missing values (:class:`BayesianNetworkEM`)."""
    from dpgm.cluster import current_client

    if not model.is_parameterized:
        raise ValueError("EM needs the states of every variable, latent ones included: "
                         "give BayesianNetwork.from_edges(edges, states)")
    _check_prior(prior, equivalent_sample_size)
    states = source.states
    observed = [v for v in model.variables if v in states]
    latent = [v for v in model.variables if v not in states]
    if not observed:
        raise DataError(f"none of the model's variables are in the data; data variables: {sorted(states)}")
    mine = model  # random starts are drawn in the model's own order of its labels
    model, order = align(model, source.data, states=states, variables=observed)
    pseudo_counts = order.tables(pseudo_counts, dict(zip(model.variables, model.families, strict=True)), states)
    plan = _family_plan(model)
    pseudo = plan.pseudo_counts(prior, equivalent_sample_size, pseudo_counts)
    source = maybe_persist(source.with_client(source.client or current_client()), observed, persist)
    family = BayesianNetworkEM(model, plan, source, observed, pseudo)
    if init in (None, "random") and n_init >= 1:
        starts = _random_starts(mine, plan, n_init, random_state, order)
    else:
        starts = [family.from_model(order.to_data(m)) for m in initial_models(mine, n_init, random_state, init)]
    state = run_em(family, starts, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, incremental=incremental,
                   prune_restarts=prune_restarts)
    from dpgm.algorithms.bayesian import n_free_parameters

    result = em_result(state, "em", n_params=n_free_parameters(model), n_rows=total_rows(source))
    result.info["latent"] = latent
    result.info["tree_width"] = plan.structure.width if plan.has_tree else None  # None: no row needed the tree
    return order.restore(result)


def bayesian_network_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                               ) -> tuple[BayesianNetwork, str | None]:
    """A ``model: bayesian_network`` specification: ``edges`` or a shipped ``network``, and ``latent`` variables
    (then fitted by EM)."""
    from dpgm.networks import load_network

    latent = spec.get("latent") or {}
    if not isinstance(latent, dict):
        raise SpecError("'latent' must map each latent variable to its state labels")
    if "network" in spec and "edges" in spec:
        raise SpecError("a bayesian_network takes 'network' or 'edges', not both")
    if "network" in spec:
        try:
            network = load_network(str(spec["network"]))
        except (FileNotFoundError, ValueError) as error:
            raise SpecError(f"'network': {error}") from None
        edges, variables = network.edges, network.variables
    else:
        edges, variables = edge_pairs(spec, "bayesian_network"), spec.get("variables", ())
    check_latent_not_observed(list(latent), states)
    if not latent:
        return BayesianNetwork.from_edges(edges, variables=variables), None
    names = {v for e in edges for v in e} | set(variables)
    missing = sorted(v for v in names if v not in states and v not in latent)
    if missing:
        raise SpecError(f"variables {missing} are neither in the data nor declared under 'latent'")
    all_states = {v: list(states[v]) for v in names if v in states} | {
        k: [str(x) for x in v] for k, v in latent.items()}
    return BayesianNetwork.from_edges(edges, all_states, variables=variables), "em"


def latent_class_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                           ) -> tuple[BayesianNetwork, str]:
    """A ``model: latent_class`` specification: ``n_classes`` and the ``observed`` variables (default: every
    categorical variable of the data), fitted by EM."""
    from dpgm.api.checks import check_latent_states
    from dpgm.models.bayesian_network import latent_class_model

    variable = spec.get("variable", "class")
    check_latent_not_observed([variable], states)
    observed = spec.get("observed") or sorted(states)
    unknown = sorted(set(observed) - set(states))
    if unknown or not isinstance(spec.get("n_classes"), int):
        raise SpecError(f"a latent_class model needs 'n_classes' (an integer) and observed variables of the "
                        f"data (unknown: {unknown})")
    check_latent_states(variable, spec["n_classes"],  # before its tables exist
                        1 + sum(len(states[v]) for v in observed), kind="latent class variable")
    return latent_class_model({v: states[v] for v in observed}, spec["n_classes"], latent=variable), "em"

"""EM for Markov networks (IPF M step) and log-linear models (GIS M step)."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.features import feature_set
from dpgm.algorithms.gis import gis
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import engine_for, zero_offsets
from dpgm.api.checks import check_variables, data_states
from dpgm.api.em_control import em_result, event_callback, initial_models, maybe_persist, total_rows
from dpgm.errors import DataError
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.zeros import check_structural_zeros, merge_structural_zeros


def fit_undirected_em(model, data, *, tol, max_iter, client, progress, callback, m_step: str | None = None,
                      inner_iter: int = 5, n_init: int = 1, random_state=None, init=None, checkpoint=None,
                      resume=None, persist: bool = False, structural_zeros=None) -> FitResult:
    """EM for Markov networks (IPF M step) and log-linear models (GIS M step), warm-started inner loops.

    The loop runs on arrays (log-potentials by scope, or the weight vector); the
    junction tree's triangulation and the features are built once, and labels are
    attached only for checkpoints and the result. Structural zeros (the model's
    and ``structural_zeros=``, over any variables, latent ones included) are a
    fixed factor of every E step's tree and of the M step.
    """
    from dpgm.algorithms.em import em
    from dpgm.algorithms.tree_ipf import tree_ipf
    from dpgm.cluster import current_client, iteration_span
    from dpgm.inference.scope_enumeration import ScopeEnumeration
    from dpgm.inference.triangulation import build_tree
    from dpgm.stats.expected import expected_counts

    markov = isinstance(model, MarkovNetwork)
    m_step = m_step or ("ipf" if markov else "gis")
    if (markov and m_step != "ipf") or (not markov and m_step != "gis"):
        raise ValueError(f"m_step={m_step!r}: Markov networks use 'ipf', log-linear models 'gis'")
    states = data_states(data)
    observed = [v for v in model.variables if v in states]
    if not observed:
        raise DataError(f"none of the model's variables are in the data; data variables: {sorted(states)}")
    check_variables(observed, model.states, states)
    cards = {v: len(model.states[v]) for v in model.variables}
    zeros = merge_structural_zeros(model.structural_zeros,
                                   check_structural_zeros(structural_zeros, model.variables, model.states),
                                   model.variables)
    model = model.with_structural_zeros(zeros)
    fixed = zero_offsets(zeros)
    client = client or current_client()
    data = maybe_persist(data, observed, persist, client)
    empty = np.zeros((1, 0), dtype=np.int64)
    if markov:
        scopes = list(model.scopes)

        def from_model(network: MarkovNetwork) -> dict:
            with np.errstate(divide="ignore"):
                return {s: np.log(network.potentials[s].values) for s in scopes}

        def to_model(log_potentials: dict) -> MarkovNetwork:
            return model.with_log_potentials(log_potentials)

        def log_tables(log_potentials: dict) -> dict:
            return log_potentials
    else:
        features, order = feature_set(model)
        scopes = list(features.scopes)
        engine = engine_for(model.variables, {v: model.states[v] for v in model.variables}, fixed)

        def from_model(loglinear: LogLinearModel) -> np.ndarray:
            return loglinear.theta(order)

        def to_model(theta: np.ndarray) -> LogLinearModel:
            return model.with_weights(order, theta)

        def log_tables(theta: np.ndarray) -> dict:
            return features.log_potentials(theta)
    structure = build_tree(model.variables, cards, [*scopes, *fixed])
    fixed_factors = [(s, np.exp(t)) for s, t in fixed.items()]

    def estep(parameters, iteration):
        # rows whose unobserved groups are cheap to enumerate skip the tree (ScopeEnumeration)
        trees = [ScopeEnumeration(model.variables, cards,
                                  [(s, np.exp(t)) for s, t in log_tables(p).items()] + fixed_factors, scopes,
                                  structure)
                 for p in parameters]
        with iteration_span("dpgm-em", iteration):
            results = expected_counts(data, trees, observed, client=client, progress=progress)
        out = []
        for tree, (loglik, clique_counts) in zip(trees, results, strict=True):
            log_z, _ = tree.expected_counts(empty, [])
            n = float(next(iter(clique_counts.values())).sum())
            out.append((loglik - n * log_z, (tree, clique_counts, n)))
        return out

    def mstep(current, statistics):
        tree, clique_counts, n = statistics
        targets = tree.family_counts(clique_counts, scopes)
        if markov:
            return tree_ipf(targets, model.variables, cards, init=current, max_iter=inner_iter, tol=0.0,
                            structure=structure, fixed=fixed).log_potentials
        empirical = features.expectations(targets) / n
        return gis(features, empirical, engine, theta=current, max_iter=inner_iter, tol=0.0).parameters

    starts = [from_model(m) for m in initial_models(model, n_init, random_state, init, randomize=_perturbed)]
    state = em(starts, estep, mstep, max_iter=max_iter, tol=tol, callback=event_callback(client, callback),
               checkpoint=checkpoint, resume=resume, to_model=to_model, from_model=from_model)
    n_params = (LogLinearModel.from_margins(model.scopes, model.states).n_free_parameters() if markov
                else model.n_free_parameters())
    result = em_result(state, "em", n_params=n_params, n_rows=total_rows(data, client))
    result.info["latent"] = [v for v in model.variables if v not in states]
    result.info["m_step"] = m_step
    return result


def _perturbed(model, rng: np.random.Generator):
    """A random start: standard normal noise added to every log-potential or weight."""
    if isinstance(model, MarkovNetwork):
        return model.with_log_potentials(
            {s: np.log(model.potentials[s].values) + rng.normal(0, 1, model.potentials[s].shape)
             for s in model.scopes})
    features, order = feature_set(model)
    return model.with_weights(order, model.theta(order) + rng.normal(0, 1, len(order)))

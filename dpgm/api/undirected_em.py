"""EM for Markov networks (IPF M step) and log-linear models (GIS M step)."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.features import feature_set
from dpgm.algorithms.gis import gis
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import engine_for, zero_offsets
from dpgm.api.em_control import em_result, initial_models, maybe_persist, run_em, total_rows
from dpgm.api.labels import align
from dpgm.errors import DataError
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.zeros import check_structural_zeros, merge_structural_zeros
from dpgm.stats.source import DataSource


class UndirectedEM(EMFamily):
    """EM for Markov networks (IPF M step) and log-linear models (GIS M step) as one EM family.

    Parameters are the log-potentials by scope (Markov) or the weight vector (log-linear),
    both unconstrained already (SQUAREM extrapolates them directly; a log-potential of
    ``-inf``, a cell the fit drove to zero, is held at a finite floor there). The E
    step's statistics are the expected tables of the model's scopes and the rows' total
    weight ``n``, additive over rows.
    """

    incremental_full_first_pass = True  # IPF/GIS updates are multiplicative: a cell left at 0 stays 0

    def __init__(self, model, source: DataSource, observed, cards, structure, fixed, inner_iter, engine=None,
                 features=None):
        self.model, self.source, self.observed, self.cards = model, source, observed, cards
        self.structure, self.fixed = structure, fixed
        self.inner_iter, self.engine, self.features = inner_iter, engine, features
        self.markov = isinstance(model, MarkovNetwork)
        self.scopes = list(model.scopes) if self.markov else list(features.scopes)
        self.fixed_factors = [(s, np.exp(t)) for s, t in fixed.items()]
        if not self.markov:
            self.order = feature_set(model)[1]

    def _log_tables(self, parameters) -> dict:
        return parameters if self.markov else self.features.log_potentials(parameters)

    def estep(self, parameters, iteration, rows=None):
        from dpgm.cluster import iteration_span
        from dpgm.inference.scope_enumeration import ScopeEnumeration
        from dpgm.stats.expected import expected_counts

        variables = self.model.variables
        # rows whose unobserved groups are cheap to enumerate skip the tree (ScopeEnumeration)
        trees = [ScopeEnumeration(variables, self.cards,
                                  [(s, np.exp(t)) for s, t in self._log_tables(p).items()] + self.fixed_factors,
                                  self.scopes, self.structure)
                 for p in parameters]
        with iteration_span("dpgm-em", iteration):
            results = expected_counts(self.source, trees, self.observed, rows=rows)
        out = []
        empty = np.zeros((1, 0), dtype=np.int64)
        for tree, (loglik, clique_counts) in zip(trees, results, strict=True):
            log_z, _ = tree.expected_counts(empty, [])
            n = float(next(iter(clique_counts.values())).sum())
            out.append((loglik - n * log_z, {"targets": tree.family_counts(clique_counts, self.scopes), "n": n}))
        return out

    def mstep(self, current, statistics):
        from dpgm.algorithms.tree_ipf import tree_ipf

        targets, n = statistics["targets"], statistics["n"]
        if self.markov:
            return tree_ipf(targets, self.model.variables, self.cards, init=current, max_iter=self.inner_iter,
                            tol=0.0, structure=self.structure, fixed=self.fixed).log_potentials
        empirical = self.features.expectations(targets) / n
        return gis(self.features, empirical, self.engine, theta=current, max_iter=self.inner_iter,
                   tol=0.0).parameters

    def vector(self, parameters) -> np.ndarray:
        from dpgm.algorithms.squarem import LOG_FLOOR

        if not self.markov:  # a weight driven to -inf (a feature never seen) is held at the floor
            return np.clip(np.asarray(parameters, dtype=float), LOG_FLOOR, -LOG_FLOOR)
        return np.maximum(np.concatenate([np.ravel(parameters[s]) for s in self.scopes]), LOG_FLOOR)

    def constrained(self, vector: np.ndarray, like):
        from dpgm.algorithms.squarem import LOG_FLOOR

        if not self.markov:
            return np.where(vector <= LOG_FLOOR, -np.inf, vector)
        out, offset = {}, 0
        for s in self.scopes:
            shape = np.shape(like[s])
            size = int(np.prod(shape))
            out[s] = np.where(vector[offset:offset + size] <= LOG_FLOOR, -np.inf,
                              vector[offset:offset + size]).reshape(shape)
            offset += size
        return out

    def from_model(self, model):
        if self.markov:
            with np.errstate(divide="ignore"):
                return {s: np.log(model.potentials[s].values) for s in self.scopes}
        return model.theta(self.order)

    def to_model(self, parameters):
        return self.model.with_log_potentials(parameters) if self.markov else self.model.with_weights(self.order,
                                                                                                       parameters)

    def add(self, first: dict, second: dict) -> dict:
        return {"targets": {s: first["targets"][s] + second["targets"][s] for s in self.scopes},
                "n": first["n"] + second["n"]}

    def subtract(self, total: dict, part: dict) -> dict:
        return {"targets": {s: total["targets"][s] - part["targets"][s] for s in self.scopes},
                "n": total["n"] - part["n"]}

    def row_blocks(self, n_blocks: int):
        from dpgm.stats.expected import row_blocks

        return row_blocks(self.source, self.observed, n_blocks)


def fit_undirected_em(model, source: DataSource, *, tol, max_iter, callback, m_step: str | None = None,
                      inner_iter: int = 5, n_init: int = 1, random_state=None, init=None, checkpoint=None,
                      resume=None, persist: bool = False, structural_zeros=None, accelerate="squarem",
                      incremental=False, prune_restarts=False) -> FitResult:
    """EM for Markov networks (IPF M step) and log-linear models (GIS M step), warm-started inner loops.

    The loop runs on arrays (log-potentials by scope, or the weight vector); the
    junction tree's triangulation and the features are built once, and labels are
    attached only for checkpoints and the result. Structural zeros (the model's
    and ``structural_zeros=``, over any variables, latent ones included) are a
    fixed factor of every E step's tree and of the M step.
    """
    from dpgm.cluster import current_client
    from dpgm.inference.triangulation import build_tree

    markov = isinstance(model, MarkovNetwork)
    m_step = m_step or ("ipf" if markov else "gis")
    if (markov and m_step != "ipf") or (not markov and m_step != "gis"):
        raise ValueError(f"m_step={m_step!r}: Markov networks use 'ipf', log-linear models 'gis'")
    states = source.states
    observed = [v for v in model.variables if v in states]
    if not observed:
        raise DataError(f"none of the model's variables are in the data; data variables: {sorted(states)}")
    mine = model  # random starts are drawn in the model's own order of its labels
    model, order = align(model, source.data, states=states, variables=observed)
    cards = {v: len(model.states[v]) for v in model.variables}
    zeros = merge_structural_zeros(model.structural_zeros,
                                   check_structural_zeros(structural_zeros, model.variables, model.states),
                                   model.variables)
    model = model.with_structural_zeros(zeros)
    fixed = zero_offsets(zeros)
    source = maybe_persist(source.with_client(source.client or current_client()), observed, persist)
    if markov:
        engine = features = None
        scopes = list(model.scopes)
    else:
        features, _ = feature_set(model)
        scopes = list(features.scopes)
        engine = engine_for(model.variables, {v: model.states[v] for v in model.variables}, fixed)
    structure = build_tree(model.variables, cards, [*scopes, *fixed])
    family = UndirectedEM(model, source, observed, cards, structure, fixed, inner_iter, engine, features)
    starts = [family.from_model(order.to_data(m))
              for m in initial_models(mine.with_structural_zeros(zeros), n_init, random_state, init,
                                      randomize=_perturbed)]
    state = run_em(family, starts, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, incremental=incremental,
                   prune_restarts=prune_restarts)
    n_params = (LogLinearModel.from_margins(model.scopes, model.states).n_free_parameters() if markov
                else model.n_free_parameters())
    result = em_result(state, "em", n_params=n_params, n_rows=total_rows(source))
    result.info["latent"] = [v for v in model.variables if v not in states]
    result.info["m_step"] = m_step
    result = order.restore(result)
    if markov and all((table.values > 0).all() for table in result.model.potentials.values()):
        result.model = result.model.canonical()  # as the complete-data fits give it, and its standard errors
    return result


def _perturbed(model, rng: np.random.Generator):
    """A random start: standard normal noise added to every log-potential or weight."""
    if isinstance(model, MarkovNetwork):
        return model.with_log_potentials(
            {s: np.log(model.potentials[s].values) + rng.normal(0, 1, model.potentials[s].shape)
             for s in model.scopes})
    features, order = feature_set(model)
    return model.with_weights(order, model.theta(order) + rng.normal(0, 1, len(order)))

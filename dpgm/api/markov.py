"""Markov networks: tree IPF, closed form, or the log-linear methods on indicator features."""

from __future__ import annotations

import numpy as np

from dpgm.api.checks import check_variables, complete_counts, data_states, saturated_scope
from dpgm.api.log_linear import (
    add_goodness_of_fit,
    engine_for,
    fit_log_linear,
    structural_zero_offsets,
)
from dpgm.fit.result import FitResult
from dpgm.fit.tables import TreeEngine
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork

_MARKOV_METHODS = ("ipf", "closed_form", "gis", "lbfgs", "newton")


def fit_markov_network(model: MarkovNetwork, data, method, *, tol, max_iter, client, progress, callback,
                        structural_zeros=None, l1: float = 0.0, l2: float = 0.0, goodness_of_fit=True,
                        loglik_tol: float = 0.0) -> FitResult:
    from dpgm.fit.decomposable import decomposable_mle
    from dpgm.fit.tree_ipf import tree_ipf

    if method not in _MARKOV_METHODS:
        raise ValueError(f"unknown method {method!r} for a MarkovNetwork; expected one of {_MARKOV_METHODS}")
    states = data_states(data)
    check_variables(model.variables, model.states, states)
    scopes = model.scopes
    hierarchical = LogLinearModel.from_margins(scopes, {v: model.states[v] for v in model.variables})
    if not loglik_tol >= 0:
        raise ValueError(f"loglik_tol must be a nonnegative number, got {loglik_tol!r}")
    if loglik_tol and method != "ipf":
        raise ValueError(f"loglik_tol applies to method='ipf', not {method!r}")
    if method in ("gis", "lbfgs", "newton"):
        result = fit_log_linear(hierarchical, data, method, tol=tol, max_iter=max_iter, client=client,
                                 progress=progress, callback=callback, l1=l1, l2=l2,
                                 structural_zeros=structural_zeros, goodness_of_fit=goodness_of_fit)
        log_potentials = {k: v.values for k, v in result.model.log_potentials().items()}
        result.model = model.with_log_potentials({s: _align(log_potentials, s) for s in scopes})
        return result
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = complete_counts(data, list(scopes) + ([saturated] if saturated else []), client, progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s].values, dtype=float) for s in scopes}
    with np.errstate(divide="ignore"):
        init = {s: np.log(model.potentials[s].values) for s in scopes}
    offsets = structural_zero_offsets(structural_zeros, model.variables, states)
    for mask_scope, table in offsets.items():
        holder = next((s for s in scopes if set(mask_scope) <= set(s)), None)
        if holder is None:
            raise ValueError(f"structural zeros on {mask_scope!r} must lie inside one of the model's scopes")
        init[holder] = init[holder] + _expand_to(table, mask_scope, holder)
    if method == "closed_form":
        if offsets or any(np.isneginf(t).any() for t in init.values()):
            raise ValueError("closed_form does not take structural zeros; use method='ipf'")
        log_potentials = decomposable_mle(scopes, counts)
        history, converged, n_iter = [], True, 0
    else:
        state = tree_ipf(counts, model.variables, {v: model.cardinality(v) for v in model.variables}, init=init,
                         max_iter=max_iter, tol=tol, loglik_tol=loglik_tol, callback=callback)
        log_potentials, history, converged, n_iter = (state.log_potentials, state.history, state.converged,
                                                      state.n_iter)
    fitted = model.with_log_potentials(log_potentials)
    features, order = hierarchical.feature_set()
    engine = engine_for(model.variables, states) if saturated else TreeEngine(
        model.variables, {v: len(states[v]) for v in model.variables})
    _, log_z = engine({s: log_potentials[s] for s in scopes}, [])
    from dpgm.fit.tables import loglik_from_potentials

    result = FitResult(model=fitted, method=method, loglik=loglik_from_potentials(counts, log_potentials, log_z, n),
                       converged=converged, n_iter=n_iter, n_rows=n, n_params=hierarchical.n_free_parameters(),
                       history=history)
    if saturated:
        add_goodness_of_fit(result, features, engine, {s: log_potentials[s] for s in scopes}, offsets,
                         tables[saturated], saturated)
    if not converged:
        import warnings

        from dpgm.errors import ConvergenceWarning

        warnings.warn(f"ipf stopped after {n_iter} sweeps without meeting tol", ConvergenceWarning, stacklevel=3)
    return result


def _align(log_potentials: dict, scope: tuple[str, ...]) -> np.ndarray:
    """The log table of ``scope`` from tables keyed by the same variables in canonical order."""
    key = next(k for k in log_potentials if set(k) == set(scope))
    return np.transpose(log_potentials[key], [key.index(v) for v in scope])


def _expand_to(table: np.ndarray, scope: tuple[str, ...], target: tuple[str, ...]) -> np.ndarray:
    from dpgm.fit.tables import expand

    return expand(table, scope, target)

"""Log-linear models: GIS, L-BFGS, Newton, FISTA; structural zeros; goodness of fit."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import xarray as xr

from dpgm.api.checks import check_variables, complete_counts, data_states, saturated_scope
from dpgm.errors import DataError
from dpgm.fit.features import FeatureSet
from dpgm.fit.gis import gis
from dpgm.fit.goodness import deviance_and_pearson
from dpgm.fit.gradient import lbfgs, newton, proximal_gradient
from dpgm.fit.result import FitResult
from dpgm.fit.tables import MAX_JOINT_CELLS, JointEngine, Scope, TreeEngine
from dpgm.models.log_linear import LogLinearModel


def engine_for(variables: Sequence[str], states: dict, offsets: dict[Scope, np.ndarray] | None = None):
    """Marginals engine for a model over ``variables``: the enumerated joint when small enough."""
    cards = {v: len(states[v]) for v in variables}
    if math.prod(cards.values()) > MAX_JOINT_CELLS:
        if offsets:
            raise ValueError("structural_zeros on a model too large to enumerate: give them as zeros "
                             "of a start table and fit with method='ipf'")
        return TreeEngine(variables, cards)
    engine = JointEngine(variables, cards)
    if not offsets:
        return engine

    def with_offsets(log_potentials, scopes):
        merged = dict(log_potentials)
        for scope, table in offsets.items():
            merged[scope] = merged[scope] + table if scope in merged else table
        return engine(merged, scopes)

    with_offsets.variables, with_offsets.shape, with_offsets.joint_engine = engine.variables, engine.shape, engine
    return with_offsets


def structural_zero_offsets(structural_zeros: xr.DataArray | None, variables, states) -> dict[Scope, np.ndarray]:
    if structural_zeros is None:
        return {}
    if not isinstance(structural_zeros, xr.DataArray):
        raise TypeError(f"structural_zeros must be a boolean xarray.DataArray, got {type(structural_zeros).__name__}")
    unknown = [str(d) for d in structural_zeros.dims if d not in variables]
    if unknown:
        raise ValueError(f"structural_zeros names variables not in the model: {unknown}")
    scope = tuple(sorted(map(str, structural_zeros.dims), key=list(variables).index))
    mask = structural_zeros.transpose(*scope)
    for v in scope:
        if tuple(map(str, mask.coords[v].values)) != tuple(states[v]):
            raise DataError("structural_zeros labels differ from the data's", variable=v)
    return {scope: np.where(mask.values.astype(bool), -np.inf, 0.0)}


_LOG_LINEAR_METHODS = ("gis", "lbfgs", "newton")


def fit_log_linear(model: LogLinearModel, data, method, *, tol, max_iter, client, progress, callback,
                    l1: float = 0.0, l2: float = 0.0, structural_zeros=None, goodness_of_fit=True) -> FitResult:
    if method not in _LOG_LINEAR_METHODS:
        raise ValueError(f"unknown method {method!r} for a LogLinearModel; expected one of {_LOG_LINEAR_METHODS}")
    states = data_states(data)
    check_variables(model.variables, model.states, states)
    features, order = model.feature_set()
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = complete_counts(data, list(features.scopes) + ([saturated] if saturated else []), client, progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s].values, dtype=float) for s in features.scopes}
    empirical = features.expectations(counts) / n
    offsets = structural_zero_offsets(structural_zeros, model.variables, states)
    engine = engine_for(model.variables, states, offsets)
    start = model.theta(order)
    options = {"theta": start, "n": n, "max_iter": max_iter, "tol": tol, "callback": callback}
    if method == "gis":
        if l1 or l2:
            raise ValueError("gis fits the unpenalized likelihood; use method='lbfgs' for l1/l2 penalties")
        theta, history, converged, n_iter = gis(features, empirical, engine, **options)
    elif method == "newton":
        theta, history, converged, n_iter = newton(features, empirical, getattr(engine, "joint_engine", engine),
                                                   l2=l2, **options) if not offsets else _refuse_newton()
    elif l1 > 0:
        theta, history, converged, n_iter = proximal_gradient(features, empirical, engine, l1=l1, l2=l2, **options)
    else:
        theta, history, converged, n_iter = lbfgs(features, empirical, engine, l2=l2, **options)
    fitted = model.with_weights(order, theta)
    return _log_linear_result(fitted, features, theta, empirical, engine, tables, saturated, offsets,
                              method, history, converged, n_iter, n)


def add_goodness_of_fit(result: FitResult, features: FeatureSet, joint_engine: JointEngine,
                     log_potentials: dict, offsets: dict, observed: xr.DataArray, saturated: Scope) -> None:
    """G^2, X^2 and df against the saturated table (structural zeros left out)."""
    probabilities = joint_engine.joint(log_potentials)
    observed = np.transpose(observed.values, [saturated.index(v) for v in joint_engine.variables])
    zeros = None
    if offsets:
        zeros = np.zeros(joint_engine.shape, dtype=bool)
        for scope, table in offsets.items():
            zeros |= np.broadcast_to(_expand_mask(table, scope, joint_engine.variables), joint_engine.shape)
    result.g2, result.pearson = deviance_and_pearson(observed, probabilities, zeros)
    result.df = int(observed.size - 1 - result.n_params)
    if zeros is not None:
        _adjust_for_structural_zeros(result, features, joint_engine, zeros)


def _adjust_for_structural_zeros(result: FitResult, features: FeatureSet, joint_engine: JointEngine,
                                 zeros: np.ndarray) -> None:
    """Cells fixed at zero leave the table and the parameters they alone carried become
    unidentifiable: df = kept cells - rank of the design on them (statsmodels' GLM agrees).
    R's loglin convention, without the adjustment, is kept in ``info["df_unadjusted"]``."""
    result.info["df_unadjusted"] = result.df
    kept = ~zeros.ravel()
    design = features.design(joint_engine.variables, joint_engine.shape)[:, kept]
    rank = int(np.linalg.matrix_rank(np.vstack([np.ones(int(kept.sum())), design])))
    result.n_params = rank - 1
    result.df = int(kept.sum()) - rank
    result.info["structural_zero_cells"] = int(zeros.sum())


def _refuse_newton():
    raise ValueError("method='newton' does not take structural_zeros; use 'lbfgs', 'gis' or 'ipf'")


def _log_linear_result(fitted, features: FeatureSet, theta, empirical, engine, tables, saturated, offsets,
                       method, history, converged, n_iter, n) -> FitResult:
    _, log_z = engine(features.log_potentials(theta), [])
    finite = np.isfinite(theta)
    loglik = n * (float(theta[finite] @ empirical[finite]) - log_z)
    n_params = fitted.n_free_parameters()
    result = FitResult(model=fitted, method=method, loglik=loglik, converged=converged, n_iter=n_iter,
                       n_rows=n, n_params=n_params, history=history)
    if saturated and not isinstance(engine, TreeEngine):
        joint_engine = getattr(engine, "joint_engine", engine)
        log_potentials = features.log_potentials(theta)
        for scope, table in offsets.items():
            log_potentials[scope] = log_potentials.get(scope, 0.0) + table
        add_goodness_of_fit(result, features, joint_engine, log_potentials, offsets, tables[saturated], saturated)
    if not converged:
        import warnings

        from dpgm.errors import ConvergenceWarning

        warnings.warn(f"{method} stopped after {n_iter} iterations without meeting tol", ConvergenceWarning,
                      stacklevel=3)
    return result


def _expand_mask(table: np.ndarray, scope: Scope, variables) -> np.ndarray:
    from dpgm.fit.tables import expand

    return expand(np.isneginf(table), scope, variables)

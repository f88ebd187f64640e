"""Log-linear models: GIS, L-BFGS, Newton, FISTA; structural zeros; goodness of fit."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import xarray as xr

from dpgm.algorithms.features import FeatureSet
from dpgm.algorithms.gis import gis
from dpgm.algorithms.goodness import deviance_and_pearson
from dpgm.algorithms.gradient import lbfgs, newton, proximal_gradient
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import MAX_JOINT_CELLS, JointEngine, TreeEngine
from dpgm.api.checks import check_variables, complete_counts, data_states, saturated_scope
from dpgm.errors import ConvergenceWarning, DataError
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.zeros import check_structural_zeros, merge_structural_zeros, zeros_log_factor
from dpgm.potentials import Scope, reduce_to


def engine_for(variables: Sequence[str], states: dict, offsets: dict[Scope, np.ndarray] | None = None):
    """Marginals engine for a model over ``variables``: the enumerated joint when small enough,
    else a junction tree; ``offsets`` (structural zeros) are fixed tables of every call."""
    cards = {v: len(states[v]) for v in variables}
    engine = TreeEngine if math.prod(cards.values()) > MAX_JOINT_CELLS else JointEngine
    return engine(variables, cards, fixed=offsets)


def structural_zeros_for(model, structural_zeros: xr.DataArray | None, states: dict) -> xr.DataArray | None:
    """The model's own structural zeros joined with those given to ``fit`` (checked against the data's states)."""
    given = check_structural_zeros(structural_zeros, model.variables, states)
    return merge_structural_zeros(model.structural_zeros, given, model.variables)


def zero_offsets(zeros: xr.DataArray | None) -> dict[Scope, np.ndarray]:
    """``{scope: log table}`` with ``-inf`` on the structural zeros (empty without any)."""
    if zeros is None:
        return {}
    scope, table = zeros_log_factor(zeros)
    return {scope: table}


def check_zero_cells_empty(zeros: xr.DataArray | None, tables) -> None:
    """Refuse data with rows in cells the model fixes at zero: such a model cannot have produced them."""
    if zeros is None:
        return
    scope = tuple(map(str, zeros.dims))
    observed = np.asarray(tables[scope].values, dtype=float)
    inside = observed[zeros.values]
    if inside.sum() > 0:
        cell = np.argwhere(zeros.values & (observed > 0))[0]
        labels = {v: str(zeros.coords[v].values[i]) for v, i in zip(scope, cell, strict=True)}
        raise DataError(
            f"{inside.sum():g} rows fall in cells that structural_zeros fixes at zero (first: {labels}); "
            "a structural zero must have no observations"
        )


def counts_with_zeros(data, scopes: list, zeros: xr.DataArray | None, client, progress):
    """Complete-data counts of ``scopes`` and, in the same pass, of the zeros' scope (checked empty)."""
    extra = [tuple(map(str, zeros.dims))] if zeros is not None else []
    tables = complete_counts(data, list(dict.fromkeys([*scopes, *extra])), client, progress)
    check_zero_cells_empty(zeros, tables)
    return tables


_LOG_LINEAR_METHODS = ("gis", "lbfgs", "newton")


def fit_log_linear(model: LogLinearModel, data, method, *, tol, max_iter, client, progress, callback,
                    l1: float = 0.0, l2: float = 0.0, structural_zeros=None, goodness_of_fit=True) -> FitResult:
    if method not in _LOG_LINEAR_METHODS:
        raise ValueError(f"unknown method {method!r} for a LogLinearModel; expected one of {_LOG_LINEAR_METHODS}")
    states = data_states(data)
    check_variables(model.variables, model.states, states)
    zeros = structural_zeros_for(model, structural_zeros, states)
    features, order = model.feature_set()
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = counts_with_zeros(data, list(features.scopes) + ([saturated] if saturated else []), zeros, client,
                               progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s].values, dtype=float) for s in features.scopes}
    empirical = features.expectations(counts) / n
    offsets = zero_offsets(zeros)
    engine = engine_for(model.variables, states, offsets)
    start = model.theta(order)
    options = {"theta": start, "n": n, "max_iter": max_iter, "tol": tol, "callback": callback}
    if method == "gis":
        if l1 or l2:
            raise ValueError("gis fits the unpenalized likelihood; use method='lbfgs' for l1/l2 penalties")
        theta, history, converged, n_iter = gis(features, empirical, engine, **options)
    elif method == "newton":
        theta, history, converged, n_iter = newton(features, empirical, engine, l2=l2, **options)
    elif l1 > 0:
        theta, history, converged, n_iter = proximal_gradient(features, empirical, engine, l1=l1, l2=l2, **options)
    else:
        theta, history, converged, n_iter = lbfgs(features, empirical, engine, l2=l2, **options)
    fitted = model.with_structural_zeros(zeros).with_weights(order, theta)
    return _log_linear_result(fitted, features, theta, empirical, engine, tables, saturated, method, history,
                              converged, n_iter, n)


def add_goodness_of_fit(result: FitResult, features: FeatureSet, joint_engine: JointEngine,
                        log_potentials: dict, observed: xr.DataArray, saturated: Scope) -> None:
    """G^2, X^2 and df against the saturated table (the engine's structural zeros left out)."""
    probabilities = joint_engine.joint(log_potentials)
    observed = reduce_to(observed.values, saturated, joint_engine.variables)
    zeros = joint_engine.zeros()
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
    design = np.vstack([np.ones(int(kept.sum())), features.design(joint_engine.variables, joint_engine.shape)[:, kept]])
    rank = int(np.linalg.matrix_rank(design))
    result.n_params = rank - 1
    result.df = int(kept.sum()) - rank
    result.info["structural_zero_cells"] = int(zeros.sum())


def _log_linear_result(fitted, features: FeatureSet, theta, empirical, engine, tables, saturated,
                       method, history, converged, n_iter, n) -> FitResult:
    log_potentials = features.log_potentials(theta)
    _, log_z = engine(log_potentials, [])
    finite = np.isfinite(theta)
    loglik = n * (float(theta[finite] @ empirical[finite]) - log_z)
    result = FitResult(model=fitted, method=method, loglik=loglik, converged=converged, n_iter=n_iter,
                       n_rows=n, n_params=fitted.n_free_parameters(), history=history)
    if saturated and isinstance(engine, JointEngine):
        add_goodness_of_fit(result, features, engine, log_potentials, tables[saturated], saturated)
    if not converged:
        warn_not_converged(method, n_iter)
    return result


def warn_not_converged(method: str, n_iter: int) -> None:
    warnings.warn(f"{method} stopped after {n_iter} iterations without meeting tol", ConvergenceWarning,
                  stacklevel=4)

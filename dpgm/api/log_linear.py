"""Log-linear models: GIS, L-BFGS, Newton, FISTA; structural zeros; goodness of fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.algorithms.features import FeatureSet, feature_set
from dpgm.algorithms.gis import gis
from dpgm.algorithms.goodness import saturated_goodness_of_fit
from dpgm.algorithms.gradient import lbfgs, newton, proximal_gradient
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import JointEngine, engine_for, zero_offsets
from dpgm.api.checks import (
    check_variables,
    counts_with_zeros,
    data_states,
    saturated_scope,
    structural_zeros_for,
)
from dpgm.api.results import fit_result
from dpgm.models.log_linear import LogLinearModel

_LOG_LINEAR_METHODS = ("gis", "lbfgs", "newton")


def fit_log_linear(model: LogLinearModel, data, method, *, tol, max_iter, client, progress, callback,
                    l1: float = 0.0, l2: float = 0.0, structural_zeros=None, goodness_of_fit=True) -> FitResult:
    if method not in _LOG_LINEAR_METHODS:
        raise ValueError(f"unknown method {method!r} for a LogLinearModel; expected one of {_LOG_LINEAR_METHODS}")
    states = data_states(data)
    check_variables(model.variables, model.states, states)
    zeros = structural_zeros_for(model, structural_zeros, states)
    features, order = feature_set(model)
    fitted = model.with_structural_zeros(zeros)
    return fit_features(features, model.theta(order), lambda theta: fitted.with_weights(order, theta), data, method,
                        model.variables, states, zeros, model.n_free_parameters(), tol=tol, max_iter=max_iter,
                        client=client, progress=progress, callback=callback, l1=l1, l2=l2,
                        goodness_of_fit=goodness_of_fit)


def fit_features(features: FeatureSet, start: np.ndarray, to_model: Callable[[np.ndarray], Any], data, method: str,
                 variables: Sequence[str], states: dict, zeros: xr.DataArray | None, n_params: int, *, tol,
                 max_iter, client, progress, callback, l1: float = 0.0, l2: float = 0.0,
                 goodness_of_fit=True) -> FitResult:
    """Fit the weights of ``features`` (a log-linear model over ``variables``) by ``method`` from ``start``:
    one counting pass, the algorithm on plain arrays, loglik and goodness of fit; ``to_model(theta)``
    attaches the labels once, at the edge."""
    saturated = saturated_scope(variables, states) if goodness_of_fit else None
    tables = counts_with_zeros(data, list(features.scopes) + ([saturated] if saturated else []), zeros, client,
                               progress)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s], dtype=float) for s in features.scopes}
    empirical = features.expectations(counts) / n
    offsets = zero_offsets(zeros)
    engine = engine_for(variables, states, offsets)
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
    log_potentials = features.log_potentials(theta)
    _, log_z = engine(log_potentials, [])
    finite = np.isfinite(theta)
    loglik = n * (float(theta[finite] @ empirical[finite]) - log_z)
    goodness = (saturated_goodness_of_fit(features, engine, log_potentials, tables[saturated], saturated, n_params)
                if saturated and isinstance(engine, JointEngine) else None)
    return fit_result(to_model(theta), method, loglik=loglik, converged=converged, n_iter=n_iter, n_rows=n,
                      n_params=n_params, history=history, goodness=goodness)

"""Log-linear models: GIS, L-BFGS, Newton, FISTA; structural zeros; goodness of fit."""

from __future__ import annotations

import functools

import numpy as np
import xarray as xr

from dpgm.algorithms.features import feature_set
from dpgm.algorithms.goodness import saturated_goodness_of_fit
from dpgm.algorithms.result import FitResult
from dpgm.algorithms.tables import JointEngine, engine_for, zero_offsets
from dpgm.algorithms.weights import WEIGHT_METHODS, fit_weights
from dpgm.api.checks import (
    counts_with_zeros,
    saturated_scope,
    structural_zeros_for,
)
from dpgm.api.labels import align
from dpgm.api.results import fit_result
from dpgm.api.spec_checks import scopes_in_data
from dpgm.models.log_linear import LogLinearModel
from dpgm.stats.source import DataSource


def fit_log_linear(model: LogLinearModel, source: DataSource, method, *, tol, max_iter, callback,
                   l1: float = 0.0, l2: float = 0.0, structural_zeros=None, goodness_of_fit=True) -> FitResult:
    """Fit the weights of a log-linear model: one counting pass, the algorithm on plain arrays, loglik and
    goodness of fit; the labels are attached once, at the edge."""
    if method not in WEIGHT_METHODS:
        raise ValueError(f"unknown method {method!r} for a LogLinearModel; expected one of {WEIGHT_METHODS}")
    states = source.states
    model, labels = align(model, source.data, states=states)
    zeros = structural_zeros_for(model, structural_zeros, states)
    features, order = feature_set(model)
    n_params = model.n_free_parameters()
    saturated = saturated_scope(model.variables, states) if goodness_of_fit else None
    tables = counts_with_zeros(source, list(features.scopes) + ([saturated] if saturated else []), zeros)
    n = float(tables.n_rows)
    counts = {s: np.asarray(tables[s], dtype=float) for s in features.scopes}
    empirical = features.expectations(counts) / n
    engine = engine_for(model.variables, states, zero_offsets(zeros))
    run = fit_weights(features, empirical, engine, method, theta=model.theta(order), n=n, max_iter=max_iter,
                      tol=tol, callback=callback, l1=l1, l2=l2)
    theta = run.parameters
    goodness = (saturated_goodness_of_fit(features, engine, features.log_potentials(theta), tables[saturated],
                                          saturated, n_params)
                if saturated and isinstance(engine, JointEngine) else None)
    fitted = model.with_structural_zeros(zeros).with_weights(order, theta)
    result = labels.restore(fit_result(fitted, method, loglik=run.loglik, converged=run.converged, n_iter=run.n_iter,
                                      n_rows=n, n_params=n_params, history=run.history, goodness=goodness))
    if l1 == 0 and l2 == 0:  # a penalised estimate has none; the MLE's are formed when asked for
        result.info["standard_errors"] = functools.partial(weight_errors, result.model, n)
    return result


def weight_errors(model: LogLinearModel, n: float) -> dict[str, xr.DataArray]:
    """The weights' standard errors: ``sqrt(diag((n Cov_p(F))^-1))``, the features' covariance under the fitted
    model from its junction tree (:func:`~dpgm.algorithms.information.feature_moments`); a structural zero's
    weight (``-inf``) and weights the features cannot identify get NaN.

    Raises
    ------
    ValueError
        More than :data:`~dpgm.algorithms.information.MAX_INFORMATION_PARAMETERS` finite weights.
    """
    from dpgm.algorithms.information import (
        MAX_INFORMATION_PARAMETERS,
        combination_errors,
        feature_moments,
        inverse_information,
    )
    from dpgm.models.zeros import zeros_factors

    stacked, order = model.stacked_features()
    finite = np.isfinite(model.theta(order))
    if finite.sum() > MAX_INFORMATION_PARAMETERS:
        raise ValueError(f"{int(finite.sum()):,} weights: the information matrix is not formed beyond "
                         f"{MAX_INFORMATION_PARAMETERS:,} (dpgm.bootstrap gives standard errors)")
    features, factors, start = {}, [], 0
    for scope, tables in stacked.items():
        matrix = tables.reshape(len(tables), -1)
        features[scope] = matrix[finite[start:start + len(tables)]]
        start += len(tables)
    for scope, log_table in model.log_potentials().items():
        values = log_table.values
        top = values.max(initial=-np.inf)
        factors.append((scope, np.exp(values - top) if np.isfinite(top) else np.zeros_like(values)))
    cards = {v: len(model.states[v]) for v in model.variables}
    _, covariance = feature_moments(model.variables, cards, factors + zeros_factors(model.structural_zeros), features)
    inverse, null = inverse_information(covariance, n)
    errors = np.full(len(order), np.nan)
    errors[finite] = combination_errors(inverse, null, np.eye(int(finite.sum())))
    by_name = dict(zip(order, errors, strict=True))
    names = list(model.weights)
    return {"weights": xr.DataArray(np.array([by_name[name] for name in names]), dims=("feature",),
                                    coords={"feature": names})}


def log_linear_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                         ) -> tuple[LogLinearModel, None]:
    """A ``model: log_linear`` specification: its ``margins``, each a list of categorical variables."""
    return LogLinearModel.from_margins(scopes_in_data(spec, "margins", "log_linear", states), states), None

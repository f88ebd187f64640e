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


def _on_joint(table: xr.DataArray, variables: list[str], states: dict, template: xr.DataArray) -> np.ndarray:
    """``table`` (over some of ``variables``) broadcast over the joint, flattened in ``variables``' order."""
    dims = [v for v in variables if v in table.dims]
    if any(list(map(str, table[v].values)) != list(states[v]) for v in dims if v in table.coords):
        table = table.reindex({v: list(states[v]) for v in dims})
    values = table.transpose(*dims).values.reshape([len(states[v]) if v in table.dims else 1 for v in variables])
    return np.broadcast_to(values, template.shape).ravel()


def weight_errors(model: LogLinearModel, n: float) -> dict[str, xr.DataArray]:
    """The weights' standard errors (:func:`dpgm.algorithms.information.exponential_family_errors`) over the
    enumerated joint; a structural zero's weight (``-inf``) and weights the features cannot identify get NaN.

    Raises
    ------
    ValueError
        The joint's cells times the weights exceed :data:`~dpgm.algorithms.information.MAX_JOINT_ENTRIES`.
    """
    from dpgm.algorithms.information import MAX_JOINT_ENTRIES, exponential_family_errors

    names = list(model.weights)
    variables = list(model.variables)
    cells = int(np.prod([len(model.states[v]) for v in variables]))
    if cells * len(names) > MAX_JOINT_ENTRIES:
        raise ValueError(f"{cells:,} cells x {len(names):,} weights: the information is formed over the "
                         f"enumerated joint up to {MAX_JOINT_ENTRIES:,} entries (dpgm.bootstrap gives standard "
                         "errors)")
    template = xr.DataArray(np.zeros([len(model.states[v]) for v in variables]), dims=variables,
                            coords={v: list(model.states[v]) for v in variables})
    features = np.empty((cells, len(names)))
    for k, name in enumerate(names):
        features[:, k] = _on_joint(model.features[name], variables, model.states, template)
    weights = np.array([model.weights[name] for name in names])
    finite = np.isfinite(weights)
    with np.errstate(invalid="ignore"):
        log_p = np.where(features[:, ~finite] > 0, -np.inf, 0.0).sum(axis=1) + features[:, finite] @ weights[finite]
    if model.structural_zeros is not None:
        allowed = ~model.structural_zeros.astype(bool).broadcast_like(template).transpose(*variables).values.ravel()
        log_p = np.where(allowed, log_p, -np.inf)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    errors = np.full(len(names), np.nan)
    errors[finite] = exponential_family_errors(features[:, finite], p, n)
    return {"weights": xr.DataArray(errors, dims=("feature",), coords={"feature": names})}


def log_linear_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                         ) -> tuple[LogLinearModel, None]:
    """A ``model: log_linear`` specification: its ``margins``, each a list of categorical variables."""
    return LogLinearModel.from_margins(scopes_in_data(spec, "margins", "log_linear", states), states), None

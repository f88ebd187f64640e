"""Gaussian graphical models: one moments pass, then closed form, IPS or the graphical lasso on the driver."""

from __future__ import annotations

import functools
import math

import numpy as np
import xarray as xr

from dpgm.algorithms.gaussian import (
    SingularBlock,
    decomposable_precision,
    gaussian_loglik,
    graphical_lasso,
    ips,
)
from dpgm.algorithms.result import Estimate, FitResult
from dpgm.api.results import fit_result
from dpgm.api.spec_checks import continuous_variables, name_lists, spec_errors
from dpgm.errors import DataError, SpecError
from dpgm.models.gaussian import GaussianGraphicalModel
from dpgm.models.linear_gaussian import LinearGaussianNetwork
from dpgm.stats.source import DataSource

_GAUSSIAN_METHODS = ("closed_form", "ipf", "glasso")


def fit_gaussian(model: GaussianGraphicalModel, source: DataSource, method: str | None, *, tol, max_iter, callback, alpha: float | None = None, missing: str = "refuse") -> FitResult:
    """Fit a Gaussian graphical model: see :func:`dpgm.fit`."""
    from dpgm.stats.moments import source_moments

    method = method or "ipf"  # on a decomposable graph IPS converges in two sweeps (one to fit, one to check)
    if method not in _GAUSSIAN_METHODS:
        raise ValueError(f"unknown method {method!r} for a GaussianGraphicalModel; expected one of {_GAUSSIAN_METHODS}")
    if missing not in ("refuse", "listwise"):
        raise ValueError(f"missing={missing!r}: expected 'refuse' or 'listwise'")
    if method == "glasso":
        if alpha is None or not alpha >= 0 or not math.isfinite(alpha):
            raise ValueError(f"method='glasso' needs a penalty alpha >= 0, got alpha={alpha!r}")
    elif alpha is not None:
        raise ValueError(f"alpha applies to method='glasso', not {method!r}")
    if source.is_table:
        raise TypeError("a GaussianGraphicalModel is fitted to a dataset of continuous variables")
    stats = source_moments(source, model.variables)
    if stats.n_missing and missing == "refuse":
        raise DataError(f"{stats.n_missing:,.0f} rows have a missing value (NaN) in {list(model.variables)}; "
                        "missing='listwise' fits the complete rows (counted in result.info)")
    n, p = float(stats.n), len(model.variables)
    if n <= p:
        raise DataError(f"{n:,.0f} complete rows for {p} variables: the sample covariance is singular")
    sample = stats.covariance.values
    try:
        if method == "closed_form":
            run = Estimate(decomposable_precision(sample, model.adjacency), converged=True)
        elif method == "ipf":
            run = ips(sample, model.adjacency, n=n, max_iter=max_iter, tol=tol, callback=callback)
    except SingularBlock as error:
        names = [model.variables[i] for i in error.indices]
        raise DataError(f"the sample covariance of {names} is singular (a variable is a linear function of the "
                        f"others, or constant); no finite MLE for method={method!r}: drop a variable of {names}, "
                        "or fit method='glasso' (penalised)") from None
    if method == "glasso":
        complete = model.adjacency.sum() == p * (p - 1)  # a complete graph forces no zeros
        run = graphical_lasso(sample, float(alpha), adjacency=None if complete else model.adjacency, n=n,
                              max_iter=max_iter, tol=tol, callback=callback)
    precision = run.parameters
    covariance = np.linalg.inv(precision)
    covariance = (covariance + covariance.T) / 2
    fitted = model.with_parameters(stats.mean.values, covariance)
    if method == "glasso":  # the estimated graph: the precision's nonzeros
        support = (np.abs(precision) > 0) & ~np.eye(p, dtype=bool)
        edges = [(model.variables[i], model.variables[j]) for i, j in zip(*np.nonzero(np.triu(support)), strict=True)]
        fitted = GaussianGraphicalModel(edges + [(v,) for v in model.variables], model.variables, fitted.mean,
                                        fitted.covariance)
    loglik = gaussian_loglik(covariance, sample, n)
    saturated = -0.5 * n * (p * math.log(2 * math.pi) + np.linalg.slogdet(sample)[1] + p)
    info = {"n_missing": stats.n_missing} | ({} if alpha is None else {"alpha": float(alpha)})
    if method != "glasso":  # the penalised estimate has none; the MLE's are formed when asked for
        info["standard_errors"] = functools.partial(_graphical_errors, fitted, model.adjacency, n)
    return fit_result(fitted, method, loglik=loglik, converged=run.converged, n_iter=run.n_iter, n_rows=n,
                      n_params=fitted.n_free_parameters(), history=run.history, g2=2.0 * (saturated - loglik),
                      df=p * (p - 1) // 2 - fitted.n_edges, info=info)


def _graphical_errors(fitted: GaussianGraphicalModel, adjacency: np.ndarray, n: float) -> dict[str, xr.DataArray]:
    """The MLE's standard errors (:func:`dpgm.algorithms.information.gaussian_graphical_errors`), labelled."""
    from dpgm.algorithms.information import gaussian_graphical_errors

    mean, covariance = gaussian_graphical_errors(fitted.covariance.values, adjacency, n)
    return {"mean": fitted.mean.copy(data=mean), "covariance": fitted.covariance.copy(data=covariance)}


def fit_linear_gaussian(model: LinearGaussianNetwork, source: DataSource, method: str | None, *, tol, max_iter,
                        callback, missing: str = "refuse") -> FitResult:
    """Every node's least-squares regression on its parents from one moments pass (complete data).

    With the divisor-n covariance ``S`` and means ``m``: ``beta = S_PP^-1 S_Pv``,
    ``intercept = m_v - beta' m_P`` and the residual variance ``S_vv - S_vP beta``
    (the MLE, divisor n): ordinary least squares per node.
    """
    from dpgm.stats.moments import source_moments

    if method not in (None, "mle"):
        raise ValueError(f"a LinearGaussianNetwork is fitted by method='mle' (least squares), not {method!r}")
    if missing not in ("refuse", "listwise"):
        raise ValueError(f"missing={missing!r}: expected 'refuse' or 'listwise'")
    stats = source_moments(source, model.variables)
    if stats.n_missing and missing == "refuse":
        raise DataError(f"{stats.n_missing:,.0f} rows have a missing value (NaN) in {list(model.variables)}; "
                        "missing='listwise' fits the complete rows (counted in result.info)")
    index = {v: i for i, v in enumerate(model.variables)}
    sample, mean = stats.covariance.values, stats.mean.values
    parameters = {}
    for v in model.variables:
        parents = list(model.parents(v))
        p, c = [index[u] for u in parents], index[v]
        beta = np.zeros(0)
        if p:
            try:
                beta = np.linalg.solve(sample[np.ix_(p, p)], sample[p, c])
            except np.linalg.LinAlgError:
                raise DataError(f"the parents {parents} of {v!r} are collinear in the data: no unique regression",
                                variable=v) from None
        variance = float(sample[c, c] - sample[c, p] @ beta) if p else float(sample[c, c])
        if not variance > 0:
            raise DataError(f"is an exact linear function of its parents {parents} (zero residual variance)",
                            variable=v)
        parameters[v] = {"intercept": float(mean[c] - beta @ mean[p]) if p else float(mean[c]),
                         "coefficients": xr.DataArray(beta, dims="parent", coords={"parent": parents}),
                         "variance": variance}
    fitted = model.with_parameters(parameters)
    errors = _regression_errors(model, parameters, sample, mean, index, float(stats.n))
    return fit_result(fitted, "mle", loglik=fitted.log_likelihood(float(stats.n)), n_rows=float(stats.n),
                      n_params=fitted.n_free_parameters(), info={"n_missing": stats.n_missing,
                                                                 "standard_errors": errors})


def _regression_errors(model: LinearGaussianNetwork, parameters: dict, sample: np.ndarray, mean: np.ndarray,
                       index: dict, n: float) -> dict[str, xr.DataArray]:
    """Each node's least-squares standard errors, named as :func:`dpgm.models.parameters.parameter_tables`.

    With ``k`` parents and the unbiased residual variance ``s2 = n variance / (n - k - 1)`` (statsmodels'
    OLS ``scale``): slopes ``s2 (n S_PP)^-1``, intercept ``s2 (1 / n + m_P' (n S_PP)^-1 m_P)``; the
    residual variance's (the MLE's) asymptotic ``sqrt(2 / n) variance``. NaN where ``n <= k + 1``.
    """
    errors = {}
    for v in model.variables:
        parents = list(model.parents(v))
        p = [index[u] for u in parents]
        variance = parameters[v]["variance"]
        dof = n - len(p) - 1
        s2 = n * variance / dof if dof > 0 else np.nan
        if p:
            inverse = np.linalg.inv(sample[np.ix_(p, p)]) / n
            slopes = np.sqrt(s2 * np.diag(inverse))
            intercept = np.sqrt(s2 * (1 / n + mean[p] @ inverse @ mean[p]))
            errors[f"coefficients.{v}"] = xr.DataArray(slopes, dims=(f"parents_of_{v}",),
                                                       coords={f"parents_of_{v}": parents})
        else:
            intercept = np.sqrt(s2 / n)
        errors[f"scalars.{v}.intercept"] = xr.DataArray(float(intercept))
        errors[f"scalars.{v}.variance"] = xr.DataArray(float(np.sqrt(2 / n) * variance))
    return errors


def gaussian_graphical_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                                 ) -> tuple[GaussianGraphicalModel, None]:
    """A ``model: gaussian_graphical`` specification: ``edges`` or ``cliques`` of continuous variables, and
    ``variables`` (default: those the graph names)."""
    if ("edges" in spec) == ("cliques" in spec):
        raise SpecError("a gaussian_graphical model takes 'edges' or 'cliques' (one of them)")
    scopes = name_lists(spec, "edges" if "edges" in spec else "cliques", "gaussian_graphical",
                        2 if "edges" in spec else None)
    variables = spec.get("variables")
    continuous_variables(list(dict.fromkeys([*(v for s in scopes for v in s), *(variables or ())])),
                         "gaussian_graphical", states, continuous)
    with spec_errors("gaussian_graphical"):
        return GaussianGraphicalModel(scopes, variables), None


def linear_gaussian_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                              ) -> tuple[LinearGaussianNetwork, None]:
    """A ``model: linear_gaussian`` specification: ``edges`` between continuous variables."""
    if "edges" not in spec:
        raise SpecError("a linear_gaussian network needs 'edges': a list of [parent, child] pairs")
    scopes = name_lists(spec, "edges", "linear_gaussian", 2)
    variables = spec.get("variables")
    continuous_variables(list(dict.fromkeys([*(v for s in scopes for v in s), *(variables or ())])),
                         "linear_gaussian", states, continuous)
    with spec_errors("linear_gaussian"):
        return LinearGaussianNetwork(scopes, variables), None

"""One IRLS pass of a generalized linear model: X'WX, X'Wz and the deviance, summed over chunks.

Given the current coefficients ``beta`` (``shared``: one key per pass), every chunk
builds its design rows ``X`` (intercept, continuous parents, reference-coded
indicators of categorical parents), the linear predictor ``eta = X beta``, the mean
``mu``, the working weights ``W`` and working response ``z = eta + (y - mu) g'(mu)``
of the canonical link, and returns ``X'WX``, ``X'Wz``, the log-likelihood and the
deviance *at beta*; the partials are plain dicts of arrays and numbers, added leaf by
leaf by :func:`dpgm.stats.engine.map_reduce`. With ``beta=None`` the weights come
from a start ``mu0`` computed from the response alone (statsmodels' start), so the
first pass needs no coefficients. With the canonical link ``W z = W eta + y - mu``,
which is how it is computed (no division by a vanishing variance).

The categorical (multinomial logit) family stacks the coefficients of the ``K - 1``
non-reference states state by state (``vec = beta.T.ravel()``); its ``xtwx`` is the
full ``(K-1)q x (K-1)q`` negative Hessian, blocks ``X' diag(w p_j (d_jk - p_k)) X``,
and ``xtwz = H vec + X'(w (Y - P))``, so the Newton step solves ``H vec' = xtwz``
exactly as for the other families.

Rows missing the child or a parent are left out and counted (``missing``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.errors import DataError
from dpgm.glm_families import GLMFamily, glm_family
from dpgm.stats.engine import map_reduce

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["Design", "irls_pass"]


@dataclass(frozen=True)
class Design:
    """The layout of a GLM's design matrix and response, planned once from the schema.

    Attributes
    ----------
    child
        Response variable.
    family
        ``"gaussian"``, ``"bernoulli"``, ``"poisson"`` or ``"categorical"``.
    parents
        ``(name, n_states)`` per parent; ``n_states = 0`` for a continuous one.
    terms
        Column labels of X: ``"Intercept"``, continuous parents, ``"parent[state]"``.
    child_values
        Numeric value of each state of a categorical child (bernoulli: 0, 1;
        poisson: the labels as numbers); ``None`` for a continuous child or the
        categorical family.
    n_classes
        States of the child (categorical family), else 0.
    """

    child: str
    family: str
    parents: tuple[tuple[str, int], ...]
    terms: tuple[str, ...]
    child_values: tuple[float, ...] | None = None
    n_classes: int = 0

    @property
    def glm(self) -> GLMFamily:
        """The family object (:mod:`dpgm.glm_families`)."""
        return glm_family(self.family)

    @property
    def n_terms(self) -> int:
        return len(self.terms)

    @property
    def n_coefficients(self) -> int:
        """Length of the coefficient vector (``(K - 1) * n_terms`` for the categorical family)."""
        return self.n_terms * max(self.n_classes - 1, 1)


def design_matrix(columns: dict[str, np.ndarray], design: Design, index: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``X`` (complete rows x terms), the response, the weights and the weight of incomplete rows."""
    child = np.asarray(columns[design.child])
    rows = len(child)
    weights = np.ones(rows) if "__weight__" not in columns else np.asarray(columns["__weight__"], np.float64)
    if "__weight__" in columns and (not np.isfinite(weights).all() or (weights < 0).any()):
        raise DataError("weights must be finite and nonnegative", chunk=index)
    keep = (child >= 0) if child.dtype.kind in "iu" else ~np.isnan(child)
    for name, k in design.parents:
        values = np.asarray(columns[name])
        if k:
            keep &= values >= 0
        else:
            if np.isinf(values).any():
                raise DataError("holds an infinite value (NaN marks a missing one)", variable=name, chunk=index)
            keep &= ~np.isnan(values)
    complete = bool(keep.all())
    missing = 0.0 if complete else float(weights[~keep].sum())

    def take(a: np.ndarray) -> np.ndarray:
        return a if complete else a[keep]

    n = int(keep.sum())
    x = np.zeros((n, design.n_terms))
    x[:, 0] = 1.0
    col = 1
    for name, k in design.parents:
        values = take(np.asarray(columns[name]))
        if k:
            codes = values.astype(np.intp)
            hit = codes > 0
            x[np.flatnonzero(hit), col + codes[hit] - 1] = 1.0
            col += k - 1
        else:
            x[:, col] = values
            col += 1
    y = take(child)
    if design.glm.multiclass:
        y = y.astype(np.intp)
    elif design.child_values is not None:
        y = np.asarray(design.child_values)[y.astype(np.intp)]
    else:
        y = y.astype(np.float64)
        if np.isinf(y).any():
            raise DataError("holds an infinite value (NaN marks a missing one)", variable=design.child, chunk=index)
        problem = design.glm.response_problem(y)
        if problem:
            raise DataError(problem, variable=design.child, chunk=index)
    return x, y, take(weights), missing


def irls_chunk(index: int, columns: dict[str, np.ndarray], shared: Any, design: Design) -> dict[str, Any]:
    """One chunk's share of an IRLS pass at the coefficients ``shared`` (``None``: the start)."""
    x, y, w, missing = design_matrix(columns, design, index)
    beta = None if shared is None else np.asarray(shared, dtype=np.float64)
    return irls_statistics(x, y, w, beta, design) | {"rows": float(w.sum()) + missing, "missing": missing}


def irls_statistics(x: np.ndarray, y: np.ndarray, w: np.ndarray, beta: np.ndarray | None,
                    design: Design) -> dict[str, Any]:
    """``X'WX``, ``X'Wz``, log-likelihood, deviance and ``n`` of complete rows at ``beta`` (``None``: the start)."""
    family = design.glm
    if family.multiclass:
        return _multinomial_chunk(x, y, w, beta, design) | {"n": float(w.sum())}
    loglik = deviance = separated = 0.0
    gradient = None
    if family.closed_form:
        weight, wz = w, w * y
        if beta is not None:  # residuals at beta: the refinement step and the RSS keep their digits
            residual = y - x @ beta
            deviance = float(w @ residual**2)
            gradient = x.T @ (w * residual)
    else:
        if beta is None:  # statsmodels' start: mu between y and its middle value
            mu, eta = family.start(y)
        else:
            eta = x @ beta
            mu = family.mean(eta)
        variance = family.variance(mu)
        weight, wz = w * variance, w * (variance * eta + y - mu)
        if beta is not None:
            loglik = float(w @ family.row_loglik(y, eta))
            separated = family.separated(eta, w)
            deviance = 2.0 * (family.saturated(y, w) - loglik)
    xtwx = (x * weight[:, None]).T @ x
    out = {"xtwx": xtwx, "xtwz": x.T @ wz, "loglik": loglik, "deviance": deviance, "separated": separated,
           "n": float(w.sum())}
    if gradient is not None:
        out["gradient"] = gradient
    return out


def _multinomial_chunk(x: np.ndarray, y: np.ndarray, w: np.ndarray, beta: np.ndarray | None,
                       design: Design) -> dict[str, Any]:
    q, m = design.n_terms, design.n_classes - 1
    coefficients = np.zeros((m, q)) if beta is None else beta.reshape(m, q)
    eta = np.zeros((len(y), m + 1))
    eta[:, 1:] = x @ coefficients.T
    log_norm = np.logaddexp.reduce(eta, axis=1)
    prob = np.exp(eta - log_norm[:, None])[:, 1:]
    indicator = np.zeros_like(prob)
    hit = y > 0
    indicator[np.flatnonzero(hit), y[hit] - 1] = 1.0
    hessian = np.empty((m * q, m * q))
    for j in range(m):
        for k in range(j, m):
            weight = w * prob[:, j] * ((j == k) - prob[:, k])
            block = (x * weight[:, None]).T @ x
            hessian[j * q:(j + 1) * q, k * q:(k + 1) * q] = block
            hessian[k * q:(k + 1) * q, j * q:(j + 1) * q] = block.T
    gradient = (x.T @ ((indicator - prob) * w[:, None])).T.ravel()
    loglik = float(w @ (eta[np.arange(len(y)), y] - log_norm))
    separated = float(w[(eta.max(axis=1) - log_norm) > -1e-13].sum()) if beta is not None else 0.0
    return {"xtwx": hessian, "xtwz": hessian @ coefficients.ravel() + gradient, "loglik": loglik,
            "deviance": -2.0 * loglik, "separated": separated}


def irls_pass(source: DataSource, design: Design, coefficients: np.ndarray | None) -> dict[str, Any]:
    """One pass over ``source``: the IRLS statistics at ``coefficients`` (see the module docstring).

    Returns
    -------
    dict
        ``xtwx``, ``xtwz``, ``loglik``, ``deviance`` (at ``coefficients``; 0 for the
        start), ``separated`` (weight of rows fitted with probability within 1e-13 of
        0 or 1), ``n`` (weight of complete rows), ``rows``, ``missing``; gaussian
        at ``coefficients``: ``gradient = X'W(y - X beta)``, the deviance being the
        residual sum of squares.
    """
    arrays = source.columns([design.child, *(name for name, _ in design.parents)])
    kernel = functools.partial(_kernel, design=design, weight=source.weight)
    shared = None if coefficients is None else np.asarray(coefficients, dtype=np.float64)
    return source.compute(map_reduce(arrays, kernel, name="dpgm-irls", shared=shared))


def _kernel(index: int, columns: dict[str, np.ndarray], shared: Any, design: Design, weight: str | None):
    if weight is not None:
        columns = dict(columns)
        columns["__weight__"] = columns.pop(weight)
    return irls_chunk(index, columns, shared, design)

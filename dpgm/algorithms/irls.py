"""Iteratively reweighted least squares on reduced statistics: the driver's side of a GLM fit.

The algorithm never sees the data: ``step(beta)`` is one pass returning ``X'WX``,
``X'Wz`` and the deviance at ``beta`` (:func:`dpgm.stats.irls.irls_pass`, or a NumPy
function in tests). Each iteration solves ``(X'WX + diag(penalty)) beta' = X'Wz``
(Newton's step for the canonical link; Green 1984) and stops when the relative
change of the penalized deviance, ``|D_k - D_{k-1}| / (|D_k| + 0.1)`` (statsmodels'
rule), is at most ``tol``. The returned coefficients are those the last pass was
evaluated at, so the deviance, ``X'WX`` and the standard errors all belong to them.

References
----------
Green, P. J. (1984). Iteratively reweighted least squares for maximum likelihood
estimation, and some robust and resistant alternatives. JRSS B 46(2), 149-192.
McCullagh, P. and Nelder, J. A. (1989). Generalized Linear Models, 2nd ed., ch. 2.5.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg

from dpgm.errors import DataError

__all__ = ["IRLSResult", "irls", "solve_normal_equations"]

# halvings of a step that raised the deviance before giving up on it
MAX_HALVINGS = 30


@dataclass
class IRLSResult:
    """What :func:`irls` returns: coefficients, the statistics of the pass at them, and the run."""

    coefficients: np.ndarray
    statistics: dict[str, Any]
    covariance: np.ndarray
    converged: bool
    n_iter: int
    passes: int
    history: list[dict[str, float | None]] = field(default_factory=list)


def solve_normal_equations(xtwx: np.ndarray, xtwz: np.ndarray, penalty: np.ndarray,
                           labels: Sequence[str]) -> tuple[np.ndarray, Any]:
    """Solve ``(X'WX + diag(penalty)) beta = X'Wz`` by Cholesky; the factor is returned for the covariance.

    Raises
    ------
    DataError
        The matrix is not positive definite: a term constant zero in the data, or
        collinear terms (named).
    """
    matrix = xtwx + np.diag(penalty)
    if not np.isfinite(matrix).all() or not np.isfinite(xtwz).all():
        raise DataError("the IRLS weights overflowed (non-finite X'WX): the linear predictor diverges; "
                        "scale the continuous parents or add an l2 penalty")
    try:
        factor = scipy.linalg.cho_factor(matrix, lower=True)
    except np.linalg.LinAlgError:
        empty = [labels[i] for i in np.flatnonzero(np.diag(matrix) <= 0)]
        if empty:
            raise DataError(f"the terms {empty} have no weight in the data (a state never seen, a parent always "
                            "zero, or no rows): no coefficient can be estimated for them") from None
        raise DataError(f"the terms {list(labels)} are collinear in the data (X'WX is singular): "
                        "drop a parent or add an l2 penalty") from None
    return scipy.linalg.cho_solve(factor, xtwz), factor


def irls(
    step: Callable[[np.ndarray | None], dict[str, Any]],
    *,
    labels: Sequence[str],
    penalty: np.ndarray,
    tol: float,
    max_iter: int,
    closed_form: bool = False,
    callback: Callable[[dict[str, float | None]], None] | None = None,
) -> IRLSResult:
    """Fit a GLM by IRLS, one ``step`` (one pass over the data) per iteration.

    Parameters
    ----------
    step
        ``step(beta) -> {"xtwx", "xtwz", "deviance", ...}`` at ``beta``; ``step(None)``
        gives the start's ``X'WX`` and ``X'Wz`` (from a start mean, no coefficients).
    labels
        Name of each coefficient (for error messages).
    penalty
        Diagonal ridge penalty added to ``X'WX`` (0 for the intercept).
    tol, max_iter
        Stop when the relative change of the penalized deviance is at most ``tol``,
        or after ``max_iter`` iterations.
    closed_form
        The identity link (gaussian): the first solve is the answer (one pass).
    callback
        Called with each iteration's record (``iteration``, ``deviance``, ``seconds``,
        ``param_change``: the largest absolute change of a coefficient since the
        previous record; None for the first).

    Returns
    -------
    IRLSResult
        ``covariance`` is ``(X'WX + diag(penalty))^-1`` at the returned coefficients
        (unscaled: multiply by the dispersion where there is one).
    """
    start = time.perf_counter()
    statistics = step(None)
    passes = 1
    beta, factor = solve_normal_equations(statistics["xtwx"], statistics["xtwz"], penalty, labels)
    if closed_form:
        covariance = scipy.linalg.cho_solve(factor, np.eye(len(beta)))
        return IRLSResult(beta, statistics, covariance, True, 1, passes)
    history: list[dict[str, float | None]] = []
    previous: float | None = None
    previous_beta = beta
    recorded: np.ndarray | None = None  # coefficients of the last record
    converged, halvings, iteration = False, 0, 0
    while iteration < max_iter:
        statistics = step(beta)
        passes += 1
        deviance = float(statistics["deviance"] + beta @ (penalty * beta))
        if not np.isfinite(deviance):
            raise DataError("the deviance is not finite at the current coefficients: the linear predictor "
                            "diverges; scale the continuous parents or add an l2 penalty")
        if previous is not None and deviance > previous + 1e-12 * (abs(previous) + 0.1) and halvings < MAX_HALVINGS:
            beta = (beta + previous_beta) / 2  # a step that raised the deviance: halve it, same iteration
            halvings += 1
            continue
        iteration += 1
        halvings = 0
        record = {"iteration": float(iteration), "deviance": deviance,
                  "param_change": None if recorded is None else float(np.abs(beta - recorded).max()),
                  "seconds": time.perf_counter() - start}
        recorded = beta
        history.append(record)
        if callback is not None:
            callback(record)
        if previous is not None and abs(deviance - previous) <= tol * (abs(deviance) + 0.1):
            converged = True
            break
        if iteration == max_iter:
            break
        previous, previous_beta = deviance, beta
        beta, factor = solve_normal_equations(statistics["xtwx"], statistics["xtwz"], penalty, labels)
    _, factor = solve_normal_equations(statistics["xtwx"], statistics["xtwz"], penalty, labels)
    covariance = scipy.linalg.cho_solve(factor, np.eye(len(beta)))
    return IRLSResult(beta, statistics, covariance, converged, iteration, passes, history)

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

__all__ = ["IRLSNode", "IRLSResult", "check_rank", "collinear_terms", "irls", "solve_normal_equations"]

# halvings of a step that raised the deviance before giving up on it
MAX_HALVINGS = 30
# terms are collinear when X'WX scaled to a unit diagonal has an eigenvalue below RANK_TOL times its largest
# (a condition number over 1e11: the normal equations keep fewer than five significant digits)
RANK_TOL = 1e-11


@dataclass(frozen=True)
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


def collinear_terms(xtwx: np.ndarray, penalty: np.ndarray, labels: Sequence[str]) -> list[str]:
    """The terms spanning the (numerical) null space of ``X'WX + diag(penalty)``; [] if it has full rank.

    The matrix is scaled to a unit diagonal (so the units of the parents do not matter) and
    its eigenvalues below :data:`RANK_TOL` times the largest are taken as zero; a term is
    named when its weight in such an eigenvector is at least 1% of the largest weight.
    Terms without weight (a zero diagonal) are left to :func:`solve_normal_equations`.
    """
    matrix = np.asarray(xtwx, dtype=float) + np.diag(penalty)
    diagonal = np.diag(matrix).copy()
    kept = np.flatnonzero(diagonal > 0)
    if len(kept) < 2 or not np.isfinite(matrix).all():
        return []
    scale = np.sqrt(diagonal[kept])
    scaled = matrix[np.ix_(kept, kept)] / np.outer(scale, scale)
    values, vectors = np.linalg.eigh((scaled + scaled.T) / 2)
    null = vectors[:, values <= RANK_TOL * values.max()]
    if null.shape[1] == 0:
        return []
    weight = np.abs(null).max(axis=1)
    return [labels[kept[i]] for i in np.flatnonzero(weight >= 0.01 * weight.max())]


def check_rank(xtwx: np.ndarray, penalty: np.ndarray, labels: Sequence[str]) -> None:
    """Refuse a design whose terms are collinear in the data, naming them (see :func:`collinear_terms`).

    Raises
    ------
    DataError
        ``X'WX + diag(penalty)`` is singular: a continuous parent constant (collinear
        with the intercept), a parent a linear function of others, or the states of
        categorical parents aliased. An ``l2`` penalty > 0 makes the system regular and
        the fit proceeds (ridge); dropping one of the named parents is the other remedy.
    """
    terms = collinear_terms(xtwx, penalty, labels)
    if terms:
        constant = [t for t in terms if t != "Intercept"] if terms[0] == "Intercept" and len(terms) == 2 else []
        hint = f" ({constant[0]!r} is constant in the data)" if constant else ""
        raise DataError(f"the terms {terms} are collinear in the data{hint}: X'WX has rank below its "
                        f"{len(labels)} terms, so their coefficients are not identified; drop one of these parents, "
                        "or pass an l2 penalty > 0 (l2: in a specification) to fit a ridge regression")


class IRLSNode:
    """The driver's state of one GLM's IRLS fit, advanced one pass at a time.

    ``request()`` gives the coefficients the next pass must evaluate (``None``: the
    start, no coefficients yet); ``update(statistics)`` takes that pass's statistics
    (``xtwx``, ``xtwz``, ``deviance``) and decides the next request: a Newton step,
    a halved step (the deviance rose), or ``done``. Several nodes advance in the same
    passes (a hybrid network's GLM nodes): each pass evaluates every node that is
    not ``done``.

    The identity link (``closed_form``) is done after two passes: the normal
    equations at the start, then one refinement at their solution from the
    residuals ``y - X beta`` (``statistics["gradient"] = X'W(y - X beta)`` and the
    residual sum of squares ``deviance``), which keeps the digits of the
    coefficients and of the deviance when the response has a large offset.
    """

    def __init__(self, *, labels: Sequence[str], penalty: np.ndarray, tol: float, max_iter: int,
                 closed_form: bool = False, callback: Callable[[dict[str, float | None]], None] | None = None):
        self.labels, self.penalty, self.tol, self.max_iter = list(labels), penalty, tol, max_iter
        self.closed_form, self.callback = closed_form, callback
        self.start = time.perf_counter()
        self.beta: np.ndarray | None = None
        self.statistics: dict[str, Any] | None = None
        self.history: list[dict[str, float | None]] = []
        self.recorded: np.ndarray | None = None  # coefficients of the last record
        self.previous: float | None = None
        self.previous_beta: np.ndarray | None = None
        self.converged, self.done = False, False
        self.halvings = self.iteration = self.passes = 0
        self.deviance = float("nan")

    def request(self) -> np.ndarray | None:
        """The coefficients the next pass evaluates (``None`` for the start)."""
        if self.done:
            raise RuntimeError("the IRLS fit is done: no further pass")
        return self.beta

    def update(self, statistics: dict[str, Any]) -> None:
        """Take one pass's statistics at :meth:`request`'s coefficients."""
        self.passes += 1
        if self.beta is None:
            self.statistics = statistics
            check_rank(statistics["xtwx"], self.penalty, self.labels)  # at the start's weights, every row counts
            self.beta, _ = solve_normal_equations(statistics["xtwx"], statistics["xtwz"], self.penalty, self.labels)
            return
        if self.closed_form:
            self._refine(statistics)
            return
        beta = self.beta
        deviance = float(statistics["deviance"] + beta @ (self.penalty * beta))
        if not np.isfinite(deviance):
            raise DataError("the deviance is not finite at the current coefficients: the linear predictor "
                            "diverges; scale the continuous parents or add an l2 penalty")
        previous = self.previous
        if (previous is not None and deviance > previous + 1e-12 * (abs(previous) + 0.1)
                and self.halvings < MAX_HALVINGS):
            self.beta = (beta + self.previous_beta) / 2  # a step that raised the deviance: halve it, same iteration
            self.halvings += 1
            return
        self.iteration += 1
        self.halvings = 0
        self.statistics, self.deviance = statistics, deviance
        self._record(deviance)
        if previous is not None and abs(deviance - previous) <= self.tol * (abs(deviance) + 0.1):
            self.converged = self.done = True
            return
        if self.iteration >= self.max_iter:
            self.done = True
            return
        self.previous, self.previous_beta = deviance, beta
        self.beta, _ = solve_normal_equations(statistics["xtwx"], statistics["xtwz"], self.penalty, self.labels)

    def _refine(self, statistics: dict[str, Any]) -> None:
        """Least squares: one correction from the residuals at the normal equations' solution."""
        beta, penalty = self.beta, self.penalty
        gradient = statistics["gradient"] - penalty * beta
        delta, _ = solve_normal_equations(statistics["xtwx"], gradient, penalty, self.labels)
        # residual sum of squares at beta + delta, expanded around beta (every term of the residuals' scale)
        rss = float(statistics["deviance"] - 2 * delta @ statistics["gradient"]
                    + delta @ statistics["xtwx"] @ delta)
        self.beta = beta + delta
        self.statistics = statistics | {"deviance": max(rss, 0.0)}
        self.deviance = max(rss, 0.0)
        self.iteration = 1
        self._record(self.deviance)
        self.converged = self.done = True

    def _record(self, deviance: float) -> None:
        beta = np.asarray(self.beta, dtype=float)
        change = None if self.recorded is None else float(np.abs(beta - self.recorded).max())
        self.recorded = beta.copy()
        record = {"iteration": float(self.iteration), "deviance": deviance, "param_change": change,
                  "seconds": time.perf_counter() - self.start}
        self.history.append(record)
        if self.callback is not None:
            self.callback(record)

    def result(self) -> IRLSResult:
        """The fit once :attr:`done`: covariance ``(X'WX + diag(penalty))^-1`` from the last pass."""
        assert self.statistics is not None and self.beta is not None
        _, factor = solve_normal_equations(self.statistics["xtwx"], self.statistics["xtwz"], self.penalty,
                                           self.labels)
        covariance = scipy.linalg.cho_solve(factor, np.eye(len(self.beta)))
        return IRLSResult(self.beta, self.statistics, covariance, self.converged, self.iteration, self.passes,
                          self.history)


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
        The identity link (gaussian): the normal equations, then one refinement
        from the residuals (two passes; see :class:`IRLSNode`).
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
    node = IRLSNode(labels=labels, penalty=penalty, tol=tol, max_iter=max_iter, closed_form=closed_form,
                    callback=callback)
    while not node.done:
        node.update(step(node.request()))
    return node.result()

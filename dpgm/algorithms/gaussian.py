"""Gaussian graphical models on the driver: closed form, iterative proportional scaling, graphical lasso.

Every algorithm sees only the sample covariance ``S`` (divisor n) of the
variables, a ``p x p`` array, and the graph as a boolean adjacency matrix; the
data were reduced to ``S`` by one moments pass.

* :func:`decomposable_precision`: the MLE of a decomposable (chordal) model in
  closed form, ``K = sum_C [S_CC^-1]^0 - sum_S [S_SS^-1]^0`` over the cliques and
  separators of a junction tree (Lauritzen 1996, Prop. 5.9).
* :func:`ips`: covariance selection by iterative proportional scaling (Dempster
  1972; Speed & Kiiveri 1986): each clique's block of ``Sigma = K^-1`` is set to
  ``S_CC`` by ``K <- K + [S_CC^-1 - Sigma_CC^-1]^0``, which keeps the precision's
  zeros off the graph; it converges to the MLE for any graph. ``Sigma`` follows
  each update by a rank-|C| Woodbury correction (O(p^2 |C|)), and is inverted
  afresh once a sweep.
* :func:`graphical_lasso`: the L1-penalized precision by block coordinate descent
  on the covariance (Friedman, Hastie & Tibshirani 2008), the penalty on the
  off-diagonal entries (scikit-learn's convention), optionally with the zeros of
  a graph forced.

References
----------
Dempster, A. P. (1972). Covariance selection. *Biometrics* 28, 157-175.
Speed, T. P. and Kiiveri, H. T. (1986). Gaussian Markov distributions over finite
graphs. *Ann. Statist.* 14, 138-150.
Lauritzen, S. L. (1996). *Graphical Models*. Oxford.
Friedman, J., Hastie, T. and Tibshirani, R. (2008). Sparse inverse covariance
estimation with the graphical lasso. *Biostatistics* 9, 432-441.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import networkx as nx
import numpy as np

from dpgm.algorithms.result import Estimate, log_iteration, log_step, parameter_change
from dpgm.inference.triangulation import clique_tree

__all__ = ["SingularBlock", "decomposable_precision", "gaussian_loglik", "graphical_lasso", "ips", "maximal_cliques"]


class SingularBlock(ValueError):
    """A block of the sample covariance that is not positive definite; ``indices``: its variables' positions."""

    def __init__(self, indices: Sequence[int]):
        self.indices = [int(i) for i in indices]
        super().__init__(f"the sample covariance of variables {self.indices} is singular (collinear variables or "
                         "fewer rows than variables); no finite MLE")


def gaussian_loglik(covariance: np.ndarray, sample: np.ndarray, n: float) -> float:
    """``-n/2 (p log 2 pi + log det Sigma + tr(Sigma^-1 S))`` at the MLE mean (divisor-n ``S``)."""
    p = covariance.shape[0]
    sign, log_det = np.linalg.slogdet(covariance)
    if sign <= 0:
        raise ValueError("the covariance is not positive definite")
    return -0.5 * n * (p * math.log(2 * math.pi) + log_det + float(np.trace(np.linalg.solve(covariance, sample))))


def maximal_cliques(adjacency: np.ndarray) -> list[tuple[int, ...]]:
    """Maximal cliques of the graph (sorted index tuples, deterministic order)."""
    graph = nx.from_numpy_array(adjacency.astype(int))
    return sorted(tuple(sorted(c)) for c in nx.find_cliques(graph))


def _junction_tree(cliques: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Separators of a junction tree of the cliques of a chordal graph (maximum spanning tree)."""
    tree = clique_tree(cliques)
    return [tuple(sorted(set(cliques[a]) & set(cliques[b]))) for a, b in tree.edges]


def decomposable_precision(sample: np.ndarray, adjacency: np.ndarray) -> np.ndarray:
    """The MLE precision of a chordal graph in closed form (clique and separator blocks).

    Raises
    ------
    ValueError
        The graph is not chordal (use :func:`ips`), or a clique's block of ``S`` is singular.
    """
    graph = nx.from_numpy_array(adjacency.astype(int))
    if not nx.is_chordal(graph):
        raise ValueError("closed_form needs a decomposable (chordal) graph; use method='ipf'")
    cliques = maximal_cliques(adjacency)
    precision = np.zeros_like(sample)
    for block, sign in [(c, 1.0) for c in cliques] + [(s, -1.0) for s in _junction_tree(cliques) if s]:
        index = np.ix_(block, block)
        precision[index] += sign * _inverse(sample[index], block)
    return precision


def _inverse(block: np.ndarray, where: Sequence[int]) -> np.ndarray:
    try:
        lower = np.linalg.cholesky(block)  # fails unless positive definite
    except np.linalg.LinAlgError:
        raise SingularBlock(where) from None
    # a pivot at rounding level: an exact linear dependence that rounding left barely positive
    pivots = np.diag(lower) ** 2 / np.diag(block)
    if not pivots.min() > 1e3 * np.finfo(float).eps * len(where):
        raise SingularBlock(where)
    factor = np.linalg.inv(lower)
    return factor.T @ factor


def ips(sample: np.ndarray, adjacency: np.ndarray, *, n: float = 1.0, max_iter: int = 1000, tol: float = 1e-10,
        callback: Callable[[dict], None] | None = None) -> Estimate:
    """Covariance selection by iterative proportional scaling: an :class:`~dpgm.algorithms.result.Estimate`
    of the precision.

    Each maximal clique ``C`` of the graph in turn, with ``B = Sigma_CC``:
    ``K_CC += S_CC^-1 - B^-1`` (the precision keeps its zeros off the graph), and
    ``Sigma -= W (B - S_CC) W'`` with ``W = Sigma_:C B^-1``: the Woodbury correction
    of that change, ``(I + (S_CC^-1 - B^-1) B)^-1 (S_CC^-1 - B^-1) = B^-1 (B - S_CC)
    B^-1``, written without a solve. O(p^2 |C|) per clique, never a p x p
    inversion inside a sweep; the covariance is inverted afresh from the precision
    once a sweep (no drift). Stops when every clique's block of the fitted covariance
    is within ``tol`` (largest absolute difference, relative to the largest
    variance) of ``S``.
    Each sweep's record has ``param_change``: the largest absolute change of a
    precision entry in the sweep.
    """
    cliques = [np.asarray(c) for c in maximal_cliques(adjacency)]
    plan = [(c, np.ix_(c, c), _inverse(sample[np.ix_(c, c)], c), sample[np.ix_(c, c)]) for c in cliques]
    precision = np.diag(1.0 / np.diag(sample))
    covariance = np.diag(np.diag(sample))
    scale = float(np.max(np.diag(sample)))
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    iteration = 0
    for iteration in range(1, max_iter + 1):
        error = 0.0
        before = precision.copy()
        for clique, index, target, block_sample in plan:
            columns = covariance[:, clique]
            block = columns[clique]
            difference = block - block_sample
            error = max(error, float(np.abs(difference).max()))
            inverse = np.linalg.inv(block)
            precision[index] += target - inverse
            w = columns @ inverse
            covariance -= (w @ difference) @ w.T
        error /= scale
        precision = (precision + precision.T) / 2
        covariance = np.linalg.inv(precision)  # once a sweep: no drift from the rank updates
        log_step(history, callback, start, iteration, gaussian_loglik(covariance, sample, n), error,
                 parameter_change(before, precision))
        if error < tol:
            converged = True
            break
    return Estimate(precision, history, converged, iteration)


def _lasso(gram: np.ndarray, target: np.ndarray, penalty: float, beta: np.ndarray, free: np.ndarray,
           tol: float, max_iter: int) -> np.ndarray:
    """Coordinate descent for ``min 1/2 b'Wb - s'b + penalty |b|_1`` over the ``free`` coordinates."""
    for _ in range(max_iter):
        largest = 0.0
        for j in np.flatnonzero(free):
            residual = target[j] - gram[j] @ beta + gram[j, j] * beta[j]
            new = np.sign(residual) * max(abs(residual) - penalty, 0.0) / gram[j, j]
            largest = max(largest, abs(new - beta[j]))
            beta[j] = new
        if largest < tol:
            break
    return beta


def graphical_lasso(sample: np.ndarray, alpha: float, *, adjacency: np.ndarray | None = None, n: float = 1.0,
                    max_iter: int = 200, tol: float = 1e-10,
                    callback: Callable[[dict], None] | None = None) -> Estimate:
    """L1-penalized precision ``argmax log det K - tr(SK) - alpha sum_{i != j} |K_ij|``.

    ``adjacency`` (optional) forces ``K_ij = 0`` where it has no edge. Returns
    an :class:`~dpgm.algorithms.result.Estimate` of the precision; converged when a sweep moves no
    entry of the covariance by more than ``tol`` times its largest variance.
    """
    p = sample.shape[0]
    covariance = sample.copy()  # the diagonal is S's (the penalty is off-diagonal)
    betas = np.zeros((p, p - 1))
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    iteration = 0
    scale = float(np.max(np.diag(sample)))
    for iteration in range(1, max_iter + 1):
        before = covariance.copy()
        for j in range(p):
            rest = np.r_[0:j, j + 1:p]
            free = np.ones(p - 1, dtype=bool) if adjacency is None else adjacency[j, rest].astype(bool)
            gram = covariance[np.ix_(rest, rest)]
            beta = _lasso(gram, sample[rest, j], alpha, betas[j].copy(), free, tol * 1e-2, 1000)
            betas[j] = beta
            covariance[rest, j] = covariance[j, rest] = gram @ beta
        change = float(np.abs(covariance - before).max()) / scale
        log_iteration(history, callback, {
            "iteration": iteration,
            "loglik": gaussian_loglik(covariance, sample, n),
            "max_error": change,
            "seconds": time.perf_counter() - start,
        })
        if change < tol:
            converged = True
            break
    return Estimate(_precision_from_betas(covariance, betas), history, converged, iteration)


def _precision_from_betas(covariance: np.ndarray, betas: np.ndarray) -> np.ndarray:
    """``K_jj = 1 / (W_jj - w_j' beta_j)``, ``K_{-j,j} = -beta_j K_jj`` (Friedman et al. 2008, sec. 2)."""
    p = covariance.shape[0]
    precision = np.zeros((p, p))
    for j in range(p):
        rest = np.r_[0:j, j + 1:p]
        kjj = 1.0 / (covariance[j, j] - covariance[rest, j] @ betas[j])
        precision[j, j] = kjj
        precision[rest, j] = -betas[j] * kjj
    return (precision + precision.T) / 2

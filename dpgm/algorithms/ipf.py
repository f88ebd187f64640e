"""Iterative proportional fitting of Markov networks to the marginals of their scopes.

``psi_C <- psi_C * p~(x_C) / p(x_C)`` for each scope ``C`` in turn, with
``0 / 0 = 0`` (Deming & Stephan 1940; Bishop, Fienberg & Holland 1975, ch. 3).
The algorithm sees only the empirical tables of its scopes, never the data.

References
----------
Deming, W. E. and Stephan, F. F. (1940). On a least squares adjustment of a
sampled frequency table when the expected marginal totals are known. *Ann.
Math. Statist.* 11, 427-444.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpgm.algorithms.result import log_step, parameter_change
from dpgm.algorithms.tables import loglik_from_potentials
from dpgm.potentials import Scope

__all__ = ["IPFState", "ipf"]

Engine = Callable[[Mapping[Scope, np.ndarray], Sequence[Scope]], tuple[dict[Scope, np.ndarray], float]]


@dataclass(frozen=True)
class IPFState:
    """Outcome of :func:`ipf` and :func:`~dpgm.algorithms.tree_ipf.tree_ipf`: log potentials, history and
    convergence; tree IPF adds the final log Z and its junction tree's width and total table size."""

    log_potentials: dict
    history: list
    converged: bool
    n_iter: int
    log_z: float | None = None
    width: int | None = None
    total_table_size: int | None = None


def _log_ratio(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(target) - np.log(current)
    # 0/0 = 0: a cell that is zero in both stays as it is
    return np.where((target == 0) & (current == 0), 0.0, np.where(target == 0, -np.inf, ratio))


def ipf(
    counts: Mapping[Scope, np.ndarray],
    engine: Engine,
    *,
    init: Mapping[Scope, np.ndarray] | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
    callback: Callable[[dict], None] | None = None,
) -> IPFState:
    """Fit potentials so the model's marginals equal the empirical ones.

    Parameters
    ----------
    counts
        Empirical counts of each scope (axes in scope order).
    engine
        ``engine(log_potentials, scopes) -> (marginals, log_z)``.
    init
        Starting log potentials (``-inf`` marks structural zeros, kept at zero);
        default all zeros (uniform).
    max_iter
        Sweeps over the scopes at most.
    tol
        Stop when the largest absolute difference between model and empirical
        marginal probabilities is below ``tol``.
    callback
        Called with each sweep's history record (``param_change``: the largest
        absolute change of a log potential in the sweep).

    Returns
    -------
    IPFState
    """
    scopes = list(counts)
    n = float(next(iter(counts.values())).sum()) if counts else 0.0
    targets = {s: np.asarray(counts[s], dtype=float) / n for s in scopes}
    log_potentials = {s: (np.zeros(counts[s].shape) if init is None else np.array(init[s], dtype=float)) for s in scopes}
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    iteration = 0
    marginals, log_z = engine(log_potentials, scopes)
    for iteration in range(1, max_iter + 1):
        before = {s: log_potentials[s] for s in scopes}  # the updates below make new arrays
        for scope in scopes:
            current, _ = engine(log_potentials, [scope])
            log_potentials[scope] = log_potentials[scope] + _log_ratio(targets[scope], current[scope])
        marginals, log_z = engine(log_potentials, scopes)
        error = max(float(np.abs(marginals[s] - targets[s]).max()) for s in scopes)
        log_step(history, callback, start, iteration, loglik_from_potentials(counts, log_potentials, log_z, n), error,
                 parameter_change(before, log_potentials))
        if error < tol:
            converged = True
            break
    return IPFState(log_potentials, history, converged, iteration)

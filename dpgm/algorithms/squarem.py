"""SQUAREM extrapolation of a fixed-point map (scheme S3) and the parametrisations it works on.

One SQUAREM cycle from ``θ0`` uses two EM steps, ``θ1 = F(θ0)`` and ``θ2 = F(θ1)``,
in an unconstrained parametrisation ``u`` (log-probabilities, Cholesky factors
with log diagonals, ...), and proposes

    r = u1 - u0,  v = u2 - 2 u1 + u0,  u' = u0 + 2 α r + α² v

(``α = 1`` gives ``u2``, the plain EM point). Because ``u'`` is mapped back by a
renormalisation (a softmax per distribution, ``L Lᵀ`` for a covariance), every
extrapolated point is a valid parameter. The step length is S3's
``α = clip(‖r‖ / ‖v‖, 1, step_max)`` measured on the model's own parameters
(probabilities, means, ...: :meth:`EMFamily.vector`), not on ``u``: a probability
that EM drives to zero falls geometrically, so its logarithm moves by a constant
each step (``r ≠ 0``, ``v = 0``), and a handful of those made ``‖r‖ / ‖v‖`` in log
space reach ``step_max`` on every cycle and overshoot the other coordinates
(measured on the latent class and alarm benchmarks: most of the rejected
extrapolations, some millions below in log-likelihood).

The EM loop evaluates ``u'`` in the next pass, which also gives its EM image
``F(θ')`` (the stabilisation step), and keeps the cycle only if the image's
log-likelihood, from the pass after, is not below that of the last accepted point;
otherwise it falls back to the plain EM point ``θ2`` (the monotonicity safeguard,
as in Varadhan's reference implementation, which tests the objective after the
stabilisation step). Judging ``θ'`` itself rejects steps that overshoot along fast
directions the stabilisation step contracts again: measured on the latent class and
alarm benchmarks, 0.51-0.82 of the passes to the same optimum with the image judged
(see ``benchmarks/results/em.md``). The step-length bound ``step_max`` starts at 1
and is multiplied by :data:`STEP_FACTOR` each time an accepted step reached it
(Varadhan and Roland's ``step.max0 = 1``, ``mstep = 4``); a rejected step of length
``α`` sets it to ``max(1, min(step_max, α) / STEP_FACTOR)``, so the next one is
shorter even when the rejected one was below the bound.

References
----------
Varadhan, R. and Roland, C. (2008). Simple and globally convergent methods for
accelerating the convergence of any EM algorithm. *Scand. J. Statist.* 35, 335-353.
"""

from __future__ import annotations

import numpy as np

__all__ = ["STEP_FACTOR", "extrapolate", "group_log", "group_softmax", "shorter_bound", "step_length"]

STEP_FACTOR = 4.0
MAX_STEP = 1e6
# log of a probability 0 in the unconstrained vector: finite, so differences stay finite (exp -> 0 again)
LOG_FLOOR = -700.0


def step_length(x0: np.ndarray, x1: np.ndarray, x2: np.ndarray, step_max: float) -> float:
    """S3's ``‖r‖ / ‖v‖`` of three successive points, clipped to ``[1, step_max]`` (1 if ``v`` vanishes)."""
    r = x1 - x0
    v = x2 - x1 - r
    r_norm, v_norm = float(np.sqrt(r @ r)), float(np.sqrt(v @ v))
    if not (v_norm > 0 and np.isfinite(r_norm) and np.isfinite(v_norm)):
        return 1.0
    return min(max(r_norm / v_norm, 1.0), step_max)


def extrapolate(u0: np.ndarray, u1: np.ndarray, u2: np.ndarray, alpha: float) -> np.ndarray:
    """The S3 point ``u0 + 2 α r + α² v`` (``u2`` when ``α = 1``)."""
    if alpha == 1.0:
        return u2
    r = u1 - u0
    v = u2 - u1 - r
    return u0 + 2 * alpha * r + alpha * alpha * v


def shorter_bound(step_max: float, alpha: float) -> float:
    """The step-length bound after a step of length ``alpha`` was rejected."""
    return max(1.0, min(step_max, alpha) / STEP_FACTOR)


def group_log(probabilities: np.ndarray) -> np.ndarray:
    """Logs of probabilities, zeros at :data:`LOG_FLOOR` (finite)."""
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(np.asarray(probabilities, dtype=float)), LOG_FLOOR)


def group_softmax(logits: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Probabilities from logits, normalised within each group (``groups[i]`` is entry ``i``'s group).

    Cells at :data:`LOG_FLOOR` or below map back to exactly 0 (a zero stays a zero).
    """
    top = np.full(n_groups, -np.inf)
    np.maximum.at(top, groups, logits)
    values = np.where(logits <= LOG_FLOOR, 0.0, np.exp(logits - top[groups]))
    totals = np.bincount(groups, weights=values, minlength=n_groups)
    return values / np.where(totals > 0, totals, 1.0)[groups]

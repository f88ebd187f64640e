"""An estimate of the distance from an EM fit's log-likelihood to its maximum (each record's ``gap``).

Near a maximum EM converges linearly: the error of the parameters shrinks by the
largest eigenvalue ``λ`` of EM's rate matrix each step, so the log-likelihood's
distance to its limit (a quadratic form in that error) shrinks by ``c = λ²`` and the
gains of successive steps form a geometric series. After an EM step of gain ``Δ``
the remaining distance is ``Δ c + Δ c² + ... = Δ c / (1 - c)``: Aitken's
acceleration estimate of the limit (Böhning et al. 1994; McLachlan and Krishnan
2008, §4.9). The rate ``c`` used is the largest over the last :data:`RATE_WINDOW` EM
steps of

* ``λ = ‖θ2 - θ1‖ / ‖θ1 - θ0‖`` measured on the parameters for the step
  ``θ0 → θ1 = F(θ0)`` and the next EM point ``θ2 = F(θ1)`` (computed before the next
  pass), taken as it is, not squared: ``λ >= λ²`` bounds the log-likelihood's rate
  when the error is not yet along one eigenvector (after a SQUAREM extrapolation,
  which removes most of the error along EM's slowest direction, ``λ²`` underestimated
  the distance by up to 3x on a latent class model, and on alarm's ridge plain EM's
  Aitken ratio alone fell short of it too);
* for plain EM, whose steps follow one another, also the ratio of two successive
  gains (Aitken's).

A rate of 1 or more (EM not yet in its linear phase, or slower than linear) gives
no bound (None).

The stopping rule (:func:`within_tolerance`): a fit has converged when
``MARGIN · gap <= tol · |loglik|``, i.e. its log-likelihood is estimated to be within
``tol`` (relative) of the maximum, with a margin of :data:`MARGIN` for the estimate's
own error. After a SQUAREM extrapolation the one-step estimate is short (the error
is no longer along EM's slowest direction), so SQUAREM's estimate only starts
:data:`CERTIFY_STEPS` plain EM steps, and the fit converges when the last of them is
within tolerance too. Checked against the maximum of an enumerated latent class
likelihood found by SciPy's L-BFGS-B (``tests/algorithms/test_stopping.py``).

References
----------
Böhning, D., Dietz, E., Schaub, R., Schlattmann, P. and Lindsay, B. G. (1994). The
distribution of the likelihood ratio for mixtures of densities from the one-parameter
exponential family. *Ann. Inst. Statist. Math.* 46, 373-388.

McLachlan, G. J. and Krishnan, T. (2008). *The EM Algorithm and Extensions*, 2nd ed. Wiley.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CERTIFY_STEPS", "MARGIN", "RATE_WINDOW", "ROUNDING", "estimated_gap", "parameter_rate",
           "within_tolerance"]

RATE_WINDOW = 20
MARGIN = 2.0  # the rule asks the estimate times this to be within tol (the estimate fell short by up to 3x near 1)
CERTIFY_STEPS = 3  # plain EM steps that confirm a SQUAREM estimate before the fit counts as converged
ROUNDING = 1e-13  # a gain below this times |loglik| (about 450 float64 epsilons) is the sum's rounding


def parameter_rate(v0: np.ndarray | None, v1: np.ndarray | None, v2: np.ndarray | None) -> float | None:
    """EM's rate ``λ = ‖v2 - v1‖ / ‖v1 - v0‖`` on the parameters of three successive EM points (None if
    unknown)."""
    if v0 is None or v1 is None or v2 is None or np.shape(v0) != np.shape(v1) or np.shape(v1) != np.shape(v2):
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        first = np.where(v1 == v0, 0.0, v1 - v0)
        second = np.where(v2 == v1, 0.0, v2 - v1)
        a, b = float(np.sqrt(first @ first)), float(np.sqrt(second @ second))
    if not (np.isfinite(a) and np.isfinite(b)):
        return None
    if a == 0.0:
        return 0.0 if b == 0.0 else None
    return b / a


def estimated_gap(gain: float, rates: list[float]) -> float | None:
    """The estimated distance to the maximum after an EM step of ``gain``, at the largest of ``rates``.

    A gain at or below 0 (a step at the maximum, within rounding) counts as ``|gain|``, and its distance
    is at least ``|gain|``; no rate, or a rate of 1 or more, gives None (no bound).
    """
    if not np.isfinite(gain) or not rates:
        return None
    rate = max(rates)
    if not (0.0 <= rate < 1.0):
        return None
    if gain <= 0.0:
        return abs(gain) * max(rate / (1.0 - rate), 1.0)
    return gain * rate / (1.0 - rate)


def within_tolerance(gap: float | None, loglik: float, tol: float) -> bool:
    """The stopping rule: the estimated distance ``gap`` to the maximum, times :data:`MARGIN`, is at most
    ``tol · |loglik|`` (no estimate: not converged)."""
    return gap is not None and bool(MARGIN * gap <= tol * abs(loglik))

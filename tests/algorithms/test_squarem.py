"""SQUAREM's step length and extrapolation against closed forms (Varadhan and Roland 2008, scheme S3).

For a fixed-point iteration converging linearly, ``x_t = x* + λ^t d``, S3's step length is
``‖r‖ / ‖v‖ = 1 / (1 - λ)`` and the extrapolated point ``x0 + 2αr + α²v`` at that length is
exactly ``x*`` (``x* + d (1 + α (λ - 1))²``). A probability driven to zero geometrically is such
an iteration on the probability scale, but on the log scale it moves by a constant step, so
there ``‖r‖ / ‖v‖`` is unbounded: the reason the step length is measured on the parameters.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpgm.algorithms.em import EMFamily, em
from dpgm.algorithms.squarem import STEP_FACTOR, extrapolate, group_log, shorter_bound, step_length


@pytest.mark.parametrize("lam", [0.5, 0.9, 0.99])
def test_linear_convergence_is_solved_in_one_step(lam):
    rng = np.random.default_rng(0)
    fixed, d = rng.normal(size=7), rng.normal(size=7)
    x0, x1, x2 = (fixed + lam**t * d for t in range(3))
    alpha = step_length(x0, x1, x2, step_max=1e6)
    assert alpha == pytest.approx(1 / (1 - lam), rel=1e-9)
    np.testing.assert_allclose(extrapolate(x0, x1, x2, alpha), fixed, atol=1e-9)


def test_step_length_is_clipped_and_one_means_the_em_point():
    x0, x1, x2 = np.zeros(2), np.ones(2), np.full(2, 1.9)  # λ = 0.9: ‖r‖/‖v‖ = 10
    assert step_length(x0, x1, x2, step_max=4.0) == 4.0
    assert step_length(x0, x1, x1 + (x1 - x0), step_max=4.0) == 1.0  # v = 0: no curvature, the EM step
    assert step_length(x0, x1, x1 + 2 * (x1 - x0), step_max=4.0) == 1.0  # expanding: below 1, clipped to 1
    np.testing.assert_array_equal(extrapolate(x0, x1, x2, 1.0), x2)


def test_a_vanishing_probability_inflates_the_log_scale_step_but_not_the_probability_one():
    lam = 0.5
    p = [np.array([1 - 0.1 * lam**t, 0.1 * lam**t]) for t in range(3)]
    assert step_length(*p, step_max=1e6) == pytest.approx(1 / (1 - lam), rel=1e-9)
    assert step_length(*(group_log(q) for q in p), step_max=1e6) > 10 / (1 - lam)  # 24.7: the log of 0.1 λ^t has v = 0


def test_rejected_step_shortens_the_bound():
    assert shorter_bound(64.0, 10.0) == pytest.approx(10.0 / STEP_FACTOR)
    assert shorter_bound(4.0, 4.0) == pytest.approx(4.0 / STEP_FACTOR)
    assert shorter_bound(2.0, 1.5) == 1.0


class _LinearEM(EMFamily):
    """A fixed-point map ``F(x) = Λ x`` (diagonal) with log-likelihood ``-1 - Σ w_i x_i²``: optimum 0."""

    def __init__(self, lam, weights):
        self.lam, self.weights = np.asarray(lam, float), np.asarray(weights, float)
        self.evaluated = []

    def loglik(self, x):
        return -1.0 - float(self.weights @ (x * x))

    def estep(self, parameters, iteration, rows=None):
        self.evaluated.extend(parameters)
        return [(self.loglik(x), x) for x in parameters]

    def mstep(self, parameters, statistics):
        return self.lam * statistics

    def vector(self, parameters):
        return parameters

    def constrained(self, vector, like):
        return vector


def test_an_extrapolation_is_judged_by_its_em_image():
    """A fast direction (λ = 0.02) overshot by the step the slow one (λ = 0.95) wants: the point is
    far below, its EM image (the fast coordinate contracted 50-fold) far above. The loop keeps it."""
    family, start, tol = _LinearEM([0.02, 0.95], [100.0, 1.0]), np.array([1.0, 3.0]), 1e-14
    state = em(family, [start], accelerate="squarem", tol=tol, max_iter=1000)
    history = state.histories[0]
    below = [t for t, h in enumerate(history) if h["step"] == "extrapolated" and not h["accepted"]]
    assert below, "no extrapolation fell below the last accepted point"
    t = below[0]
    best_before = max(h["loglik"] for h in history[:t] if h["accepted"])
    assert history[t]["loglik"] < best_before - 10  # the old rule rejected this cycle
    # the next pass evaluates the point's EM image Λθ' and keeps it (the old rule fell back to F(θ1))
    np.testing.assert_allclose(family.evaluated[t + 1], family.lam * family.evaluated[t], rtol=1e-15)
    assert history[t + 1]["accepted"] and history[t + 1]["loglik"] > best_before
    accepted = [h["loglik"] for h in history if h["accepted"]]
    assert np.all(np.diff(accepted) >= 0)
    assert state.converged[0]
    np.testing.assert_allclose(state.models[0], 0.0, atol=1e-6)
    # plain EM's passes in closed form: x_t = Λ^t x_0, stop at the first |L_t - L_{t-1}| <= tol |L_t|
    logliks = [family.loglik(family.lam**k * start) for k in range(2000)]
    plain = next(k for k in range(1, 2000) if abs(logliks[k] - logliks[k - 1]) <= tol * abs(logliks[k])) + 1
    assert plain > 250 and state.passes < plain / 10

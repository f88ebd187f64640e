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

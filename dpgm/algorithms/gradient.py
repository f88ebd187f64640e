"""Gradient methods for log-linear models: L-BFGS, Newton, and proximal gradient for L1.

Objective (per row, to be minimized):

    f(theta) = log Z(theta) - theta . E_data[f] + (l2 / 2) |theta|^2 + l1 |theta|_1,

whose smooth part has gradient ``E_model[f] - E_data[f] + l2 theta``. Model
expectations of every feature come from one engine call (one calibration).
L-BFGS is scipy's L-BFGS-B; Newton uses the feature covariance (the Hessian of
log Z) from the enumerated joint, for small models; L1 uses FISTA proximal
gradient steps with backtracking (Beck & Teboulle 2009), whose soft-threshold
gives exact zeros.

References
----------
Beck, A. and Teboulle, M. (2009). A fast iterative shrinkage-thresholding
algorithm for linear inverse problems. *SIAM J. Imaging Sci.* 2, 183-202.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import scipy.optimize

from dpgm.algorithms.features import FeatureSet
from dpgm.algorithms.result import Estimate, parameter_change
from dpgm.algorithms.tables import JointEngine

__all__ = ["lbfgs", "newton", "proximal_gradient"]


class _Objective:
    """The penalized objective over the *active* features (empirical expectation > 0).

    A feature never seen in the data has its MLE weight at ``-inf`` (its cells get
    probability zero); it is fixed there instead of chased towards it, which keeps
    the remaining problem well conditioned.
    """

    def __init__(self, features: FeatureSet, empirical: np.ndarray, engine, l2: float, l1: float, n: float,
                 callback: Callable[[dict], None] | None):
        self.active = empirical > 0
        self.full_empirical = empirical
        empirical = empirical[self.active]
        self.features, self.empirical, self.engine = features, empirical, engine
        self.evaluate = features.expectations_at(engine, self.active)
        self.l2, self.l1, self.n = l2, l1, n
        self.history: list[dict] = []
        self.callback = callback
        self.start = time.perf_counter()
        self.previous: np.ndarray | None = None  # weights of the last record (or the start)

    def full(self, theta: np.ndarray) -> np.ndarray:
        """Active weights -> every feature's weight (``-inf`` for the inactive ones)."""
        out = np.full(self.active.shape, -np.inf)
        out[self.active] = theta
        return out

    def smooth(self, theta: np.ndarray) -> tuple[float, np.ndarray, float]:
        expected, log_z = self.evaluate(theta)
        mean_loglik = float(theta @ self.empirical) - log_z
        value = -mean_loglik + 0.5 * self.l2 * float(theta @ theta)
        gradient = expected - self.empirical + self.l2 * theta
        return value, gradient, mean_loglik

    def covariance(self, theta: np.ndarray) -> np.ndarray:
        """Covariance of the active features at ``theta`` (the Hessian of log Z; an enumerable joint)."""
        if hasattr(self.evaluate, "covariance"):
            return self.evaluate.covariance(theta)
        _, covariance = self.features.joint_covariance(self.engine, self.full(theta))
        return covariance[np.ix_(self.active, self.active)]

    def record(self, theta: np.ndarray, value: float, gradient: np.ndarray, mean_loglik: float) -> dict:
        objective = value + self.l1 * float(np.abs(theta).sum())
        entry = {
            "iteration": len(self.history) + 1,
            "loglik": self.n * mean_loglik,
            "objective": objective,
            "max_error": float(np.abs(gradient - self.l2 * theta).max()),
            "param_change": None if self.previous is None else parameter_change(self.previous, theta),
            "seconds": time.perf_counter() - self.start,
        }
        self.previous = np.array(theta, dtype=float)
        self.history.append(entry)
        if self.callback is not None:
            self.callback(entry)
        return entry


def lbfgs(features: FeatureSet, empirical: np.ndarray, engine, *, l2: float = 0.0, theta=None, n: float = 1.0,
          max_iter: int = 1000, tol: float = 1e-10, callback=None) -> Estimate:
    """Minimize the L2-penalized negative log-likelihood with L-BFGS-B.

    The weights are scaled by the square root of their features' empirical expectations (a
    diagonal preconditioner): 1.3-3x fewer iterations on the benchmark tables, 377 -> 126 on
    the all-pairwise model of five alarm variables.

    Returns an :class:`~dpgm.algorithms.result.Estimate`; converged means the largest
    gradient component fell below ``tol`` or L-BFGS-B could lower the objective no
    further in double precision (then the gradient is about 1e-8 per row). On an
    enumerable joint with a modest design, up to ``POLISH_STEPS`` Newton steps
    then take the gradient below ``tol``; larger models stop at L-BFGS-B's limit
    (use ``"ipf"`` or ``"gis"`` for tighter fits there).
    """
    problem = _Objective(features, empirical, engine, l2, 0.0, n, callback)
    theta0 = _start(problem, theta)
    problem.previous = theta0  # each record is after an L-BFGS-B iteration
    cache: dict = {}

    # L-BFGS-B runs on z = scale * theta: an indicator feature of empirical expectation p has Fisher
    # information p (1 - p) ~ p, so scale = sqrt(p) is a diagonal preconditioner (active features: p > 0)
    scale = np.sqrt(problem.empirical)

    def fun(z):
        theta = z / scale
        value, gradient, mean_loglik = problem.smooth(theta)
        cache["last"] = (theta.copy(), value, gradient, mean_loglik)
        return value, gradient / scale

    def step(intermediate):
        theta_now, value, gradient, mean_loglik = cache["last"]
        problem.record(theta_now, value, gradient, mean_loglik)

    # L-BFGS-B stops when its line search can no longer lower f in floating point;
    # restarting with fresh curvature pairs usually gets the gradient further down.
    iterations, point = 0, theta0 * scale
    for _ in range(5):
        result = scipy.optimize.minimize(
            fun, point, jac=True, method="L-BFGS-B", callback=lambda *a: step(a),
            options={"maxiter": max_iter - iterations, "gtol": tol, "ftol": 0.0, "maxcor": 30, "maxls": 50},
        )
        iterations += int(result.nit)
        improved = float(np.abs(point - result.x).max()) > 0
        point = result.x
        if result.success or not improved or iterations >= max_iter:
            break
    result.x, result.nit = point / scale, iterations
    value, gradient, mean_loglik = problem.smooth(result.x)
    problem.record(result.x, value, gradient, mean_loglik)
    # success: the gradient met tol, or f stopped decreasing in floating point (for an
    # objective of size ~1 that leaves the gradient near 1e-8-1e-9, not lower) ...
    converged = bool(result.success) or float(np.abs(gradient).max()) < tol
    if float(np.abs(gradient).max()) >= tol and _can_polish(problem):
        # ... where a few Newton steps, whose test is the gradient itself, finish the job
        point, polished, steps = _newton_iterations(problem, result.x, POLISH_STEPS, tol)
        result.x, result.nit, converged = point, iterations + steps, converged or polished
    return Estimate(problem.full(result.x), problem.history, converged, int(result.nit))


POLISH_STEPS = 20
_POLISH_MAX_ENTRIES = 5 * 10**7


def _can_polish(problem: _Objective) -> bool:
    """Newton steps are affordable: an enumerable joint and a design of at most 5e7 entries."""
    engine = problem.engine
    return (isinstance(engine, JointEngine) and problem.l2 == 0.0
            and len(problem.active) * int(np.prod(engine.shape)) <= _POLISH_MAX_ENTRIES)


def newton(features: FeatureSet, empirical: np.ndarray, engine: JointEngine, *, l2: float = 0.0, theta=None,
           n: float = 1.0, max_iter: int = 100, tol: float = 1e-10, callback=None) -> Estimate:
    """Damped Newton steps with the exact Hessian (feature covariance) on an enumerable joint.

    The Hessian of an over-parameterized model is singular; the step solves it in
    the least-squares sense (pseudo-inverse), which moves only identifiable directions.
    """
    if not isinstance(engine, JointEngine):
        raise ValueError("Newton's method needs an enumerable joint table (a small model); use lbfgs")
    problem = _Objective(features, empirical, engine, l2, 0.0, n, callback)
    theta, converged, iteration = _newton_iterations(problem, _start(problem, theta), max_iter, tol)
    return Estimate(problem.full(theta), problem.history, converged, iteration)


def _newton_iterations(problem: _Objective, theta: np.ndarray, max_iter: int, tol: float):
    """Damped Newton from ``theta`` (active weights): ``(theta, converged, iterations)``."""
    converged = False
    iteration = 0
    for iteration in range(1, max_iter + 1):
        value, gradient, mean_loglik = problem.smooth(theta)
        problem.record(theta, value, gradient, mean_loglik)
        if float(np.abs(gradient).max()) < tol:
            converged = True
            break
        covariance = problem.covariance(theta)
        hessian = covariance + problem.l2 * np.eye(len(theta))
        direction = -np.linalg.lstsq(hessian, gradient, rcond=1e-12)[0]
        theta = theta + _newton_step_size(problem, theta, direction, value, gradient) * direction
    return theta, converged, iteration


def _newton_step_size(problem: _Objective, theta, direction, value: float, gradient) -> float:
    """Armijo backtracking; near the optimum, where f no longer changes in double precision
    (|f| ~ 1, decreases ~ |gradient|^2), a step that shrinks the gradient without raising f
    beyond rounding is taken instead, so the gradient goes below 1e-12 rather than stalling."""
    size = 1.0
    largest = float(np.abs(gradient).max())
    while size > 1e-10:
        candidate_value, candidate_gradient, _ = problem.smooth(theta + size * direction)
        if candidate_value <= value + 1e-4 * size * float(gradient @ direction):
            return size
        if (candidate_value <= value + 1e-13 * max(abs(value), 1.0)
                and float(np.abs(candidate_gradient).max()) < 0.5 * largest):
            return size
        size /= 2
    return size


def proximal_gradient(features: FeatureSet, empirical: np.ndarray, engine, *, l1: float, l2: float = 0.0,
                      theta=None, n: float = 1.0, max_iter: int = 5000, tol: float = 1e-10, callback=None) -> Estimate:
    """FISTA with backtracking for the L1(+L2)-penalized negative log-likelihood.

    Converged means the proximal-gradient mapping (the step's movement divided by
    its size) fell below ``tol``.
    """
    problem = _Objective(features, empirical, engine, l2, l1, n, callback)
    theta = _start(problem, theta)
    problem.previous = theta  # each record is after a step
    momentum_point, t, lipschitz = theta.copy(), 1.0, 1.0
    converged = False
    iteration = 0

    def shrink(v, threshold):
        return np.sign(v) * np.maximum(np.abs(v) - threshold, 0.0)

    for iteration in range(1, max_iter + 1):
        value_y, gradient_y, _ = problem.smooth(momentum_point)
        while True:
            candidate = shrink(momentum_point - gradient_y / lipschitz, l1 / lipschitz)
            difference = candidate - momentum_point
            value_c, gradient_c, mean_loglik = problem.smooth(candidate)
            if value_c <= value_y + gradient_y @ difference + 0.5 * lipschitz * difference @ difference + 1e-15:
                break
            lipschitz *= 2.0
        entry = problem.record(candidate, value_c, gradient_c, mean_loglik)
        movement = float(np.abs(candidate - theta).max()) * lipschitz
        if len(problem.history) > 1 and entry["objective"] > problem.history[-2]["objective"]:
            t = 1.0  # adaptive restart (O'Donoghue & Candes 2015): drop the momentum
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        momentum_point = candidate + ((t - 1) / t_next) * (candidate - theta)
        theta, t = candidate, t_next
        lipschitz = max(lipschitz / 1.5, 1e-8)
        if movement < tol:
            converged = True
            break
    return Estimate(problem.full(theta), problem.history, converged, iteration)


def _start(problem: _Objective, theta) -> np.ndarray:
    if theta is None:
        return np.zeros(int(problem.active.sum()))
    theta = np.asarray(theta, dtype=float)[problem.active]
    return np.where(np.isfinite(theta), theta, 0.0)

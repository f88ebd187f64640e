"""Generalized iterative scaling for log-linear models with nonnegative features.

Model: ``p(x) ∝ exp(sum_i theta_i f_i(x_{S_i}))`` with ``f_i >= 0``. Each step

    theta_i <- theta_i + (1 / C) log(E_data[f_i] / E_model[f_i]),

where ``C >= max_x sum_i f_i(x)``. Where the features do not sum to the constant
``C`` everywhere, a slack feature ``C - sum_i f_i`` is added (Darroch & Ratcliff
1972); since the slack is a sum of per-scope terms, its weight folds into the
others. ``C`` is the exact maximum where the joint is enumerated, else the bound
``sum_i max f_i`` (correct, slower steps). Indicator features of every cell of
every clique sum to the number of cliques: GIS on them is the fully parallel form
of IPF.

References
----------
Darroch, J. N. and Ratcliff, D. (1972). Generalized iterative scaling for
log-linear models. *Ann. Math. Statist.* 43, 1470-1480.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dpgm.algorithms.features import FeatureSet
from dpgm.algorithms.result import Estimate, log_step, parameter_change

__all__ = ["gis"]


def gis(
    features: FeatureSet,
    empirical: np.ndarray,
    engine,
    *,
    theta: np.ndarray | None = None,
    scale: float | None = None,
    n: float = 1.0,
    max_iter: int = 10_000,
    tol: float = 1e-10,
    callback: Callable[[dict], None] | None = None,
) -> Estimate:
    """Run GIS from ``theta`` (default zeros) until the expectations match within ``tol``.

    Parameters
    ----------
    features
        The features, grouped by scope.
    empirical
        Empirical expectation of each feature (``E_data[f_i]``), in feature order.
    engine
        ``engine(log_potentials, scopes) -> (marginals, log_z)``.
    theta
        Starting weights.
    scale
        ``C``; default :meth:`FeatureSet.max_total`.
    n
        Rows behind ``empirical``: the history's log-likelihood is per row times ``n``.
    max_iter, tol
        Stop when ``max_i |E_model[f_i] - E_data[f_i]| < tol`` or after ``max_iter`` steps.
    callback
        Called with each step's history record, at the weights before the step
        (``param_change``: the largest absolute change of a weight since the
        previous record; None at the start).

    Returns
    -------
    Estimate
        The weights (``-inf`` for a feature never seen), history, convergence and steps.
    """
    theta = np.zeros(features.n_features) if theta is None else np.array(theta, dtype=float)
    c = float(scale if scale is not None else features.max_total(engine))
    if c <= 0:
        raise ValueError("all features are zero everywhere: nothing to fit")
    slack_empirical = c - float(empirical.sum())
    theta_slack = 0.0
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    step = 0
    # a feature never seen has its weight at -inf (its cells at zero, its expectation exactly 0):
    # the iterations run on the others
    active = empirical > 0
    evaluate = features.expectations_at(engine, active)
    target = empirical[active]
    theta = theta[active]
    log_target = np.log(target)
    previous = None
    with np.errstate(divide="ignore"):  # an expectation that underflows to 0 sends its weight to +inf
        for step in range(1, max_iter + 1):
            effective = theta - theta_slack
            change = None if previous is None else parameter_change(previous, effective)
            previous = effective
            expected, log_z = evaluate(effective)
            error = float(np.abs(expected - target).max()) if expected.size else 0.0
            loglik = n * (float(effective @ target) - log_z)
            log_step(history, callback, start, step, loglik, error, change)
            if error < tol:
                converged = True
                break
            theta = theta + (log_target - np.log(expected)) / c
            slack_expected = c - float(expected.sum())
            if slack_empirical > 0 and slack_expected > 0:
                theta_slack += np.log(slack_empirical / slack_expected) / c
    out = np.full(features.n_features, -np.inf)
    out[active] = theta - theta_slack
    return Estimate(out, history, converged, step)

"""The weights of a feature set by one of the log-linear methods, and the log-likelihood they reach.

The one dispatch behind :class:`~dpgm.LogLinearModel` fits and the log-linear
methods of a :class:`~dpgm.MarkovNetwork` (indicator features): GIS, Newton, L1 by
proximal gradient, else L-BFGS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from dpgm.algorithms.features import FeatureSet
from dpgm.algorithms.gis import gis
from dpgm.algorithms.gradient import lbfgs, newton, proximal_gradient
from dpgm.algorithms.result import Estimate

__all__ = ["WEIGHT_METHODS", "fit_weights"]

WEIGHT_METHODS = ("gis", "lbfgs", "newton")


def fit_weights(features: FeatureSet, empirical: np.ndarray, engine, method: str, *, theta: np.ndarray, n: float,
                max_iter: int, tol: float, callback: Callable[[dict], None] | None = None, l1: float = 0.0,
                l2: float = 0.0) -> Estimate:
    """Fit the weights of ``features`` to ``empirical`` (per-row expectations of ``n`` rows) from ``theta``.

    ``method`` is one of :data:`WEIGHT_METHODS`; ``"lbfgs"`` with ``l1 > 0`` runs the
    proximal gradient. The :class:`~dpgm.algorithms.result.Estimate` carries the
    log-likelihood at the fitted weights (``n (theta . E_data[f] - log Z)`` over the
    finite weights).

    Raises
    ------
    ValueError
        ``"gis"`` with a penalty.
    """
    options = {"theta": theta, "n": n, "max_iter": max_iter, "tol": tol, "callback": callback}
    if method == "gis":
        if l1 or l2:
            raise ValueError("gis fits the unpenalized likelihood; use method='lbfgs' for l1/l2 penalties")
        run = gis(features, empirical, engine, **options)
    elif method == "newton":
        run = newton(features, empirical, engine, l2=l2, **options)
    elif l1 > 0:
        run = proximal_gradient(features, empirical, engine, l1=l1, l2=l2, **options)
    else:
        run = lbfgs(features, empirical, engine, l2=l2, **options)
    weights = run.parameters
    _, log_z = engine(features.log_potentials(weights), [])
    finite = np.isfinite(weights)
    return replace(run, loglik=n * (float(weights[finite] @ empirical[finite]) - log_z))

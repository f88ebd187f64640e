"""Goodness of fit against the saturated model, where its table is small enough to form."""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_SATURATED_CELLS", "deviance_and_pearson"]

MAX_SATURATED_CELLS = 1 << 22


def deviance_and_pearson(
    observed: np.ndarray, probabilities: np.ndarray, structural_zeros: np.ndarray | None = None
) -> tuple[float, float]:
    """G^2 = 2 sum n log(n / m) and X^2 = sum (n - m)^2 / m, with m = N p.

    Cells fixed at zero (``structural_zeros``) are left out of both sums.
    """
    observed = np.asarray(observed, dtype=float)
    fitted = observed.sum() * np.asarray(probabilities, dtype=float)
    keep = np.ones(observed.shape, dtype=bool) if structural_zeros is None else ~structural_zeros
    n, m = observed[keep], fitted[keep]
    positive = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        g2 = 2.0 * float((n[positive] * np.log(n[positive] / m[positive])).sum())
        pearson = float(np.where(m > 0, (n - m) ** 2 / np.where(m > 0, m, 1.0), np.where(n > 0, np.inf, 0.0)).sum())
    return g2, pearson

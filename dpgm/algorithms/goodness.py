"""Goodness of fit against the saturated model, where its table is small enough to form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpgm.potentials import Scope, reduce_to

__all__ = ["MAX_SATURATED_CELLS", "GoodnessOfFit", "deviance_and_pearson", "saturated_goodness_of_fit"]

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


@dataclass(frozen=True)
class GoodnessOfFit:
    """G^2, Pearson X^2 and their degrees of freedom against the saturated model; ``n_params`` the
    identified parameters (fewer than the model's where structural zeros leave some unidentified)."""

    g2: float
    pearson: float
    df: int
    n_params: int
    info: Mapping[str, Any] = field(default_factory=dict)


def saturated_goodness_of_fit(features: Any, joint_engine: Any, log_potentials: Mapping[Scope, np.ndarray],
                              observed: np.ndarray, saturated: Scope, n_params: int) -> GoodnessOfFit:
    """G^2, X^2 and df of the model ``log_potentials`` against the saturated table ``observed`` (axes in
    ``saturated`` order), on an enumerable ``joint_engine`` whose structural zeros are left out.

    Cells fixed at zero leave the table and the parameters they alone carried become unidentifiable:
    df = kept cells - rank of the design on them (statsmodels' GLM agrees). R's loglin convention,
    without the adjustment, is kept in ``info["df_unadjusted"]``.
    """
    probabilities = joint_engine.joint(log_potentials)
    observed = reduce_to(np.asarray(observed), saturated, joint_engine.variables)
    zeros = joint_engine.zeros()
    g2, pearson = deviance_and_pearson(observed, probabilities, zeros)
    df = int(observed.size - 1 - n_params)
    if zeros is None:
        return GoodnessOfFit(g2, pearson, df, n_params)
    kept = ~zeros.ravel()
    design = np.vstack([np.ones(int(kept.sum())), features.design(joint_engine.variables, joint_engine.shape)[:, kept]])
    rank = int(np.linalg.matrix_rank(design))
    return GoodnessOfFit(g2, pearson, int(kept.sum()) - rank, rank - 1,
                         {"df_unadjusted": df, "structural_zero_cells": int(zeros.sum())})

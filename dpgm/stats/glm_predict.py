"""A GLM child's prediction for every row, as a chunked map (no reduction).

Each chunk builds the design rows of its parents (rows missing a parent predict
NaN), the linear predictor at the fitted coefficients and, by the family's
inverse link, the mean (gaussian, poisson) or the state probabilities (bernoulli:
two columns; categorical: one per state). One task per chunk (``dpgm-predict``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.stats.irls import Design
from dpgm.stats.rows import constant_map, row_map

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["design_rows", "glm_prediction_map", "predict_block"]


def predict_block(columns: dict[str, np.ndarray], design: Design, beta: np.ndarray) -> np.ndarray:
    """``(rows, outputs)`` predictions of one block: the mean (1 column) or each state's probability."""
    x, keep = design_rows(columns, design)
    family = design.glm
    out = family.predictions(family.linear_predictor(x, beta, design.n_classes))
    out[~keep] = np.nan
    return out


def design_rows(columns: dict[str, np.ndarray], design: Design) -> tuple[np.ndarray, np.ndarray]:
    """The design matrix of every row of a block (a missing parent's columns zero) and which rows have every
    parent."""
    parents = [np.asarray(columns[name]) for name, _ in design.parents]
    n = len(parents[0]) if parents else len(next(iter(columns.values()), ()))
    x = np.zeros((n, design.n_terms))
    x[:, 0] = 1.0
    keep = np.ones(n, bool)
    col = 1
    for (name, k), values in zip(design.parents, parents, strict=True):
        if k:
            codes = values.astype(np.intp)
            keep &= codes >= 0
            hit = codes > 0
            x[np.flatnonzero(hit), col + codes[hit] - 1] = 1.0
            col += k - 1
        else:
            keep &= ~np.isnan(values)
            x[:, col] = np.where(np.isnan(values), 0.0, values)
            col += 1
    return x, keep


def _glm_block(index: int, columns: dict[str, np.ndarray], shared: tuple[Design, np.ndarray]) -> np.ndarray:
    design, beta = shared
    return predict_block(columns, design, beta)


def glm_prediction_map(data: Any, design: Design, beta: np.ndarray, outputs: int) -> da.Array:
    """Lazy ``(row, outputs)`` predictions of the GLM ``design`` at ``beta`` for every row of ``data``.

    One task per chunk (see :func:`dpgm.stats.rows.row_map`); the design and the
    coefficients enter the graph once.
    """
    names = [name for name, _ in design.parents]
    if not names:  # intercept only: every row predicts the same
        return constant_map(data, predict_block({"__rows__": np.zeros(1)}, design, beta))
    return row_map(data, names, _glm_block, outputs, shared=(design, np.asarray(beta)))

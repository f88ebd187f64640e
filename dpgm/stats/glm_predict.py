"""A GLM child's prediction for every row, as a chunked map (no reduction).

Each chunk builds the design rows of its parents (rows missing a parent predict
NaN), the linear predictor at the fitted coefficients and, by the family's
inverse link, the mean (gaussian, poisson) or the state probabilities (bernoulli:
two columns; categorical: one per state). One task per chunk (``dpgm-predict``).
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dpgm.data.columns import ZarrColumns, zarr_columns
from dpgm.stats.irls import Design

__all__ = ["glm_prediction_map", "predict_block"]


def predict_block(columns: dict[str, np.ndarray], design: Design, beta: np.ndarray) -> np.ndarray:
    """``(rows, outputs)`` predictions of one block: the mean (1 column) or each state's probability."""
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
    family = design.glm
    out = family.predictions(family.linear_predictor(x, beta, design.n_classes))
    out[~keep] = np.nan
    return out


def _from_store(design, beta, columns: ZarrColumns, index: int) -> np.ndarray:
    return predict_block(columns.read(index), design, beta)


def _from_blocks(design, beta, names, *blocks: np.ndarray) -> np.ndarray:
    return predict_block(dict(zip(names, blocks, strict=True)), design, beta)


def glm_prediction_map(data: Any, design: Design, beta: np.ndarray, outputs: int) -> da.Array:
    """Lazy ``(row, outputs)`` predictions of the GLM ``design`` at ``beta`` for every row of ``data``."""
    names = [name for name, _ in design.parents]
    if not names:  # intercept only: every row predicts the same
        n = data.sizes["row"]
        return da.from_array(np.repeat(predict_block({"__rows__": np.zeros(1)}, design, beta), n, axis=0),
                             chunks=(data.chunks.get("row", (n,)) if hasattr(data, "chunks") else n, outputs))
    columns = zarr_columns(data, names)
    token = tokenize(design, beta, names, getattr(columns, "starts", None))
    if columns is not None:
        sizes = np.diff(columns.starts)
        parts = [dask.delayed(_from_store, pure=True, traverse=False)(design, beta, columns, i,
                                                                      dask_key_name=(f"dpgm-predict-{token}", i))
                 for i in range(columns.n_chunks)]
    else:
        arrays = [da.asarray(data.variables[v].data) for v in names]
        chunks = arrays[0].chunks[0]
        blocks = [a.rechunk({0: chunks}).to_delayed().ravel() for a in arrays]
        sizes = np.asarray(chunks)
        parts = [dask.delayed(_from_blocks, pure=True, traverse=False)(design, beta, names, *(b[i] for b in blocks),
                                                                       dask_key_name=(f"dpgm-predict-{token}", i))
                 for i in range(len(chunks))]
    return da.concatenate([da.from_delayed(p, shape=(int(n), outputs), dtype=float)
                           for p, n in zip(parts, sizes, strict=True)])

"""Per-row posteriors as a chunked map (no reduction): e.g. class membership for every row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from dpgm.data.columns import ZarrColumns, zarr_columns
from dpgm.data.schema import Schema

__all__ = ["posterior_map"]


def _posterior_block(tree: Any, observed: Sequence[str], target: str, columns: dict[str, np.ndarray]) -> np.ndarray:
    codes = np.stack([np.asarray(columns[v]) for v in observed], axis=1) if observed else np.zeros((0, 0))
    _, marginals = tree.posteriors(codes, observed, targets=[target])
    return marginals[target]


def _from_store(tree, observed, target, columns: ZarrColumns, index: int) -> np.ndarray:
    return _posterior_block(tree, observed, target, columns.read(index))


def _from_blocks(tree, observed, target, *blocks: np.ndarray) -> np.ndarray:
    return _posterior_block(tree, observed, target, dict(zip(observed, blocks, strict=True)))


def posterior_map(data, tree: Any, observed: Sequence[str], target: str, cardinality: int) -> da.Array:
    """Lazy ``(row, state)`` posterior of ``target`` given each row's observed values.

    One task per chunk (``dpgm-predict`` in the dashboard); the tree enters the
    graph once.
    """
    schema = Schema.from_dataset(data)
    observed = list(observed)
    schema.check_scopes([tuple(observed)])
    columns = zarr_columns(data, observed)
    token = tokenize(id(tree), observed, target, getattr(columns, "starts", None))
    shared = dask.delayed(tree, pure=True, traverse=False, name=f"dpgm-predict-tree-{token}")
    if columns is not None:
        sizes = np.diff(columns.starts)
        parts = [
            dask.delayed(_from_store, pure=True, traverse=False)(
                shared, observed, target, columns, i, dask_key_name=(f"dpgm-predict-{token}", i))
            for i in range(columns.n_chunks)
        ]
    else:
        arrays = [da.asarray(data.variables[v].data) for v in observed]
        chunks = arrays[0].chunks[0]
        arrays = [a.rechunk({0: chunks}) for a in arrays]
        blocks = [a.to_delayed().ravel() for a in arrays]
        sizes = np.asarray(chunks)
        parts = [
            dask.delayed(_from_blocks, pure=True, traverse=False)(
                shared, observed, target, *(b[i] for b in blocks), dask_key_name=(f"dpgm-predict-{token}", i))
            for i in range(len(chunks))
        ]
    return da.concatenate(
        [da.from_delayed(p, shape=(int(n), cardinality), dtype=float) for p, n in zip(parts, sizes, strict=True)]
    )

"""Per-row posteriors as a chunked map (no reduction): e.g. class membership for every row."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.stats.rows import constant_map, row_map

if TYPE_CHECKING:
    import dask.array as da

    from dpgm.stats.source import DataSource

__all__ = ["posterior_map"]


def _posterior_block(index: int, columns: dict[str, np.ndarray], tree: Any, *, observed: tuple[str, ...],
                     target: str) -> np.ndarray:
    codes = np.stack([np.asarray(columns[v]) for v in observed], axis=1)
    _, marginals = tree.posteriors(codes, observed, targets=[target])
    return marginals[target]


def posterior_map(source: DataSource, tree: Any, observed: Sequence[str], target: str, cardinality: int) -> da.Array:
    """Lazy ``(row, state)`` posterior of ``target`` given each row's observed values in ``source``.

    One task per chunk (``dpgm-predict`` in the dashboard, see :func:`dpgm.stats.rows.row_map`);
    the tree enters the graph once.
    """
    data = source.data
    observed = tuple(observed)
    source.schema.check_scopes([observed])
    if not observed:  # nothing observed: every row's posterior is the target's marginal
        _, marginals = tree.posteriors(np.zeros((1, 0), dtype=np.int8), observed, targets=[target])
        return constant_map(data, marginals[target])
    block = functools.partial(_posterior_block, observed=observed, target=target)
    return row_map(data, observed, block, cardinality, shared=tree)

"""The one map-reduce over the chunks of a dataset, shared by every statistic.

A statistic is a *chunk kernel*, ``kernel(chunk_index, columns, shared) -> partial``,
whose partial results form a monoid under ``+`` (nested dicts, tuples, NumPy
arrays and numbers, added leaf by leaf). :func:`map_reduce` applies it to every
chunk along ``row`` (one task per chunk), adds the partials in a tree of fan-in
``split_every`` and returns the total. Nothing accumulates into object state, so
any chunk can run on any worker, twice if a worker dies.

``shared`` (e.g. the current parameters of an EM iteration) enters the task graph
once, as one key every chunk task depends on: it travels to each worker once per
pass, not once per task.

Datasets held in memory (NumPy-backed) are processed in-process, slice by slice
on a thread per core, without Dask.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import numpy as np
from dask.base import tokenize

__all__ = ["add_partials", "map_reduce", "IN_MEMORY_CHUNK_ROWS"]

IN_MEMORY_CHUNK_ROWS = 1 << 20
# below this many rows per slice, a second thread costs more than it saves
MIN_THREAD_ROWS = 1 << 16
Kernel = Callable[[int, dict[str, np.ndarray], Any], Any]


def add_partials(*parts: Any) -> Any:
    """Leaf-wise sum of partial statistics of the same structure."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: add_partials(*(p[key] for p in parts)) for key in first}
    if isinstance(first, tuple | list):
        return type(first)(add_partials(*items) for items in zip(*parts, strict=True))
    if callable(getattr(type(first), "sum_of", None)):  # e.g. CellRows: all the parts at once
        return type(first).sum_of(list(parts))
    total = first.copy() if isinstance(first, np.ndarray) else first
    for part in parts[1:]:
        total = total + part
    return total


def _is_lazy(array: Any) -> bool:
    return hasattr(array, "dask") or type(array).__module__.startswith("dask")


def row_chunks(arrays: Mapping[str, Any]) -> tuple[int, ...]:
    """Common chunk sizes along the first axis of dask arrays (they must agree)."""
    chunks = None
    for array in arrays.values():
        if _is_lazy(array):
            if chunks is None:
                chunks = array.chunks[0]
            elif array.chunks[0] != chunks:
                raise ValueError("arrays are chunked differently along 'row'")
    return chunks or ()


def _run_chunk(kernel: Kernel, index: int, shared: Any, names: tuple[str, ...], *blocks: np.ndarray):
    return kernel(index, dict(zip(names, blocks, strict=True)), shared)


def _run_zarr_chunk(kernel: Kernel, index: int, shared: Any, columns: Any):
    return kernel(index, columns.read(index), shared)


def _reading_tasks(columns: Any, kernel: Kernel, shared: Any, name: str, token: str) -> list:
    """One task per chunk that reads its own columns, marked as a data producer.

    Each task depends on the one ``shared`` key. Without the mark, the scheduler
    places every such task on the worker that holds ``shared`` (a dependency is
    where it prefers to run), so a pass of a few chunks ran on one worker while
    the others idled. Data producers are placed like root tasks, on the least busy
    worker, as dask.array's own reading tasks are; ``shared`` is copied to each
    worker once.
    """
    from dask._task_spec import DataNode, Task, TaskRef
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    map_name, shared_name = f"{name}-map-{token}", f"{name}-shared-{token}"
    layer: dict = {shared_name: DataNode(shared_name, shared)}
    for i in range(columns.n_chunks):
        layer[(map_name, i)] = Task((map_name, i), _run_zarr_chunk, kernel, i, TaskRef(shared_name), columns,
                                    _data_producer=True)
    graph = HighLevelGraph.from_collections(map_name, layer, dependencies=())
    return [Delayed((map_name, i), graph, layer=map_name) for i in range(columns.n_chunks)]


def _tree(level: list, name: str, token: str, split_every: int):
    depth = 0
    while len(level) > 1:
        level = [
            dask.delayed(add_partials, pure=True, traverse=False)(
                *level[j : j + split_every], dask_key_name=(f"{name}-combine-{token}", depth, j)
            )
            for j in range(0, len(level), split_every)
        ]
        depth += 1
    return level[0]


def _in_process(arrays: Mapping[str, Any], kernel: Kernel, shared: Any, names: tuple[str, ...],
                chunk_rows: int) -> Any:
    """In-memory arrays: slices of at most ``chunk_rows`` rows, at least one per core, on threads.

    The kernels release the GIL in their compiled loops, so slices run in parallel;
    partials are added in slice order, so the total does not depend on timing.
    """
    n = len(next(iter(arrays.values()))) if arrays else 0
    workers = min(os.cpu_count() or 1, max(n // MIN_THREAD_ROWS, 1))
    step = max(min(chunk_rows, -(-n // workers)), 1)
    starts = range(0, max(n, 1), step)

    def run(item: tuple[int, int]) -> Any:
        i, start = item
        return _run_chunk(kernel, i, shared, names, *(np.asarray(arrays[k][start : start + step]) for k in names))

    if workers == 1 or len(starts) == 1:
        return add_partials(*map(run, enumerate(starts)))
    with ThreadPoolExecutor(workers, thread_name_prefix="dpgm-chunk") as pool:
        return add_partials(*pool.map(run, enumerate(starts)))


def map_reduce(
    arrays: Mapping[str, Any],
    kernel: Kernel,
    *,
    name: str,
    shared: Any = None,
    split_every: int = 8,
    chunk_rows: int = IN_MEMORY_CHUNK_ROWS,
) -> Any:
    """Apply ``kernel`` to every chunk and tree-reduce the partials.

    Parameters
    ----------
    arrays
        Column name -> array with ``row`` as first axis; dask arrays (sharing their
        row chunks, single chunk along other axes) or NumPy arrays; or
        :class:`dpgm.data.columns.ZarrColumns`, whose chunk tasks read the store themselves.
    kernel
        ``kernel(chunk_index, {name: block}, shared) -> partial``.
    name
        Readable prefix of the task keys (``"dpgm-counts"``): the dashboard shows
        ``name-map`` and ``name-combine`` tasks.
    shared
        One object every chunk needs (parameters); one key in the graph.
    split_every
        Fan-in of the reduction tree.
    chunk_rows
        Slice length for in-memory arrays.

    Returns
    -------
    dask.delayed.Delayed or object
        A lazy total (compute it once, see :func:`dpgm.cluster.compute`) when any
        array is a dask array, else the total itself.
    """
    from dpgm.data.columns import ZarrColumns

    if isinstance(arrays, ZarrColumns):
        token = tokenize(name, arrays.store.token, arrays.variables, arrays.starts, shared, split_every, kernel)
        return _tree(_reading_tasks(arrays, kernel, shared, name, token), name, token, split_every)
    names = tuple(arrays)
    if not any(_is_lazy(a) for a in arrays.values()):
        return _in_process(arrays, kernel, shared, names, chunk_rows)
    import dask.array as da

    lazy = {k: (a if _is_lazy(a) else da.from_array(np.asarray(a))) for k, a in arrays.items()}
    chunks = row_chunks(lazy)
    lazy = {k: a.rechunk({0: chunks} | {i: -1 for i in range(1, a.ndim)}) for k, a in lazy.items()}
    token = tokenize(name, names, [a.name for a in lazy.values()], shared, split_every, kernel)
    blocks = {k: a.to_delayed().reshape(len(chunks), -1)[:, 0] for k, a in lazy.items()}
    shared_key = dask.delayed(shared, pure=True, traverse=False, name=f"{name}-shared-{token}")
    level = [
        dask.delayed(_run_chunk, pure=True, traverse=False)(
            kernel, i, shared_key, names, *(blocks[k][i] for k in names), dask_key_name=(f"{name}-map-{token}", i)
        )
        for i in range(len(chunks))
    ]
    return _tree(level, name, token, split_every)


def n_tree_levels(n_chunks: int, split_every: int) -> int:
    """Depth of the reduction tree over ``n_chunks`` partials."""
    return 0 if n_chunks <= 1 else math.ceil(math.log(n_chunks, split_every))

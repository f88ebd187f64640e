"""Per-row maps: one lazy ``(row, outputs)`` array computed chunk by chunk, with no reduction.

:func:`row_map` is the one builder behind every per-row quantity of a fitted
model: a discrete model's posteriors (:func:`dpgm.stats.posterior.posterior_map`),
a GLM child's predictions (:func:`dpgm.stats.glm_predict.glm_prediction_map`),
a mixture's responsibilities (:func:`dpgm.stats.mixture.responsibility_map`).
It builds one task per chunk along ``row``, named ``dpgm-predict-map-<token>`` (the
progress display and the dashboard show the pass as ``dpgm-predict``), and
concatenates their ``(chunk rows, outputs)`` results in row order.

Each task gets its chunk's columns the way the shared map-reduce
(:mod:`dpgm.stats.engine`) gives them to a statistic: a dataset opened with
:func:`dpgm.open_dataset` whose columns are untouched is read by the chunk task
itself, straight from the Zarr store (:func:`dpgm.data.columns.zarr_columns`), and
placed like a root task on the least busy worker; any
other dataset (in memory, sliced, computed) contributes the blocks of its dask
arrays, rechunked to the first column's row chunks. The ``shared`` object (a
junction tree, a GLM's coefficients, a mixture's parameters) enters the graph
once, as one key every chunk task depends on.

The task keys are a hash of everything the result depends on: the block
function (with the arguments bound to it), the columns, ``outputs``, ``dtype``,
``shared``, the caller's ``token_parts`` and the data's identity (the store's
token and chunk starts when read from the store, else the source arrays' dask
names). Two maps over different data or parameters never share a key;
``shared`` is hashed once per call.

Adding a per-row quantity
-------------------------
A new per-row quantity (for example each row's log-likelihood under a fitted
model) is a *block*: a module-level function (so it pickles by reference to the
workers)

.. code-block:: python

    def _score_block(index, columns, shared, *, variables):
        # index: the chunk's number (for errors naming the chunk)
        # columns: {variable: the chunk's 1-D array}, one entry per name given
        # shared: the object passed as ``shared`` (the fitted parameters)
        return scores  # (rows of the chunk, outputs) array of ``dtype``

with the signature of :mod:`dpgm.stats.engine`'s chunk kernels: a per-row block
and a reduction's kernel can wrap one per-row function (the kernel sums what the
block returns, e.g. a pass's total log-likelihood). Its keyword
parameters are bound with :func:`functools.partial`; the public function is then
one call::

    row_map(data, variables, functools.partial(_score_block, variables=tuple(variables)),
            1, shared=parameters)

and the caller wraps the lazy array as an ``xarray.DataArray`` over ``row``.
A quantity that reads no column (a GLM with only an intercept, a posterior
given no observed variable) is the same on every row: compute its one row and
spread it with :func:`constant_map`. Validation of the model and of the data
stays at the public boundary (``api/``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.data.columns import zarr_columns
from dpgm.stats.engine import _reading_tasks, _run_chunk

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["Block", "constant_map", "row_map"]

Block = Callable[[int, dict[str, np.ndarray], Any], np.ndarray]
"""``block(chunk_index, {name: column}, shared) -> (rows, outputs)`` array of one chunk."""


def row_map(
    data: Any,
    names: Sequence[str],
    block: Block,
    outputs: int,
    *,
    shared: Any = None,
    token_parts: Sequence[Any] = (),
    dtype: Any = float,
    prefix: str = "dpgm-predict",
    lengths: Sequence[int] | None = None,
) -> da.Array:
    """Lazy ``(row, outputs)`` array: ``block`` applied to the columns ``names`` of every chunk of ``data``.

    Parameters
    ----------
    data
        An ``xarray.Dataset`` over ``row`` holding ``names`` (Dask- or NumPy-backed,
        or opened with :func:`dpgm.open_dataset`).
    names
        The columns the block reads; at least one.
    block
        ``block(chunk_index, {name: column}, shared)`` returning the chunk's
        ``(rows, outputs)`` values; a module-level function, or a
        :func:`functools.partial` of one.
    outputs
        Number of columns of the result.
    shared
        One object every chunk needs; one key in the graph.
    token_parts
        Anything else the result depends on that ``block`` and ``shared`` do not
        show (hashed into the task keys).
    dtype
        The result's dtype.
    prefix
        Readable prefix of the task keys.
    lengths
        How many rows each chunk's block returns, if not the chunk's rows (a quantity per
        sequence of the long layout: :mod:`dpgm.stats.long_scores`).

    Returns
    -------
    dask.array.Array
        ``(rows of data, outputs)`` (``(sum(lengths), outputs)``), one chunk per task, in row order.

    Raises
    ------
    ValueError
        If ``names`` is empty (a quantity that reads no column is the same on
        every row: :func:`constant_map`).
    """
    import dask
    import dask.array as da
    from dask.base import tokenize

    names = list(names)
    if not names:
        raise ValueError("row_map needs at least one column to read")
    columns = zarr_columns(data, names)
    if columns is not None:
        sizes = np.diff(columns.starts)
        source: Any = (columns.store.token, columns.starts)
    else:
        arrays = [da.asarray(data.variables[v].data) for v in names]
        chunks = arrays[0].chunks[0]
        arrays = [a.rechunk({0: chunks} | {i: -1 for i in range(1, a.ndim)}) for a in arrays]  # whole sequences
        sizes = np.asarray(chunks)
        source = [a.name for a in arrays]
    if lengths is not None:
        if len(lengths) != len(sizes):
            raise ValueError(f"lengths has {len(lengths)} entries, the data {len(sizes)} chunks")
        sizes = np.asarray(lengths)
    token = tokenize(prefix, block, names, int(outputs), np.dtype(dtype).str, shared, list(token_parts), source,
                     None if lengths is None else list(map(int, sizes)))
    if columns is not None:  # tasks that read the store, placed like dask.array's reading tasks
        parts = _reading_tasks(columns, block, shared, prefix, token)
    else:
        shared_key = dask.delayed(shared, pure=True, traverse=False, name=f"{prefix}-shared-{token}")
        blocks = [a.to_delayed().ravel() for a in arrays]
        parts = [dask.delayed(_run_chunk, pure=True, traverse=False)(
                     block, i, shared_key, tuple(names), *(b[i] for b in blocks),
                     dask_key_name=(f"{prefix}-map-{token}", i))
                 for i in range(len(sizes))]
    return da.concatenate([da.from_delayed(part, shape=(int(n), int(outputs)), dtype=dtype)
                           for part, n in zip(parts, sizes, strict=True)])


def constant_map(data: Any, values: np.ndarray) -> da.Array:
    """Lazy ``(row, outputs)`` array holding the one row ``values`` (shape ``(1, outputs)``) on every row of ``data``.

    Chunked like ``data`` along ``row``; nothing is repeated in memory.
    """
    import dask.array as da

    values = np.asarray(values)
    n = data.sizes["row"]
    chunks = data.chunks.get("row", (n,)) if hasattr(data, "chunks") else (n,)
    return da.broadcast_to(da.from_array(values), (n, values.shape[1]), chunks=(chunks, values.shape[1]))

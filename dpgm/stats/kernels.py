"""Chunk kernels for contingency counts: plain functions of one chunk's arrays.

Every table is counted over *extended* states: a variable with ``c`` states gets
index ``c`` for missing (code ``-1``). A table over a scope ``S`` then holds the
counts of every subset of ``S`` too, each restricted to the rows where that
subset is observed — so only maximal scopes are counted, and the tables of their
subsets (with their own missing-value counts) are exact marginals on the driver.

The numba kernel walks the chunk in blocks of rows; per block it checks every
column's codes (a vectorized min/max), builds each table's mixed-radix (Horner)
index column by column in an int32 buffer (vectorized loops) and increments the
table, so the block, its index and the tables stay in cache. The NumPy kernel
(``bincount``) is its reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from dpgm.errors import DataError

__all__ = ["CountPlan", "count_chunk", "count_chunk_numpy"]


@dataclass(frozen=True)
class CountPlan:
    """Which tables to count over which columns.

    Attributes
    ----------
    variables
        Column order of the chunk arrays passed to the kernel.
    cardinalities
        Number of states of each column.
    scopes
        Each table's variables, as indices into ``variables``.
    """

    variables: tuple[str, ...]
    cardinalities: tuple[int, ...]
    scopes: tuple[tuple[int, ...], ...]

    def extended_shape(self, scope: int) -> tuple[int, ...]:
        """Shape of a table with the extra 'missing' state on each axis."""
        return tuple(self.cardinalities[j] + 1 for j in self.scopes[scope])

    @property
    def offsets(self) -> np.ndarray:
        """Start of each table in the flat output vector (length ``n_tables + 1``)."""
        sizes = [int(np.prod(self.extended_shape(t))) for t in range(len(self.scopes))]
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def _raise_bad_code(plan: CountPlan, column: int, row: int, value: int, chunk: int) -> None:
    name = plan.variables[column]
    raise DataError(
        f"code {value!r} at row {row} of the chunk is out of range: expected -1 (missing) "
        f"or 0..{plan.cardinalities[column] - 1}",
        variable=name,
        chunk=chunk,
    )


def count_chunk_numpy(
    columns: list[np.ndarray], plan: CountPlan, weights: np.ndarray | None = None, chunk: int = 0
) -> np.ndarray:
    """Reference kernel: flat extended tables of one chunk (int64, or float64 if weighted)."""
    _check_codes(columns, plan, chunk)
    offsets = plan.offsets
    out = np.zeros(offsets[-1], dtype=np.float64 if weights is not None else np.int64)
    for t, scope in enumerate(plan.scopes):
        size = int(offsets[t + 1] - offsets[t])
        index = np.zeros(columns[0].shape[0] if columns else 0, dtype=np.int64)
        for j in scope:
            card = plan.cardinalities[j]
            codes = columns[j].astype(np.int64)
            index = index * (card + 1) + np.where(codes < 0, card, codes)
        if weights is None:
            out[offsets[t] : offsets[t + 1]] = np.bincount(index, minlength=size)
        else:
            out[offsets[t] : offsets[t + 1]] = np.bincount(index, weights=weights, minlength=size)
    return out


BLOCK_ROWS = 16384


@numba.njit(nogil=True, cache=True)
def _first_codes(codes, cardinality, index):
    """index <- extended code (missing -> cardinality)."""
    for r in range(codes.shape[0]):
        c = codes[r]
        index[r] = cardinality if c < 0 else c


@numba.njit(nogil=True, cache=True)
def _extend_codes(codes, cardinality, index):
    """index <- index * (cardinality + 1) + extended code."""
    for r in range(codes.shape[0]):
        c = codes[r]
        index[r] = index[r] * (cardinality + 1) + (cardinality if c < 0 else c)


@numba.njit(nogil=True, cache=True)
def _out_of_range(codes, cardinality):
    low = codes[0]
    high = codes[0]
    for r in range(codes.shape[0]):
        low = min(low, codes[r])
        high = max(high, codes[r])
    return (low < -1) | (high >= cardinality)


@numba.njit(nogil=True, cache=True)
def _increment(index, out):
    for r in range(index.shape[0]):
        out[index[r]] += 1


@numba.njit(nogil=True, cache=True)
def _increment_weighted(index, weights, out):
    for r in range(index.shape[0]):
        out[index[r]] += weights[r]


@numba.njit(nogil=True, cache=True)
def _count_blocks(codes, cardinalities, scope_columns, scope_starts, table_offsets, weights, weighted, out, index):
    """Count every table over the rows of ``codes`` (variables x rows), block by block.

    For each block of rows: every variable's codes are checked (one min/max loop);
    then for each table the block's mixed-radix index is built column by column
    (loops over contiguous slices, which the compiler vectorizes) and the table is
    incremented. The block's codes, its index (``index``, int32 when the tables
    are small enough) and the tables stay in cache. Returns -1, or the first row of
    the block holding an invalid code (nothing of that block counted).
    """
    n = codes.shape[1]
    block = index.shape[0]
    for start in range(0, n, block):
        stop = min(n, start + block)
        bad = False
        for v in range(codes.shape[0]):
            bad |= _out_of_range(codes[v, start:stop], cardinalities[v])
        if bad:
            return start
        part = index[: stop - start]
        for t in range(scope_starts.shape[0] - 1):
            p = scope_starts[t]
            _first_codes(codes[scope_columns[p], start:stop], cardinalities[scope_columns[p]], part)
            for p in range(scope_starts[t] + 1, scope_starts[t + 1]):
                _extend_codes(codes[scope_columns[p], start:stop], cardinalities[scope_columns[p]], part)
            table = out[table_offsets[t] : table_offsets[t + 1]]
            if weighted:
                _increment_weighted(part, weights[start:stop], table)
            else:
                _increment(part, table)
    return -1


def _stack(columns: list[np.ndarray] | np.ndarray) -> np.ndarray:
    """The chunk as one C-contiguous (variables x rows) array of a common integer dtype."""
    if isinstance(columns, np.ndarray) and columns.ndim == 2 and columns.flags.c_contiguous:
        return columns
    dtype = np.result_type(*columns)
    if dtype.kind not in "iu":
        raise DataError(f"codes must be integers, got dtype {dtype}")
    return np.stack([np.asarray(c, dtype=dtype) for c in columns])


def _check_codes(columns: list[np.ndarray], plan: CountPlan, chunk: int) -> None:
    for j, codes in enumerate(columns):
        if codes.size and (codes.min() < -1 or codes.max() >= plan.cardinalities[j]):
            bad = (codes < -1) | (codes >= plan.cardinalities[j])
            row = int(np.argmax(bad))
            _raise_bad_code(plan, j, row, int(codes[row]), chunk)


def count_chunk(
    columns: list[np.ndarray] | np.ndarray, plan: CountPlan, weights: np.ndarray | None = None, chunk: int = 0
) -> np.ndarray:
    """Flat extended tables of one chunk, by the compiled blocked kernel.

    Parameters
    ----------
    columns
        One 1-D code array per variable of ``plan`` (int8/int16/int32), equal lengths;
        or those columns as the rows of one C-contiguous 2-D array (no copy made).
    plan
        The tables to count.
    weights
        Frequency weights per row, or None.
    chunk
        Index of the chunk, for error messages.

    Returns
    -------
    numpy.ndarray
        The tables' extended counts, concatenated (see :attr:`CountPlan.offsets`).

    Raises
    ------
    DataError
        A code below -1 or at least the variable's cardinality (validated in the
        same pass over the rows).
    """
    offsets = plan.offsets
    weighted = weights is not None
    out = np.zeros(offsets[-1], dtype=np.float64 if weighted else np.int64)
    if len(columns) == 0:
        return out
    codes = _stack(columns)
    w = np.ascontiguousarray(weights, dtype=np.float64) if weighted else np.zeros(0)
    scope_columns = np.array([j for scope in plan.scopes for j in scope], dtype=np.int64)
    scope_starts = np.cumsum([0, *(len(scope) for scope in plan.scopes)], dtype=np.int64)
    # int32 index arithmetic vectorizes twice as wide; tables beyond 2**31 cells need int64
    largest = int(np.diff(offsets).max()) if len(plan.scopes) else 0
    index_dtype = np.int32 if largest < 2**31 else np.int64
    cardinalities = np.array(plan.cardinalities, dtype=index_dtype)
    index = np.empty(min(BLOCK_ROWS, max(codes.shape[1], 1)), dtype=index_dtype)
    bad = _count_blocks(codes, cardinalities, scope_columns, scope_starts, offsets, w, weighted, out, index)
    if bad >= 0:
        _check_codes(list(codes), plan, chunk)
        raise AssertionError("the kernel found an invalid code that the check did not")  # pragma: no cover
    return out

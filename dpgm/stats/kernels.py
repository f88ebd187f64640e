"""Chunk kernels for contingency counts: plain functions of one chunk's arrays.

Every table is counted over *extended* states: a variable with ``c`` states gets
index ``c`` for missing (code ``-1``). A table over a scope ``S`` then holds the
counts of every subset of ``S`` too, each restricted to the rows where that
subset is observed — so only maximal scopes are counted, and the tables of their
subsets (with their own missing-value counts) are exact marginals on the driver.

The numba kernels compute the mixed-radix (Horner) index and increment each
table in one tight loop per table (1- and 2-variable tables fused, larger ones
through an int64 index); the NumPy kernel (``bincount``) is its
reference. Codes are validated in the same call (one vectorized min/max per column).
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


@numba.njit(nogil=True, cache=True)
def _count_one(column, card, out):
    for r in range(column.shape[0]):
        c = np.int64(column[r])
        out[card if c < 0 else c] += 1


@numba.njit(nogil=True, cache=True)
def _count_one_weighted(column, card, weights, out):
    for r in range(column.shape[0]):
        c = np.int64(column[r])
        out[card if c < 0 else c] += weights[r]


@numba.njit(nogil=True, cache=True)
def _count_two(first, second, c1, c2, out):
    for r in range(first.shape[0]):
        x, y = np.int64(first[r]), np.int64(second[r])
        out[(c1 if x < 0 else x) * (c2 + 1) + (c2 if y < 0 else y)] += 1


@numba.njit(nogil=True, cache=True)
def _count_two_weighted(first, second, c1, c2, weights, out):
    for r in range(first.shape[0]):
        x, y = np.int64(first[r]), np.int64(second[r])
        out[(c1 if x < 0 else x) * (c2 + 1) + (c2 if y < 0 else y)] += weights[r]


@numba.njit(nogil=True, cache=True)
def _count_three(first, second, third, c1, c2, c3, weights, weighted, out):
    for r in range(first.shape[0]):
        x, y, z = np.int64(first[r]), np.int64(second[r]), np.int64(third[r])
        index = ((c1 if x < 0 else x) * (c2 + 1) + (c2 if y < 0 else y)) * (c3 + 1) + (c3 if z < 0 else z)
        if weighted:
            out[index] += weights[r]
        else:
            out[index] += 1


@numba.njit(nogil=True, cache=True)
def _extend_index(column, card, index):
    """index <- index * (card + 1) + extended code (missing -> card)."""
    for r in range(column.shape[0]):
        c = np.int64(column[r])
        index[r] = index[r] * (card + 1) + (card if c < 0 else c)


@numba.njit(nogil=True, cache=True)
def _count_index(index, out):
    for r in range(index.shape[0]):
        out[index[r]] += 1


@numba.njit(nogil=True, cache=True)
def _count_index_weighted(index, weights, out):
    for r in range(index.shape[0]):
        out[index[r]] += weights[r]


def _count_table(columns: list[np.ndarray], cards: list[int], weights: np.ndarray | None, out: np.ndarray) -> None:
    # One tight compiled loop per table: ~2.3x faster here than one sweep over all
    # tables per row, and no copy of the chunk into a stacked array.
    if len(columns) == 1:
        if weights is None:
            _count_one(columns[0], cards[0], out)
        else:
            _count_one_weighted(columns[0], cards[0], weights, out)
    elif len(columns) == 2:
        if weights is None:
            _count_two(columns[0], columns[1], cards[0], cards[1], out)
        else:
            _count_two_weighted(columns[0], columns[1], cards[0], cards[1], weights, out)
    elif len(columns) == 3:
        weighted = weights is not None
        w = weights if weighted else np.zeros(0)
        _count_three(*columns, *cards, w, weighted, out)
    else:
        index = np.zeros(columns[0].shape[0], dtype=np.int64)
        for column, card in zip(columns, cards, strict=True):
            _extend_index(column, card, index)
        if weights is None:
            _count_index(index, out)
        else:
            _count_index_weighted(index, weights, out)


def _check_codes(columns: list[np.ndarray], plan: CountPlan, chunk: int) -> None:
    for j, codes in enumerate(columns):
        if codes.size and (codes.min() < -1 or codes.max() >= plan.cardinalities[j]):
            bad = (codes < -1) | (codes >= plan.cardinalities[j])
            row = int(np.argmax(bad))
            _raise_bad_code(plan, j, row, int(codes[row]), chunk)


def count_chunk(
    columns: list[np.ndarray], plan: CountPlan, weights: np.ndarray | None = None, chunk: int = 0
) -> np.ndarray:
    """Flat extended tables of one chunk, by the fused numba kernel.

    Parameters
    ----------
    columns
        One 1-D code array per variable of ``plan`` (int8/int16/int32), equal lengths.
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
        A code below -1 or at least the variable's cardinality.
    """
    offsets = plan.offsets
    weighted = weights is not None
    out = np.zeros(offsets[-1], dtype=np.float64 if weighted else np.int64)
    if not columns:
        return out
    _check_codes(columns, plan, chunk)
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    for t, scope in enumerate(plan.scopes):
        _count_table(
            [np.ascontiguousarray(columns[j]) for j in scope],
            [plan.cardinalities[j] for j in scope],
            w,
            out[offsets[t] : offsets[t + 1]],
        )
    return out

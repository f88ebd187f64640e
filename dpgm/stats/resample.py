"""Poisson bootstrap weights: each row's weight in each replicate from a hash of its position.

Replicate ``b`` of the Poisson bootstrap (Hanley & MacGibbon 2006; Chamandy et al.,
"Estimating uncertainty for massive data streams", Google 2012) weighs row ``i`` by a
Poisson(1) draw ``w[i, b]``: the replicate's fit is the plain fit of the data weighted
by ``w[:, b]`` (times the data's own weight). Like the folds (:mod:`dpgm.stats.folds`),
the draws depend only on the row's position, ``b`` and ``random_state``, so a worker
computes its chunk's weights from the chunk's first row, whatever the chunking and
the number of workers.

Each row has its own SplitMix64 generator (Steele, Lea & Flood, OOPSLA 2014), seeded
with the row's hash ``mix(position + (random_state + 1) * 0x9E3779B97F4A7C15)``
(:func:`dpgm.stats.folds.row_seeds`); its ``q + 1``-th output, ``mix(seed + (q + 1) *
0x9E3779B97F4A7C15)``, gives four replicates ``4q .. 4q + 3``: replicate ``b`` takes the
16 bits ``m`` at bit ``16 * (b mod 4)`` of output ``b // 4 + 1``. The draw is the inverse
Poisson(1) distribution function at the midpoint uniform ``u = (m + 1/2) / 2**16``: the
number of values of ``F(k) = P(X <= k)`` at most ``u``. So ``P(w <= k)`` is ``F(k)``
rounded to the nearest multiple of ``2**-16``: the weights take the values 0 to 8, their
mean is exactly 1 and their variance ``1 - 2**-15`` (Poisson(1): ``P(X > 8) = 1.1e-6``).

Examples
--------
>>> import numpy as np
>>> from dpgm.stats.resample import poisson_weights
>>> poisson_weights(np.arange(8), replicate=0, random_state=0).tolist()
[1, 1, 1, 1, 3, 0, 0, 2]
>>> np.array_equal(poisson_weights(np.arange(4, 8), 0, 0), poisson_weights(np.arange(8), 0, 0)[4:])
True
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

__all__ = ["POISSON_CDF", "UNIFORM_BITS", "check_replicates", "poisson_weights", "replicate_count_chunk",
           "replicate_weights"]

from dpgm.stats.code_patterns import (
    compact_cells,
    find_patterns,
    key_words,
    mix,
    pair_tables,
    work_array,
)
from dpgm.stats.folds import GOLDEN, check_seed, row_seeds, splitmix

# P(X <= k) of Poisson(1) for k = 0 .. 20
POISSON_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(21)])
# bits of a uniform; four of them in each 64-bit output of a row's generator
UNIFORM_BITS = 16
# the same comparisons on the uniform's integer m: F(k) <= (m + 1/2) / 2**16  <=>  m >= round(F(k) 2**16); the
# thresholds below 2**16 (k = 0 .. 7): a weight is the number of them at most m
_THRESHOLDS = tuple(int(t) for t in np.ceil(POISSON_CDF * 2.0**UNIFORM_BITS - 0.5) if t < 2**UNIFORM_BITS)


def check_replicates(replicates: Any, random_state: Any) -> tuple[int, int]:
    """``(replicates, random_state)`` checked: at least 2 replicates, a seed from 0 to 2**63 - 1."""
    from dpgm.errors import ConfigError, ConfigTypeError

    if isinstance(replicates, bool) or not isinstance(replicates, (int, np.integer)):
        raise ConfigTypeError(f"replicates must be an integer, got {replicates!r}")
    if not 2 <= replicates <= 100_000:
        raise ConfigError(f"replicates must be between 2 and 100000, got {replicates!r}")
    return int(replicates), check_seed(random_state)


def poisson_weights(positions: np.ndarray, replicate: int, random_state: int = 0) -> np.ndarray:
    """Replicate ``replicate``'s Poisson(1) weight (``uint8``) of the rows at ``positions``."""
    word, quarter = divmod(replicate, 4)
    with np.errstate(over="ignore"):
        z = splitmix(row_seeds(positions, random_state) + np.uint64(word + 1) * GOLDEN)
    m = (z >> np.uint64(UNIFORM_BITS * quarter)) & np.uint64(2**UNIFORM_BITS - 1)
    uniform = (m.astype(np.float64) + 0.5) * 2.0**-UNIFORM_BITS
    return np.searchsorted(POISSON_CDF, uniform, side="right").astype(np.uint8)


def _block(block_info: dict | None = None, *, replicate: int, random_state: int) -> np.ndarray:
    start, stop = block_info[None]["array-location"][0]
    return poisson_weights(np.arange(start, stop), replicate, random_state)


def replicate_weights(n_rows: int, chunks: Sequence[int] | None, replicate: int, random_state: int = 0) -> Any:
    """Every row's weight in ``replicate``: a Dask array chunked as ``chunks`` (computed per chunk on the
    workers), or NumPy (None)."""
    if chunks is None:
        return poisson_weights(np.arange(n_rows), replicate, random_state)
    import dask.array as da

    return da.map_blocks(_block, chunks=(tuple(chunks),), dtype=np.uint8, replicate=replicate,
                         random_state=random_state,
                         name=f"poisson-weight-{replicate}-{random_state}-{n_rows}-{hash(tuple(chunks)) & 0xFFFFFFFF:x}")




# ---------------------------------------------------------------- every replicate's counts in one kernel
#
# Rows of a chunk with the same codes (a pattern) fall in the same cell of every table: each replicate's
# weights of a pattern's rows are summed first (rows x replicates adds, next to the draws themselves), then
# added to the pattern's cell of every table (patterns x tables x replicates adds). The weights stay each
# row's own: replicate b's tables are those of the rows weighted by their draws.

# generator outputs per block of replicates (256 replicates): a row's draws of a block come from one loop,
# long enough to vectorise well; the block's tables are cells x 256 int32
WORDS = 64
_T = _THRESHOLDS  # eight (the weights 0 .. 8), which _draw compares with one by one
if len(_T) != 8:
    raise RuntimeError(f"expected 8 thresholds of the 16-bit draw, got {len(_T)}")
# rows of one pattern whose whole weights add up in uint16 lanes: at most 8 each
_FLUSH = (2**16 - 1) // len(_THRESHOLDS)
_LITTLE_ENDIAN = sys.byteorder == "little"


@numba.njit(nogil=True, cache=True)
def _draw(m):
    """The weight of the uniform ``m``: how many thresholds are at most ``m`` (comparisons, vectorised)."""
    return ((m >= _T[0]) + np.int32(m >= _T[1]) + np.int32(m >= _T[2]) + np.int32(m >= _T[3]) + np.int32(m >= _T[4])
            + np.int32(m >= _T[5]) + np.int32(m >= _T[6]) + np.int32(m >= _T[7]))


@numba.njit(nogil=True, cache=True)
def _outputs(seed, first, count, words):
    """``words[i]`` <- output ``first + i + 1`` of the generator ``seed``, for ``i < count``."""
    golden = np.uint64(GOLDEN)
    for i in range(count):
        words[i] = mix(seed + np.uint64(first + i + 1) * golden)


@numba.njit(nogil=True, cache=True)
def _quarters(words, count, uniforms):
    """``uniforms[4 i + j]`` <- bits ``16 j .. 16 j + 15`` of ``words[i]`` (what a little-endian uint16 view of
    ``words`` reads in place)."""
    for i in range(count):
        z = words[i]
        uniforms[4 * i] = np.uint16(z & np.uint64(0xFFFF))
        uniforms[4 * i + 1] = np.uint16((z >> np.uint64(16)) & np.uint64(0xFFFF))
        uniforms[4 * i + 2] = np.uint16((z >> np.uint64(32)) & np.uint64(0xFFFF))
        uniforms[4 * i + 3] = np.uint16(z >> np.uint64(48))


@numba.njit(nogil=True, cache=True)
def _group_rows(pattern, size, positions, random_state, base, weighted, seeds):
    """The rows ordered by pattern: where each pattern's rows start (patterns + 1), their generators' seeds
    (:func:`dpgm.stats.folds.row_seeds`, into ``seeds``) and their frequency weights (``weighted``)."""
    n = pattern.shape[0]
    starts = np.zeros(size.shape[0] + 1, dtype=np.int64)
    for p in range(size.shape[0]):
        starts[p + 1] = starts[p] + size[p]
    fill = starts[:-1].copy()
    salt = np.uint64(random_state + 1) * np.uint64(GOLDEN)
    weights = np.empty(n if weighted else 0, dtype=np.float64)
    for r in range(n):
        p = pattern[r]
        at = fill[p]
        fill[p] += 1
        seeds[at] = mix(np.uint64(positions[r]) + salt)
        if weighted:
            weights[at] = base[r]
    return starts, seeds, weights


@numba.njit(nogil=True, cache=True, inline="always")  # called once per pattern: a call costs the arrays' references
def _draw_sums(seeds, begin, end, first, count, words, uniforms, small):
    """``small[:4 count]`` <- the whole sums, in uint16, of the draws of rows ``begin .. end - 1`` (at most
    :data:`_FLUSH`, at least one) from their generators' outputs ``first + 1 ..``."""
    width = 4 * count
    for r in range(begin, end):
        _outputs(seeds[r], first, count, words)
        if not _LITTLE_ENDIAN:
            _quarters(words, count, uniforms)
        if r == begin:
            for x in range(width):
                small[x] = np.uint16(_draw(uniforms[x]))
        else:
            for x in range(width):
                small[x] += np.uint16(_draw(uniforms[x]))


@numba.njit(nogil=True, cache=True, inline="always")
def _add_to(out, row, pairs, column, values, width):
    """``values[:width]`` added to ``out``'s ``row`` from ``column`` on; a row past ``out``'s rows is pair
    ``row - len(out)`` of :func:`~dpgm.stats.code_patterns.pair_tables`: to both its cells."""
    n_cells = out.shape[0]
    if row < n_cells:
        for x in range(width):
            out[row, column + x] += values[x]
    else:
        a, b = pairs[row - n_cells, 0], pairs[row - n_cells, 1]
        for x in range(width):
            out[a, column + x] += values[x]
            out[b, column + x] += values[x]


@numba.njit(nogil=True, cache=True)
def _flush(out, held, row, pairs, column, width):
    """A row's held sums into ``out`` (:func:`_add_to`), then the row zero."""
    pending = held[row]
    _add_to(out, row, pairs, column, pending, width)
    for x in range(width):
        pending[x] = 0


@numba.njit(nogil=True, cache=True)
def _replicate_count_patterns(starts, seeds, weights, weighted, cells, replicates, out, rows, held, first_table, pairs):
    """Add each pattern's weights, summed over its rows, to its cell of every table, block by block of replicates.

    ``out`` is (cells, at least ``replicates`` rounded up to a multiple of 4), ``rows`` (replicate
    blocks, lanes): lane ``x`` of block ``b`` is replicate ``b * lanes + x`` (the column of ``out``), the
    draw of the 16 bits at bit ``16 * (x % 4)`` of the generator's output ``b * lanes / 4 + x // 4 + 1``.
    Whole weights add up in uint16 lanes, :data:`_FLUSH` rows at a time: a pattern's sums, and each
    cell's sums until the rows added to it would reach :data:`_FLUSH` (then into ``out``); frequency
    weights in float64. ``held``: (cells + pairs, lanes) uint16 zeros (unweighted), left zero.
    ``first_table``: the rows of ``out`` that hold the first table (each row of the chunk falls in one of
    its cells, so their sums are the replicates' rows), or an empty range when there are no tables.
    ``cells`` past ``out``'s rows are pairs of cells of two tables (``pairs``,
    :func:`~dpgm.stats.code_patterns.pair_tables`): their sums go to both cells (:func:`_add_to`).
    """
    n_cells = out.shape[0] + pairs.shape[0]
    blocks, lanes = rows.shape
    n_patterns, n_tables = cells.shape
    outputs = lanes // 4
    words = np.empty(outputs, dtype=np.uint64)
    if _LITTLE_ENDIAN:
        uniforms = words.view(np.uint16)  # the outputs' 16-bit quarters, read in place
    else:
        uniforms = np.empty(lanes, dtype=np.uint16)
    small = np.zeros(lanes, dtype=np.uint16)
    sums = np.zeros(lanes, dtype=out.dtype)
    held_rows = np.zeros(0 if weighted else n_cells, dtype=np.int64)
    for block in range(blocks):
        first = block * outputs
        count = min(outputs, (replicates + 3) // 4 - first)
        width = 4 * count
        column = block * lanes
        total = rows[block]
        for p in range(n_patterns):
            size = starts[p + 1] - starts[p]
            if weighted or size > _FLUSH or n_tables == 0:  # the pattern's sums in out's dtype, added directly
                sums[:width] = 0
                if weighted:
                    for r in range(starts[p], starts[p + 1]):
                        _outputs(seeds[r], first, count, words)
                        if not _LITTLE_ENDIAN:
                            _quarters(words, count, uniforms)
                        scale = weights[r]
                        for x in range(width):
                            sums[x] += _draw(uniforms[x]) * scale
                else:
                    for begin in range(starts[p], starts[p + 1], _FLUSH):
                        _draw_sums(seeds, begin, min(begin + _FLUSH, starts[p + 1]), first, count, words, uniforms,
                                   small)
                        for x in range(width):
                            sums[x] += small[x]
                if n_tables == 0:
                    for x in range(width):
                        total[x] += sums[x]
                for t in range(n_tables):
                    _add_to(out, cells[p, t], pairs, column, sums, width)
                continue
            # at most _FLUSH rows: their whole sums in uint16, held per cell
            _draw_sums(seeds, starts[p], starts[p + 1], first, count, words, uniforms, small)
            for t in range(n_tables):  # indexed in two dimensions: a row's view would cost two atomic reference counts
                cell = cells[p, t]
                if held_rows[cell] + size > _FLUSH:
                    _flush(out, held, cell, pairs, column, width)
                    held_rows[cell] = 0
                held_rows[cell] += size
                for x in range(width):
                    held[cell, x] += small[x]
        for cell in range(held_rows.shape[0]):
            if held_rows[cell] > 0:
                _flush(out, held, cell, pairs, column, width)
                held_rows[cell] = 0
        for cell in range(first_table[0], first_table[1]):
            source = out[cell]
            for x in range(width):
                total[x] += source[column + x]


@numba.njit(nogil=True, cache=True)
def _own_counts(starts, weights, weighted, cells, table):
    """Add each pattern's rows (their frequency weights, ``weighted``) to its cell of every table (``cells``:
    tables x patterns)."""
    n_tables, n_patterns = cells.shape
    for p in range(n_patterns):
        if weighted:
            total = 0.0
            for r in range(starts[p], starts[p + 1]):
                total += weights[r]
        else:
            total = float(starts[p + 1] - starts[p])
        for t in range(n_tables):
            table[cells[t, p]] += total


def replicate_count_chunk(codes: list[np.ndarray] | np.ndarray, positions: np.ndarray, plan: Any, replicates: int,
                          random_state: int, base: np.ndarray | None = None, chunk: int = 0,
                          own: bool = False, integer: bool = False, sparse: bool = False) -> dict[str, Any]:
    """Every replicate's flat extended tables of one chunk (:mod:`dpgm.stats.kernels`' layout), in one kernel.

    Returns ``{"tables": (cells, replicates), "rows": (replicates,)}``: replicate ``b``'s
    column equals :func:`dpgm.stats.kernels.count_chunk` of the chunk weighted by
    ``poisson_weights(positions, b, random_state) * base``. The chunk's rows are grouped by
    their codes (:func:`~dpgm.stats.code_patterns.find_patterns`), and each group's weights summed
    before they are added to the tables (:func:`_replicate_count_patterns`), tables that share
    variables two by two (:func:`~dpgm.stats.code_patterns.pair_tables`). ``own``: one more column, last,
    the chunk's own tables (its rows weighted by ``base`` alone, as :func:`~dpgm.stats.kernels.count_chunk`
    counts them), from the same groups: the fit on the data needs no other read of the chunk.
    ``integer`` (no ``base``): the tables as int32, exact, half the bytes to send and add up; the
    caller makes sure no total over all its chunks reaches 2**31 (8 times its rows stay below it).
    ``sparse``: the tables as a :class:`~dpgm.stats.cell_rows.CellRows` of the cells the chunk's rows
    fall in (about a sixth of alarm's cells in a 500,000-row chunk: a sixth of the bytes to send and add).
    """
    from dpgm.stats.kernels import _check_codes, _stack

    _check_codes(codes, plan, chunk)
    n = len(positions)
    matrix = _stack(codes) if len(codes) else np.zeros((0, n), dtype=np.int8)
    cardinalities = np.asarray(plan.cardinalities, dtype=np.int64)
    columns = np.array([j for scope in plan.scopes for j in scope], dtype=np.int64)
    scope_starts = np.concatenate([[0], np.cumsum([len(s) for s in plan.scopes])]).astype(np.int64)
    offsets = plan.offsets
    word_of, n_words = key_words(plan.cardinalities)
    pattern, cells = work_array("pattern", (n,), np.int64), work_array("cells", (len(plan.scopes), n), np.int32)
    size = find_patterns(matrix, cardinalities, word_of, n_words, columns, scope_starts, offsets, pattern, cells,
                         work_array("keys", (n, n_words), np.uint64), work_array("hashes", (n,), np.uint64),
                         work_array("slots", (max(4096, 1 << (2 * n - 1).bit_length()),), np.uint32))
    cells = cells[:, : len(size)]  # tables x patterns
    n_cells = int(offsets[-1])
    used = compact_cells(cells, work_array("lookup", (n_cells,), np.int32))  # the tables' rows the chunk reaches
    weighted = base is not None
    starts, seeds, weights = _group_rows(pattern, size, np.asarray(positions, dtype=np.int64), random_state,
                                         np.asarray(base if weighted else np.zeros(0), dtype=np.float64), weighted,
                                         work_array("seeds", (n,), np.uint64))
    # whole Poisson weights add up exactly in int32 while a chunk's total stays below 2**31 (at most 8 per row);
    # frequency weights need float64
    dtype = np.int32 if not weighted and n * len(_THRESHOLDS) < 2**31 else np.float64
    outputs = -(-replicates // 4)
    lanes = 4 * min(WORDS, outputs)
    blocks = -(-outputs * 4 // lanes)
    # the kernel writes every replicate's column (up to a multiple of 4), the chunk's own tables go last: when
    # replicates is a multiple of 4 and the dtype the one asked for, that array is the result as it stands
    written = 4 * outputs
    bounds = np.searchsorted(used, offsets)  # where each table's cells start among the chunk's
    columns, pairs = pair_tables(cells, bounds, plan.scopes)
    n_rows = len(used) + len(pairs)
    out = np.zeros((len(used), written + own), dtype=dtype)
    rows = np.zeros((blocks, lanes), dtype=np.float64)
    held = work_array("held", (0 if weighted else n_rows, lanes), np.uint16)
    held[:] = 0
    first_table = (0, int(bounds[1])) if len(offsets) > 1 else (0, 0)
    _replicate_count_patterns(starts, seeds, weights, weighted, columns, replicates, out, rows, held, first_table,
                              pairs)
    rows = rows.reshape(-1)[:replicates]
    if own:
        mine = np.zeros(len(used), dtype=np.float64)
        _own_counts(starts, weights, weighted, cells, mine)
        out[:, written] = mine  # whole counts below 2**31 when the dtype is int32: exact
        rows = np.append(rows, float(weights.sum()) if weighted else float(n))
    if written != replicates:
        out = out[:, [*range(replicates), *([written] if own else [])]]
    from dpgm.stats.cell_rows import CellRows

    tables = CellRows(used, out if integer and dtype == np.int32 else out.astype(np.float64, copy=False), n_cells)
    return {"tables": tables if sparse else np.asarray(tables), "rows": rows}

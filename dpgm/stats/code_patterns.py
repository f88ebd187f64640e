"""A chunk's distinct rows (its patterns), their cells in every table, and the tables held two by two.

Rows with the same codes (a pattern) fall in the same cell of every table: the bootstrap's kernel
(:func:`dpgm.stats.resample.replicate_count_chunk`) sums each pattern's weights once, then adds the
sums to the pattern's cells. :func:`find_patterns` finds the patterns in a hash table,
:func:`compact_cells` renumbers their cells to the ones the chunk reaches, and :func:`pair_tables`
pairs tables that share variables, so that a pattern's sums are added once per pair of cells.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from dpgm.stats.folds import GOLDEN

__all__ = ["DISTINCT_ROWS", "PAIR_CELLS", "PAIR_SHARE", "PAIR_TRIES", "ROW_BLOCK", "compact_cells",
           "find_patterns", "key_words", "mix", "pair_tables", "work_array"]

# rows whose keys, hashes and cells are computed together, column by column
ROW_BLOCK = 2048
# rows of a chunk searched for patterns before find_patterns may stop searching
DISTINCT_ROWS = 2**16


@numba.njit(nogil=True, cache=True)
def mix(z):
    """SplitMix64's finaliser of the 64-bit ``z``."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def key_words(cardinalities: Sequence[int]) -> tuple[np.ndarray, int]:
    """Which 64-bit word of a row's pattern key holds each variable (mixed radix ``cardinality + 1``), and how
    many words: each word's radices multiply to at most 2**64."""
    word_of, words, product = [], 0, 1
    for cardinality in cardinalities:
        if product * (cardinality + 1) > 2**64:
            words, product = words + 1, 1
        product *= cardinality + 1
        word_of.append(words)
    return np.asarray(word_of, dtype=np.int64), words + 1 if word_of else 0


@numba.njit(nogil=True, cache=True, inline="always")
def _slot_entry(h, p, id_bits):
    """Pattern ``p``'s slot (uint32): ``p + 1`` in the low ``id_bits`` bits (0: empty), the top bits of its hash
    ``h`` above them (a probe compares those before it reads the pattern's key)."""
    return np.uint32((((h >> np.uint64(32)) >> np.uint64(id_bits)) << np.uint64(id_bits)) | np.uint64(p + 1))


@numba.njit(nogil=True, cache=True)
def _slot_table(hashes, slots, id_bits):
    """``slots``, an open-addressing table (its length a power of 2) holding patterns ``0 .. len(hashes) - 1`` by
    their hashes (:func:`_slot_entry`), four bytes a slot, so that the table of a chunk's patterns stays in
    cache."""
    mask = np.uint64(slots.shape[0] - 1)
    slots[:] = 0
    for p in range(hashes.shape[0]):
        slot = hashes[p] & mask
        while slots[slot] != 0:
            slot = (slot + np.uint64(1)) & mask
        slots[slot] = _slot_entry(hashes[p], p, id_bits)


@numba.njit(nogil=True, cache=True)
def find_patterns(codes, cardinalities, word_of, n_words, scope_columns, scope_starts, table_offsets, pattern,
                  cells, pattern_keys, pattern_hashes, slot_space):
    """Each row's pattern: its extended codes, as ``n_words`` mixed-radix words, found in a hash table.

    Fills ``pattern`` (rows), each pattern's flat cell in every table (``cells``: tables x rows, the
    first columns), its key and hash (``pattern_keys``, ``pattern_hashes``), using the first slots of ``slot_space``
    (a power of 2 at least twice the rows, or 4096) as the table; patterns are numbered in the order of
    their first row. Returns each pattern's number of rows. When the first :data:`DISTINCT_ROWS` rows (or
    more) are nearly all distinct (9 in 10), each later row is a pattern of its own, without a search: a
    pattern may then recur (its rows' sums are added in two places instead of one, the same tables).
    """
    n_variables, n = codes.shape
    n_tables = scope_starts.shape[0] - 1
    id_bits = 1  # the bits of a slot that hold a pattern + 1 (at most n)
    while (1 << id_bits) <= n:
        id_bits += 1
    ids = np.uint32((1 << id_bits) - 1)
    capacity = min(4096, slot_space.shape[0])
    slots = slot_space[:capacity]
    slots[:] = 0
    mask = np.uint64(capacity - 1)
    keys = np.empty((max(n_words, 1), ROW_BLOCK), dtype=np.uint64)
    hashes = np.empty(ROW_BLOCK, dtype=np.uint64)
    block_cells = np.empty((n_tables, ROW_BLOCK), dtype=np.int64)
    found = 0
    for start in range(0, n, ROW_BLOCK):
        stop = min(n, start + ROW_BLOCK)
        m = stop - start
        distinct = start >= DISTINCT_ROWS and 10 * found > 9 * start  # nearly every row its own pattern: no search
        keys[:, :m] = 0
        for j in range(0 if distinct else n_variables):  # column by column: vectorised
            cardinality = cardinalities[j]
            radix = np.uint64(cardinality + 1)
            key = keys[word_of[j]]
            column = codes[j, start:stop]
            for r in range(m):
                c = column[r]
                key[r] = key[r] * radix + np.uint64(cardinality if c < 0 else c)
        hashes[:m] = np.uint64(GOLDEN)
        for k in range(0 if distinct else n_words):
            key = keys[k]
            for r in range(m):
                hashes[r] = mix(hashes[r] ^ key[r])
        for t in range(n_tables):  # every row's cells, Horner column by column: vectorised
            cell = block_cells[t]
            cell[:m] = table_offsets[t]
            weight = 1
            for q in range(scope_starts[t + 1] - 1, scope_starts[t] - 1, -1):
                j = scope_columns[q]
                cardinality = cardinalities[j]
                column = codes[j, start:stop]
                for r in range(m):
                    c = column[r]
                    cell[r] += weight * (cardinality if c < 0 else c)
                weight *= cardinality + 1
        if distinct:
            for r in range(m):
                for t in range(n_tables):
                    cells[t, found] = block_cells[t, r]
                pattern[start + r] = found
                found += 1
            continue
        for r in range(m):
            h = hashes[r]
            slot = h & mask
            while True:
                entry = slots[slot]
                if entry == 0:  # a new pattern: its hash, key, and cells from the row's codes
                    p = found
                    found += 1
                    pattern_hashes[p] = h
                    for k in range(n_words):
                        pattern_keys[p, k] = keys[k, r]
                    for t in range(n_tables):
                        cells[t, p] = block_cells[t, r]
                    if 2 * found > capacity:  # at most half full: grow
                        capacity *= 2
                        mask = np.uint64(capacity - 1)
                        slots = slot_space[:capacity]
                        _slot_table(pattern_hashes[:found], slots, id_bits)
                    else:
                        slots[slot] = _slot_entry(h, p, id_bits)
                    break
                q = np.int64(entry & ids) - 1
                if (entry ^ _slot_entry(h, q, id_bits)) == 0:  # the same top bits of the hash: the keys decide
                    same = True
                    for k in range(n_words):
                        same &= pattern_keys[q, k] == keys[k, r]
                    if same:
                        p = np.int64(q)
                        break
                slot = (slot + np.uint64(1)) & mask
            pattern[start + r] = p
    size = np.zeros(found, dtype=np.int64)
    for r in range(n):  # the patterns' rows, counted after the probes: no dependence between these additions
        size[pattern[r]] += 1
    return size


@numba.njit(nogil=True, cache=True)
def compact_cells(cells, lookup):
    """The cells the chunk's patterns fall in (ascending), and ``cells`` (tables x patterns) renumbered in place
    to their places in that list; ``lookup`` (one entry per cell of the tables, any values) is overwritten."""
    n_tables, n_patterns = cells.shape
    lookup[:] = 0
    for t in range(n_tables):
        for p in range(n_patterns):
            lookup[cells[t, p]] = 1
    used = np.empty(lookup.shape[0], dtype=np.int64)
    n_used = 0
    for cell in range(lookup.shape[0]):
        if lookup[cell]:
            lookup[cell] = n_used
            used[n_used] = cell
            n_used += 1
    for t in range(n_tables):
        for p in range(n_patterns):
            cells[t, p] = lookup[cells[t, p]]
    return used[:n_used]


@numba.njit(nogil=True, cache=True)
def _pair_cells(cells, a, b, first_a, first_b, n_b, lut, pairs, into, base, most):
    """Each pattern's cells in tables ``a`` and ``b`` (rows of ``cells``, tables x patterns; compact cells
    ``first_a ..`` and ``first_b .. + n_b``) as one row, ``base`` + the pair's order of first sight (into
    ``into``): ``pairs[k]`` <- pair ``k``'s two cells. ``lut`` (both tables' cells multiplied, any
    values) is overwritten. Returns the number of pairs, or
    ``most + 1`` as soon as there are more than ``most`` (the rest left undone)."""
    lut[:] = -1
    found = 0
    row_a, row_b = cells[a], cells[b]
    for p in range(row_a.shape[0]):
        ca, cb = row_a[p], row_b[p]
        at = (ca - first_a) * n_b + (cb - first_b)
        k = lut[at]
        if k < 0:
            if found == most:
                return most + 1
            k = found
            lut[at] = k
            pairs[k, 0], pairs[k, 1] = ca, cb
            found += 1
        into[p] = base + k
    return found


# the largest product of two tables' cells in a chunk that _pair_cells pairs (its lookup table: 256 KiB)
PAIR_CELLS = 2**16
# a pair of tables is held when it has at most 1/PAIR_SHARE as many pairs of cells as the chunk has patterns (on
# alarm, 1/4 to 1/100 give the same kernel time); at most PAIR_TRIES x tables pairs tried in all
PAIR_SHARE = 16
PAIR_TRIES = 2


def pair_tables(cells: np.ndarray, bounds: np.ndarray, scopes: Sequence[Sequence[int]]) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """The kernel's cells (patterns x columns) with tables held two by two: ``(columns, pairs)``.

    ``cells``: tables x patterns, compact (:func:`compact_cells`). Each pattern adds its sums to one row
    per column instead of one per table. Tables are paired greedily, those sharing the most variables
    first, then the fewest cells in the chunk (``bounds``: where each table's compact cells start, tables
    + 1); a pair is kept when it has at most 1/:data:`PAIR_SHARE` as many distinct pairs of cells as there
    are patterns. ``columns`` numbers the pairs after the ``bounds[-1]`` cells, ``pairs`` (pairs x 2) gives
    each pair row's two cells.
    """
    n_tables, n_patterns = cells.shape
    counts = np.diff(bounds)
    shared = [set(scope) for scope in scopes]
    candidates = sorted(((a, b) for a in range(n_tables) for b in range(a + 1, n_tables)
                         if counts[a] * counts[b] <= PAIR_CELLS),
                        key=lambda ab: (-len(shared[ab[0]] & shared[ab[1]]), counts[ab[0]] * counts[ab[1]], ab))
    # work arrays reused chunk after chunk (see work_array): each kept pair's rows, and its pairs of cells
    into = work_array("pair-rows", (n_tables // 2, n_patterns), np.int32)
    found = work_array("pair-cells", (n_tables // 2, PAIR_CELLS, 2), np.int32)
    lut = work_array("pair-lut", (PAIR_CELLS,), np.int32)
    kept, sizes, left, base = [], [], set(range(n_tables)), int(bounds[-1])
    most, tries = n_patterns // PAIR_SHARE, PAIR_TRIES * n_tables
    for a, b in candidates:
        if a not in left or b not in left or tries == 0:
            continue
        j, tries = len(kept), tries - 1
        k = _pair_cells(cells, a, b, int(bounds[a]), int(bounds[b]), int(counts[b]),
                        lut[: int(counts[a] * counts[b])], found[j], into[j], base, most)
        if k <= most:
            kept.append((a, b))
            sizes.append(k)
            left -= {a, b}
            base += k
    singles = sorted(left)
    columns = work_array("pair-columns", (n_patterns, len(kept) + len(singles)), np.int32)
    for j in range(len(kept)):
        columns[:, j] = into[j]
    for j, t in enumerate(singles, start=len(kept)):
        columns[:, j] = cells[t]
    pairs = np.concatenate([found[j, :k] for j, k in enumerate(sizes)]) if sizes else np.zeros((0, 2), np.int32)
    return columns, pairs


def work_array(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A per-thread work array of the kernel (:func:`dpgm.data.columns.scratch`), reused chunk after chunk: on
    distributed workers, whose allocator hands freed memory back to the system, fresh arrays of a chunk's size
    cost a page fault per 4 KiB touched (about 11 ms of a 500,000-row chunk's 80 ms)."""
    from dpgm.data.columns import scratch

    dtype = np.dtype(dtype)
    n_bytes = math.prod(shape) * dtype.itemsize
    return scratch(f"resample-{name}", n_bytes)[:n_bytes].view(dtype).reshape(shape)



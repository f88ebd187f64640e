"""The numba kernels of :mod:`dpgm.inference.pruning` (private): Hugin on the cells evidence leaves.

Hard evidence fixes a variable's state, so in every clique and separator holding it only the cells
with that state can be nonzero. These kernels keep only those cells: per missingness pattern each
table's free cells (the mixed-radix grid of its unobserved variables, offsets relative to the table)
are listed once, and become a compact junction tree (contiguous tables, its own separator maps);
per row each table's start in the full tables moves by ``code x stride`` of its observed variables,
and the row's compact tables are gathered from there. Rows of one pattern then run side by side
through the dense kernels' Hugin propagation (:func:`dpgm.inference._kernels._sum_propagate`), the
same arithmetic in the same order on fewer cells. A clique of width 10 with four observed ternary
variables costs 81x fewer cells. Blocks of rows are padded to whole vectors (``_PAD`` columns), and
a variable's posterior, or the evidence of a column not compacted, goes through the smallest compact
clique holding it, read in C order as (variables before it, it, variables after it): no state map.

Tables ``0 .. n-1`` are the cliques, ``n .. 2n-1`` the separators (to each clique's parent); table
``t``'s variables are ``grid_var[grid_ptr[t]:grid_ptr[t + 1]]`` with C-order strides ``grid_stride``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpgm.inference._kernels import _sum_propagate

#: Blocks of rows run a multiple of this many columns (padded with copies of the first row), so the loops over
#: rows are whole AVX-512 vectors: propagation on insurance ran 1.1-1.2x faster in blocks of 24 rows than of 21-23.
_PAD = 8


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _enumerate(limits, strides, n_free, first, digits, out, m):
    """Write the grid ``first + sum_d digit_d strides[d]`` (``digit_d < limits[d]``, the last fastest) from ``m`` on.

    Returns the end. The innermost digit runs as a plain arithmetic progression.
    """
    if n_free == 0:
        out[m] = first
        return m + 1
    inner, step = limits[n_free - 1], strides[n_free - 1]
    for d in range(n_free - 1):
        digits[d] = 0
    cell = first
    while True:
        value = cell
        for _ in range(inner):
            out[m] = value
            m += 1
            value += step
        d = n_free - 2
        while d >= 0:
            digits[d] += 1
            cell += strides[d]
            if digits[d] < limits[d]:
                break
            cell -= strides[d] * limits[d]
            digits[d] = 0
            d -= 1
        if d < 0:
            return m


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _list_free_cells(state, card, grid_ptr, grid_var, grid_stride, free_ptr, free, odometer, n_listed):
    """Each table's cells consistent with a missingness pattern, relative to the table's evidence start.

    ``state[v] >= 0`` marks an observed variable. Fills ``free_ptr`` (CSR over tables) and ``free`` (the
    cells of the first ``n_listed`` tables; the others only get their size); ``odometer`` is ``(3, 64)`` scratch.
    """
    n_tables = grid_ptr.shape[0] - 1
    digits, limits, strides = odometer[0], odometer[1], odometer[2]
    k = 0
    for t in range(n_tables):
        free_ptr[t] = k
        n_free = 0
        for i in range(grid_ptr[t], grid_ptr[t + 1]):
            v = grid_var[i]
            if state[v] < 0:
                limits[n_free] = card[v]
                strides[n_free] = grid_stride[i]
                digits[n_free] = 0
                n_free += 1
        if t < n_listed:
            k = _enumerate(limits, strides, n_free, 0, digits, free, k)
        else:  # a separator: only its size is needed
            size = 1
            for d in range(n_free):
                size *= limits[d]
            k += size
    free_ptr[n_tables] = k


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _separator_cells(t, c, state, card, grid_ptr, grid_var, sep_stride, maps, m, odometer):
    """Write into ``maps`` from ``m`` on each free cell of table ``t``'s compact separator ``c`` cell; returns the end.

    The free cells run in C order of table ``t``'s free variables, as :func:`_list_free_cells` lists them;
    ``sep_stride[v]`` is variable ``v``'s stride in the compact separator (0 if it is not a free variable there).
    """
    digits, limits, strides = odometer[0], odometer[1], odometer[2]
    n_free = 0
    for i in range(grid_ptr[t], grid_ptr[t + 1]):
        v = grid_var[i]
        if state[v] < 0:
            limits[n_free] = card[v]
            strides[n_free] = sep_stride[v]
            n_free += 1
    return _enumerate(limits, strides, n_free, c, digits, maps, m)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _compact_maps(n, free_ptr, state, card, grid_ptr, grid_var, parent, sep_stride, up, down, down_ptr, odometer):
    """The compact tree of a pattern: each compact clique cell's compact separator cell, and each parent cell's.

    Compact clique ``c`` is ``free_ptr[c]:free_ptr[c + 1]``, compact separator ``c`` starts at
    ``free_ptr[n + c] - free_ptr[n]``. Computed from the free variables' strides, no table read.
    """
    d = 0
    for c in range(n):
        down_ptr[c] = d
        p = parent[c]
        if p < 0:
            for k in range(free_ptr[c], free_ptr[c + 1]):
                up[k] = -1
            continue
        t = n + c
        step = 1
        for i in range(grid_ptr[t + 1] - 1, grid_ptr[t] - 1, -1):
            v = grid_var[i]
            if state[v] < 0:
                sep_stride[v] = step
                step *= card[v]
        start = free_ptr[t] - free_ptr[n]
        _separator_cells(c, start, state, card, grid_ptr, grid_var, sep_stride, up, free_ptr[c], odometer)
        d = _separator_cells(p, start, state, card, grid_ptr, grid_var, sep_stride, down, d, odometer)
        for i in range(grid_ptr[t], grid_ptr[t + 1]):
            sep_stride[grid_var[i]] = 0
    down_ptr[n] = d


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _stride_in(c, v, state, card, grid_ptr, grid_var):
    """Variable ``v``'s stride in clique ``c``'s compact table (the cells of the free variables after it)."""
    inner = 1
    for i in range(grid_ptr[c + 1] - 1, grid_ptr[c] - 1, -1):
        u = grid_var[i]
        if u == v:
            break
        if state[u] < 0:
            inner *= card[u]
    return inner


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _smallest_cliques(n, free_ptr, grid_ptr, grid_var, best, best_size):
    """``best[v]``: the clique holding variable ``v`` with the fewest compact cells in this pattern."""
    best_size[:] = np.iinfo(np.int64).max
    for c in range(n):
        size = free_ptr[c + 1] - free_ptr[c]
        for i in range(grid_ptr[c], grid_ptr[c + 1]):
            v = grid_var[i]
            if size < best_size[v]:
                best_size[v] = size
                best[v] = c


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _load_compact(work, base, codes, r0, rows, width, observed_var, compact, state, n, grid_ptr, grid_var,
                  grid_stride, table_offset, free_ptr, free, card, best, starts, keep):
    """Gather each row's compact clique tables (cells x rows) from the full initial tables; enter the evidence
    of the columns not compacted (``compact[j]`` False) by zeroing the disagreeing cells of the smallest
    compact clique holding the variable (any clique holding it would do).

    Columns ``rows .. width - 1`` (padding, so that every loop over rows runs a multiple of the vector width)
    get the first row's tables and no evidence. ``starts`` is ``(n, width)`` scratch: each clique's first
    consistent full cell per row; ``keep`` ``(max card, width)`` scratch.
    """
    for r in range(rows):
        for j in range(codes.shape[1]):
            if compact[j]:
                state[observed_var[j]] = codes[r0 + r, j]
        for c in range(n):
            start = table_offset[c]
            for i in range(grid_ptr[c], grid_ptr[c + 1]):
                code = state[grid_var[i]]
                if code > 0:
                    start += code * grid_stride[i]
            starts[c, r] = start
    for r in range(rows, width):
        for c in range(n):
            starts[c, r] = starts[c, 0]
    for c in range(n):
        for k in range(free_ptr[c], free_ptr[c + 1]):
            offset = free[k]
            for r in range(width):
                work[k, r] = base[starts[c, r] + offset]
    for j in range(codes.shape[1]):
        if compact[j]:
            continue
        seen = False
        for r in range(rows):
            seen = seen or codes[r0 + r, j] >= 0
        if not seen:
            continue
        v = observed_var[j]
        cards = card[v]
        for s in range(cards):  # 1.0 or 0.0 per state and row: multiplying leaves the kept cells bit for bit
            for r in range(width):
                keep[s, r] = 1.0
            for r in range(rows):
                code = codes[r0 + r, j]
                if code >= 0 and code != s:
                    keep[s, r] = 0.0
        c = best[v]
        inner = _stride_in(c, v, state, card, grid_ptr, grid_var)
        k = free_ptr[c]
        for _ in range((free_ptr[c + 1] - k) // (cards * inner)):  # cells in C order: (before v, v, after v)
            for s in range(cards):
                for _ in range(inner):
                    for r in range(width):
                        work[k, r] *= keep[s, r]
                    k += 1


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _propagate_row(work, sep, scratch, order, parent, clique_offset, sep_offset, up_index, down_index, down_offset):
    """:func:`~dpgm.inference._kernels._sum_propagate` for one row (1-D tables): the same operations in the same order.

    Returns the log of the row's total (``-inf`` for probability zero, then the tables are not calibrated).
    """
    n = order.shape[0]
    log_total = 0.0
    for k in range(n):
        c = order[k]
        p = parent[c]
        start, stop = clique_offset[c], clique_offset[c + 1]
        total = 0.0
        if p < 0:
            for cell in range(start, stop):
                total += work[cell]
        else:
            s0, s1 = sep_offset[c], sep_offset[c + 1]
            for s in range(s0, s1):
                sep[s] = 0.0
            for cell in range(start, stop):
                sep[up_index[cell]] += work[cell]
            for s in range(s0, s1):
                total += sep[s]
        if not total > 0.0:
            return -np.inf
        log_total += np.log(total)
        scale = 1.0 / total
        for cell in range(start, stop):
            work[cell] *= scale
        if p < 0:
            continue
        for s in range(sep_offset[c], sep_offset[c + 1]):
            sep[s] *= scale
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            work[p0 + j] *= sep[down_index[d0 + j]]
    for k in range(n - 1, -1, -1):
        c = order[k]
        p = parent[c]
        if p < 0:
            continue
        s0, s1 = sep_offset[c], sep_offset[c + 1]
        for s in range(s1 - s0):
            scratch[s] = 0.0
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            scratch[down_index[d0 + j] - s0] += work[p0 + j]
        for s in range(s1 - s0):  # the Hugin update ratio new / old, with 0 / 0 = 0
            old = sep[s0 + s]
            scratch[s] = scratch[s] / old if old > 0.0 else 0.0
        for cell in range(clique_offset[c], clique_offset[c + 1]):
            work[cell] *= scratch[up_index[cell] - s0]
    return log_total


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pruned_kernel(codes, pattern, compact, weights, observed_var, card, base, base_log, grid_ptr, grid_var, grid_stride,
                   table_offset, order, parent, clique_offset, sep_offset, up_index, down_index, down_offset,
                   var_offset, var_state, var_home, targets, target_offset, capacity, block, row_index, out_log, out,
                   totals):
    """Posteriors of ``targets`` (into ``out``) or EM's ``totals += w P(x_C | e)`` (if ``totals`` is not empty).

    Sorted row ``i`` (of ``codes``, ``weights``) answers into row ``row_index[i]`` of ``out_log`` and ``out``.

    Rows are sorted by ``pattern``, the missingness of the columns with ``compact[j]`` (the others' evidence is
    entered by zeroing cells); each pattern's compact tree is built once and its rows run in blocks of ``block``,
    padded to a multiple of ``_PAD`` columns. ``capacity`` bounds the compact clique cells of every pattern.
    Posteriors are read from the smallest compact clique holding each target.
    """
    n = order.shape[0]
    block = block if block == 1 else -(-block // _PAD) * _PAD
    n_free = base.shape[0] + sep_offset[-1] + 2 * n
    free = np.empty(n_free, dtype=np.int64)
    free_ptr = np.empty(2 * n + 1, dtype=np.int64)
    sep_stride = np.zeros(card.shape[0], dtype=np.int64)
    odometer = np.zeros((3, 64), dtype=np.int64)
    starts = np.empty((n, block), dtype=np.int64)
    up = np.empty(capacity, dtype=np.int64)
    down = np.empty(max(1, down_index.shape[0]), dtype=np.int64)
    down_ptr = np.empty(n + 1, dtype=np.int64)
    sep_capacity = sep_offset[-1] + n
    work_flat = np.empty(capacity * block)  # with one row per block, the 1-D kernel runs on contiguous arrays
    sep_flat = np.empty(sep_capacity * block)
    scratch_flat = np.empty(sep_capacity * block)
    work = work_flat.reshape((capacity, block))
    sep = sep_flat.reshape((sep_capacity, block))
    scratch = scratch_flat.reshape((sep_capacity, block))
    total = np.empty(block)
    log_total = np.empty(block)
    state = np.full(card.shape[0], -1, dtype=np.int64)
    accumulate = totals.shape[0] > 0
    best = np.zeros(card.shape[0], dtype=np.int64)
    best_size = np.empty(card.shape[0], dtype=np.int64)
    max_card = 1
    for v in range(card.shape[0]):
        max_card = max(max_card, card[v])
    acc = np.empty((max_card, block))
    r0 = 0
    while r0 < codes.shape[0]:
        r1 = r0 + 1
        while r1 < codes.shape[0] and pattern[r1] == pattern[r0]:
            r1 += 1
        for j in range(codes.shape[1]):
            if compact[j]:
                state[observed_var[j]] = codes[r0, j]
        _list_free_cells(state, card, grid_ptr, grid_var, grid_stride, free_ptr, free, odometer, n)
        _compact_maps(n, free_ptr, state, card, grid_ptr, grid_var, parent, sep_stride, up, down, down_ptr, odometer)
        sep_ptr = free_ptr[n:] - free_ptr[n]
        _smallest_cliques(n, free_ptr, grid_ptr, grid_var, best, best_size)
        for b0 in range(r0, r1, block):
            rows = min(block, r1 - b0)
            width = 1 if rows == 1 else -(-rows // _PAD) * _PAD
            _load_compact(work, base, codes, b0, rows, width, observed_var, compact, state, n, grid_ptr, grid_var,
                          grid_stride, table_offset, free_ptr, free, card, best, starts, acc)
            if rows == 1:
                if block == 1:
                    log_total[0] = _propagate_row(work_flat, sep_flat, scratch_flat, order, parent, free_ptr, sep_ptr,
                                                  up, down, down_ptr)
                else:
                    log_total[0] = _propagate_row(work[:, 0], sep[:, 0], scratch[:, 0], order, parent, free_ptr,
                                                  sep_ptr, up, down, down_ptr)
                if log_total[0] == -np.inf:
                    for k in range(free_ptr[n]):
                        work[k, 0] = 0.0
            else:
                _sum_propagate(work, sep, scratch, total, log_total, width, order, parent, free_ptr, sep_ptr, up, down,
                               down_ptr)
            for r in range(rows):
                out_log[row_index[b0 + r]] = log_total[r] + base_log
            if accumulate:
                for r in range(rows):
                    w = weights[b0 + r]
                    total[r] = 0.0 if log_total[r] == -np.inf else w
                for c in range(n):  # the row's clique starts are still in ``starts`` from the load
                    a = 0
                    while a < rows:  # rows whose clique starts at the same cell are summed first, as the dense kernel
                        z = a + 1
                        while z < rows and starts[c, z] == starts[c, a]:
                            z += 1
                        start = starts[c, a]
                        for k in range(free_ptr[c], free_ptr[c + 1]):
                            value = 0.0
                            for r in range(a, z):
                                value += total[r] * work[k, r]
                            totals[start + free[k]] += value
                        a = z
                continue
            for t in range(targets.shape[0]):
                v = targets[t]
                o = target_offset[t]
                cards = target_offset[t + 1] - o
                if state[v] >= 0:  # observed in a compacted column: its indicator
                    for r in range(rows):
                        for s in range(cards):
                            out[row_index[b0 + r], o + s] = 0.0
                        for j in range(codes.shape[1]):
                            if observed_var[j] == v:
                                out[row_index[b0 + r], o + codes[b0 + r, j]] = 1.0
                else:
                    c = best[v]
                    inner = _stride_in(c, v, state, card, grid_ptr, grid_var)
                    for s in range(cards):
                        for r in range(rows):
                            acc[s, r] = 0.0
                    k = free_ptr[c]
                    for _ in range((free_ptr[c + 1] - k) // (cards * inner)):  # cells in C order: (before v, v, after v)
                        for s in range(cards):
                            for _ in range(inner):
                                for r in range(rows):
                                    acc[s, r] += work[k, r]
                                k += 1
                    for r in range(rows):
                        norm = 0.0
                        for s in range(cards):
                            norm += acc[s, r]
                        for s in range(cards):
                            out[row_index[b0 + r], o + s] = acc[s, r] / norm
                for r in range(rows):
                    if log_total[r] == -np.inf:
                        for s in range(cards):
                            out[row_index[b0 + r], o + s] = np.nan
        r0 = r1


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pruned_cells(mask, member, log_size, out):
    """Per row the clique cells left when the variables of its True columns leave the cliques.

    ``member[j, c]`` is ``log card`` of column ``j``'s variable if clique ``c`` holds it, else 0.
    """
    n = log_size.shape[0]
    cut = np.empty(n)
    for r in range(mask.shape[0]):
        for c in range(n):
            cut[c] = log_size[c]
        for j in range(mask.shape[1]):
            if mask[r, j]:
                for c in range(n):
                    cut[c] -= member[j, c]
        total = 0.0
        for c in range(n):
            total += math.exp(cut[c])
        out[r] = np.int64(total + 0.5)

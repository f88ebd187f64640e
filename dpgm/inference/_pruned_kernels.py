"""The numba kernels of :mod:`dpgm.inference.pruning` (private): Hugin on the cells evidence leaves.

Hard evidence fixes a variable's state, so in every clique and separator holding it only the cells
with that state can be nonzero. These kernels visit only those cells: per missingness pattern each
table's free cells (the mixed-radix grid of its unobserved variables, offsets relative to the table)
are listed once; per row each table's start moves by ``code x stride`` of its observed variables.
A clique of width 10 with four observed ternary variables costs 81x fewer cells. The arithmetic is
the dense kernels' (:mod:`dpgm.inference._kernels`) in the same order, on fewer cells.

Tables ``0 .. n-1`` are the cliques, ``n .. 2n-1`` the separators (to each clique's parent); table
``t``'s variables are ``grid_var[grid_ptr[t]:grid_ptr[t + 1]]`` with C-order strides ``grid_stride``.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _list_free_cells(state, card, grid_ptr, grid_var, grid_stride, free_ptr, free):
    """Each table's cells consistent with a missingness pattern, relative to the table's evidence start.

    ``state[v] >= 0`` marks an observed variable. Fills ``free_ptr`` (CSR over tables) and ``free``.
    """
    n_tables = grid_ptr.shape[0] - 1
    digits = np.zeros(64, dtype=np.int64)
    limits = np.zeros(64, dtype=np.int64)
    strides = np.zeros(64, dtype=np.int64)
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
        cell = 0
        while True:
            free[k] = cell
            k += 1
            d = n_free - 1  # next cell, the last free variable fastest (C order)
            while d >= 0:
                digits[d] += 1
                cell += strides[d]
                if digits[d] < limits[d]:
                    break
                cell -= strides[d] * limits[d]
                digits[d] = 0
                d -= 1
            if d < 0:
                break
    free_ptr[n_tables] = k


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _starts(state, grid_ptr, grid_var, grid_stride, table_offset, start):
    """Flat index of each table's first consistent cell for one row (``table_offset`` over all tables)."""
    for t in range(grid_ptr.shape[0] - 1):
        s = table_offset[t]
        for i in range(grid_ptr[t], grid_ptr[t + 1]):
            code = state[grid_var[i]]
            if code > 0:
                s += code * grid_stride[i]
        start[t] = s


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pruned_propagate(work, sep, scratch, base, start, free_ptr, free, order, parent, clique_offset,
                      sep_offset, up_index, down_index, down_offset):
    """Load one row's consistent clique cells and run Hugin collect/distribute on them; returns log of the total.

    ``-inf`` for a row of probability zero (then the tables are not calibrated).
    """
    n = order.shape[0]
    for c in range(n):
        s0 = start[c]
        for k in range(free_ptr[c], free_ptr[c + 1]):
            cell = s0 + free[k]
            work[cell] = base[cell]
    log_total = 0.0
    for k in range(n):
        c = order[k]
        p = parent[c]
        c0 = start[c]
        total = 0.0
        if p < 0:
            for f in range(free_ptr[c], free_ptr[c + 1]):
                total += work[c0 + free[f]]
        else:
            t0 = start[n + c]
            for f in range(free_ptr[n + c], free_ptr[n + c + 1]):
                sep[t0 + free[f]] = 0.0
            for f in range(free_ptr[c], free_ptr[c + 1]):
                cell = c0 + free[f]
                sep[up_index[cell]] += work[cell]
            for f in range(free_ptr[n + c], free_ptr[n + c + 1]):
                total += sep[t0 + free[f]]
        if not total > 0.0:
            return -np.inf
        log_total += math.log(total)
        scale = 1.0 / total
        for f in range(free_ptr[c], free_ptr[c + 1]):
            work[c0 + free[f]] *= scale
        if p < 0:
            continue
        t0 = start[n + c]
        for f in range(free_ptr[n + c], free_ptr[n + c + 1]):
            sep[t0 + free[f]] *= scale
        p0 = clique_offset[p]
        d0 = down_offset[c] - p0
        q0 = start[p]
        for f in range(free_ptr[p], free_ptr[p + 1]):
            cell = q0 + free[f]
            work[cell] *= sep[down_index[d0 + cell]]
    for k in range(n - 1, -1, -1):
        c = order[k]
        p = parent[c]
        if p < 0:
            continue
        t0 = start[n + c]
        for f in range(free_ptr[n + c], free_ptr[n + c + 1]):
            scratch[t0 + free[f]] = 0.0
        p0 = clique_offset[p]
        d0 = down_offset[c] - p0
        q0 = start[p]
        for f in range(free_ptr[p], free_ptr[p + 1]):
            cell = q0 + free[f]
            scratch[down_index[d0 + cell]] += work[cell]
        for f in range(free_ptr[n + c], free_ptr[n + c + 1]):  # the Hugin update ratio new / old, 0 / 0 = 0
            s = t0 + free[f]
            old = sep[s]
            scratch[s] = scratch[s] / old if old > 0.0 else 0.0
        c0 = start[c]
        for f in range(free_ptr[c], free_ptr[c + 1]):
            cell = c0 + free[f]
            work[cell] *= scratch[up_index[cell]]
    return log_total


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _row_state(codes, r, observed_var, state):
    for j in range(codes.shape[1]):
        state[observed_var[j]] = codes[r, j]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pruned_posteriors_kernel(codes, pattern, observed_var, card, base, base_log, grid_ptr, grid_var, grid_stride,
                              table_offset, order, parent, clique_offset, sep_offset, up_index, down_index,
                              down_offset, var_offset, var_state, var_home, targets, target_offset, out_log, out):
    """Posterior marginals of ``targets`` per row; rows sorted by missingness ``pattern`` (a new id lists cells)."""
    n = order.shape[0]
    work = np.empty_like(base)
    sep = np.empty(sep_offset[-1])
    scratch = np.empty(sep_offset[-1])
    state = np.full(card.shape[0], -1, dtype=np.int64)
    start = np.empty(2 * n, dtype=np.int64)
    free_ptr = np.empty(2 * n + 1, dtype=np.int64)
    free = np.empty(base.shape[0] + sep_offset[-1] + 2 * n, dtype=np.int64)
    for r in range(codes.shape[0]):
        _row_state(codes, r, observed_var, state)
        if r == 0 or pattern[r] != pattern[r - 1]:
            _list_free_cells(state, card, grid_ptr, grid_var, grid_stride, free_ptr, free)
        _starts(state, grid_ptr, grid_var, grid_stride, table_offset, start)
        log_total = _pruned_propagate(work, sep, scratch, base, start, free_ptr, free, order, parent,
                                      clique_offset, sep_offset, up_index, down_index, down_offset)
        out_log[r] = log_total + base_log
        for t in range(targets.shape[0]):
            o = target_offset[t]
            cards = target_offset[t + 1] - o
            if log_total == -np.inf:
                for s in range(cards):
                    out[r, o + s] = np.nan
                continue
            v = targets[t]
            h = var_home[v]
            for s in range(cards):
                out[r, o + s] = 0.0
            h0 = start[h]
            states = var_offset[v] - clique_offset[h]
            for f in range(free_ptr[h], free_ptr[h + 1]):
                cell = h0 + free[f]
                out[r, o + var_state[states + cell]] += work[cell]
            norm = 0.0
            for s in range(cards):
                norm += out[r, o + s]
            for s in range(cards):
                out[r, o + s] /= norm


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _pruned_expected_kernel(codes, pattern, weights, observed_var, card, base, base_log, grid_ptr, grid_var,
                            grid_stride, table_offset, order, parent, clique_offset, sep_offset, up_index, down_index,
                            down_offset, out_log, totals):
    """EM's accumulation ``totals += w P(x_C | e)`` per row; rows sorted by missingness ``pattern``."""
    n = order.shape[0]
    work = np.empty_like(base)
    sep = np.empty(sep_offset[-1])
    scratch = np.empty(sep_offset[-1])
    state = np.full(card.shape[0], -1, dtype=np.int64)
    start = np.empty(2 * n, dtype=np.int64)
    free_ptr = np.empty(2 * n + 1, dtype=np.int64)
    free = np.empty(base.shape[0] + sep_offset[-1] + 2 * n, dtype=np.int64)
    for r in range(codes.shape[0]):
        _row_state(codes, r, observed_var, state)
        if r == 0 or pattern[r] != pattern[r - 1]:
            _list_free_cells(state, card, grid_ptr, grid_var, grid_stride, free_ptr, free)
        _starts(state, grid_ptr, grid_var, grid_stride, table_offset, start)
        log_total = _pruned_propagate(work, sep, scratch, base, start, free_ptr, free, order, parent,
                                      clique_offset, sep_offset, up_index, down_index, down_offset)
        out_log[r] = log_total + base_log
        w = weights[r]
        if log_total == -np.inf or w == 0.0:
            continue
        for c in range(n):
            c0 = start[c]
            for f in range(free_ptr[c], free_ptr[c + 1]):
                cell = c0 + free[f]
                totals[cell] += w * work[cell]

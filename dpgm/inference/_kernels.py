"""The numba kernels of :mod:`dpgm.inference` (private): loops over flat C-order tables and index maps.

Hugin propagation for blocks of rows (posteriors, the EM accumulation of ``w * P(x_C | e)``, MAP),
layout arrays in the order of ``TreeLayout.maps`` (:mod:`dpgm.inference.propagation`); and the
enumeration of a Bayesian network row's unobserved non-leaf variables in independent groups.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# -- Hugin propagation on a junction tree ---------------------------------------------------


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _load_row(work, base, b, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state, var_home,
              clique_offset):
    """Copy the clique tables and enter one row's hard and soft evidence."""
    work[:] = base
    for j in range(codes.shape[1]):
        code = codes[b, j]
        if code < 0:
            continue
        v = observed_var[j]
        h = var_home[v]
        start = clique_offset[h]
        size = clique_offset[h + 1] - start
        states = var_state[var_offset[v]: var_offset[v] + size]
        for cell in range(size):
            if states[cell] != code:
                work[start + cell] = 0.0
    for j in range(soft_var.shape[0]):
        v = soft_var[j]
        h = var_home[v]
        start = clique_offset[h]
        size = clique_offset[h + 1] - start
        states = var_state[var_offset[v]: var_offset[v] + size]
        for cell in range(size):
            work[start + cell] *= soft[b, soft_offset[j] + states[cell]]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                var_home, clique_offset):
    """Copy the clique tables for a block of rows (cells x rows) and enter their evidence."""
    for cell in range(base.shape[0]):
        value = base[cell]
        for r in range(rows):
            work[cell, r] = value
    for j in range(codes.shape[1]):
        v = observed_var[j]
        h = var_home[v]
        start = clique_offset[h]
        for cell in range(clique_offset[h + 1] - start):
            state = var_state[var_offset[v] + cell]
            for r in range(rows):
                code = codes[r0 + r, j]
                if code >= 0 and code != state:
                    work[start + cell, r] = 0.0
    for j in range(soft_var.shape[0]):
        v = soft_var[j]
        h = var_home[v]
        start = clique_offset[h]
        for cell in range(clique_offset[h + 1] - start):
            column = soft_offset[j] + var_state[var_offset[v] + cell]
            for r in range(rows):
                work[start + cell, r] *= soft[r0 + r, column]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset, up_index,
                   down_index, down_offset):
    """Hugin collect and distribute with sum for a block of rows; ``log_total[r]`` gets log of each row's total.

    Then every clique table holds its posterior marginal per row, or zeros for a row of probability zero.
    """
    n = order.shape[0]
    for r in range(rows):
        log_total[r] = 0.0
    for k in range(n):
        c = order[k]
        p = parent[c]
        start, stop = clique_offset[c], clique_offset[c + 1]
        for r in range(rows):
            total[r] = 0.0
        if p < 0:
            for cell in range(start, stop):
                for r in range(rows):
                    total[r] += work[cell, r]
        else:
            s0, s1 = sep_offset[c], sep_offset[c + 1]
            for s in range(s0, s1):
                for r in range(rows):
                    sep[s, r] = 0.0
            for cell in range(start, stop):
                s = up_index[cell]
                for r in range(rows):
                    sep[s, r] += work[cell, r]
            for s in range(s0, s1):
                for r in range(rows):
                    total[r] += sep[s, r]
        for r in range(rows):
            if total[r] > 0.0:
                log_total[r] += math.log(total[r])
                total[r] = 1.0 / total[r]
            else:
                log_total[r] = -np.inf
                total[r] = 0.0
        for cell in range(start, stop):
            for r in range(rows):
                work[cell, r] *= total[r]
        if p < 0:
            continue
        for s in range(sep_offset[c], sep_offset[c + 1]):
            for r in range(rows):
                sep[s, r] *= total[r]
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            s = down_index[d0 + j]
            for r in range(rows):
                work[p0 + j, r] *= sep[s, r]
    for k in range(n - 1, -1, -1):
        c = order[k]
        p = parent[c]
        if p < 0:
            continue
        s0, s1 = sep_offset[c], sep_offset[c + 1]
        for s in range(s1 - s0):
            for r in range(rows):
                scratch[s, r] = 0.0
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            s = down_index[d0 + j] - s0
            for r in range(rows):
                scratch[s, r] += work[p0 + j, r]
        for s in range(s1 - s0):  # the Hugin update ratio new / old, with 0 / 0 = 0
            for r in range(rows):
                old = sep[s0 + s, r]
                scratch[s, r] = scratch[s, r] / old if old > 0.0 else 0.0
        for cell in range(clique_offset[c], clique_offset[c + 1]):
            s = up_index[cell] - s0
            for r in range(rows):
                work[cell, r] *= scratch[s, r]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _posteriors_kernel(codes, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent,
                       clique_offset, sep_offset, up_index, down_index, down_offset, var_offset, var_state,
                       var_home, targets, target_offset, block, out_log, out):
    work = np.empty((base.shape[0], block))
    sep = np.empty((sep_offset[-1], block))
    scratch = np.empty((sep_offset[-1], block))
    total = np.empty(block)
    log_total = np.empty(block)
    for r0 in range(0, codes.shape[0], block):
        rows = min(block, codes.shape[0] - r0)
        _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                    var_home, clique_offset)
        _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset,
                       up_index, down_index, down_offset)
        for r in range(rows):
            out_log[r0 + r] = log_total[r] + base_log
        for t in range(targets.shape[0]):
            v = targets[t]
            h = var_home[v]
            start = clique_offset[h]
            o = target_offset[t]
            card = target_offset[t + 1] - o
            for r in range(rows):
                for s in range(card):
                    out[r0 + r, o + s] = 0.0
            for cell in range(clique_offset[h + 1] - start):
                column = o + var_state[var_offset[v] + cell]
                for r in range(rows):
                    out[r0 + r, column] += work[start + cell, r]
            for r in range(rows):
                if log_total[r] == -np.inf:
                    for s in range(card):
                        out[r0 + r, o + s] = np.nan
                    continue
                norm = 0.0
                for s in range(card):
                    norm += out[r0 + r, o + s]
                for s in range(card):
                    out[r0 + r, o + s] /= norm


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _expected_kernel(codes, weights, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent,
                     clique_offset, sep_offset, up_index, down_index, down_offset, var_offset, var_state,
                     var_home, block, out_log, totals):
    work = np.empty((base.shape[0], block))
    sep = np.empty((sep_offset[-1], block))
    scratch = np.empty((sep_offset[-1], block))
    total = np.empty(block)
    log_total = np.empty(block)
    w = np.empty(block)
    for r0 in range(0, codes.shape[0], block):
        rows = min(block, codes.shape[0] - r0)
        _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                    var_home, clique_offset)
        _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset,
                       up_index, down_index, down_offset)
        for r in range(rows):
            out_log[r0 + r] = log_total[r] + base_log
            w[r] = weights[r0 + r] if log_total[r] > -np.inf else 0.0
        for cell in range(base.shape[0]):
            acc = 0.0
            for r in range(rows):
                acc += w[r] * work[cell, r]
            totals[cell] += acc


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _map_kernel(codes, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent, clique_offset,
                sep_offset, up_index, down_index, down_offset, var_offset, var_state, var_home, out, out_log):
    work = np.empty_like(base)
    sep = np.empty(sep_offset[-1])
    chosen = np.empty(parent.shape[0], dtype=np.int64)
    n = order.shape[0]
    for b in range(codes.shape[0]):
        _load_row(work, base, b, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                  var_home, clique_offset)
        log_best = base_log
        impossible = False
        for k in range(n):  # max-product collect
            c = order[k]
            p = parent[c]
            start, stop = clique_offset[c], clique_offset[c + 1]
            if p < 0:
                top = 0.0
                best = start
                for cell in range(start, stop):
                    if work[cell] > top:
                        top = work[cell]
                        best = cell
                if not top > 0.0:
                    impossible = True
                    break
                log_best += math.log(top)
                chosen[c] = best - start
                continue
            s0, s1 = sep_offset[c], sep_offset[c + 1]
            for s in range(s0, s1):
                sep[s] = 0.0
            for cell in range(start, stop):
                if work[cell] > sep[up_index[cell]]:
                    sep[up_index[cell]] = work[cell]
            top = 0.0
            for s in range(s0, s1):
                if sep[s] > top:
                    top = sep[s]
            if not top > 0.0:
                impossible = True
                break
            for s in range(s0, s1):
                sep[s] /= top
            log_best += math.log(top)
            p0 = clique_offset[p]
            d0 = down_offset[c]
            for j in range(clique_offset[p + 1] - p0):
                work[p0 + j] *= sep[down_index[d0 + j]]
        if impossible:
            out_log[b] = -np.inf
            for v in range(out.shape[1]):
                out[b, v] = -1
            continue
        out_log[b] = log_best
        for k in range(n - 1, -1, -1):  # decode: parents before children
            c = order[k]
            p = parent[c]
            if p < 0:
                continue
            target = down_index[down_offset[c] + chosen[p]]
            start, stop = clique_offset[c], clique_offset[c + 1]
            top = -1.0
            best = start
            for cell in range(start, stop):
                if up_index[cell] == target and work[cell] > top:
                    top = work[cell]
                    best = cell
            chosen[c] = best - start
        for v in range(out.shape[1]):
            out[b, v] = var_state[var_offset[v] + chosen[var_home[v]]]


# -- enumeration of a Bayesian network's row (expected family counts) -------------------------
# Family f's cells start at family_offset[f] in θ; its variables (child first) are family_var[family_var_ptr[f]:
# family_var_ptr[f + 1]], with strides family_stride[...]. The classification of a missingness pattern lives in
# one int64 table ``work`` (rows named below; one array argument instead of twenty: numba reference-counts every
# array argument of every call, which cost 15-60 % here). Groups of enumerated variables are CSR over groups.
(_ROOT, _GROUP, _KIND, _PLAIN, _PLAIN_CELL, _LOOSE, _ENUMERATED, _MEMBER, _ANCHOR, _GROUPED, _FAMILY_GROUP, _FILL,
 _FILL_LEAF, _VAR_PTR, _VAR, _FAMILY_PTR, _FAMILY, _LEAF_PTR, _LEAF, _SIZE, _START) = range(21)


@numba.njit(cache=True, nogil=True)
def _clique_base(theta, scaled_index, cell, base):
    """Initial clique tables: each cell the product of its assigned (max-scaled) factor entries."""
    for k in range(cell.shape[0]):
        base[cell[k]] *= theta[scaled_index[k]]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _family_index(f, state, family_offset, family_var_ptr, family_var, family_stride, first):
    """Flat index of family ``f``'s cell at ``state``, from its ``first``-th variable on (1 = parents only)."""
    index = family_offset[f]
    for k in range(family_var_ptr[f] + first, family_var_ptr[f + 1]):
        index += state[family_var[k]] * family_stride[k]
    return index


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _find(work, v):
    while work[_ROOT, v] != v:
        work[_ROOT, v] = work[_ROOT, work[_ROOT, v]]
        v = work[_ROOT, v]
    return v


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _classify(state, is_leaf, family_var_ptr, family_var, work):
    """Kind of every family under the row's missingness; enumerated variables joined (``_ROOT``) by their families.

    ``_KIND``: 0 fully observed (in ``_PLAIN``), 1 meets the enumerated variables (``_ENUMERATED``), 2 an
    unobserved leaf (in ``_LOOSE`` if its parents are all observed). Kind 1 and the other leaves go to
    ``_GROUPED`` with one unobserved variable in ``_ANCHOR``. Returns the numbers of enumerated, plain,
    loose and grouped.
    """
    n_plain = n_loose = n_enumerated = n_grouped = 0
    for v in range(state.shape[0]):
        if state[v] < 0 and not is_leaf[v]:
            work[_ROOT, v] = v
            work[_GROUP, v] = -1
            work[_ENUMERATED, n_enumerated] = v
            n_enumerated += 1
    for f in range(state.shape[0]):
        first = -1
        leaf = state[f] < 0 and is_leaf[f]
        for k in range(family_var_ptr[f] + (1 if leaf else 0), family_var_ptr[f + 1]):
            u = family_var[k]
            if state[u] < 0:
                if first < 0:
                    first = _find(work, u)
                    work[_ANCHOR, f] = u
                else:
                    other = _find(work, u)
                    if other != first:
                        work[_ROOT, other] = first
        if leaf and first < 0:
            work[_KIND, f] = 2
            work[_LOOSE, n_loose] = f
            n_loose += 1
        elif leaf or first >= 0:
            work[_KIND, f] = 2 if leaf else 1
            work[_GROUPED, n_grouped] = f
            n_grouped += 1
        else:
            work[_KIND, f] = 0
            work[_PLAIN, n_plain] = f
            n_plain += 1
    return n_enumerated, n_plain, n_loose, n_grouped


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _place_groups(n_enumerated, n_grouped, work):
    """Number the groups (roots of ``_ROOT``) and place their variables, families and leaves; returns their number."""
    n_groups = 0
    for i in range(n_enumerated):
        top = _find(work, work[_ENUMERATED, i])
        if work[_GROUP, top] < 0:
            work[_GROUP, top] = n_groups
            n_groups += 1
    for g in range(n_groups + 1):
        work[_VAR_PTR, g] = work[_FAMILY_PTR, g] = work[_LEAF_PTR, g] = 0
    for i in range(n_enumerated):  # count members, then place them
        work[_MEMBER, i] = work[_GROUP, _find(work, work[_ENUMERATED, i])]
        work[_VAR_PTR, work[_MEMBER, i] + 1] += 1
    for i in range(n_grouped):
        f = work[_GROUPED, i]
        work[_FAMILY_GROUP, i] = work[_GROUP, _find(work, work[_ANCHOR, f])]
        if work[_KIND, f] == 1:
            work[_FAMILY_PTR, work[_FAMILY_GROUP, i] + 1] += 1
        else:
            work[_LEAF_PTR, work[_FAMILY_GROUP, i] + 1] += 1
    for g in range(n_groups):
        work[_VAR_PTR, g + 1] += work[_VAR_PTR, g]
        work[_FAMILY_PTR, g + 1] += work[_FAMILY_PTR, g]
        work[_LEAF_PTR, g + 1] += work[_LEAF_PTR, g]
    for g in range(n_groups):
        work[_FILL, g] = work[_VAR_PTR, g]
    for i in range(n_enumerated):
        g = work[_MEMBER, i]
        work[_VAR, work[_FILL, g]] = work[_ENUMERATED, i]
        work[_FILL, g] += 1
    for g in range(n_groups):
        work[_FILL, g] = work[_FAMILY_PTR, g]
        work[_FILL_LEAF, g] = work[_LEAF_PTR, g]
    for i in range(n_grouped):
        f = work[_GROUPED, i]
        g = work[_FAMILY_GROUP, i]
        if work[_KIND, f] == 1:
            work[_FAMILY, work[_FILL, g]] = f
            work[_FILL, g] += 1
        else:
            work[_LEAF, work[_FILL_LEAF, g]] = f
            work[_FILL_LEAF, g] += 1
    return n_groups


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _too_costly(n_groups, card, limit, work):
    """Size every group; whether the row's enumeration (sum of ``|states| x families evaluated``) exceeds ``limit``."""
    cost = 0
    work[_START, 0] = 0
    for g in range(n_groups):
        size = 1
        for i in range(work[_VAR_PTR, g], work[_VAR_PTR, g + 1]):
            size *= card[work[_VAR, i]]
            if size > limit:
                return True
        work[_SIZE, g] = size
        work[_START, g + 1] = work[_START, g] + size
        cost_g = work[_FAMILY_PTR, g + 1] - work[_FAMILY_PTR, g]
        for i in range(work[_LEAF_PTR, g], work[_LEAF_PTR, g + 1]):
            cost_g += card[work[_LEAF, i]]
        cost += size * cost_g
        if cost > limit or work[_START, g + 1] > limit:
            return True
    return False


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _enumerate_kernel(codes, weights, column_var, card, is_leaf, family_offset, family_var_ptr, family_var,
                      family_stride, log_theta, theta, limit, counts, fallback):
    """Exact expected family counts of rows with few unobserved non-leaf variables, by enumeration.

    Adds ``w · P(family cell | e)`` of each row into ``counts`` and returns their weighted log-likelihood;
    ``fallback[r]`` marks (and skips) rows costing more than ``limit``. A row's missingness is classified
    (:func:`_classify`, :func:`_place_groups`, :func:`_too_costly`) unless the previous row's was the same;
    then each group of enumerated variables runs through its joint states in log space, and the second
    pass adds the posterior of every family cell read.
    """
    n_vars = card.shape[0]
    n_columns = codes.shape[1]
    state = np.empty(n_vars, dtype=np.int64)
    work = np.zeros((21, n_vars + 1), dtype=np.int64)
    plain, plain_cell, loose = work[_PLAIN], work[_PLAIN_CELL], work[_LOOSE]
    group_var_ptr, group_var, group_size, group_start = work[_VAR_PTR], work[_VAR], work[_SIZE], work[_START]
    group_family_ptr, group_family = work[_FAMILY_PTR], work[_FAMILY]
    group_leaf_ptr, group_leaf = work[_LEAF_PTR], work[_LEAF]
    log_p = np.empty(max(limit, 1))
    cells = np.empty(max(limit, 1), dtype=np.int64)  # family cells read per (group state, family)
    missing = np.zeros(n_columns, dtype=np.bool_)  # the classified row's missingness pattern
    known = False
    too_costly = False
    n_plain = n_loose = n_groups = 0
    loglik = 0.0
    for r in range(codes.shape[0]):
        fallback[r] = False
        w = weights[r]
        if w == 0.0:
            continue
        same = known
        if known:  # rows sharing a missingness pattern share the groups and the families' kinds
            for j in range(n_columns):
                if (codes[r, j] < 0) != missing[j]:
                    same = False
                    break
        if not same:
            for v in range(n_vars):
                state[v] = -1
        for j in range(n_columns):
            state[column_var[j]] = codes[r, j]
        if not same:
            known = True
            for j in range(n_columns):
                missing[j] = codes[r, j] < 0
            n_enumerated, n_plain, n_loose, n_grouped = _classify(state, is_leaf, family_var_ptr, family_var, work)
            n_groups = _place_groups(n_enumerated, n_grouped, work)
            too_costly = _too_costly(n_groups, card, limit, work)
        if too_costly:
            fallback[r] = True
            continue
        # fully observed families: a plain count, and their log-probability
        log_observed = 0.0
        for t in range(n_plain):
            index = _family_index(plain[t], state, family_offset, family_var_ptr, family_var, family_stride, 0)
            plain_cell[t] = index
            log_observed += log_theta[index]
        if log_observed == -np.inf:
            loglik = -np.inf
            continue
        # each group's joint states, in log space; the cells read are kept for the counting pass
        impossible = False
        k = 0
        for g in range(n_groups):
            top = -np.inf
            v0, v1 = group_var_ptr[g], group_var_ptr[g + 1]
            for i in range(v0, v1):
                state[group_var[i]] = 0
            for s in range(group_size[g]):
                if s > 0:  # next joint state, the group's last variable fastest
                    for i in range(v1 - 1, v0 - 1, -1):
                        v = group_var[i]
                        state[v] += 1
                        if state[v] < card[v]:
                            break
                        state[v] = 0
                value = 0.0
                for t in range(group_family_ptr[g], group_family_ptr[g + 1]):
                    index = _family_index(group_family[t], state, family_offset, family_var_ptr, family_var,
                                          family_stride, 0)
                    cells[k] = index
                    k += 1
                    value += log_theta[index]
                for t in range(group_leaf_ptr[g], group_leaf_ptr[g + 1]):
                    cells[k] = _family_index(group_leaf[t], state, family_offset, family_var_ptr, family_var,
                                             family_stride, 1)
                    k += 1
                log_p[group_start[g] + s] = value
                if value > top:
                    top = value
            if top == -np.inf:
                impossible = True
                break
            total = 0.0
            for s in range(group_start[g], group_start[g + 1]):
                log_p[s] = math.exp(log_p[s] - top)
                total += log_p[s]
            log_observed += top + math.log(total)
            for s in range(group_start[g], group_start[g + 1]):
                log_p[s] /= total
        if impossible:
            loglik = -np.inf
            continue
        loglik += w * log_observed
        for t in range(n_plain):
            counts[plain_cell[t]] += w
        for t in range(n_loose):
            f = loose[t]
            index = _family_index(f, state, family_offset, family_var_ptr, family_var, family_stride, 1)
            stride = family_stride[family_var_ptr[f]]
            for x in range(card[f]):
                counts[index + x * stride] += w * theta[index + x * stride]
        k = 0
        for g in range(n_groups):
            for s in range(group_size[g]):
                q = w * log_p[group_start[g] + s]
                for t in range(group_family_ptr[g], group_family_ptr[g + 1]):
                    counts[cells[k]] += q
                    k += 1
                for t in range(group_leaf_ptr[g], group_leaf_ptr[g + 1]):
                    f = group_leaf[t]
                    index = cells[k]
                    k += 1
                    stride = family_stride[family_var_ptr[f]]
                    for x in range(card[f]):
                        counts[index + x * stride] += q * theta[index + x * stride]
    return loglik

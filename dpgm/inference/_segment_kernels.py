"""Compiled loops of the split chain computations (:mod:`dpgm.inference.segments`).

Every kernel takes a ``size`` argument (:func:`state_size`): for up to 8 states a tuple
whose length numba knows when it compiles, so each number of states gets its own
kernel with its loops unrolled.
"""

from __future__ import annotations

import numba
import numpy as np


def scaled_emissions(log_emission: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``exp(log_emission - m)`` with ``m`` each row's maximum, and ``m`` (a row of ``-inf``: zeros, ``m = 0``,
    so the step has probability 0). The maxima in a compiled loop, the exponentials by NumPy (vectorised)."""
    log_emission = np.ascontiguousarray(log_emission, dtype=np.float64)
    shift = np.empty(len(log_emission))
    _row_max(log_emission, shift, state_size(log_emission.shape[1]))
    e = np.subtract(log_emission, shift[:, None])
    return np.exp(e, out=e), shift


@numba.njit(nogil=True, cache=True)
def _row_max(log_emission, shift, size):
    rows, n = log_emission.shape[0], len(size)
    for t in range(rows):
        top = -np.inf
        for j in range(n):
            top = max(top, log_emission[t, j])
        shift[t] = top if np.isfinite(top) else 0.0


# Scales are multiplied up and their log taken only when the product falls below TINY (a scale is at most 1:
# the emissions are scaled to a maximum of 1, the transition rows sum to 1): one log every few hundred steps
# instead of one per step and state.
TINY = 1e-200


def state_size(n: int) -> tuple | np.ndarray:
    """The kernels' ``size`` argument: a tuple of ``n`` zeros for up to 8 states, whose length numba knows
    when it compiles (one compiled kernel per number of states, its loops unrolled: about 4x faster for 4
    states), an array of ``n`` otherwise (one kernel for all)."""
    return (0,) * n if n <= 8 else np.zeros(n)


@numba.njit(nogil=True, cache=True)
def operator_rows(e, shift, a, b, transition, matrix, log_scale, size):
    """Rows of the segment operator of steps ``[a, b)``: ``S`` scaled forward filters, one per previous state."""
    n = len(size)
    step = np.empty((n, n))  # T diag(e_t)
    row = np.empty(n)
    running = np.ones(n)
    for i in range(n):
        log_scale[i] = 0.0
        for j in range(n):
            matrix[i, j] = 1.0 if i == j else 0.0
    total_shift = 0.0
    for t in range(a, b):
        total_shift += shift[t]
        for k in range(n):
            for j in range(n):
                step[k, j] = transition[k, j] * e[t, j]
        for i in range(n):
            if log_scale[i] == -np.inf:
                continue
            for j in range(n):
                row[j] = 0.0
            for k in range(n):
                weight = matrix[i, k]
                for j in range(n):
                    row[j] += weight * step[k, j]
            norm = 0.0
            for j in range(n):
                norm += row[j]
            if not norm > 0.0:  # impossible from this state
                log_scale[i] = -np.inf
                continue
            inverse = 1.0 / norm
            for j in range(n):
                matrix[i, j] = row[j] * inverse
            running[i] *= norm
            if running[i] < TINY:
                log_scale[i] += np.log(running[i])
                running[i] = 1.0
    for i in range(n):
        if log_scale[i] > -np.inf:
            log_scale[i] += np.log(running[i]) + total_shift
        else:
            for j in range(n):
                matrix[i, j] = 1.0 / n


@numba.njit(nogil=True, cache=True)
def forward_filter(e, shift, a, b, start, transition, alpha, size):
    """The scaled forward filter of steps ``[a, b)`` from the start distribution: fills ``alpha`` (the
    distribution at ``b - 1``), returns the log-likelihood (``-inf``: impossible)."""
    n = len(size)
    row = np.empty(n)
    log = 0.0
    running = 1.0
    for j in range(n):
        alpha[j] = start[j]
    for t in range(a, b):
        norm = _advance(alpha, transition, e[t], t > a, row, size)
        if not norm > 0.0:
            for j in range(n):
                alpha[j] = 1.0 / n
            return -np.inf
        log += shift[t]
        running *= norm
        if running < TINY:
            log += np.log(running)
            running = 1.0
    return log + np.log(running)


@numba.njit(nogil=True, cache=True, inline="always")
def _advance(alpha, transition, emission, move, row, size):
    """``alpha <- normalise((alpha T if move else alpha) * emission)`` in place (``row``: scratch); returns
    the norm."""
    n = len(size)
    for j in range(n):
        row[j] = 0.0
    if move:
        for i in range(n):
            weight = alpha[i]
            for j in range(n):
                row[j] += weight * transition[i, j]
    else:
        for j in range(n):
            row[j] = alpha[j]
    norm = 0.0
    for j in range(n):
        row[j] *= emission[j]
        norm += row[j]
    if norm > 0.0:
        inverse = 1.0 / norm
        for j in range(n):
            alpha[j] = row[j] * inverse
    return norm


@numba.njit(nogil=True, cache=True)
def smooth_pieces(e, shift, runs, start, transition, continues_in, alpha_in, log_in, continues_out, log_beta_out,
            gamma, start_counts, transition_counts, size):
    """Scaled forward-backward over every piece of one chunk with its boundary messages; returns the summed
    log-likelihood of the sequences that end in the chunk. ``gamma`` holds alpha, then the posteriors;
    ``transition_counts`` gets ``sum_t alpha_{t-1}(i) e_t(j) beta_t(j) / c_t``, to be multiplied by the
    transition matrix."""
    n_rows, n = e.shape[0], len(size)
    n_runs = runs.shape[0] - 1
    inverse_scale = np.empty(n_rows)
    alpha = np.empty(n)
    row = np.empty(n)
    beta = np.empty(n)
    weight = np.empty(n)
    total = 0.0
    for r in range(n_runs):
        a, b = runs[r], runs[r + 1]
        head_in = continues_in and r == 0
        tail_out = continues_out and r == n_runs - 1
        log = log_in if head_in else 0.0
        running = 1.0
        possible = log > -np.inf
        for j in range(n):
            alpha[j] = alpha_in[j] if head_in else start[j]
        for t in range(a, b):
            norm = _advance(alpha, transition, e[t], t > a or head_in, row, size)
            if not (possible and norm > 0.0):
                possible = False
                break
            inverse_scale[t] = 1.0 / norm
            for j in range(n):
                gamma[t, j] = alpha[j]
            log += shift[t]
            running *= norm
            if running < TINY:
                log += np.log(running)
                running = 1.0
        log += np.log(running)
        if possible and tail_out:
            top = -np.inf
            for j in range(n):
                top = max(top, log_beta_out[j])
            dot = 0.0
            if top > -np.inf:
                for j in range(n):
                    beta[j] = np.exp(log_beta_out[j] - top)
                    dot += gamma[b - 1, j] * beta[j]
            possible = dot > 0.0
        elif possible:
            for j in range(n):
                beta[j] = 1.0
        if not possible:
            if not tail_out:
                total = -np.inf
            for t in range(a, b):
                for j in range(n):
                    gamma[t, j] = np.nan
            continue
        if not tail_out:
            total += log
        for t in range(b - 1, a - 1, -1):
            # gamma_t = alpha_t beta_t / s, and beta is rescaled by the same s, so that alpha_t . beta_t = 1
            s = 0.0
            for j in range(n):
                s += gamma[t, j] * beta[j]
            inverse = 1.0 / s
            for j in range(n):
                beta[j] *= inverse
                gamma[t, j] *= beta[j]
                weight[j] = e[t, j] * beta[j] * inverse_scale[t]
            if t > a or head_in:
                for i in range(n):
                    p = gamma[t - 1, i] if t > a else alpha_in[i]
                    for j in range(n):
                        transition_counts[i, j] += p * weight[j]
            if t > a:
                for i in range(n):
                    value = 0.0
                    for j in range(n):
                        value += transition[i, j] * weight[j]
                    beta[i] = value
        if not head_in:
            for j in range(n):
                start_counts[j] += gamma[a, j]
    return total


@numba.njit(nogil=True, cache=True)
def piece_logliks(e, shift, runs, start, transition, continues_in, alpha_in, log_in, out, size):
    """The log-likelihood of each of the chunk's first ``len(out)`` pieces (the sequences that end in the chunk)
    into ``out``, by the scaled forward filter; the first piece continues from ``alpha_in`` (the filtered
    distribution before the chunk) and ``log_in`` (its sequence's log-likelihood so far) if ``continues_in``."""
    n = len(size)
    alpha = np.empty(n)
    row = np.empty(n)
    for r in range(len(out)):
        a, b = runs[r], runs[r + 1]
        head_in = continues_in and r == 0
        log = log_in if head_in else 0.0
        for j in range(n):
            alpha[j] = alpha_in[j] if head_in else start[j]
        running = 1.0
        for t in range(a, b):
            if log == -np.inf:
                break
            norm = _advance(alpha, transition, e[t], t > a or head_in, row, size)
            if not norm > 0.0:
                log = -np.inf
                break
            log += shift[t]
            running *= norm
            if running < TINY:
                log += np.log(running)
                running = 1.0
        out[r] = log + np.log(running) if log > -np.inf else -np.inf

"""Test oracle and emission functions for hidden Markov chains in the long layout.

:func:`oracle` is a plain log-space forward-backward of each whole sequence (NumPy, no
chunks, no scaling beyond a per-step shift), written
independently of ``dpgm.inference.segments``. The categorical emission functions are the
caller's side of :func:`dpgm.stats.long_sequences.long_expected_stats` (module level, so
they pickle to the workers).
"""

from __future__ import annotations

import numpy as np


def logsumexp(a: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    """``log(sum(exp(a)))`` along ``axis``, shifted by the maximum; ``-inf`` where every term is.

    SciPy's ``logsumexp`` gives the same to rounding, at some 200 µs a call: the oracle makes three
    calls per step, which made it most of the cost of the long-sequence tests.
    """
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def runs_of(ids: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` of every run of equal ids."""
    edges = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def oracle(log_emission: np.ndarray, ids: np.ndarray, start: np.ndarray, transition: np.ndarray):
    """Log-space forward-backward of each whole sequence: loglik, gamma, start and transition counts.

    Each step's log messages are shifted by their log-sum-exp (the log-likelihood is the sum of the
    forward shifts), so that their magnitudes stay small over long sequences; posteriors and the
    transition posteriors of each step are normalised over their states.
    """
    n = len(start)
    log_start, log_transition = np.log(start), np.log(transition)
    gamma = np.empty_like(log_emission)
    start_counts, transition_counts, total = np.zeros(n), np.zeros((n, n)), 0.0
    for a, b in runs_of(ids):
        le = log_emission[a:b]
        length = b - a
        log_alpha, log_beta = np.empty((length, n)), np.zeros((length, n))
        log_alpha[0] = log_start + le[0]
        for t in range(length):
            if t > 0:
                log_alpha[t] = logsumexp(log_alpha[t - 1][:, None] + log_transition, axis=0) + le[t]
            shift = logsumexp(log_alpha[t])
            total += shift
            log_alpha[t] -= shift
        for t in range(length - 2, -1, -1):
            log_beta[t] = logsumexp(log_transition + (le[t + 1] + log_beta[t + 1])[None, :], axis=1)
            log_beta[t] -= logsumexp(log_beta[t])
        log_gamma = log_alpha + log_beta
        gamma[a:b] = np.exp(log_gamma - logsumexp(log_gamma, axis=1, keepdims=True))
        start_counts += gamma[a]
        for t in range(1, length):
            log_xi = log_alpha[t - 1][:, None] + log_transition + (le[t] + log_beta[t])[None, :]
            transition_counts += np.exp(log_xi - logsumexp(log_xi))
    return total, gamma, start_counts, transition_counts


def viterbi_oracle(log_emission: np.ndarray, ids: np.ndarray, start: np.ndarray, transition: np.ndarray):
    """The most probable state path of each whole sequence (log-space Viterbi), and the summed best log-probs."""
    log_start, log_transition = np.log(start), np.log(transition)
    path = np.empty(len(ids), dtype=np.int64)
    best = 0.0
    for a, b in runs_of(ids):
        delta = log_start + log_emission[a]
        back = np.empty((b - a, len(start)), dtype=np.int64)
        for t in range(a + 1, b):
            scores = delta[:, None] + log_transition
            back[t - a] = scores.argmax(axis=0)
            delta = scores.max(axis=0) + log_emission[t]
        path[b - 1] = delta.argmax()
        best += delta.max()
        for t in range(b - 1, a, -1):
            path[t - 1] = back[t - a, path[t]]
    return best, path


def categorical_log_emission(chunk: int, columns: dict, table: np.ndarray, variable: str = "letter") -> np.ndarray:
    """``log table[s, x_t]`` per row, 0 where the code is -1 (missing)."""
    codes = np.asarray(columns[variable])
    out = np.log(table[:, np.maximum(codes, 0)].T)
    out[codes < 0] = 0.0
    return out


def categorical_accumulate(chunk: int, columns: dict, gamma: np.ndarray, table: np.ndarray,
                           variable: str = "letter") -> np.ndarray:
    """Expected emission counts ``(S, symbols)`` of the chunk's observed steps."""
    codes = np.asarray(columns[variable])
    seen = codes >= 0
    return np.stack([np.bincount(codes[seen], gamma[seen, s], minlength=table.shape[1])
                     for s in range(table.shape[0])])


def gaussian_log_emission(chunk: int, columns: dict, parameters: tuple, variable: str = "x") -> np.ndarray:
    """``log N(x_t; mean_s, variance_s)`` per row, 0 where ``x`` is NaN (missing)."""
    means, variances = parameters
    x = np.asarray(columns[variable], dtype=np.float64)[:, None]
    out = -0.5 * (np.log(2 * np.pi * variances) + (x - means) ** 2 / variances)
    out[np.isnan(x[:, 0])] = 0.0
    return out

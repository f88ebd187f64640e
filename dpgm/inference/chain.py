"""Batched scaled forward-backward for hidden Markov chains (the E step of Baum-Welch).

Sequences are rows of an int code matrix ``(B, T)``; ``-1`` is a missing
observation (its emission factor is 1). Trailing ``-1`` values are padding: a
sequence ends at its last observed step. One compiled loop per sequence,
O(T n^2) each, with per-step rescaling so long sequences never underflow.

References
----------
Rabiner, L. R. (1989). A tutorial on hidden Markov models and selected
applications in speech recognition. *Proc. IEEE* 77, 257-286.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["forward_backward_counts", "forward_logliks"]


@numba.njit(nogil=True, cache=True)
def _forward_one(codes, end, start, transition, emission, alpha, scale):
    """The scaled forward recursion over steps ``[0, end)`` of one sequence: fills ``alpha`` (each step's
    filtered state distribution) and ``scale``; returns the log-likelihood (``-inf`` if impossible)."""
    n = start.shape[0]
    total = 0.0
    for t in range(end):
        c = codes[t]
        norm = 0.0
        for j in range(n):
            if t == 0:
                value = start[j]
            else:
                value = 0.0
                for i in range(n):
                    value += alpha[t - 1, i] * transition[i, j]
            if c >= 0:
                value *= emission[j, c]
            alpha[t, j] = value
            norm += value
        if norm <= 0.0:
            return -np.inf
        scale[t] = norm
        for j in range(n):
            alpha[t, j] /= norm
        total += np.log(norm)
    return total


@numba.njit(nogil=True, cache=True)
def _sequences(codes, weights, start, transition, emission, start_counts, transition_counts, emission_counts):
    n_seq, length = codes.shape
    n = start.shape[0]
    alpha = np.empty((length, n))
    beta = np.empty((length, n))
    scale = np.empty(length)
    total = 0.0
    for s in range(n_seq):
        w = weights[s]
        end = length
        while end > 0 and codes[s, end - 1] < 0:
            end -= 1
        if end == 0 or w == 0.0:
            continue
        loglik = _forward_one(codes[s], end, start, transition, emission, alpha, scale)
        if loglik == -np.inf:
            return -np.inf
        total += w * loglik
        # backward
        for j in range(n):
            beta[end - 1, j] = 1.0
        for t in range(end - 2, -1, -1):
            c = codes[s, t + 1]
            for i in range(n):
                value = 0.0
                for j in range(n):
                    e = emission[j, c] if c >= 0 else 1.0
                    value += transition[i, j] * e * beta[t + 1, j]
                beta[t, i] = value / scale[t + 1]
        # expected counts
        for t in range(end):
            c = codes[s, t]
            for j in range(n):
                gamma = alpha[t, j] * beta[t, j]
                if t == 0:
                    start_counts[j] += w * gamma
                if c >= 0:
                    emission_counts[j, c] += w * gamma
            if t > 0:
                for i in range(n):
                    for j in range(n):
                        e = emission[j, c] if c >= 0 else 1.0
                        transition_counts[i, j] += (
                            w * alpha[t - 1, i] * transition[i, j] * e * beta[t, j] / scale[t]
                        )
    return total


def forward_backward_counts(
    codes: np.ndarray,
    start: np.ndarray,
    transition: np.ndarray,
    emission: np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[float, dict[str, np.ndarray]]:
    """Log-likelihood and expected counts of a batch of sequences.

    Parameters
    ----------
    codes
        ``(B, T)`` observation codes, ``-1`` = missing (trailing ``-1`` = padding).
    start, transition, emission
        ``(n,)``, ``(n, n)`` (from, to) and ``(n, m)`` probabilities.
    weights
        Frequency weight of each sequence.

    Returns
    -------
    (float, dict)
        The summed log-likelihood (``-inf`` if a sequence is impossible) and the
        expected counts ``start`` (n,), ``transition`` (n, n), ``emission`` (n, m).
    """
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    n, m = emission.shape
    weights = np.ones(codes.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    counts = {"start": np.zeros(n), "transition": np.zeros((n, n)), "emission": np.zeros((n, m))}
    loglik = _sequences(codes, weights, np.asarray(start, float), np.asarray(transition, float),
                        np.asarray(emission, float), counts["start"], counts["transition"], counts["emission"])
    return float(loglik), counts


@numba.njit(nogil=True, cache=True)
def _forward(codes, start, transition, emission, out):
    n_seq, length = codes.shape
    alpha = np.empty((length, start.shape[0]))
    scale = np.empty(length)
    for s in range(n_seq):
        out[s] = _forward_one(codes[s], length, start, transition, emission, alpha, scale)


def forward_logliks(codes: np.ndarray, start: np.ndarray, transition: np.ndarray, emission: np.ndarray
                    ) -> np.ndarray:
    """Each sequence's log-likelihood by the scaled forward recursion, ``(B,)``.

    A missing observation (``-1``) has emission factor 1, so it is summed out; a
    sequence with no observation gets 0 and an impossible one ``-inf``.
    """
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    out = np.empty(codes.shape[0])
    _forward(codes, np.asarray(start, float), np.asarray(transition, float), np.asarray(emission, float), out)
    return out

"""Batched scaled forward-backward and Viterbi for hidden Markov chains (the E step of Baum-Welch, decoding).

A batch of ``B`` sequences of at most ``T`` steps arrives as each step's emission
density per state in two parts, ``emission (B, T, n)`` times ``exp(shift (B, T))`` (a
continuous family's ``exp(log density - its max over states)`` and that max: far
from 1, densities never underflow; 1 and 0 at a step whose observations are all
missing: they are summed out), and each sequence's length (later steps are
padding). One compiled loop per sequence, O(T n^2) each, the forward messages
rescaled at every step so long sequences never underflow.

References
----------
Rabiner, L. R. (1989). A tutorial on hidden Markov models and selected
applications in speech recognition. *Proc. IEEE* 77, 257-286.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["forward_backward", "sequence_logliks", "viterbi"]



@numba.njit(nogil=True, cache=True)
def _forward_factors(factors, shifts, end, start, transition, alpha, scale):
    """The scaled forward recursion over steps ``[0, end)`` of one sequence: fills ``alpha`` (each step's
    filtered state distribution) and ``scale``; returns the log-likelihood (``-inf`` if impossible)."""
    n = start.shape[0]
    total = 0.0
    for t in range(end):
        norm = 0.0
        for j in range(n):
            if t == 0:
                value = start[j]
            else:
                value = 0.0
                for i in range(n):
                    value += alpha[t - 1, i] * transition[i, j]
            value *= factors[t, j]
            alpha[t, j] = value
            norm += value
        if norm <= 0.0:
            return -np.inf
        scale[t] = norm
        for j in range(n):
            alpha[t, j] /= norm
        total += np.log(norm) + shifts[t]
    return total


@numba.njit(nogil=True, cache=True)
def _posteriors(emission, shift, ends, weights, start, transition, start_counts, transition_counts, gamma):
    n_seq, length, n = emission.shape
    alpha = np.empty((length, n))
    beta = np.empty((length, n))
    scale = np.empty(length)
    total = 0.0
    for s in range(n_seq):
        w = weights[s]
        end = ends[s]
        for t in range(length):
            for j in range(n):
                gamma[s, t, j] = 0.0
        if end == 0 or w == 0.0:
            continue
        factors = emission[s]
        loglik = _forward_factors(factors, shift[s], end, start, transition, alpha, scale)
        if loglik == -np.inf:
            return -np.inf
        total += w * loglik
        for j in range(n):
            beta[end - 1, j] = 1.0
        for t in range(end - 2, -1, -1):
            for i in range(n):
                value = 0.0
                for j in range(n):
                    value += transition[i, j] * factors[t + 1, j] * beta[t + 1, j]
                beta[t, i] = value / scale[t + 1]
        for t in range(end):
            for j in range(n):
                g = alpha[t, j] * beta[t, j]
                gamma[s, t, j] = w * g
                if t == 0:
                    start_counts[j] += w * g
            if t > 0:
                for i in range(n):
                    for j in range(n):
                        transition_counts[i, j] += (
                            w * alpha[t - 1, i] * transition[i, j] * factors[t, j] * beta[t, j] / scale[t])
    return total


def forward_backward(emission: np.ndarray, shift: np.ndarray, ends: np.ndarray, start: np.ndarray,
                     transition: np.ndarray, weights: np.ndarray | None = None
                     ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """Log-likelihood, expected start and transition counts and each step's state posteriors of a batch of
    sequences, given each step's emission factors.

    Parameters
    ----------
    emission, shift
        ``(B, T, n)`` and ``(B, T)``: ``p(x_t | z_t = j) = emission[b, t, j] * exp(shift[b, t])`` (a step
        whose observations are all missing: factors 1, shift 0).
    ends
        ``(B,)``: each sequence's length (steps ``[end, T)`` are padding).
    start, transition
        ``(n,)`` and ``(n, n)`` (from, to) probabilities.
    weights
        Frequency weight of each sequence.

    Returns
    -------
    (float, dict, numpy.ndarray)
        The weighted log-likelihood (``-inf`` if a sequence is impossible), ``{"start", "transition"}``
        expected counts, and ``gamma (B, T, n)``: each step's posterior times its sequence's weight (0 on
        padding).
    """
    emission = np.ascontiguousarray(emission, dtype=np.float64)
    n_seq, length, n = emission.shape
    weights = np.ones(n_seq) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    counts = {"start": np.zeros(n), "transition": np.zeros((n, n))}
    gamma = np.empty((n_seq, length, n))
    loglik = _posteriors(emission, np.ascontiguousarray(shift, dtype=np.float64),
                         np.ascontiguousarray(ends, dtype=np.int64), weights, np.asarray(start, float),
                         np.asarray(transition, float), counts["start"], counts["transition"], gamma)
    return float(loglik), counts, gamma


@numba.njit(nogil=True, cache=True)
def _sequence_logliks(emission, shift, ends, start, transition, out):
    n_seq, length, n = emission.shape
    alpha = np.empty((length, n))
    scale = np.empty(length)
    for s in range(n_seq):
        end = ends[s]
        if end == 0:
            out[s] = 0.0
            continue
        out[s] = _forward_factors(emission[s], shift[s], end, start, transition, alpha, scale)


def sequence_logliks(emission: np.ndarray, shift: np.ndarray, ends: np.ndarray, start: np.ndarray,
                     transition: np.ndarray) -> np.ndarray:
    """Each sequence's log-likelihood ``(B,)`` by the scaled forward recursion (0 for an empty sequence,
    ``-inf`` for an impossible one); arguments as :func:`forward_backward`."""
    out = np.empty(emission.shape[0])
    _sequence_logliks(np.ascontiguousarray(emission, dtype=np.float64), np.ascontiguousarray(shift, dtype=np.float64),
                      np.ascontiguousarray(ends, dtype=np.int64), np.asarray(start, float),
                      np.asarray(transition, float), out)
    return out


@numba.njit(nogil=True, cache=True)
def _viterbi(log_e, ends, log_start, log_transition, paths, best):
    n_seq, length, n = log_e.shape
    delta = np.empty((length, n))
    back = np.empty((length, n), dtype=np.int64)
    for s in range(n_seq):
        end = ends[s]
        for t in range(length):
            paths[s, t] = -1
        if end == 0:
            best[s] = 0.0
            continue
        for j in range(n):
            delta[0, j] = log_start[j] + log_e[s, 0, j]
        for t in range(1, end):
            for j in range(n):
                top, arg = -np.inf, 0
                for i in range(n):
                    value = delta[t - 1, i] + log_transition[i, j]
                    if value > top:
                        top, arg = value, i
                delta[t, j] = top + log_e[s, t, j]
                back[t, j] = arg
        top, arg = -np.inf, 0
        for j in range(n):
            if delta[end - 1, j] > top:
                top, arg = delta[end - 1, j], j
        best[s] = top
        paths[s, end - 1] = arg
        for t in range(end - 1, 0, -1):
            arg = back[t, arg]
            paths[s, t - 1] = arg
    return 0


def viterbi(emission: np.ndarray, shift: np.ndarray, ends: np.ndarray, start: np.ndarray, transition: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The most probable state path of each sequence (``(B, T)``, ``-1`` on padding) and its log
    probability ``(B,)`` (ties: the lowest state); arguments as :func:`forward_backward`."""
    with np.errstate(divide="ignore"):
        log_emission = np.log(np.asarray(emission, dtype=np.float64)) + np.asarray(shift, dtype=np.float64)[..., None]
    n_seq, length, _ = log_emission.shape
    paths = np.empty((n_seq, length), dtype=np.int64)
    best = np.empty(n_seq)
    with np.errstate(divide="ignore"):
        log_start, log_transition = np.log(np.asarray(start, float)), np.log(np.asarray(transition, float))
    _viterbi(log_emission, np.ascontiguousarray(ends, dtype=np.int64), log_start, log_transition, paths, best)
    return paths, best

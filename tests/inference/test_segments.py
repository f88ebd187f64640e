"""The split forward-backward of the long layout (``dpgm.inference.segments``) against whole sequences.

Oracle: a plain log-space forward-backward of each whole sequence, written here in
NumPy with ``scipy.special.logsumexp`` (no scaling, no chunks): log-likelihood,
per-step posteriors, expected transition and start counts. The split E step
must equal it to 1e-10 (relative, absolute for posteriors) for every chunking,
including cuts inside one long sequence, sequences of length 1 and missing
steps (log emission 0).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from dpgm.inference.segments import run_starts, split_forward_backward

TOL = 1e-10


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
    runs = run_starts(ids)
    for a, b in zip(runs[:-1], runs[1:], strict=True):
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


def random_problem(rng: np.random.Generator, n_states: int, lengths: list[int], missing: float):
    start = rng.dirichlet(np.ones(n_states))
    transition = rng.dirichlet(np.ones(n_states), n_states)
    n = sum(lengths)
    log_emission = np.log(rng.dirichlet(np.ones(6), n_states).T[rng.integers(0, 6, n)])  # categorical emissions
    log_emission[rng.random(n) < missing] = 0.0
    ids = np.repeat(rng.permutation(len(lengths)) * 3 + 7, lengths)  # distinct ids, not sorted
    return log_emission, ids, start, transition


def assert_split_equals_oracle(log_emission, ids, start, transition, chunk_starts):
    loglik, gamma, start_counts, transition_counts = split_forward_backward(log_emission, ids, start, transition,
                                                                            chunk_starts)
    expected = oracle(log_emission, ids, start, transition)
    np.testing.assert_allclose(loglik, expected[0], rtol=TOL)
    np.testing.assert_allclose(gamma, expected[1], rtol=0, atol=TOL)
    np.testing.assert_allclose(start_counts, expected[2], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(transition_counts, expected[3], rtol=TOL, atol=TOL)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_states=st.integers(2, 4),
       lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       cuts=st.lists(st.floats(0, 1), max_size=8), missing=st.sampled_from([0.0, 0.3]))
def test_any_chunking_equals_whole_sequences(seed, n_states, lengths, cuts, missing):
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_states, lengths, missing)
    n = sum(lengths)
    chunk_starts = sorted({0, n, *(int(c * n) for c in cuts)})
    assert_split_equals_oracle(*problem, chunk_starts)


@pytest.mark.parametrize("chunk_rows", [1, 2, 7, 1000, 4999, 5000])
def test_one_long_sequence_cut_into_chunks(chunk_rows):
    rng = np.random.default_rng(chunk_rows)
    problem = random_problem(rng, 3, [5000], 0.1)
    assert_split_equals_oracle(*problem, [*range(0, 5000, chunk_rows), 5000])


def test_log_emission_far_below_one_does_not_underflow():
    """Gaussian-like log densities of -800 per step: exp() underflows unless each step is rescaled."""
    rng = np.random.default_rng(3)
    log_emission, ids, start, transition = random_problem(rng, 3, [300, 1, 200], 0.0)
    log_emission = log_emission - 800.0
    assert_split_equals_oracle(log_emission, ids, start, transition, [0, 17, 300, 301, 302, 450, 501])


def test_impossible_sequence_has_minus_infinite_loglik_and_no_counts():
    """A step no state can emit (log emission -inf everywhere) makes its sequence impossible: the total is
    -inf, its posteriors NaN; the other sequences' counts equal the oracle's without it."""
    rng = np.random.default_rng(4)
    log_emission, ids, start, transition = random_problem(rng, 2, [10, 12], 0.0)
    log_emission[15] = -np.inf  # inside the second sequence, which the chunking cuts
    loglik, gamma, start_counts, transition_counts = split_forward_backward(log_emission, ids, start, transition,
                                                                            [0, 5, 13, 22])
    assert loglik == -np.inf
    assert np.isnan(gamma[10:]).all()
    expected = oracle(log_emission[:10], ids[:10], start, transition)
    np.testing.assert_allclose(gamma[:10], expected[1], rtol=0, atol=TOL)
    np.testing.assert_allclose(start_counts, expected[2], rtol=TOL)
    np.testing.assert_allclose(transition_counts, expected[3], rtol=TOL)

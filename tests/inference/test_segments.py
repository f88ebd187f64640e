"""The split forward-backward of the long layout (``dpgm.inference.segments``) against whole sequences.

Oracle: a plain log-space forward-backward of each whole sequence (``tests/chain_oracle.py``,
NumPy, no chunks): log-likelihood,
per-step posteriors, expected transition and start counts. The split E step
must equal it to 1e-10 (relative, absolute for posteriors) for every chunking,
including cuts inside one long sequence, sequences of length 1 and missing
steps (log emission 0).
"""

from __future__ import annotations

import numpy as np
import pytest
from chain_oracle import oracle, runs_of, viterbi_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from dpgm.inference.segment_paths import split_viterbi
from dpgm.inference.segments import (
    ChunkLinks,
    boundary_operators,
    combine_boundaries,
    run_starts,
    sequence_log_likelihoods,
    split_forward_backward,
)

TOL = 1e-10


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
    # every step missing: loglik 0, up to rounding of one ulp per step
    np.testing.assert_allclose(loglik, expected[0], rtol=TOL, atol=1e-15 * len(ids))
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


def _split_scores(log_emission, ids, start, transition, chunk_starts) -> np.ndarray:
    """Every sequence's log-likelihood by the three steps of scoring over rows cut at ``chunk_starts``."""
    pieces = [(slice(a, b), run_starts(ids[a:b])) for a, b in zip(chunk_starts, chunk_starts[1:], strict=False)]
    links = ChunkLinks.from_ids([ids[s.start] for s, _ in pieces], [ids[s.stop - 1] for s, _ in pieces],
                                [len(r) == 2 for _, r in pieces])
    boundaries = [boundary_operators(log_emission[s], r, start, transition, continues_in=bool(links.continues_in[c]),
                                     continues_out=bool(links.continues_out[c])) for c, (s, r) in enumerate(pieces)]
    messages = combine_boundaries(boundaries, links)
    return np.concatenate([sequence_log_likelihoods(log_emission[s], r, start, transition, m)
                           for (s, r), m in zip(pieces, messages, strict=True)])


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_states=st.integers(2, 4),
       lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6) | st.just([3000]),
       cuts=st.lists(st.floats(0, 1), max_size=8), missing=st.sampled_from([0.0, 0.3]))
def test_each_sequence_scores_as_its_whole_forward_pass_for_any_chunking(seed, n_states, lengths, cuts, missing):
    """One log-likelihood per sequence, in row order, each the oracle's of that sequence alone (rel 1e-10;
    every step missing: 0 up to one ulp per step), whichever chunk its last row falls in."""
    rng = np.random.default_rng(seed)
    log_emission, ids, start, transition = random_problem(rng, n_states, lengths, missing)
    n = sum(lengths)
    found = _split_scores(log_emission, ids, start, transition, sorted({0, n, *(int(c * n) for c in cuts)}))
    expected = [oracle(log_emission[a:b], ids[a:b], start, transition)[0] for a, b in runs_of(ids)]
    np.testing.assert_allclose(found, expected, rtol=TOL, atol=1e-15 * n)


def test_an_impossible_sequence_scores_minus_infinity_and_the_others_theirs():
    rng = np.random.default_rng(4)
    log_emission, ids, start, transition = random_problem(rng, 2, [10, 12, 5], 0.0)
    log_emission[15] = -np.inf  # inside the second sequence, which the chunking cuts
    found = _split_scores(log_emission, ids, start, transition, [0, 5, 13, 16, 27])
    assert found[1] == -np.inf
    for i, (a, b) in enumerate([(0, 10), (22, 27)]):
        np.testing.assert_allclose(found[2 * i], oracle(log_emission[a:b], ids[a:b], start, transition)[0], rtol=TOL)


def _path_log_probability(log_emission, ids, start, transition, path) -> float:
    """The summed log-probability of ``path`` (each sequence's) under the model."""
    total = 0.0
    for a, b in runs_of(ids):
        states = path[a:b]
        total += np.log(start[states[0]]) + np.log(transition[states[:-1], states[1:]]).sum()
        total += log_emission[np.arange(a, b), states].sum()
    return total


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_states=st.integers(2, 4),
       lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6) | st.just([3000]),
       cuts=st.lists(st.floats(0, 1), max_size=8), missing=st.sampled_from([0.0, 0.3]),
       continuous=st.booleans())
def test_split_viterbi_equals_whole_sequences(seed, n_states, lengths, cuts, missing, continuous):
    """The best path and its log-probability per sequence against a log-space Viterbi of each whole sequence:
    the summed best log-probabilities to 1e-10, and the path's own log-probability equal to them. Continuous
    emissions and no missing step (Gaussian-like log densities: no two paths equally probable): the path
    exactly. Repeated symbols and missing steps make equally probable paths (1→2→1→1 and 1→1→2→1 over two
    missing steps), any of which is a right answer."""
    rng = np.random.default_rng(seed)
    log_emission, ids, start, transition = random_problem(rng, n_states, lengths, missing)
    if continuous:
        log_emission = np.where(log_emission == 0, 0.0, rng.normal(-3.0, 2.0, log_emission.shape))
    n = sum(lengths)
    chunk_starts = sorted({0, n, *(int(c * n) for c in cuts)})
    best, path = split_viterbi(log_emission, ids, start, transition, chunk_starts)
    expected_best, expected_path = viterbi_oracle(log_emission, ids, start, transition)
    np.testing.assert_allclose(best, expected_best, rtol=TOL)
    np.testing.assert_allclose(_path_log_probability(log_emission, ids, start, transition, path), expected_best,
                               rtol=0, atol=1e-8)  # rounding of sums of 3000 terms
    if continuous and not missing:
        np.testing.assert_array_equal(path, expected_path)


def test_impossible_sequence_has_no_path():
    rng = np.random.default_rng(4)
    log_emission, ids, start, transition = random_problem(rng, 2, [10, 12, 5], 0.0)
    log_emission[15] = -np.inf
    best, path = split_viterbi(log_emission, ids, start, transition, [0, 5, 13, 16, 27])
    assert best == -np.inf
    assert (path[10:22] == -1).all()
    expected = viterbi_oracle(log_emission, ids, start, transition)[1]
    np.testing.assert_array_equal(path[:10], expected[:10])
    np.testing.assert_array_equal(path[22:], expected[22:])


def test_more_than_eight_states_take_the_general_kernels():
    """Above 8 states the kernels are compiled once for any number of states (``state_size``): the same
    answers as the oracle, for the posteriors and the paths."""
    rng = np.random.default_rng(6)
    log_emission, ids, start, transition = random_problem(rng, 10, [300, 1, 80], 0.2)
    assert_split_equals_oracle(log_emission, ids, start, transition, [0, 120, 299, 300, 302, 381])
    log_emission = np.where(log_emission == 0, 0.0, rng.normal(-3.0, 2.0, log_emission.shape))
    best, path = split_viterbi(log_emission, ids, start, transition, [0, 120, 299, 300, 302, 381])
    expected_best, _ = viterbi_oracle(log_emission, ids, start, transition)
    np.testing.assert_allclose(best, expected_best, rtol=TOL)
    np.testing.assert_allclose(_path_log_probability(log_emission, ids, start, transition, path), expected_best,
                               rtol=0, atol=1e-8)

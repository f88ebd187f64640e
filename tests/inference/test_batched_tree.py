"""Batched junction-tree inference against brute-force enumeration of the joint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_models import grid_tables, grid_transfer

import dpgm
from dpgm.inference.batched import BatchedTree
from dpgm.testing import joint_array, restrict


def _brute(variables, cards, factors, codes, observed, cliques):
    joint = joint_array(variables, factors)
    loglik = 0.0
    counts = {c: np.zeros([cards[v] for v in c]) for c in cliques}
    for row in codes:
        restricted = restrict(joint, variables, observed, row)
        p = restricted.sum()
        loglik += np.log(p)
        posterior = restricted / p
        for c in counts:
            axes = tuple(i for i, v in enumerate(variables) if v not in c)
            kept = [v for v in variables if v in c]
            counts[c] += np.transpose(posterior.sum(axis=axes), [kept.index(v) for v in c])
    return loglik, counts


@st.composite
def models(draw):
    """Random Markov networks on 4-6 variables of 2-5 states, cycles of length >= 4 included."""
    n = draw(st.integers(4, 6))
    variables = [f"x{i}" for i in range(n)]
    cards = {v: draw(st.integers(2, 5)) for v in variables}
    scopes = [(variables[i], variables[(i + 1) % n]) for i in range(n)]  # a cycle of length n
    scopes += [tuple(draw(st.lists(st.sampled_from(variables), min_size=1, max_size=3, unique=True)))
               for _ in range(draw(st.integers(0, 3)))]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    factors = [(s, rng.gamma(1.0, 1.0, [cards[v] for v in s])) for s in scopes]
    observed = draw(st.lists(st.sampled_from(variables), min_size=1, max_size=n - 1, unique=True))
    codes = np.stack([rng.integers(-1, cards[v], 12) for v in observed], axis=1)
    return variables, cards, factors, observed, codes


@settings(max_examples=40, deadline=None)
@given(models())
def test_expected_counts_and_loglik_equal_brute_force(problem):
    variables, cards, factors, observed, codes = problem
    tree = BatchedTree(variables, cards, factors)
    loglik, counts = tree.expected_counts(codes, observed)
    expected_loglik, expected_counts = _brute(variables, cards, factors, codes, observed, tree.structure.cliques)
    assert loglik == pytest.approx(expected_loglik, rel=1e-10)
    for clique, table in counts.items():
        np.testing.assert_allclose(table, expected_counts[clique], rtol=1e-10, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(models())
def test_posteriors_row_by_row_equal_brute_force(problem):
    variables, cards, factors, observed, codes = problem
    tree = BatchedTree(variables, cards, factors)
    log_evidence, marginals = tree.posteriors(codes, observed)
    for b, row in enumerate(codes):
        loglik, counts = _brute(variables, cards, factors, row[None, :], observed, [(v,) for v in variables])
        assert log_evidence[b] == pytest.approx(loglik, rel=1e-10)
        for v in variables:
            np.testing.assert_allclose(marginals[v][b], counts[(v,)], rtol=1e-10, atol=1e-12)


def test_weights_and_duplicate_rows_are_folded():
    bn = dpgm.load_network("asia")
    factors = [(bn.cpds[v].dims, bn.cpds[v].values) for v in bn.variables]
    tree = BatchedTree(bn.variables, {v: bn.cardinality(v) for v in bn.variables}, factors)
    codes = np.array([[0, 1], [0, 1], [1, -1], [0, 1]])
    weights = np.array([1.0, 2.0, 0.5, 3.0])
    loglik, counts = tree.expected_counts(codes, ["xray", "dysp"], weights)
    single, single_counts = tree.expected_counts(codes[[0, 2]], ["xray", "dysp"], np.array([6.0, 0.5]))
    assert loglik == pytest.approx(single, rel=1e-13)
    for c in counts:
        np.testing.assert_allclose(counts[c], single_counts[c], rtol=1e-13)


def test_impossible_evidence_gives_minus_infinity_not_nan():
    factors = [(("a",), np.array([1.0, 0.0])), (("b", "a"), np.array([[1.0, 0.5], [0.0, 0.5]]))]
    tree = BatchedTree(["a", "b"], {"a": 2, "b": 2}, factors)
    loglik, counts = tree.expected_counts(np.array([[1], [0]]), ["b"])
    assert loglik == -np.inf
    assert all(np.isfinite(t).all() for t in counts.values())


def test_long_chain_with_extreme_potentials_stays_finite():
    """200 variables, entries down to 1e-300: log P(evidence) against a scaled forward recursion."""
    rng = np.random.default_rng(0)
    n = 200
    variables = [f"x{i}" for i in range(n)]
    cards = dict.fromkeys(variables, 3)
    tables = [rng.random((3, 3)) * np.where(rng.random((3, 3)) < 0.3, 1e-300, 1.0) for _ in range(n - 1)]
    factors = [((variables[i], variables[i + 1]), tables[i]) for i in range(n - 1)]
    tree = BatchedTree(variables, cards, factors)
    codes = np.array([[0, 2, 1]])
    observed = [variables[0], variables[100], variables[199]]
    loglik, counts = tree.expected_counts(codes, observed)
    # independent computation: scaled forward pass along the chain
    alpha, log_total = np.eye(3)[0], 0.0
    for i, table in enumerate(tables):
        alpha = alpha @ table
        if i + 1 == 100:
            alpha = alpha * np.eye(3)[2]
        if i + 1 == 199:
            alpha = alpha * np.eye(3)[1]
        s = alpha.sum()
        log_total += np.log(s)
        alpha = alpha / s
    assert np.isfinite(loglik)
    assert loglik == pytest.approx(log_total, rel=1e-10)
    assert all(np.isfinite(t).all() for t in counts.values())


@settings(max_examples=30, deadline=None)
@given(models())
def test_map_equals_brute_force_argmax(problem):
    """Ties are judged by probability: the returned assignment must reach the maximum."""
    variables, cards, factors, observed, codes = problem
    tree = BatchedTree(variables, cards, factors)
    best = tree.map_batch(codes, observed)
    joint = joint_array(variables, factors)
    for row, assignment in zip(codes, best, strict=True):
        for v, c in zip(observed, row, strict=True):
            if c >= 0:
                assert assignment[variables.index(v)] == c
        assert joint[tuple(assignment)] == pytest.approx(restrict(joint, variables, observed, row).max(), rel=1e-12)


def test_soft_evidence_equals_brute_force():
    bn = dpgm.load_network("asia")
    likelihood = np.array([0.8, 0.3])
    ours = dpgm.marginals(bn, {"xray": likelihood, "smoke": "yes"})
    joint = joint_array(bn.variables, bn.factors())
    weighted = joint * likelihood.reshape([2 if v == "xray" else 1 for v in bn.variables])
    weighted = np.take(weighted, [0], axis=bn.variables.index("smoke"))
    for v in bn.variables:
        if v == "smoke":
            np.testing.assert_array_equal(ours[v].values, [1.0, 0.0])
            continue
        axes = tuple(i for i, u in enumerate(bn.variables) if u != v)
        expected = weighted.sum(axis=axes).ravel()
        np.testing.assert_allclose(ours[v].values, expected / expected.sum(), rtol=1e-12)
    assignment = dpgm.map_assignment(bn, {"xray": "yes", "dysp": "yes"})
    index = tuple(bn.states[v].index(assignment[v]) for v in bn.variables)
    x, d = bn.variables.index("xray"), bn.variables.index("dysp")
    assert joint[index] == pytest.approx(np.take(np.take(joint, [0], axis=x), [0], axis=d).max(), rel=1e-12)


def test_grid_with_extreme_potentials_against_a_transfer_matrix():
    """A 3 x 60 grid (180 variables), entries down to 1e-300 and exact zeros: log Z by column transfer matrices."""
    rng = np.random.default_rng(3)
    rows, columns = 3, 60
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]

    vertical, horizontal = grid_tables(rng, rows, columns, zeros=0.1)
    factors = [((name[i][j], name[i + 1][j]), t) for (i, j), t in vertical.items()]
    factors += [((name[i][j], name[i][j + 1]), t) for (i, j), t in horizontal.items()]
    variables = [name[i][j] for j in range(columns) for i in range(rows)]
    tree = BatchedTree(variables, dict.fromkeys(variables, 2), factors)
    log_z, counts = tree.expected_counts(np.zeros((1, 0), dtype=np.int64), [])
    total, _, _ = grid_transfer(vertical, horizontal, rows, columns)
    assert np.isfinite(log_z)
    assert log_z == pytest.approx(total, rel=1e-10)
    assert all(np.isfinite(t).all() for t in counts.values())

"""The compiled layout and the propagation door (dpgm.inference.propagation).

Oracles: np.unique(axis=0) for the pattern folding; brute-force enumeration of the
joint for clique posteriors (rtol 1e-12: a handful of float products and sums).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpgm.inference import propagation
from dpgm.inference.propagation import TreeLayout, compile_layout, distinct_rows
from dpgm.inference.triangulation import build_tree


@pytest.mark.parametrize("columns, card", [(3, 2), (12, 40)])  # 12 columns of 41 codes need two 62-bit keys
def test_distinct_rows_equal_numpy_unique(columns, card):
    rng = np.random.default_rng(columns)
    pool = rng.integers(-1, card, size=(300, columns))
    codes = pool[rng.integers(0, len(pool), size=5000)]  # many repeated rows
    weights = rng.random(len(codes))
    patterns, pattern_weights, inverse = distinct_rows(codes, weights, [card] * columns)
    expected, expected_inverse = np.unique(codes, axis=0, return_inverse=True)
    assert len(patterns) == len(expected)
    np.testing.assert_array_equal(patterns[inverse], codes)
    # the same partition of the rows as numpy's, and the weights summed per pattern (exact up to order)
    assert len(set(zip(inverse.tolist(), expected_inverse.reshape(-1).tolist(), strict=True))) == len(expected)
    np.testing.assert_allclose(pattern_weights, np.bincount(inverse, weights=weights), rtol=1e-12)


def test_layout_is_frozen_and_splits_flat_tables_by_clique():
    cards = {"a": 2, "b": 3, "c": 2, "d": 4}
    structure = build_tree(list(cards), cards, [("a", "b"), ("b", "c"), ("c", "d")])
    layout = compile_layout(structure, list(cards), cards)
    assert isinstance(layout, TreeLayout)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.order = layout.parent  # type: ignore[misc]
    assert layout.n_cells == structure.total_table_size
    tables = layout.tables(np.arange(layout.n_cells, dtype=float))
    assert [t.shape for t in tables] == [tuple(cards[v] for v in c) for c in structure.cliques]
    assert 1 <= layout.block(0) and layout.block(3) <= 3 and layout.block(10**6) <= 256


def _broadcast(table, scope, onto, cards):
    """``table`` over ``scope`` as an array over ``onto`` (a superset), axes in ``onto`` order."""
    kept = [v for v in onto if v in scope]
    moved = table.transpose([scope.index(v) for v in kept])
    return np.broadcast_to(moved.reshape([cards[v] if v in scope else 1 for v in onto]), [cards[v] for v in onto])


def test_expected_counts_equal_brute_force_clique_posteriors():
    rng = np.random.default_rng(7)
    cards = {"a": 2, "b": 3, "c": 2, "d": 3}
    variables = list(cards)
    scopes = [("a", "b"), ("c", "b"), ("d", "c"), ("a", "d")]
    tables = [rng.random([cards[v] for v in s]) + 0.1 for s in scopes]
    structure = build_tree(variables, cards, scopes)
    layout = compile_layout(structure, variables, cards)
    joint = np.prod([_broadcast(t, s, variables, cards) for s, t in zip(scopes, tables, strict=True)], axis=0)
    base = np.concatenate([
        np.prod([np.ones([cards[v] for v in clique])]
                + [_broadcast(tables[f], scopes[f], clique, cards)
                   for f, home in enumerate(structure.assignment) if home == i], axis=0).ravel()
        for i, clique in enumerate(structure.cliques)])
    codes = np.array([[1, -1], [-1, 2], [0, 0], [-1, -1]], dtype=np.int64)  # columns b, d
    observed = np.array([variables.index("b"), variables.index("d")], dtype=np.int64)
    weights = np.array([1.0, 2.0, 0.5, 3.0])

    log_evidence, totals = propagation.expected_counts(layout, base, 0.0, codes, observed, weights)

    expected = [np.zeros([cards[v] for v in c]) for c in structure.cliques]
    for row, w, value in zip(codes, weights, log_evidence, strict=True):
        conditioned = joint.copy()
        for j, code in zip(observed, row, strict=True):
            if code >= 0:
                keep = np.zeros(cards[variables[j]], dtype=bool)
                keep[code] = True
                conditioned = conditioned * _broadcast(keep, (variables[j],), variables, cards)
        assert value == pytest.approx(np.log(conditioned.sum()), rel=1e-12)
        for i, clique in enumerate(structure.cliques):
            marginal = conditioned.sum(axis=tuple(k for k, v in enumerate(variables) if v not in clique))
            kept = [v for v in variables if v in clique]
            expected[i] += w * marginal.transpose([kept.index(v) for v in clique]) / conditioned.sum()
    for table, oracle in zip(layout.tables(totals), expected, strict=True):
        np.testing.assert_allclose(table, oracle, rtol=1e-12)

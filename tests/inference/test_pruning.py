"""Evidence-pruned propagation (dpgm.inference.pruning) against brute force and pyAgrum.

Oracles: enumeration of the joint (random Markov networks, rtol 1e-12: a handful of
float products and sums) and pyAgrum's LazyPropagation on the shipped networks
(atol 1e-12; the pyAgrum network is converted from dpgm's doubles by ``to_pyagrum``, observed differences
~1e-15). The pruned kernel visits only the clique cells consistent with a row's
evidence; each test checks the rows really took that path.
"""

from __future__ import annotations

import numpy as np
import pyagrum as gum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.inference import JunctionTree, propagation, pruning
from dpgm.inference.batched import BatchedTree
from dpgm.networks import available_networks
from dpgm.testing import forward_sample, joint_array, observe_at_random, restrict


@st.composite
def problems(draw):
    """Random Markov networks on 5-7 variables (a cycle plus extra factors), most variables observed."""
    n = draw(st.integers(5, 7))
    variables = [f"x{i}" for i in range(n)]
    cards = {v: draw(st.integers(2, 4)) for v in variables}
    scopes = [(variables[i], variables[(i + 1) % n], variables[(i + 2) % n]) for i in range(n)]
    scopes += [tuple(draw(st.lists(st.sampled_from(variables), min_size=1, max_size=3, unique=True)))
               for _ in range(draw(st.integers(0, 3)))]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    factors = [(s, rng.gamma(1.0, 1.0, [cards[v] for v in s])) for s in scopes]
    codes = np.stack([rng.integers(0, cards[v], 16) for v in variables], axis=1)
    codes[rng.random(codes.shape) < 0.4] = -1
    compact = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))  # the others' evidence zeroes cells
    return variables, cards, factors, codes, compact


def _all_targets(tree: BatchedTree):
    targets = np.arange(len(tree.variables))
    offset = np.concatenate([[0], np.cumsum([tree.cardinalities[v] for v in tree.variables])]).astype(np.int64)
    return targets, offset


@settings(max_examples=30, deadline=None)
@given(problems())
def test_pruned_posteriors_and_expected_counts_equal_brute_force(problem):
    variables, cards, factors, codes, compact = problem
    tree = BatchedTree(variables, cards, factors)
    observed = np.arange(len(variables))
    targets, offset = _all_targets(tree)
    log_evidence, out = pruning.posteriors(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                           targets, offset, compact)
    weights = np.random.default_rng(len(codes)).random(len(codes))
    log_e, totals = pruning.expected_counts(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                            weights, compact)
    # log P(e) is near 0 when P(e) is near 1: its error is absolute (1e-12 in log = 1e-12 relative in P(e))
    np.testing.assert_allclose(log_e, log_evidence, rtol=1e-12, atol=1e-12)
    joint = joint_array(variables, factors)
    counts = [np.zeros(s) for s in tree.layout.clique_shapes]
    for b, row in enumerate(codes):
        _check_row(joint, variables, tree, row, log_evidence[b], out[b], offset, weights[b], counts)
    for table, expected in zip(tree.layout.tables(totals), counts, strict=True):
        np.testing.assert_allclose(table, expected, rtol=1e-12, atol=1e-14)


def _check_row(joint, variables, tree, row, log_evidence, out, offset, weight, counts) -> None:
    """One row's log P(e) and posteriors against the enumerated joint; adds its weighted clique posteriors to
    ``counts`` (an observed variable's posterior is its indicator)."""
    restricted = restrict(joint, variables, variables, row)
    np.testing.assert_allclose(log_evidence, np.log(restricted.sum()), rtol=1e-12, atol=1e-12)
    posterior = restricted / restricted.sum()
    for j in range(len(variables)):
        marginal = posterior.sum(axis=tuple(i for i in range(len(variables)) if i != j))
        np.testing.assert_allclose(out[offset[j]:offset[j + 1]], marginal, rtol=1e-12, atol=1e-15)
    for k, clique in enumerate(tree.structure.cliques):
        axes = tuple(i for i, v in enumerate(variables) if v not in clique)
        kept = [v for v in variables if v in clique]
        counts[k] += weight * np.transpose(posterior.sum(axis=axes), [kept.index(v) for v in clique])


def test_impossible_rows_get_minus_infinity_and_nan():
    cards = {"a": 2, "b": 2, "c": 3}
    factors = [(("a", "b"), np.array([[1.0, 0.0], [0.5, 0.5]])), (("b", "c"), np.ones((2, 3)))]
    tree = BatchedTree(list(cards), cards, factors)
    codes = np.array([[0, 1, 2], [1, 1, -1], [0, -1, 1]])  # row 0: a=0, b=1 has value 0
    observed = np.arange(3)
    targets, offset = _all_targets(tree)
    log_evidence, out = pruning.posteriors(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                           targets, offset)
    assert log_evidence[0] == -np.inf and np.isnan(out[0]).all()
    joint = joint_array(list(cards), factors)
    for b in (1, 2):
        np.testing.assert_allclose(log_evidence[b], np.log(restrict(joint, list(cards), list(cards),
                                                                       codes[b]).sum()), rtol=1e-12, atol=1e-12)
    _, totals = pruning.expected_counts(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                        np.ones(3))
    assert np.isfinite(totals).all()
    np.testing.assert_allclose(tree.layout.tables(totals)[0].sum(), 2.0, rtol=1e-12)  # the two possible rows


def test_blocks_of_rows_sharing_a_pattern_equal_brute_force():
    """Rows of one pattern run in blocks padded to whole vectors (9-40 rows: one padded column to several
    blocks), evidence of the columns not compacted zeroes cells, some rows are impossible; posteriors
    against brute force (rtol 1e-12: the same sums in another order), log P(e) -inf and NaN posteriors
    for the impossible rows, expected counts summed over the possible ones."""
    cards = {"a": 2, "b": 3, "c": 2, "d": 4, "e": 3}
    variables = list(cards)
    rng = np.random.default_rng(11)
    scopes = [("a", "b", "c"), ("b", "c", "d"), ("c", "d", "e"), ("a", "e")]
    factors = [(s, rng.gamma(1.0, 1.0, [cards[v] for v in s])) for s in scopes]
    factors[1][1][0, 1, :] = 0.0  # b=0, c=1 is impossible
    observed = np.arange(len(variables))
    targets, offset = _all_targets(BatchedTree(variables, cards, factors))
    joint = joint_array(variables, factors)
    for rows in (9, 17, 40):
        codes = np.stack([rng.integers(0, cards[v], rows) for v in variables], axis=1)
        codes[:, 3] = -1  # d missing in every row; a compacted and observed in every row, so few patterns
        codes[rng.random(rows) < 0.3, 4] = -1
        codes[: rows // 3, 1:3] = [0, 1]
        compact = np.array([True, False, False, False, rng.random() < 0.5])
        tree = BatchedTree(variables, cards, factors)
        log_evidence, out = pruning.posteriors(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                               targets, offset, compact)
        weights = rng.random(rows)
        _, totals = pruning.expected_counts(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed,
                                            weights, compact)
        counts = [np.zeros(s) for s in tree.layout.clique_shapes]
        for b, row in enumerate(codes):
            restricted = restrict(joint, variables, variables, row)
            if restricted.sum() == 0.0:
                assert log_evidence[b] == -np.inf and np.isnan(out[b]).all()
                continue
            _check_row(joint, variables, tree, row, log_evidence[b], out[b], offset, weights[b], counts)
        assert np.isinf(log_evidence).sum() >= rows // 3
        for table, expected in zip(tree.layout.tables(totals), counts, strict=True):
            np.testing.assert_allclose(table, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["water", "insurance", "hailfinder", "alarm", "child"])
def test_routed_posteriors_equal_pyagrum_on_shipped_networks(name):
    """Rows with 10 random observed variables (d-separating ones included): the routed JunctionTree.posteriors
    and the pruned kernel on every row."""
    model = dpgm.load_network(name)
    tree = JunctionTree(model)
    rng = np.random.default_rng(7)
    codes = observe_at_random(forward_sample(model, 12, rng), min(10, len(model.variables) // 3), rng)
    variables = list(model.variables)
    observed = np.arange(len(variables))
    if name == "water":  # ten observed variables mostly leave far fewer cells than the 3.4e6 of the full tree
        assert pruning.pruned_rows(tree.tree.layout, tree.tree.grids, codes, observed).sum() >= len(codes) // 2
    log_evidence, post = tree.posteriors(codes, variables)
    targets, offset = _all_targets(tree.tree)
    direct_log, direct = pruning.posteriors(tree.tree.layout, tree.tree.grids, tree.tree._base, tree.tree._base_log,
                                            codes, observed, targets, offset)
    engine = gum.LazyPropagation(model.to_pyagrum())
    for b, row in enumerate(codes):
        engine.eraseAllEvidence()
        engine.setEvidence({v: int(c) for v, c in zip(variables, row, strict=True) if c >= 0})
        engine.makeInference()
        np.testing.assert_allclose(log_evidence[b], np.log(engine.evidenceProbability()), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(direct_log[b], np.log(engine.evidenceProbability()), rtol=1e-12, atol=1e-12)
        for j, v in enumerate(variables):
            expected = engine.posterior(v).toarray()
            np.testing.assert_allclose(post[v][b], expected, rtol=0, atol=1e-12)
            np.testing.assert_allclose(direct[b, offset[j]:offset[j + 1]], expected, rtol=0, atol=1e-12)


def test_pruned_and_dense_kernels_agree_on_every_shipped_network():
    """Both kernels on the same rows (1e-12); water's dense kernel is slow, so few rows there."""
    for name in available_networks():
        model = dpgm.load_network(name)
        tree = JunctionTree(model).tree
        rng = np.random.default_rng(3)
        rows = 3 if name == "water" else 40
        codes = observe_at_random(forward_sample(model, rows, rng), min(10, max(1, len(model.variables) // 3)), rng)
        observed = np.arange(len(model.variables))
        targets, offset = _all_targets(tree)
        pruned = pruning.posteriors(tree.layout, tree.grids, tree._base, tree._base_log, codes, observed, targets,
                                    offset)
        dense = propagation.posteriors(tree.layout, tree._base, tree._base_log, codes, observed,
                                       propagation.SoftEvidence.none(rows), targets, offset)
        np.testing.assert_allclose(pruned[0], dense[0], rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(pruned[1], dense[1], rtol=0, atol=1e-12, err_msg=name)


def test_query_on_an_observed_node_and_a_d_separated_ancestor_equal_pyagrum():
    """asia: evidence on 'either' d-separates 'asia'/'tub' side from 'xray'/'dysp'; barren targets too."""
    model = dpgm.load_network("asia")
    tree = JunctionTree(model)
    variables = list(model.variables)
    observed_names = ["either", "smoke", "xray"]
    codes = np.array([[0, 1, 1], [1, 0, 0], [0, 0, -1], [1, 1, 1]])
    index = np.array([variables.index(v) for v in observed_names])
    assert pruning.pruned_cells(tree.tree.grids, codes >= 0, index).max() < tree.total_table_size
    targets = ["asia", "either", "dysp", "bronc"]  # an ancestor, an observed node, a barren leaf, a sibling
    direct = pruning.posteriors(tree.tree.layout, tree.tree.grids, tree.tree._base, tree.tree._base_log, codes,
                                index, np.array([variables.index(v) for v in targets]),
                                np.concatenate([[0], np.cumsum([2] * len(targets))]).astype(np.int64))
    log_evidence, post = tree.posteriors(codes, observed_names, targets=targets)
    engine = gum.LazyPropagation(model.to_pyagrum())
    engine.setTargets(set(targets))
    for b, row in enumerate(codes):
        engine.eraseAllEvidence()
        engine.setEvidence({v: int(c) for v, c in zip(observed_names, row, strict=True) if c >= 0})
        engine.makeInference()
        np.testing.assert_allclose(log_evidence[b], np.log(engine.evidenceProbability()), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(direct[0][b], log_evidence[b], rtol=1e-12)
        for t, v in enumerate(targets):
            expected = engine.posterior(v).toarray()
            np.testing.assert_allclose(post[v][b], expected, rtol=0, atol=1e-12)
            np.testing.assert_allclose(direct[1][b, 2 * t:2 * t + 2], expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(post["either"], np.eye(2)[codes[:, 0]])  # an observed node: its indicator


def test_predict_proba_on_water_from_zarr_equals_pyagrum(tmp_path):
    """predict_proba reads rows from a Zarr store (~10 of 32 variables observed per row): pruned rows, pyAgrum oracle."""
    model = dpgm.load_network("water")
    data = dpgm.sample_bayesian_network(model, 12, tmp_path / "water.zarr", seed=3, missing=0.69, chunk_rows=5)
    target = "CKND_12_15"
    proba = dpgm.predict_proba(model, data, target).values
    columns = [v for v in model.variables if v != target]
    codes = np.stack([data[v].values for v in columns], axis=1).astype(np.int64)
    tree = JunctionTree(model).tree
    index = np.array([model.variables.index(v) for v in columns])
    assert pruning.pruned_rows(tree.layout, tree.grids, codes, index).any()
    engine = gum.LazyPropagation(model.to_pyagrum())
    for b, row in enumerate(codes):
        engine.eraseAllEvidence()
        engine.setEvidence({v: int(c) for v, c in zip(columns, row, strict=True) if c >= 0})
        engine.makeInference()
        np.testing.assert_allclose(proba[b], engine.posterior(target).toarray(), rtol=0, atol=1e-12)

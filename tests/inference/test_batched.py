"""The EM-facing batched API of JunctionTree: row by row equal to the single-row queries and brute force.

Oracles: brute-force enumeration (dpgm.testing) at 1e-10 relative; the labelled
single-row queries for "batched == unbatched"; exact arithmetic identities
(chunking, duplicate folding, pickling, with_model) at 1e-12 or bit-identical.
"""

from __future__ import annotations

import math
import pickle
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inference_models import models, random_codes

import dpgm
from dpgm.inference import ImpossibleEvidenceError, JunctionTree
from dpgm.testing import (
    brute_log_partition,
    brute_map_value,
    brute_marginal,
    condition,
    joint_table,
)

RTOL = 1e-10
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _row_evidence(tree, variables, row):
    return {v: tree.states[v][int(c)] for v, c in zip(variables, row, strict=True) if c >= 0}


def _problem(data, rows=8):
    model = data.draw(models)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    variables = list(data.draw(st.permutations(list(model.variables))))[: data.draw(
        st.integers(1, len(model.variables)))]
    codes = random_codes(rng, model, variables, rows)
    codes = np.concatenate([codes, codes[:3]])  # duplicate patterns
    weights = rng.gamma(1.0, 1.0, len(codes))
    return model, variables, codes, weights


@SETTINGS
@given(st.data())
def test_posteriors_row_by_row_equal_single_queries_and_enumeration(data):
    model, variables, codes, _ = _problem(data)
    tree = JunctionTree(model)
    joint = joint_table(model)
    log_evidence, posteriors = tree.posteriors(codes, variables)
    for b, row in enumerate(codes):
        evidence = _row_evidence(tree, variables, row)
        expected = brute_log_partition(joint, evidence)
        assert log_evidence[b] == pytest.approx(expected, rel=RTOL)
        if not math.isfinite(expected):
            assert all(np.isnan(posteriors[v][b]).all() for v in model.variables)
            continue
        single = tree.marginals(evidence)
        conditioned = condition(joint, evidence)
        conditioned = conditioned / float(conditioned.sum())
        for v in model.variables:
            np.testing.assert_allclose(posteriors[v][b], single[v].values, rtol=1e-12, atol=1e-15)
            expected = conditioned.sum([d for d in joint.dims if d != v]).values
            np.testing.assert_allclose(posteriors[v][b], expected, rtol=RTOL, atol=1e-15)


@SETTINGS
@given(st.data())
def test_expected_counts_are_the_weighted_sum_of_clique_posteriors(data):
    model, variables, codes, weights = _problem(data)
    tree = JunctionTree(model)
    joint = joint_table(model)
    loglik, counts = tree.expected_counts(codes, variables, weights)
    expected_loglik = 0.0
    expected = {c: 0.0 for c in tree.cliques}
    family = {s: 0.0 for s in tree.scopes}
    for row, w in zip(codes, weights, strict=True):
        evidence = _row_evidence(tree, variables, row)
        log_p = brute_log_partition(joint, evidence)
        expected_loglik += w * log_p
        if not math.isfinite(log_p):
            continue
        conditioned = condition(joint, evidence)
        conditioned = conditioned / float(conditioned.sum())
        for c in expected:
            expected[c] = expected[c] + w * conditioned.sum([d for d in joint.dims if d not in c]).transpose(*c).values
        for s in family:
            family[s] = family[s] + w * conditioned.sum([d for d in joint.dims if d not in s]).transpose(*s).values
    if not math.isfinite(expected_loglik):
        assert loglik == -math.inf
        with pytest.raises(ImpossibleEvidenceError, match=r"row \d+ \(codes .*\) has probability zero") as error:
            tree.expected_counts(codes, variables, weights, errors="raise")
        bad = codes[error.value.row]
        assert brute_log_partition(joint, _row_evidence(tree, variables, bad)) == -math.inf
    else:
        assert loglik == pytest.approx(expected_loglik, rel=RTOL)
    for c in tree.cliques:
        np.testing.assert_allclose(counts[c], expected[c], rtol=RTOL, atol=1e-13)
        assert np.isfinite(counts[c]).all()
    loglik2, families = tree.expected_family_counts(codes, variables, weights)
    assert set(families) == set(tree.scopes)
    for s in tree.scopes:
        np.testing.assert_allclose(families[s], family[s], rtol=RTOL, atol=1e-13)


@SETTINGS
@given(st.data())
def test_map_batch_rows_reach_the_brute_force_maximum(data):
    model, variables, codes, _ = _problem(data, rows=10)
    tree = JunctionTree(model)
    joint = joint_table(model)
    best, log_value = tree.map_batch(codes, variables, return_log_value=True)
    assert best.shape == (len(codes), len(model.variables))
    for b, row in enumerate(codes):
        evidence = _row_evidence(tree, variables, row)
        top = brute_map_value(joint, evidence)
        if top == 0:
            assert (best[b] == -1).all() and log_value[b] == -math.inf
            continue
        assignment = {v: tree.states[v][int(c)] for v, c in zip(model.variables, best[b], strict=True)}
        assert all(assignment[v] == s for v, s in evidence.items())
        assert float(condition(joint, evidence).sel(assignment)) == pytest.approx(top, rel=1e-12)
        assert log_value[b] == pytest.approx(math.log(top), rel=1e-12, abs=1e-12)


def _alarm_rows(rows: int, seed: int):
    model = dpgm.load_network("alarm")
    rng = np.random.default_rng(seed)
    variables = list(model.variables)
    codes = np.stack([rng.integers(0, model.cardinality(v), rows) for v in variables], axis=1)
    keep = np.argsort(rng.random(codes.shape), axis=1) < 10  # 10 observed variables per row
    codes = np.where(keep, codes, -1)
    log_evidence, _ = JunctionTree(model).posteriors(codes, variables, targets=())
    return model, variables, codes[np.isfinite(log_evidence)]  # alarm has zeros: keep possible rows


def test_chunks_duplicates_and_weights_add_up():
    """Clique sums are a monoid: 1 chunk == 7 ragged chunks; duplicated rows == one row with summed weight."""
    model, variables, codes = _alarm_rows(700, seed=1)
    tree = JunctionTree(model)
    weights = np.random.default_rng(2).gamma(1.0, 1.0, len(codes))
    loglik, counts = tree.expected_counts(codes, variables, weights)
    bounds = [0, 1, 90, 91, 300, 450, len(codes) - 1, len(codes)]
    parts = [tree.expected_counts(codes[a:b], variables, weights[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert sum(p[0] for p in parts) == pytest.approx(loglik, rel=1e-12)
    for c in tree.cliques:
        np.testing.assert_allclose(sum(p[1][c] for p in parts), counts[c], rtol=1e-12)
    doubled = tree.expected_counts(np.concatenate([codes, codes]), variables, np.concatenate([weights, weights]))
    assert doubled[0] == pytest.approx(2 * loglik, rel=1e-12)
    for c in tree.cliques:
        np.testing.assert_allclose(doubled[1][c], 2 * counts[c], rtol=1e-12)
    # total mass of every clique table is the total weight
    for c in tree.cliques:
        assert counts[c].sum() == pytest.approx(weights.sum(), rel=1e-12)


def test_with_model_and_pickle_give_identical_results():
    model, variables, codes = _alarm_rows(200, seed=3)
    tree = JunctionTree(model)
    other = model.randomized(np.random.default_rng(4))
    reused = tree.with_model(other)
    fresh = JunctionTree(other)
    assert reused.cliques == fresh.cliques
    a = reused.expected_counts(codes, variables)
    b = fresh.expected_counts(codes, variables)
    assert a[0] == b[0]
    for c in tree.cliques:
        np.testing.assert_array_equal(a[1][c], b[1][c])
    again = pickle.loads(pickle.dumps(reused))
    c_ = again.posteriors(codes, variables)
    d = reused.posteriors(codes, variables)
    np.testing.assert_array_equal(c_[0], d[0])
    with pytest.raises(ValueError, match="with_model needs a model with the same variables and states"):
        tree.with_model(dpgm.load_network("asia"))


def _worker_loglik(tree, codes, variables):
    return tree.expected_counts(codes, variables)[0]


def test_tree_ships_to_a_fresh_worker_process():
    """What EM does: pickle the compiled tree to another process (spawned, nothing inherited)."""
    model, variables, codes = _alarm_rows(100, seed=5)
    tree = JunctionTree(model)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        remote = pool.submit(_worker_loglik, tree, codes, variables).result(timeout=120)
    assert remote == tree.expected_counts(codes, variables)[0]


def test_bad_codes_are_refused_with_names():
    model, variables, codes = _alarm_rows(5, seed=6)
    tree = JunctionTree(model)
    bad = codes.copy()
    bad[3, 2] = 9
    with pytest.raises(ValueError, match=rf"code 9 of variable {variables[2]!r} in row 3 is out of range"):
        tree.expected_counts(bad, variables)
    with pytest.raises(ValueError, match=r"not model variables; variables: \["):
        tree.posteriors(codes[:, :2], ["HR", "nope"])
    with pytest.raises(ValueError, match=r"codes must be \(rows, 2\)"):
        tree.posteriors(codes, ["HR", "BP"])
    with pytest.raises(TypeError, match="codes must be integers"):
        tree.map_batch(codes.astype(float), variables)
    with pytest.raises(ValueError, match="errors='loud'"):
        tree.expected_counts(codes, variables, errors="loud")


def test_impossible_rows_are_flagged_not_nan():
    model = dpgm.load_network("asia")
    tree = JunctionTree(model)
    variables = ["tub", "either"]
    codes = np.array([[0, 0], [0, 1], [-1, 1]])  # row 1: tub=yes, either=no is impossible
    log_evidence, posteriors = tree.posteriors(codes, variables)
    assert np.isfinite(log_evidence[[0, 2]]).all() and log_evidence[1] == -math.inf
    assert np.isfinite(posteriors["lung"][[0, 2]]).all() and np.isnan(posteriors["lung"][1]).all()
    with pytest.raises(ImpossibleEvidenceError, match=r"row 1 \(codes \[0, 1\]") as error:
        tree.posteriors(codes, variables, errors="raise")
    assert error.value.row == 1
    loglik, counts = tree.expected_counts(codes, variables, np.array([1.0, 0.0, 1.0]))  # zero weight: ignored
    assert np.isfinite(loglik)
    assert all(np.isfinite(t).all() for t in counts.values())
    best = tree.map_batch(codes, variables)
    assert (best[1] == -1).all() and (best[[0, 2]] >= 0).all()


def test_per_row_soft_evidence_equals_enumeration():
    model = dpgm.load_network("asia")
    tree = JunctionTree(model)
    joint = joint_table(model)
    rng = np.random.default_rng(7)
    codes = random_codes(rng, model, ["smoke", "dysp"], 6)
    likelihoods = rng.random((6, 2))
    log_evidence, posteriors = tree.posteriors(codes, ["smoke", "dysp"], soft={"xray": likelihoods})
    for b, row in enumerate(codes):
        evidence = {**_row_evidence(tree, ["smoke", "dysp"], row), "xray": likelihoods[b]}
        assert log_evidence[b] == pytest.approx(brute_log_partition(joint, evidence), rel=RTOL)
        np.testing.assert_allclose(posteriors["lung"][b], brute_marginal(joint, ["lung"], evidence).values,
                                   rtol=RTOL)

"""The enumeration E step of undirected models against brute-force enumeration of the joint."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpgm.inference.scope_enumeration import ScopeEnumeration

VARIABLES = ["a", "b", "c", "d", "e", "f"]
CARDS = {"a": 2, "b": 3, "c": 2, "d": 4, "e": 2, "f": 3}
SCOPES = [("a", "b"), ("b", "c", "d"), ("d", "e"), ("a", "e"), ("f",), ("c", "f")]


def _factors(seed: int, zeros: bool):
    rng = np.random.default_rng(seed)
    factors = [(s, rng.gamma(1.0, 1.0, [CARDS[v] for v in s])) for s in SCOPES]
    if zeros:  # a structural-zero indicator over (b, d) and a zero cell inside a potential
        indicator = np.ones((CARDS["b"], CARDS["d"]))
        indicator[0, 1] = indicator[2, 3] = 0.0
        factors.append((("b", "d"), indicator))
        factors[0][1][1, 2] = 0.0
    return factors


def _brute_force(factors, codes, observed, weights):
    """``sum w log P~(e)`` and ``sum w P(x_S | e)`` from the full joint table."""
    shape = [CARDS[v] for v in VARIABLES]
    joint = np.ones(shape)
    for scope, table in factors:
        order = sorted(range(len(scope)), key=lambda i: VARIABLES.index(scope[i]))
        expanded = np.transpose(table, order).reshape(
            [CARDS[v] if v in scope else 1 for v in VARIABLES])
        joint = joint * expanded
    loglik = 0.0
    counts = {s: np.zeros([CARDS[v] for v in s]) for s in SCOPES}
    for row, w in zip(codes, weights, strict=True):
        index = [slice(None)] * len(VARIABLES)
        for v, code in zip(observed, row, strict=True):
            if code >= 0:
                index[VARIABLES.index(v)] = slice(code, code + 1)
        mask = np.zeros(shape, dtype=bool)
        mask[tuple(index)] = True
        restricted = np.where(mask, joint, 0.0)
        evidence = restricted.sum()
        if w > 0:
            loglik += w * math.log(evidence) if evidence > 0 else -math.inf
        if evidence == 0:
            continue
        posterior = restricted / evidence
        for s in SCOPES:
            other = tuple(i for i, v in enumerate(VARIABLES) if v not in s)
            reduced = posterior.sum(axis=other)
            kept = [v for v in VARIABLES if v in s]
            counts[s] += w * np.transpose(reduced, [kept.index(v) for v in s])
    return loglik, counts


def _rows(seed: int, n: int, observed, missing: float):
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, CARDS[v], n) for v in observed], axis=1)
    codes[rng.random(codes.shape) < missing] = -1
    codes[: n // 4] = codes[n // 4: n // 2]  # repeated rows: patterns are folded
    return codes, rng.uniform(0.0, 3.0, n)


@pytest.mark.parametrize(("limit", "overhead"), [(None, 0), (0, 0), (10**9, 0), (40, 0), (None, 300)])
@pytest.mark.parametrize("zeros", [False, True])
def test_expected_scope_counts_equal_brute_force(limit, overhead, zeros):
    factors = _factors(1, zeros)
    observed = ["a", "b", "d", "e", "f"]  # c latent
    codes, weights = _rows(2, 300, observed, 0.3)
    if zeros:  # rows the zeros make impossible would send the loglik to -inf: keep them out
        keep = ~(((codes[:, 1] == 0) & (codes[:, 2] == 1)) | ((codes[:, 1] == 2) & (codes[:, 2] == 3))
                 | ((codes[:, 0] == 1) & (codes[:, 1] == 2)))
        codes, weights = codes[keep], weights[keep]
    plan = ScopeEnumeration(VARIABLES, CARDS, factors, SCOPES, enumeration_limit=limit, mask_overhead=overhead)
    loglik, counts = plan.expected_counts(codes, observed, weights)
    expected_loglik, expected_counts = _brute_force(factors, codes, observed, weights)
    assert loglik == pytest.approx(expected_loglik, rel=1e-10)
    for scope in SCOPES:
        np.testing.assert_allclose(counts[scope], expected_counts[scope], rtol=1e-10, atol=1e-12 * weights.sum())


def test_both_paths_used_in_one_call_and_no_evidence_gives_log_z():
    factors = _factors(3, False)
    observed = ["a", "b", "c", "d", "e", "f"]
    codes, weights = _rows(4, 200, observed, 0.5)
    plan = ScopeEnumeration(VARIABLES, CARDS, factors, SCOPES, enumeration_limit=130, mask_overhead=0)
    patterns = {tuple(r) for r in (codes < 0)}
    routes = {p: plan._plan(np.array(p)) is None for p in patterns}
    assert any(routes.values()) and not all(routes.values())  # some patterns enumerated, some on the tree
    loglik, counts = plan.expected_counts(codes, observed, weights)
    expected_loglik, expected_counts = _brute_force(factors, codes, observed, weights)
    assert loglik == pytest.approx(expected_loglik, rel=1e-10)
    for scope in SCOPES:
        np.testing.assert_allclose(counts[scope], expected_counts[scope], rtol=1e-10, atol=1e-12 * weights.sum())
    # no evidence at all: log Z, enumerated (large limit) and on the tree (limit 0)
    log_z = math.log(math.fsum(math.prod(float(t[tuple(x[VARIABLES.index(v)] for v in s)]) for s, t in factors)
                               for x in itertools.product(*(range(CARDS[v]) for v in VARIABLES))))
    for limit in (10**9, 0):
        plan = ScopeEnumeration(VARIABLES, CARDS, factors, SCOPES, enumeration_limit=limit, mask_overhead=0)
        assert plan.expected_counts(np.zeros((1, 0), dtype=np.int64), [])[0] == pytest.approx(log_z, rel=1e-12)


@pytest.mark.parametrize("limit", [10**9, 0])
def test_impossible_row_gives_minus_infinite_loglik_and_no_counts(limit):
    factors = _factors(5, True)
    observed = ["a", "b", "d"]
    codes = np.array([[0, 0, 1], [0, 1, 0], [1, -1, 2]])  # b=0, d=1 is a structural zero
    plan = ScopeEnumeration(VARIABLES, CARDS, factors, SCOPES, enumeration_limit=limit, mask_overhead=0)
    loglik, counts = plan.expected_counts(codes, observed, np.ones(3))
    assert loglik == -math.inf
    _, expected_counts = _brute_force(factors, codes, observed, np.ones(3))
    for scope in SCOPES:
        np.testing.assert_allclose(counts[scope], expected_counts[scope], rtol=1e-10, atol=1e-12)
        assert counts[scope].sum() == pytest.approx(2.0, rel=1e-12)

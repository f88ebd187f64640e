"""Disconnected Markov networks (several components, isolated variables): every inference entry point
against brute-force enumeration of the joint, and IPF against the closed form.

The oracle is written here with NumPy (one einsum into the full joint, then sums, slices and
argmax), sharing no code with dpgm's junction tree.
"""

from __future__ import annotations

import itertools
import string

import numpy as np
import pytest
import xarray as xr

import dpgm

RTOL = 1e-12  # exact inference against exact enumeration: only float reassociation differs
ATOL = 1e-15  # for entries that are exactly 0 (an observed variable's other states)

CARDS = {"a": 2, "b": 3, "c": 4, "d": 2, "e": 3, "f": 2}

STRUCTURES = {
    "edge_and_isolated": [("a", "b"), ("c",)],
    "three_isolated": [("a",), ("b",), ("c",)],
    "two_edges": [("a", "b"), ("c", "d")],
    "chain_isolated_and_edge": [("a", "b"), ("b", "c"), ("d",), ("e", "f")],
}


def _labels(variable: str) -> list[str]:
    return [f"{variable}{k}" for k in range(CARDS[variable])]


def _model(structure: str, seed: int = 0) -> dpgm.MarkovNetwork:
    """Random positive potentials (no ties among joint assignments)."""
    rng = np.random.default_rng(seed)
    potentials = {}
    for scope in STRUCTURES[structure]:
        values = rng.uniform(0.1, 3.0, [CARDS[v] for v in scope])
        potentials[scope] = xr.DataArray(values, dims=scope, coords={v: _labels(v) for v in scope})
    return dpgm.MarkovNetwork(potentials)


def _variables(structure: str) -> list[str]:
    return list(dict.fromkeys(v for scope in STRUCTURES[structure] for v in scope))


# -- brute force ----------------------------------------------------------------------------------


def _joint(model: dpgm.MarkovNetwork, variables: list[str]) -> np.ndarray:
    """Unnormalized joint, axes in ``variables`` order."""
    symbol = dict(zip(variables, string.ascii_letters, strict=False))
    operands, subscripts = [], []
    for scope, table in model.potentials.items():
        operands.append(np.asarray(table.transpose(*scope).values, dtype=float))
        subscripts.append("".join(symbol[v] for v in scope))
    return np.einsum(",".join(subscripts) + "->" + "".join(symbol[v] for v in variables), *operands)


def _conditioned(joint: np.ndarray, variables: list[str], evidence: dict) -> np.ndarray:
    out = joint.copy()
    for variable, value in evidence.items():
        if isinstance(value, str):
            vector = np.array([1.0 if s == value else 0.0 for s in _labels(variable)])
        else:
            vector = np.asarray(value, dtype=float)
        shape = [CARDS[variable] if v == variable else 1 for v in variables]
        out = out * vector.reshape(shape)
    return out


def _brute_marginal(joint, variables, scope, evidence) -> np.ndarray:
    table = _conditioned(joint, variables, evidence)
    table = table.sum(axis=tuple(i for i, v in enumerate(variables) if v not in scope))
    kept = [v for v in variables if v in scope]
    table = np.transpose(table, [kept.index(v) for v in scope])
    return table / table.sum()


def _brute_log_partition(joint, variables, evidence) -> float:
    return float(np.log(_conditioned(joint, variables, evidence).sum()))


def _brute_map(joint, variables, evidence) -> dict[str, str]:
    table = _conditioned(joint, variables, evidence)
    flat = np.argmax(table)
    best = np.unravel_index(flat, table.shape)
    assert np.sum(table == table.ravel()[flat]) == 1  # no ties: the argmax is unique
    return {v: _labels(v)[int(i)] for v, i in zip(variables, best, strict=True)}


# -- evidence -------------------------------------------------------------------------------------


def _likelihood(variable: str, seed: int) -> list[float]:
    return list(np.random.default_rng(seed).uniform(0.05, 2.0, CARDS[variable]))


def _evidence(kind: str, variables: list[str]) -> dict:
    first, second, last = variables[0], variables[1], variables[-1]
    return {
        "none": {},
        "hard_in_first_component": {first: _labels(first)[1]},
        "hard_in_last_component": {last: _labels(last)[-1]},
        "hard_and_soft_in_two_components": {first: _labels(first)[0], last: _likelihood(last, 11)},
        "soft_only": {second: _likelihood(second, 12), last: _likelihood(last, 13)},
    }[kind]


EVIDENCE = ["none", "hard_in_first_component", "hard_in_last_component", "hard_and_soft_in_two_components",
            "soft_only"]


def _scopes(variables: list[str]) -> list[tuple[str, ...]]:
    first, second, last = variables[0], variables[1], variables[-1]
    return list(dict.fromkeys([(first, last), (last, first), (second, last), (last, second, first),
                               tuple(variables), tuple(reversed(variables)), (first,), (last,)]))


structures = pytest.mark.parametrize("structure", list(STRUCTURES))
evidences = pytest.mark.parametrize("evidence_kind", EVIDENCE)


# -- module-level entry points --------------------------------------------------------------------


@structures
@evidences
def test_marginals_equal_enumeration(structure, evidence_kind):
    model, variables = _model(structure), _variables(structure)
    joint, evidence = _joint(model, variables), _evidence(evidence_kind, variables)
    result = dpgm.marginals(model, evidence)
    assert set(result) == set(variables)
    for v in variables:
        np.testing.assert_allclose(result[v].sel({v: _labels(v)}).values,
                                   _brute_marginal(joint, variables, (v,), evidence), rtol=RTOL, atol=ATOL)


@structures
@evidences
def test_marginal_of_scopes_across_components_equals_enumeration(structure, evidence_kind):
    model, variables = _model(structure), _variables(structure)
    joint, evidence = _joint(model, variables), _evidence(evidence_kind, variables)
    for scope in _scopes(variables):
        table = dpgm.marginal(model, scope, evidence)
        assert tuple(table.dims) == scope
        ordered = table.sel({v: _labels(v) for v in scope}).values
        np.testing.assert_allclose(ordered, _brute_marginal(joint, variables, scope, evidence), rtol=RTOL,
                                   atol=ATOL, err_msg=f"scope {scope}")


@structures
@evidences
def test_log_partition_equals_enumeration(structure, evidence_kind):
    model, variables = _model(structure), _variables(structure)
    joint, evidence = _joint(model, variables), _evidence(evidence_kind, variables)
    assert dpgm.log_partition(model, evidence) == pytest.approx(_brute_log_partition(joint, variables, evidence),
                                                                rel=RTOL)


@structures
@evidences
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_assignment_equals_argmax_of_the_joint(structure, evidence_kind, seed):
    model, variables = _model(structure, seed), _variables(structure)
    joint, evidence = _joint(model, variables), _evidence(evidence_kind, variables)
    assert dpgm.map_assignment(model, evidence) == _brute_map(joint, variables, evidence)


# -- JunctionTree methods -------------------------------------------------------------------------


@structures
@evidences
def test_junction_tree_labelled_queries_equal_enumeration(structure, evidence_kind):
    model, variables = _model(structure, seed=3), _variables(structure)
    joint, evidence = _joint(model, variables), _evidence(evidence_kind, variables)
    tree = dpgm.JunctionTree(model)
    marginals = tree.marginals(evidence)
    for v in variables:
        np.testing.assert_allclose(marginals[v].sel({v: _labels(v)}).values,
                                   _brute_marginal(joint, variables, (v,), evidence), rtol=RTOL, atol=ATOL)
    for scope in _scopes(variables):
        np.testing.assert_allclose(tree.marginal(scope, evidence).sel({v: _labels(v) for v in scope}).values,
                                   _brute_marginal(joint, variables, scope, evidence), rtol=RTOL, atol=ATOL,
                                   err_msg=f"scope {scope}")
    assert tree.log_partition(evidence) == pytest.approx(_brute_log_partition(joint, variables, evidence), rel=RTOL)
    assert tree.map_assignment(evidence) == _brute_map(joint, variables, evidence)


def _rows(variables: list[str], observed: list[str], n: int, seed: int) -> np.ndarray:
    """Every combination of observed / missing per column, random states; -1 = missing."""
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, CARDS[v], n) for v in observed], axis=1)
    missing = np.array(list(itertools.product([False, True], repeat=len(observed))) * (n // 2 ** len(observed) + 1))
    return np.where(missing[:n], -1, codes)


@structures
@pytest.mark.parametrize("with_soft", [False, True], ids=["hard", "hard_and_soft"])
def test_junction_tree_posteriors_batch_equal_enumeration(structure, with_soft):
    model, variables = _model(structure, seed=4), _variables(structure)
    joint = _joint(model, variables)
    observed = [variables[0], variables[-1]]  # in different components
    targets = [variables[1], variables[-1], variables[0]]
    codes = _rows(variables, observed, 12, seed=5)
    soft_variable = variables[1]
    soft = None
    if with_soft:
        soft = {soft_variable: np.random.default_rng(6).uniform(0.05, 2.0, (len(codes), CARDS[soft_variable]))}
    log_evidence, posteriors = dpgm.JunctionTree(model).posteriors(codes, observed, targets=targets, soft=soft)
    assert log_evidence.shape == (len(codes),)
    assert set(posteriors) == set(targets)
    for b, row in enumerate(codes):
        evidence = {v: _labels(v)[int(c)] for v, c in zip(observed, row, strict=True) if c >= 0}
        if soft is not None:
            evidence[soft_variable] = soft[soft_variable][b]
        # for a Markov network: the log of the unnormalized sum consistent with the row (as log_partition)
        assert log_evidence[b] == pytest.approx(_brute_log_partition(joint, variables, evidence), rel=RTOL)
        for v in targets:
            assert posteriors[v].shape == (len(codes), CARDS[v])
            np.testing.assert_allclose(posteriors[v][b], _brute_marginal(joint, variables, (v,), evidence),
                                       rtol=RTOL, atol=ATOL, err_msg=f"row {b}, target {v}")


@structures
def test_junction_tree_map_batch_equals_argmax_of_the_joint(structure):
    model, variables = _model(structure, seed=7), _variables(structure)
    joint = _joint(model, variables)
    tree = dpgm.JunctionTree(model)
    observed = [variables[0], variables[-1]]
    codes = _rows(variables, observed, 8, seed=8)
    best = tree.map_batch(codes, observed)
    for b, row in enumerate(codes):
        evidence = {v: _labels(v)[int(c)] for v, c in zip(observed, row, strict=True) if c >= 0}
        expected = _brute_map(joint, variables, evidence)
        assert {v: tree.states[v][int(best[b, j])] for j, v in enumerate(tree.variables)} == expected


# -- IPF ------------------------------------------------------------------------------------------

IPF_STRUCTURES = {
    "edge_and_isolated": [("a", "b"), ("c",)],
    "three_isolated": [("a",), ("b",), ("c",)],
    "two_edges": [("a", "b"), ("c", "d")],
    "two_edges_and_isolated": [("a", "b"), ("c", "d"), ("e",)],
}


@pytest.mark.parametrize("structure", list(IPF_STRUCTURES))
def test_ipf_on_disconnected_model_equals_product_of_margins(structure):
    scopes = IPF_STRUCTURES[structure]
    variables = list(dict.fromkeys(v for s in scopes for v in s))
    rng = np.random.default_rng(9)
    counts = rng.poisson(rng.gamma(2.0, 15.0, [CARDS[v] for v in variables])).astype(float)
    table = xr.DataArray(counts, dims=variables, coords={v: _labels(v) for v in variables})
    n = float(table.sum())
    model = dpgm.MarkovNetwork.from_cliques(scopes, {v: _labels(v) for v in variables})
    result = dpgm.fit(model, table, method="ipf", tol=1e-12, max_iter=1000)
    assert result.converged
    fitted = dpgm.marginal(result.model, variables).transpose(*variables).values * n
    # closed form of a model whose scopes are disjoint: N * prod_s p(x_s)
    expected = xr.DataArray(n)
    for scope in scopes:
        expected = expected * (table.sum([v for v in variables if v not in scope]) / n)
    np.testing.assert_allclose(fitted, expected.transpose(*variables).values, rtol=1e-9, atol=0)

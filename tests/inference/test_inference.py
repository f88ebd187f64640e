"""Exact queries (marginals, marginal of any scope, log Z, log P(evidence), MAP) against brute force.

Oracle: :mod:`dpgm.testing`, a single ``np.einsum`` of all factors into the full
joint. Tolerance: 1e-10 relative for probabilities and log Z (the engine and the
enumeration add the same numbers in different orders; observed errors ~1e-14).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inference_models import evidence_for, grid_tables, grid_transfer, models

import dpgm
from dpgm.algorithms.tree_ipf import grid_scopes
from dpgm.inference import ImpossibleEvidenceError, JunctionTree, interaction_graph
from dpgm.inference.triangulation import TreeTooLarge
from dpgm.testing import (
    brute_log_partition,
    brute_map_value,
    brute_marginal,
    condition,
    joint_table,
)

RTOL = 1e-10
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_marginals_log_partition_and_any_scope_equal_enumeration(data):
    model = data.draw(models)
    evidence = data.draw(evidence_for(model))
    joint = joint_table(model)
    tree = JunctionTree(model)
    expected_log = brute_log_partition(joint, evidence)
    assert tree.log_partition(evidence) == pytest.approx(expected_log, rel=RTOL)
    assert dpgm.log_partition(model) == pytest.approx(brute_log_partition(joint), rel=RTOL, abs=1e-12)
    if not math.isfinite(expected_log):
        with pytest.raises(ImpossibleEvidenceError, match="probability zero"):
            tree.marginals(evidence)
        return
    ours = dpgm.marginals(model, evidence)
    assert set(ours) == set(model.variables)
    for v in model.variables:
        assert ours[v].dims == (v,)
        np.testing.assert_allclose(ours[v].values, brute_marginal(joint, [v], evidence).values, rtol=RTOL, atol=1e-15)
    # a random scope: often one no clique holds (then the tree is re-triangulated)
    scope = data.draw(st.lists(st.sampled_from(list(model.variables)), min_size=1, max_size=3, unique=True))
    table = dpgm.marginal(model, scope, evidence)
    assert table.dims == tuple(scope)
    np.testing.assert_allclose(table.values, brute_marginal(joint, scope, evidence).values, rtol=RTOL, atol=1e-15)


@SETTINGS
@given(st.data())
def test_clique_and_separator_marginals_are_consistent_and_exact(data):
    """After calibration each clique holds P(x_C | e) and both sides of a separator agree."""
    model = data.draw(models)
    evidence = data.draw(evidence_for(model))
    joint = joint_table(model)
    if not math.isfinite(brute_log_partition(joint, evidence)):
        return
    tree = JunctionTree(model)
    cliques = tree.clique_marginals(evidence)
    for clique, table in cliques.items():
        np.testing.assert_allclose(table.values, brute_marginal(joint, clique, evidence).values, rtol=RTOL,
                                   atol=1e-15)
    for (child, parent), table in tree.separator_marginals(evidence).items():
        scope = tree.separators[(child, parent)]
        assert table.dims == scope
        from_parent = cliques[parent].sum([v for v in parent if v not in scope]).transpose(*scope)
        np.testing.assert_allclose(table.values, from_parent.values, rtol=RTOL, atol=1e-15)
        np.testing.assert_allclose(table.values, brute_marginal(joint, scope, evidence).values, rtol=RTOL,
                                   atol=1e-15)


@SETTINGS
@given(st.data())
def test_map_assignment_reaches_the_brute_force_maximum(data):
    """Ties are judged by value: the returned assignment's probability equals the maximum."""
    model = data.draw(models)
    evidence = data.draw(evidence_for(model))
    joint = joint_table(model)
    best = brute_map_value(joint, evidence)
    if best == 0:
        with pytest.raises(ImpossibleEvidenceError):
            dpgm.map_assignment(model, evidence)
        return
    assignment = dpgm.map_assignment(model, evidence)
    for v, value in evidence.items():
        if isinstance(value, str):
            assert assignment[v] == value
    value = float(condition(joint, evidence).sel(assignment))
    assert value == pytest.approx(best, rel=1e-12)


def test_soft_evidence_forms_agree_and_equal_enumeration():
    model = dpgm.load_network("asia")
    joint = joint_table(model)
    likelihood = [0.8, 0.3]
    labelled = xr.DataArray([0.3, 0.8], dims=["xray"], coords={"xray": ["no", "yes"]})  # reversed label order
    assert model.states["xray"] == ("yes", "no")
    for form in (likelihood, np.array(likelihood), labelled):
        evidence = {"xray": form, "smoke": "yes"}
        ours = dpgm.marginals(model, evidence)
        for v in model.variables:
            np.testing.assert_allclose(ours[v].values, brute_marginal(joint, [v], evidence).values, rtol=1e-12)
        assert dpgm.log_partition(model, evidence) == pytest.approx(brute_log_partition(joint, evidence), rel=1e-12)


def test_bad_evidence_and_scopes_are_refused_with_names():
    model = dpgm.load_network("asia")
    with pytest.raises(ValueError, match=r"'maybe' is not a state of 'xray'; states: \['yes', 'no'\]"):
        dpgm.marginals(model, {"xray": "maybe"})
    with pytest.raises(ValueError, match="'nope', which is not a model variable; variables: .*'asia'"):
        dpgm.log_partition(model, {"nope": "yes"})
    with pytest.raises(ValueError, match="soft evidence on 'xray' must be 2 nonnegative"):
        dpgm.marginals(model, {"xray": [0.5, -1.0]})
    with pytest.raises(TypeError, match="state label .* or a likelihood vector, got 1"):
        dpgm.marginals(model, {"xray": 1})
    with pytest.raises(ValueError, match=r"not in the model: \['zz'\]"):
        dpgm.marginal(model, ("asia", "zz"))
    with pytest.raises(TypeError, match="expected a BayesianNetwork, MarkovNetwork or LogLinearModel, got dict"):
        dpgm.marginals({"a": 1})


def test_impossible_evidence_is_minus_infinity_or_an_error_never_nan():
    model = dpgm.load_network("asia")
    impossible = {"tub": "yes", "either": "no"}  # either = tub or lung, deterministically
    assert dpgm.log_partition(model, impossible) == -math.inf
    for query in (dpgm.marginals, dpgm.map_assignment, lambda m, e: dpgm.marginal(m, ["lung"], e)):
        with pytest.raises(ImpossibleEvidenceError, match=r"evidence \{'tub': 'yes', 'either': 'no'\} has "
                                                          "probability zero"):
            query(model, impossible)


def _chain(n: int, card: int, seed: int):
    """A chain MN with entries down to 1e-300 and exact zeros (each row keeps a nonzero entry)."""
    rng = np.random.default_rng(seed)
    variables = [f"x{i}" for i in range(n)]
    tables = []
    for _ in range(n - 1):
        t = rng.random((card, card)) * np.where(rng.random((card, card)) < 0.4, 1e-300, 1.0)
        t[rng.random((card, card)) < 0.2] = 0.0
        t[np.arange(card), rng.integers(0, card, card)] = rng.random(card) + 1e-300
        tables.append(t)
    labels = {v: [str(k) for k in range(card)] for v in variables}
    potentials = {(variables[i], variables[i + 1]): xr.DataArray(
        t, dims=(variables[i], variables[i + 1]), coords={variables[i]: labels[variables[i]],
                                                          variables[i + 1]: labels[variables[i + 1]]})
        for i, t in enumerate(tables)}
    return dpgm.MarkovNetwork(potentials), variables, tables


def test_200_variable_chain_with_extreme_potentials_against_scaled_forward_backward():
    """log Z and marginals against a straightforward scaled forward-backward recursion (written here)."""
    model, variables, tables = _chain(200, 3, seed=5)
    evidence = {"x60": "2", "x150": "0"}
    unit = {i: np.eye(3)[int(evidence[v])] for i, v in enumerate(variables) if v in evidence}
    local = [unit.get(i, np.ones(3)) for i in range(200)]
    alpha, log_z, alphas = local[0].copy(), 0.0, []
    for i in range(200):
        if i:
            alpha = (alpha @ tables[i - 1]) * local[i]
        s = alpha.sum()
        log_z += np.log(s)
        alpha = alpha / s
        alphas.append(alpha)
    beta, betas = np.ones(3), [None] * 200
    betas[199] = beta
    for i in range(198, -1, -1):
        beta = tables[i] @ (local[i + 1] * beta)
        beta = beta / beta.sum()
        betas[i] = beta
    ours = dpgm.marginals(model, evidence)
    assert dpgm.log_partition(model, evidence) == pytest.approx(log_z, rel=1e-10)
    for i in (0, 1, 59, 61, 100, 149, 151, 199):
        expected = alphas[i] * betas[i]
        assert np.isfinite(ours[variables[i]].values).all()
        np.testing.assert_allclose(ours[variables[i]].values, expected / expected.sum(), rtol=1e-9, atol=1e-300)


def test_200_variable_grid_with_extreme_potentials_against_transfer_matrices():
    """A 4 x 50 grid, entries down to 1e-300 and exact zeros: log Z by column transfer matrices."""
    rng = np.random.default_rng(11)
    rows, columns = 4, 50
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]

    vertical, horizontal = grid_tables(rng, rows, columns, zeros=0.15)
    labels = ["0", "1"]
    potentials = {}
    for (i, j), t in vertical.items():
        scope = (name[i][j], name[i + 1][j])
        potentials[scope] = xr.DataArray(t, dims=scope, coords=dict.fromkeys(scope, labels))
    for (i, j), t in horizontal.items():
        scope = (name[i][j], name[i][j + 1])
        potentials[scope] = xr.DataArray(t, dims=scope, coords=dict.fromkeys(scope, labels))
    model = dpgm.MarkovNetwork(potentials)
    total, last_column, states = grid_transfer(vertical, horizontal, rows, columns)
    tree = JunctionTree(model)
    assert tree.log_partition() == pytest.approx(total, rel=1e-10)
    assert all(np.isfinite(m.values).all() for m in tree.marginals().values())
    # last column's joint marginal from the transfer vector
    last = tree.marginal([name[i][columns - 1] for i in range(rows)])
    expected = np.zeros([2] * rows)
    for s, p in zip(states, last_column, strict=True):
        expected[tuple(s)] = p
    np.testing.assert_allclose(last.values, expected, rtol=1e-9, atol=1e-300)


def test_tiny_scaled_potentials_do_not_underflow():
    """Every potential scaled by 1e-300: log Z shifts by exactly n_factors * log(1e-300)."""
    model, variables, tables = _chain(30, 2, seed=1)
    scaled = dpgm.MarkovNetwork({s: p * 1e-300 for s, p in model.potentials.items()})
    shift = len(model.potentials) * math.log(1e-300)
    assert dpgm.log_partition(scaled) == pytest.approx(dpgm.log_partition(model) + shift, rel=1e-12)
    assert len(interaction_graph(variables, list(model.potentials)).edges) == 29


def test_a_tree_too_big_is_refused_before_allocation():
    # water's best tree holds 3.36e6 cells (its published treewidth is 10)
    with pytest.raises(TreeTooLarge, match=r"needs more than max_table_size=1000000 cells.*32 variables"):
        JunctionTree(dpgm.load_network("water"), max_table_size=10**6)
    assert JunctionTree(dpgm.load_network("water"), max_table_size=4 * 10**6).total_table_size == 3_362_268


def test_a_dense_grid_is_refused_by_junction_tree_and_ipf():
    """A 40 x 40 binary grid has treewidth 40: 2**41-cell cliques, refused before any table exists."""
    scopes = grid_scopes(40, 40)
    variables = sorted({v for s in scopes for v in s})
    grid = dpgm.MarkovNetwork.from_cliques(scopes, {v: ["0", "1"] for v in variables})
    with pytest.raises(TreeTooLarge, match="too densely connected"):
        JunctionTree(grid)
    table = xr.Dataset({v: ("row", np.zeros(3, dtype=np.int8), {"flag_values": np.array([0, 1], dtype=np.int8),
                                                              "flag_meanings": "0 1"}) for v in variables})
    with pytest.raises(TreeTooLarge, match="max_table_size"):
        dpgm.fit(grid, table, method="ipf")


@pytest.mark.parametrize("module", ["dpgm.potentials", "dpgm.testing", "dpgm.io.uai", "dpgm.inference.batched",
                                    "dpgm.inference.junction_tree", "dpgm.inference.queries",
                                    "dpgm.inference.triangulation"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np, "xr": xr})
    assert result.failed == 0 and result.attempted > 0

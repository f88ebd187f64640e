"""Shipped networks against pyAgrum's LazyPropagation (exact inference written by others).

The pyAgrum network is converted from OUR tables (``BayesianNetwork.to_pyagrum``; pyAgrum's
BIF reader parses single precision), so both sides use the same doubles. Tolerance 1e-8 as the issue
asks (observed differences ~1e-15). pgmpy's VariableElimination is compared in
tests/inference/test_exact.py.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pyagrum as gum
import pytest

import dpgm
from dpgm.inference import JunctionTree

NETWORKS = ["asia", "sachs", "child", "alarm", "insurance"]


def _sample_row(model: dpgm.BayesianNetwork, rng: np.random.Generator) -> dict[str, str]:
    row: dict[str, int] = {}
    for v in model.variables:
        table = model.cpds[v].values
        column = table[(slice(None), *(row[p] for p in model.parents(v)))]
        row[v] = int(rng.choice(len(column), p=column / column.sum()))
    return {v: model.states[v][k] for v, k in row.items()}


def _log_joint(model: dpgm.BayesianNetwork, assignment: dict[str, str]) -> float:
    total = 0.0
    for v in model.variables:
        index = tuple(model.states[d].index(assignment[d]) for d in model.cpds[v].dims)
        total += math.log(model.cpds[v].values[index])
    return total


@pytest.mark.parametrize("name", NETWORKS)
def test_marginals_and_evidence_probability_equal_pyagrum(name):
    model = dpgm.load_network(name)
    theirs_bn = model.to_pyagrum()
    tree = JunctionTree(model)
    rng = np.random.default_rng(len(name))
    sample = _sample_row(model, rng)
    observed = rng.choice(model.variables, size=min(6, len(model.variables) - 2), replace=False)
    soft_variable = next(v for v in model.variables if v not in observed)
    likelihood = rng.random(model.cardinality(soft_variable)) + 0.1
    cases = [{}, {v: sample[v] for v in observed}, {**{v: sample[v] for v in observed[:3]},
                                                     soft_variable: likelihood}]
    for evidence in cases:
        engine = gum.LazyPropagation(theirs_bn)
        engine.setEvidence({v: (x if isinstance(x, str) else x.tolist()) for v, x in evidence.items()})
        engine.makeInference()
        ours = tree.marginals(evidence)
        for v in model.variables:
            np.testing.assert_allclose(ours[v].values, engine.posterior(v).toarray(), rtol=1e-8, atol=1e-12)
        if evidence:
            assert tree.log_partition(evidence) == pytest.approx(math.log(engine.evidenceProbability()), rel=1e-8)


@pytest.mark.parametrize("name", ["asia", "sachs", "child"])
def test_map_probability_equals_pgmpy_map_query(name):
    """MAP against pgmpy's VariableElimination.map_query. Ties make the argmax ambiguous: compare the
    probabilities of the two assignments. Not alarm: pgmpy's map_query builds the joint of the hidden
    variables and runs out of memory there; pyAgrum 3.3.1's ``mpe`` fails ("Empty tensor") on asia,
    child, alarm and insurance."""
    from pgmpy.inference import VariableElimination

    model = dpgm.load_network(name)
    rng = np.random.default_rng(7)
    sample = _sample_row(model, rng)
    evidence = {v: sample[v] for v in rng.choice(model.variables, size=3, replace=False)}
    hidden = [v for v in model.variables if v not in evidence]
    theirs = VariableElimination(model.to_pgmpy()).map_query(hidden, evidence=evidence, show_progress=False)
    ours = dpgm.map_assignment(model, evidence)
    assert all(ours[v] == s for v, s in evidence.items())
    assert _log_joint(model, ours) == pytest.approx(_log_joint(model, {**evidence, **theirs}), rel=1e-10)


@pytest.mark.parametrize("name", dpgm.available_networks())
def test_every_shipped_network_compiles_to_a_valid_junction_tree(name):
    """Families inside cliques, running intersection, width and table size reported."""
    model = dpgm.load_network(name)
    tree = JunctionTree(model)
    cliques = [set(c) for c in tree.cliques]
    for family in model.families:
        assert any(set(family) <= c for c in cliques), family
    graph = nx.Graph()
    graph.add_nodes_from(range(len(cliques)))
    for (child, parent), separator in tree.separators.items():
        graph.add_edge(tree.cliques.index(child), tree.cliques.index(parent))
        assert set(separator) == set(child) & set(parent)
    assert nx.is_forest(graph)
    for v in model.variables:
        holding = [i for i, c in enumerate(cliques) if v in c]
        assert nx.is_connected(graph.subgraph(holding)), v
    assert tree.width == max(len(c) for c in cliques) - 1
    assert tree.total_table_size == sum(math.prod(model.cardinality(v) for v in c) for c in cliques)

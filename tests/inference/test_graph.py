"""Triangulation and junction-tree construction, checked with networkx's graph algorithms.

Oracles: networkx's chordality test and maximal cliques of chordal graphs
(``nx.is_chordal``, ``nx.chordal_graph_cliques``), connectivity for the
running-intersection property, and networkx's own treewidth heuristics as a
quality baseline on the shipped networks.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.inference import build_tree, eliminate, interaction_graph


@st.composite
def scope_sets(draw):
    n = draw(st.integers(1, 12))
    variables = [f"v{i}" for i in range(n)]
    cards = {v: draw(st.integers(2, 5)) for v in variables}
    scopes = [tuple(draw(st.lists(st.sampled_from(variables), min_size=1, max_size=4, unique=True)))
              for _ in range(draw(st.integers(0, 10)))]
    return variables, cards, scopes


@settings(max_examples=150, deadline=None)
@given(scope_sets(), st.sampled_from(["min-weight", "weighted-min-fill", "min-fill", "min-degree"]))
def test_elimination_gives_a_chordal_cover_whose_cliques_networkx_agrees_with(problem, criterion):
    variables, cards, scopes = problem
    graph = interaction_graph(variables, scopes)
    order, cliques = eliminate(graph, cards, criterion)
    assert sorted(order) == sorted(variables)
    filled = nx.Graph()
    filled.add_nodes_from(variables)
    for c in cliques:
        filled.add_edges_from((a, b) for a in c for b in c if a < b)
    assert nx.is_chordal(filled)
    assert set(graph.edges) <= {tuple(e) for e in filled.edges} | {tuple(reversed(e)) for e in filled.edges}
    assert {frozenset(c) for c in cliques} == set(nx.chordal_graph_cliques(filled))


@settings(max_examples=150, deadline=None)
@given(scope_sets())
def test_junction_tree_has_running_intersection_and_assigns_every_scope(problem):
    variables, cards, scopes = problem
    tree = build_tree(variables, cards, scopes)
    forest = nx.Graph()
    forest.add_nodes_from(range(len(tree.cliques)))
    forest.add_edges_from((c, p) for c, p in enumerate(tree.parent) if p >= 0)
    assert nx.is_forest(forest)
    for v in variables:
        holding = [i for i, c in enumerate(tree.cliques) if v in c]
        assert holding and nx.is_connected(forest.subgraph(holding)), v
    # one tree per connected component of the interaction graph
    assert nx.number_connected_components(forest) == nx.number_connected_components(
        interaction_graph(variables, scopes))
    for scope, home in zip(scopes, tree.assignment, strict=True):
        assert set(scope) <= set(tree.cliques[home])
    assert sorted(tree.order) == list(range(len(tree.cliques)))
    position = {c: k for k, c in enumerate(tree.order)}
    assert all(position[c] < position[p] for c, p in enumerate(tree.parent) if p >= 0)  # children first
    assert tree.width == max(len(c) for c in tree.cliques) - 1
    assert tree.total_table_size == sum(math.prod(cards[v] for v in c) for c in tree.cliques)


def _networkx_total(graph: nx.Graph, cards: dict[str, int]) -> int:
    best = math.inf
    for heuristic in (nx.algorithms.approximation.treewidth_min_fill_in,
                      nx.algorithms.approximation.treewidth_min_degree):
        _, decomposition = heuristic(graph)
        best = min(best, sum(math.prod(cards[v] for v in bag) for bag in decomposition.nodes))
    return best


@pytest.mark.parametrize("name", ["alarm", "child", "insurance", "hailfinder", "win95pts", "hepar2", "water"])
def test_weighted_triangulation_is_no_larger_than_networkx_heuristics(name):
    """Quality, not correctness: cardinality-aware elimination beats or ties unweighted min-fill/min-degree."""
    model = dpgm.load_network(name)
    cards = {v: model.cardinality(v) for v in model.variables}
    tree = build_tree(model.variables, cards, model.families)
    theirs = _networkx_total(interaction_graph(model.variables, model.families), cards)
    assert tree.total_table_size <= theirs


def test_four_cycle_is_triangulated_with_one_chord():
    graph = interaction_graph("abcd", [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    order, cliques = eliminate(graph, dict(zip("abcd", [2, 5, 2, 5], strict=True)))
    # the chord joins the two cheap variables: cliques {a, c, b}, {a, c, d} of 20 cells each
    assert sorted(sorted(c) for c in cliques) == [["a", "b", "c"], ["a", "c", "d"]]
    with pytest.raises(ValueError, match="criterion .max-cardinality. is not one of"):
        eliminate(graph, dict.fromkeys("abcd", 2), "max-cardinality")
    assert np.isclose(build_tree("abcd", dict.fromkeys("abcd", 2), [("a", "b")]).total_table_size, 4 + 2 + 2)


@settings(max_examples=80, deadline=None)
@given(scope_sets(), st.sampled_from(["min-weight", "weighted-min-fill", "min-fill", "min-degree"]),
       st.integers(0, 2**16), st.sampled_from([0.0, 0.5, 1.0]))
def test_randomized_elimination_is_also_a_chordal_cover(problem, criterion, seed, tolerance):
    import random

    variables, cards, scopes = problem
    graph = interaction_graph(variables, scopes)
    order, cliques = eliminate(graph, cards, criterion, random_state=random.Random(seed), tolerance=tolerance)
    filled = nx.Graph()
    filled.add_nodes_from(variables)
    for c in cliques:
        filled.add_edges_from((a, b) for a in c for b in c if a < b)
    assert nx.is_chordal(filled)
    assert all(filled.has_edge(a, b) for a, b in graph.edges)
    assert {frozenset(c) for c in cliques} == set(nx.chordal_graph_cliques(filled))
    # restarts never make the deterministic result worse
    base = build_tree(variables, cards, scopes, restarts=0)
    assert build_tree(variables, cards, scopes, restarts=8).total_table_size <= base.total_table_size

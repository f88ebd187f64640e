"""Closed-form maximum likelihood for decomposable models.

For a chordal interaction graph whose scopes are exactly its maximal cliques,
``p(x) = prod_C p~(x_C) / prod_S p~(x_S)`` over the cliques and separators of a
junction tree (Lauritzen 1996, Prop. 4.18): each clique's potential is its
empirical marginal divided by the separator towards the root.

References
----------
Lauritzen, S. L. (1996). *Graphical Models*. Oxford University Press, ch. 4.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import numpy as np

from dpgm.potentials import Scope, expand, reduce_to

__all__ = ["check_decomposable", "decomposable_mle"]


def interaction_graph(scopes: list[Scope]) -> nx.Graph:
    """Variables joined when they share a scope."""
    graph = nx.Graph()
    for scope in scopes:
        graph.add_nodes_from(scope)
        graph.add_edges_from((a, b) for i, a in enumerate(scope) for b in scope[i + 1 :])
    return graph


def check_decomposable(scopes: list[Scope]) -> nx.Graph:
    """Raise ValueError unless the scopes are the maximal cliques of a chordal graph."""
    graph = interaction_graph(scopes)
    if not nx.is_chordal(graph):
        cycle = _chordless_cycle(graph)
        raise ValueError(
            f"the model is not decomposable: the cycle {cycle} has no chord; "
            "fit it with method='ipf' (or 'gis', 'lbfgs')"
        )
    cliques = {frozenset(c) for c in nx.find_cliques(graph)}
    given = {frozenset(s) for s in scopes}
    if cliques != given:
        extra = sorted(tuple(sorted(c)) for c in cliques - given)
        inner = sorted(tuple(sorted(s)) for s in given - cliques)
        raise ValueError(
            "closed_form needs the scopes to be exactly the maximal cliques of their graph; "
            f"cliques not given as scopes: {extra}; scopes that are not maximal cliques: {inner}; "
            "use method='ipf'"
        )
    return graph


def _chordless_cycle(graph: nx.Graph) -> list[str]:
    for cycle in nx.chordless_cycles(graph):
        if len(cycle) >= 4:
            return list(cycle)
    return []


def decomposable_mle(scopes: list[Scope], counts: Mapping[Scope, np.ndarray]) -> dict[Scope, np.ndarray]:
    """Log potentials of the MLE: clique marginals over separators (``log 0 = -inf``, 0/0 = 0).

    Parameters
    ----------
    scopes
        The maximal cliques of a chordal graph.
    counts
        Empirical counts of each scope (axes in scope order).

    Returns
    -------
    dict
        Scope -> log potential; the product of the potentials is the fitted joint
        (normalized: log Z = 0).
    """
    graph = check_decomposable(scopes)
    n = float(next(iter(counts.values())).sum())
    by_set = {frozenset(s): s for s in scopes}
    log_potentials: dict[Scope, np.ndarray] = {}
    for component in nx.connected_components(graph):
        tree = nx.junction_tree(graph.subgraph(component).copy())
        cliques = [c for c, kind in tree.nodes(data="type") if kind == "clique"]
        root = cliques[0]
        for node in nx.bfs_tree(tree, root):
            if tree.nodes[node]["type"] != "clique":
                continue
            scope = by_set[frozenset(node)]
            with np.errstate(divide="ignore"):
                table = np.log(np.asarray(counts[scope], dtype=float) / n)
            separator = _parent_separator(tree, root, node)
            if separator:
                marginal = reduce_to(np.asarray(counts[scope], dtype=float), scope, separator) / n
                with np.errstate(divide="ignore"):
                    log_separator = np.log(marginal)
                expanded = expand(log_separator, separator, scope)
                # 0/0 = 0: cells of an empty separator configuration stay at -inf
                table = np.where(np.isneginf(expanded), -np.inf, table - expanded)
            log_potentials[scope] = table
    return {s: log_potentials[s] for s in scopes}


def _parent_separator(tree: nx.Graph, root, node) -> tuple[str, ...]:
    if node == root:
        return ()
    path = nx.shortest_path(tree, root, node)
    return tuple(path[-2])

"""Junction trees from factor scopes: weighted greedy elimination and a maximum spanning tree.

The elimination order is greedy: at each step eliminate the variable whose
elimination clique (the variable and its current neighbours) has the smallest
table, breaking ties by fewest fill-in edges (min-weight, then min-fill). Table
size, unlike fill-in count, weighs cardinalities, so it keeps the total table
size of the tree small (Kjaerulff 1990).

References
----------
Kjaerulff, U. (1990). Triangulation of graphs - algorithms giving small total
state space. Technical report R-90-09, Aalborg University.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

__all__ = ["TreeStructure", "build_tree"]


@dataclass(frozen=True)
class TreeStructure:
    """Cliques, tree edges rooted at clique 0, and where each factor lives.

    Attributes
    ----------
    cliques
        Maximal cliques, each a tuple of variables (in the model's variable order).
    parent
        ``parent[i]`` is the clique towards the root (``-1`` for roots; a forest
        has one root per connected component).
    order
        Cliques in a collect order (children before parents).
    assignment
        Factor index -> clique holding its scope.
    """

    cliques: tuple[tuple[str, ...], ...]
    parent: tuple[int, ...]
    order: tuple[int, ...]
    assignment: tuple[int, ...]
    cardinalities: Mapping[str, int] = field(hash=False)

    def separator(self, clique: int) -> tuple[str, ...]:
        """Variables shared with the parent clique."""
        p = self.parent[clique]
        if p < 0:
            return ()
        return tuple(v for v in self.cliques[clique] if v in self.cliques[p])

    def table_size(self, scope: Sequence[str]) -> int:
        """Cells of a table over ``scope``."""
        return math.prod(self.cardinalities[v] for v in scope)

    @property
    def width(self) -> int:
        """Largest clique size minus one (the treewidth of this triangulation)."""
        return max((len(c) for c in self.cliques), default=1) - 1

    @property
    def total_table_size(self) -> int:
        """Cells of all clique tables together."""
        return sum(self.table_size(c) for c in self.cliques)


def _elimination_cliques(graph: nx.Graph, cardinalities: Mapping[str, int]) -> list[frozenset]:
    graph = graph.copy()
    cliques: list[frozenset] = []
    while graph.number_of_nodes():
        best, best_key = None, None
        for v in graph.nodes:
            neighbours = list(graph.neighbors(v))
            weight = cardinalities[v] * math.prod(cardinalities[u] for u in neighbours)
            fill = sum(
                1 for i, a in enumerate(neighbours) for b in neighbours[i + 1 :] if not graph.has_edge(a, b)
            )
            key = (weight, fill)
            if best_key is None or key < best_key:
                best, best_key = v, key
        neighbours = list(graph.neighbors(best))
        clique = frozenset([best, *neighbours])
        if not any(clique <= c for c in cliques):
            cliques.append(clique)
        graph.add_edges_from((a, b) for i, a in enumerate(neighbours) for b in neighbours[i + 1 :])
        graph.remove_node(best)
    return [c for c in cliques if not any(c < d for d in cliques)]


def build_tree(
    variables: Sequence[str], cardinalities: Mapping[str, int], scopes: Sequence[Sequence[str]]
) -> TreeStructure:
    """A junction tree whose cliques cover every scope.

    Parameters
    ----------
    variables
        All variables (isolated ones get a clique of their own).
    cardinalities
        States per variable.
    scopes
        Factor scopes; each is assigned to the smallest clique containing it.
    """
    graph = nx.Graph()
    graph.add_nodes_from(variables)
    for scope in scopes:
        graph.add_edges_from((a, b) for i, a in enumerate(scope) for b in scope[i + 1 :])
    position = {v: i for i, v in enumerate(variables)}
    cliques = [tuple(sorted(c, key=position.__getitem__)) for c in _elimination_cliques(graph, cardinalities)]
    cliques.sort(key=lambda c: (position[c[0]], len(c)))
    weights = nx.Graph()
    weights.add_nodes_from(range(len(cliques)))
    for i in range(len(cliques)):
        for j in range(i + 1, len(cliques)):
            shared = set(cliques[i]) & set(cliques[j])
            if shared:
                # more shared variables first, then the larger separator table
                size = math.prod(cardinalities[v] for v in shared)
                weights.add_edge(i, j, weight=len(shared) * 1e15 + size)
    tree = nx.maximum_spanning_tree(weights)
    parent = [-1] * len(cliques)
    order: list[int] = []
    for component in nx.connected_components(tree):
        root = min(component)
        for child, par in nx.bfs_predecessors(tree, root):
            parent[child] = par
        order += list(reversed([root, *(c for c, _ in nx.bfs_predecessors(tree, root))]))
    assignment = []
    for scope in scopes:
        holders = [i for i, c in enumerate(cliques) if set(scope) <= set(c)]
        assignment.append(min(holders, key=lambda i: math.prod(cardinalities[v] for v in cliques[i])))
    return TreeStructure(tuple(cliques), tuple(parent), tuple(order), tuple(assignment), dict(cardinalities))

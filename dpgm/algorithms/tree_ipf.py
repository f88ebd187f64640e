"""IPF on a junction tree, restoring calibration only along the path to the next clique.

Clique beliefs ``beta_C`` (the model's clique marginals) and separator beliefs
``mu_S`` are kept calibrated Hugin-style. Updating a scope ``s`` inside clique
``C`` multiplies ``beta_C`` by ``p~(x_s) / p(x_s)`` (0/0 = 0) and the scope's
potential by the same ratio; the joint changes by exactly that factor and stays
normalized, so log Z never changes. Before the next scope, whose clique is
``C'``, Hugin absorptions run only along the tree path ``C -> C'``; scopes are
visited in depth-first clique order, so the paths are short. A sweep costs
about one pass over the tree instead of one full calibration per scope.

References
----------
Jirousek, R. and Preucil, S. (1995). On the effective implementation of the
iterative proportional fitting procedure. *Comput. Statist. Data Anal.* 19, 177-189.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dpgm.algorithms.ipf import IPFState, _log_ratio
from dpgm.algorithms.result import log_iteration, parameter_change
from dpgm.algorithms.tables import JointEngine, loglik_from_potentials
from dpgm.inference.batched import BatchedTree
from dpgm.inference.triangulation import build_tree
from dpgm.models.markov import canonical_log_potentials
from dpgm.potentials import Scope, expand, reduce_to

__all__ = ["tree_ipf"]

# models with at most this many joint cells start from the enumerated joint's clique marginals
JOINT_START_CELLS = 1 << 12


class _HuginTree:
    def __init__(self, variables, cards, scopes, log_potentials, structure=None, fixed=None):
        fixed = list((fixed or {}).items())
        self.structure = structure if structure is not None else build_tree(
            variables, cards, [*scopes, *(s for s, _ in fixed)])
        if math.prod(cards[v] for v in variables) <= JOINT_START_CELLS:
            # a small joint is cheaper to enumerate than a tree's compiled layout and einsum plans
            engine = JointEngine(variables, cards, fixed=dict(fixed))
            joint, self.log_z = engine({s: log_potentials[s] for s in scopes}, self.structure.cliques)
            self.beliefs = [np.array(joint[c], dtype=float) for c in self.structure.cliques]
        else:
            factors = [(s, np.exp(log_potentials[s])) for s in scopes] + [(s, np.exp(t)) for s, t in fixed]
            tree = BatchedTree(variables, cards, factors, self.structure)
            self.log_z, clique_tables = tree.expected_counts(np.zeros((1, 0), dtype=np.int64), [])
            self.beliefs = [np.array(clique_tables[c], dtype=float) for c in self.structure.cliques]
        self.separators = {c: self._project(c, self.structure.parent[c])
                           for c in range(len(self.structure.cliques)) if self.structure.parent[c] >= 0}

    def _shared(self, a: int, b: int) -> tuple[str, ...]:
        return tuple(v for v in self.structure.cliques[a] if v in self.structure.cliques[b])

    def _project(self, a: int, b: int) -> np.ndarray:
        return reduce_to(self.beliefs[a], self.structure.cliques[a], self._shared(a, b))

    def absorb(self, source: int, target: int) -> None:
        """Hugin message ``source -> target`` (adjacent cliques)."""
        edge = source if self.structure.parent[source] == target else target
        new = self._project(source, target)
        old = self.separators[edge]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(old > 0, new / np.where(old > 0, old, 1.0), 0.0)
        shared = self._shared(source, target)
        self.beliefs[target] = self.beliefs[target] * expand(ratio, shared, self.structure.cliques[target])
        self.separators[edge] = new

    def ancestors(self, clique: int) -> list[int]:
        """``clique`` and its ancestors up to its tree's root (the junction tree may be a forest)."""
        up = [clique]
        while self.structure.parent[up[-1]] >= 0:
            up.append(self.structure.parent[up[-1]])
        return up

    def path(self, a: int, b: int) -> list[int]:
        """Cliques from ``a`` to ``b``, both in the same tree of the forest."""
        up_a, up_b = self.ancestors(a), self.ancestors(b)
        below_common = set(up_b)
        common = next(x for x in up_a if x in below_common)
        return up_a[: up_a.index(common) + 1] + list(reversed(up_b[: up_b.index(common)]))


def tree_ipf(
    counts: Mapping[Scope, np.ndarray],
    variables: Sequence[str],
    cardinalities: Mapping[str, int],
    *,
    init: Mapping[Scope, np.ndarray] | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
    loglik_tol: float = 0.0,
    callback: Callable[[dict], None] | None = None,
    structure=None,
    fixed: Mapping[Scope, np.ndarray] | None = None,
) -> IPFState:
    """IPF with path-wise recalibration of a junction tree (see the module docstring).

    Parameters
    ----------
    counts
        Empirical counts of each scope.
    variables, cardinalities
        The model's variables.
    init
        Starting log potentials (``-inf`` = structural zero); default uniform.
    max_iter, tol
        Sweeps at most; stop when every scope's marginal, checked just before its
        update in a sweep, is within ``tol`` of the empirical one.
    loglik_tol
        Also stop when a sweep changes the log-likelihood by at most ``loglik_tol``
        times its absolute value (0, the default, turns this rule off).
    callback
        Called with each sweep's history record (``param_change``: the largest
        absolute change of a log potential in the sweep, in canonical form).
    structure
        A junction tree of ``scopes`` (and the ``fixed`` scopes) built earlier by
        ``build_tree`` (EM's M step reuses one across iterations); built here if None.
    fixed
        Log tables that stay as they are (structural zeros: ``-inf`` on the cells
        fixed at zero, over any variables): IPF starts from them, as R's
        ``loglin(start=)`` does, each on a clique that holds its scope.

    Notes
    -----
    A model whose scopes do not form one connected graph has a junction forest:
    each tree keeps its own calibrated position, and the path to the next scope
    runs inside its tree only (the trees' tables are independent marginals).
    """
    scopes = list(counts)
    canonical = _canonical_form(list(scopes))
    n = float(next(iter(counts.values())).sum()) if counts else 0.0
    targets = {s: np.asarray(counts[s], dtype=float) / n for s in scopes}
    log_potentials = {s: (np.zeros(np.shape(counts[s])) if init is None else np.array(init[s], dtype=float))
                      for s in scopes}
    hugin = _HuginTree(variables, cardinalities, scopes, log_potentials, structure, fixed)
    structure = hugin.structure
    home = dict(zip(scopes, structure.assignment, strict=False))
    preorder = list(reversed(structure.order))
    scopes.sort(key=lambda s: preorder.index(home[s]))
    history: list[dict] = []
    start = time.perf_counter()
    converged = False
    iteration = 0
    root = {c: hugin.ancestors(c)[-1] for c in set(home.values())}
    current = {root[c]: c for c in reversed([home[s] for s in scopes])}  # each tree's calibrated clique
    for iteration in range(1, max_iter + 1):
        error = 0.0
        before = dict(log_potentials)  # the updates below make new arrays
        for scope in scopes:
            clique = home[scope]
            route = hugin.path(current[root[clique]], clique)
            for a, b in zip(route, route[1:], strict=False):
                hugin.absorb(a, b)
            current[root[clique]] = clique
            marginal = reduce_to(hugin.beliefs[clique], structure.cliques[clique], scope)
            error = max(error, float(np.abs(marginal - targets[scope]).max()))
            log_ratio = _log_ratio(targets[scope], marginal)
            hugin.beliefs[clique] = hugin.beliefs[clique] * np.exp(expand(log_ratio, scope, structure.cliques[clique]))
            log_potentials[scope] = log_potentials[scope] + log_ratio
        loglik = loglik_from_potentials(counts, log_potentials, hugin.log_z, n)
        change = loglik - history[-1]["loglik"] if history else None
        log_iteration(history, callback, {
            "iteration": iteration,
            "loglik": loglik,
            "change": change,
            "max_error": error,
            "param_change": parameter_change(canonical(before), canonical(log_potentials)),
            "seconds": time.perf_counter() - start,
        })
        if error < tol or (loglik_tol > 0 and change is not None and abs(change) <= loglik_tol * abs(loglik)):
            converged = True
            break
    return IPFState(log_potentials, history, converged, iteration, log_z=hugin.log_z, width=structure.width,
                    total_table_size=structure.total_table_size)


def grid_scopes(rows: int, columns: int) -> list[tuple[str, str]]:
    """Nearest-neighbour pairs of a ``rows x columns`` grid of variables ``r{i}c{j}``."""
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]
    pairs = [(name[i][j], name[i][j + 1]) for i in range(rows) for j in range(columns - 1)]
    pairs += [(name[i][j], name[i + 1][j]) for i in range(rows - 1) for j in range(columns)]
    return pairs


def _canonical_form(scopes: list) -> Callable[[dict], dict]:
    """Log-potentials in the canonical form a fitted Markov network reports (:meth:`MarkovNetwork.canonical`,
    the scopes in the model's order), where every entry is finite; as they are otherwise. A sweep's
    ``param_change`` is measured on it: the raw potentials' split between overlapping scopes is arbitrary."""

    def canonical(log_potentials: dict) -> dict:
        if all(np.isfinite(t).all() for t in log_potentials.values()):
            return canonical_log_potentials(scopes, log_potentials)
        return log_potentials

    return canonical

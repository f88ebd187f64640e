"""Expected family counts of a Bayesian network for EM, row by row, on raw arrays.

EM's M step for a Bayesian network needs, per family ``(v, parents)``, the sum
over rows of ``w · P(x_v, x_pa | e)``. In a row, only the unobserved variables
``U`` make this more than a plain count, and only the factors touching them
matter:

* an unobserved **leaf** (no children in the network) sums out of the joint
  (its table sums to 1 over the leaf), so it is left out of the row's
  enumeration; its family's expected counts are ``θ(x_v | pa) · P(pa | e)``;
* the other unobserved variables ``E`` are **enumerated**: for every joint state
  of ``E``, the product of the tables whose family meets ``E`` (in log space,
  so no product underflows) gives ``P(x_E, e)`` up to the factor of the fully
  observed families, whose cells are counted with weight ``w`` and whose logs
  add to the row's log-likelihood.

``E`` splits into independent groups (variables joined by a family they both
meet), each enumerated on its own. A row whose enumeration would cost more than a
junction-tree propagation (above :attr:`FamilyPlan.enumeration_limit`)
goes through the batched junction tree instead (distinct evidence patterns,
Hugin propagation, see :mod:`dpgm.inference.batched`), and its clique counts are
summed into family counts with index maps built once. Everything works on flat
arrays: the parameters are one vector ``θ`` (each family's table in C order of
``(v, *parents)``, concatenated in variable order), the result one vector of
the same layout.

Examples
--------
>>> import numpy as np
>>> plan = FamilyPlan(["a", "b"], {"a": 2, "b": 2}, {"a": (), "b": ("a",)})
>>> theta = np.array([0.3, 0.7, 0.9, 0.2, 0.1, 0.8])    # P(a), then P(b | a) as (b, a)
>>> loglik, counts, tree_rows = plan.expected_counts(theta, np.array([[1], [1]]), ["b"])
>>> round(float(np.exp(loglik / 2)), 6)                  # P(b=1) = 0.3 * 0.1 + 0.7 * 0.8
0.59
>>> counts[:2].round(4)                                  # expected counts of a: 2 P(a | b=1)
array([0.1017, 1.8983])
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpgm.cpt import CPTLayout
from dpgm.inference import propagation
from dpgm.inference._kernels import _clique_base, _enumerate_kernel
from dpgm.inference.propagation import TreeLayout, compile_layout, distinct_rows
from dpgm.inference.triangulation import TreeStructure, build_tree

__all__ = ["FamilyPlan", "FamilyParameters", "few_patterns"]


class FamilyPlan(CPTLayout):
    """Index maps of one Bayesian network structure for expected family counts (built once per fit).

    The parameters and the counts share the flat layout of :class:`~dpgm.cpt.CPTLayout`
    (``flatten``, ``tables``, ``normalize`` for the M step).

    Parameters
    ----------
    variables
        Variables in topological order; family ``i`` is variable ``i`` with its parents.
    cardinalities
        States per variable.
    parents
        Variable -> its parents, in the order of its table's axes after the variable.
    structure
        Junction tree for the fallback path (built from the families on first use if not given:
        when every row can be enumerated, no triangulation is done at all).
    enumeration_limit
        Largest enumeration cost (sum over independent groups of ``|states| x families evaluated``)
        of a row; costlier rows go to the junction tree (default: an eighth of the tree's cells plus
        8 per clique, at least 16; ``0`` sends every row to the tree).
    """

    def __init__(
        self,
        variables: Sequence[str],
        cardinalities: Mapping[str, int],
        parents: Mapping[str, Sequence[str]],
        structure: TreeStructure | None = None,
        enumeration_limit: int | None = None,
    ):
        super().__init__(variables, cardinalities, parents)  # the parameters' layout: flatten, tables, normalize
        self.index = {v: i for i, v in enumerate(self.variables)}
        card = np.array([self.cardinalities[v] for v in self.variables], dtype=np.int64)
        self.family_var_ptr = np.concatenate([[0], np.cumsum([len(f) for f in self.families])]).astype(np.int64)
        self.family_var = np.array([self.index[u] for f in self.families for u in f], dtype=np.int64)
        strides = []
        for f in self.families:
            shape = [self.cardinalities[u] for u in f]
            strides += [math.prod(shape[i + 1:]) for i in range(len(shape))]
        self.family_stride = np.array(strides, dtype=np.int64)
        has_child = np.zeros(len(self.variables), dtype=bool)
        for f in self.families:
            for u in f[1:]:
                has_child[self.index[u]] = True
        self.is_leaf = ~has_child
        self.card = card
        self._structure = structure
        # a row's enumeration costs ~ sum over groups of |states| x families evaluated; a propagation
        # ~ the tree's cells (at least the families' cells) plus a fixed cost per clique (at most one
        # per family). Measured at 1e5 rows, s per pass, tree only -> this default (390 on alarm):
        # alarm, 2 latent + 20% missing, 0.35 -> 0.25 (81% of rows enumerated; limit 200: 0.26,
        # 800: 0.26, 1500: 0.29); alarm, 1 latent: 0.15 -> 0.032; 20-item latent class model with
        # 20% missing: 0.106 -> 0.084
        default = (self.n_cells + 64 * len(self.variables)) // 8
        self.enumeration_limit = (min(max(16, default), 1 << 16) if enumeration_limit is None
                                  else int(enumeration_limit))
        self.token = uuid.uuid4().hex

    @property
    def structure(self) -> TreeStructure:
        """The junction tree of the fallback path, triangulated on first use."""
        if self._structure is None:
            self._structure = build_tree(self.variables, self.cardinalities, self.families)
        if "count_write" not in self.__dict__:
            # every derived map is assigned in one dict update: a worker holding this plan may pickle it
            # for another worker (in its communication thread) while its own task builds the tree here,
            # and the copy must hold all of the maps or none of them
            self.__dict__.update(self._clique_maps(compile_layout(self._structure, self.variables,
                                                                  self.cardinalities)))
        return self._structure

    def build_tree(self) -> TreeStructure:
        """Triangulate (once) and compile the index maps of the fallback junction tree."""
        return self.structure

    @property
    def has_tree(self) -> bool:
        """Whether the junction tree has been built (only rows too costly to enumerate need it)."""
        return self._structure is not None

    def _clique_maps(self, layout: TreeLayout) -> dict[str, Any]:
        """The layout, the factor cell of each clique cell (initial tables) and clique cell -> family cell
        (counts), by attribute name (:data:`_DERIVED`)."""
        cliques = self._structure.cliques
        offset = layout.clique_offset
        cells, sources = [], []
        for f, home in enumerate(self._structure.assignment):
            cells.append(np.arange(offset[home], offset[home + 1], dtype=np.int64))
            sources.append(self._cell_map(cliques[home], self.families[f]) + self.family_offset[f])
        empty = np.zeros(0, dtype=np.int64)
        sizes = np.diff(offset)
        reads, writes = [], []
        for f, family in enumerate(self.families):
            holders = [i for i, c in enumerate(cliques) if set(family) <= set(c)]
            home = min(holders, key=lambda i: sizes[i])
            reads.append(np.arange(offset[home], offset[home + 1], dtype=np.int64))
            writes.append(self._cell_map(cliques[home], family) + self.family_offset[f])
        return {"layout": layout,
                "base_cell": np.concatenate(cells) if cells else empty,
                "base_source": np.concatenate(sources) if sources else empty,
                "count_read": np.concatenate(reads) if reads else empty,
                "count_write": np.concatenate(writes) if writes else empty}

    def _cell_map(self, clique: Sequence[str], family: Sequence[str]) -> np.ndarray:
        """For each cell of ``clique`` (C order), the flat index of the matching cell of ``family``."""
        coordinates = np.indices([self.cardinalities[v] for v in clique]).reshape(len(clique), -1)
        shape = [self.cardinalities[v] for v in family]
        return np.ravel_multi_index([coordinates[clique.index(v)] for v in family], shape).astype(np.int64)

    _DERIVED = ("layout", "base_cell", "base_source", "count_read", "count_write")

    def __getstate__(self) -> dict:
        # the tree's index maps travel only when small (alarm: ~90 KB in all); a large tree's are
        # rebuilt on arrival (water's would be ~100 MB)
        state = dict(self.__dict__)  # one copy: the maps are all in it or none (see :attr:`structure`)
        if "count_write" in state and state["layout"].n_cells > 1 << 16:
            for name in self._DERIVED:
                state.pop(name)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    @property
    def total_table_size(self) -> int:
        """Cells of the fallback junction tree's clique tables."""
        self.build_tree()
        return self.layout.n_cells

    # -- the E step --------------------------------------------------------------------------

    def _base(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        tops = np.maximum.reduceat(theta, self.family_offset[:-1]) if self.n_cells else np.zeros(0)
        tops = np.where(tops > 0, tops, 1.0)
        scaled = theta / np.repeat(tops, np.diff(self.family_offset))
        base = np.ones(self.layout.n_cells)
        _clique_base(scaled, self.base_source, self.base_cell, base)
        return base, float(np.log(tops).sum())

    def tree_expected_counts(self, theta: np.ndarray, codes: np.ndarray, column_var: np.ndarray,
                             weights: np.ndarray) -> tuple[float, np.ndarray]:
        """Junction-tree path: distinct patterns, Hugin propagation, clique counts summed into families."""
        counts = np.zeros(self.n_cells)
        if not len(codes):
            return 0.0, counts
        patterns, pattern_weights, _ = distinct_rows(codes, weights, [int(self.card[v]) for v in column_var])
        self.build_tree()
        base, base_log = self._base(theta)
        log_evidence, totals = propagation.expected_counts(self.layout, base, base_log, patterns, column_var,
                                                           pattern_weights)
        loglik = propagation.log_likelihood(pattern_weights, log_evidence)
        counts += np.bincount(self.count_write, weights=totals[self.count_read], minlength=self.n_cells)
        return loglik, counts

    def expected_counts(self, theta: np.ndarray, codes: np.ndarray, variables: Sequence[str],
                        weights: np.ndarray | None = None) -> tuple[float, np.ndarray, float]:
        """Weighted log-likelihood, expected family counts (flat, the layout of ``θ``), rows through the tree.

        Parameters
        ----------
        theta
            Parameters, :meth:`flatten`'s layout.
        codes
            ``(B, k)`` integer codes of the observed variables, ``-1`` = missing (checked by the caller).
        variables
            The ``k`` observed variables.
        weights
            Frequency weight per row (default 1).
        """
        codes = np.ascontiguousarray(codes)
        n = codes.shape[0]
        weights = np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=float)
        column_var = np.array([self.index[str(v)] for v in variables], dtype=np.int64)
        cards = self.card[column_var]
        rows_per_code = None
        if few_patterns(cards, n):
            codes, weights, inverse = distinct_rows(codes, weights, cards.tolist())
            rows_per_code = np.bincount(inverse, minlength=len(codes))
            n = codes.shape[0]
        counts = np.zeros(self.n_cells)
        fallback = np.zeros(n, dtype=np.bool_)
        with np.errstate(divide="ignore"):
            log_theta = np.log(theta)
        loglik = 0.0
        if self.enumeration_limit > 0:
            loglik = _enumerate_kernel(codes, weights, column_var, self.card, self.is_leaf, self.family_offset,
                                       self.family_var_ptr, self.family_var, self.family_stride, log_theta, theta,
                                       self.enumeration_limit, counts, fallback)
        else:
            fallback[:] = weights > 0
        if fallback.any():
            rest = np.flatnonzero(fallback)
            tree_loglik, tree_counts = self.tree_expected_counts(
                theta, codes[rest].astype(np.int64), column_var, weights[rest])
            loglik += tree_loglik
            counts += tree_counts
        tree_rows = fallback.sum() if rows_per_code is None else rows_per_code[fallback].sum()
        return float(loglik), counts, float(tree_rows)


def few_patterns(cards: np.ndarray, n_rows: int) -> bool:
    """Whether ``n_rows`` rows over columns of ``cards`` states (and missing) are worth reducing to their
    distinct patterns before the E step: when there are at most ``n_rows / 4`` possible patterns.

    Rows repeat there (a survey's few items), and the per-row work then runs once per pattern with the
    summed weight: 2.4x to 5.0x less time per pass (``benchmarks/results/em_patterns.md``). The test
    is on the possible patterns, not the rows, so wide data (alarm's 37 columns, a 20-item model) never
    pays for the sort that finding its nearly all distinct rows would cost.
    """
    possible = 1
    for c in cards.tolist():
        possible *= c + 1
        if 4 * possible > n_rows:
            return False
    return n_rows > 1


class FamilyParameters:
    """One restart's parameters ``θ`` with the plan they index: what an E-step task receives.

    Several restarts share one :class:`FamilyPlan` object, which pickles once per pass.
    """

    def __init__(self, plan: FamilyPlan, theta: np.ndarray):
        self.plan = plan
        self.theta = theta

    def expected_counts(self, codes: np.ndarray, variables: Sequence[str],
                        weights: np.ndarray | None = None) -> tuple[float, dict[str, np.ndarray | float]]:
        """The E-step protocol (:mod:`dpgm.stats.expected`): ``(loglik, {"counts", "tree_rows"})``.

        ``counts`` are the expected family counts (the layout of ``θ``), ``tree_rows``
        the rows that went through the junction tree (see :meth:`FamilyPlan.expected_counts`).
        """
        loglik, counts, tree_rows = self.plan.expected_counts(self.theta, codes, variables, weights)
        return loglik, {"counts": counts, "tree_rows": tree_rows}

    def __dask_tokenize__(self):
        theta = np.ascontiguousarray(self.theta)
        digest = hashlib.sha256(theta.view(np.uint8).reshape(-1)).hexdigest()
        return ("dpgm-family-parameters", self.plan.token, theta.dtype.str, theta.shape, digest)

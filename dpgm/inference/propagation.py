"""The compiled junction-tree layout and the one door to the propagation kernels.

:func:`compile_layout` turns a :class:`~dpgm.inference.triangulation.TreeStructure`
into a :class:`TreeLayout`: flat C-order clique tables and the index maps of the
Hugin kernels (:mod:`dpgm.inference._kernels`), built once per structure with
NumPy. :func:`expected_counts`, :func:`posteriors` and :func:`map_assignments`
run those kernels on a layout, the initial clique tables (``base``, scaled, with
the log of the scales ``base_log``) and rows of evidence codes; both
:class:`~dpgm.inference.batched.BatchedTree` (any factors) and
:class:`~dpgm.inference.families.FamilyPlan` (a Bayesian network's E step) call
them. :func:`distinct_rows` folds rows into their distinct evidence patterns
first.

Examples
--------
>>> import numpy as np
>>> from dpgm.inference.triangulation import build_tree
>>> structure = build_tree(["a", "b"], {"a": 2, "b": 2}, [("a",), ("b", "a")])
>>> layout = compile_layout(structure, ["a", "b"], {"a": 2, "b": 2})
>>> layout.n_cells, layout.clique_shapes
(4, ((2, 2),))
>>> base = np.array([0.3 * 0.9, 0.3 * 0.1, 0.7 * 0.2, 0.7 * 0.8])   # P(a, b), C order (a, b)
>>> log_evidence, totals = expected_counts(layout, base, 0.0, np.array([[1]]), np.array([1]), np.ones(1))
>>> round(float(np.exp(log_evidence[0])), 6)                          # P(b=1)
0.59
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dpgm.inference._kernels import _expected_kernel, _map_kernel, _posteriors_kernel
from dpgm.inference.triangulation import TreeStructure

__all__ = ["SoftEvidence", "TreeLayout", "compile_layout", "distinct_rows", "expected_counts", "log_likelihood",
           "map_assignments", "posteriors"]


@dataclass(frozen=True, eq=False)
class TreeLayout:
    """Flat-table index maps of one junction tree (built once per structure by :func:`compile_layout`).

    Clique ``i``'s table is ``flat[clique_offset[i]:clique_offset[i + 1]]`` (C
    order of the clique's variables); separator ``i`` (to the parent of clique
    ``i``) likewise with ``sep_offset``.

    Attributes
    ----------
    order
        Cliques, children before parents (collect runs through it forwards, distribute backwards).
    parent
        Parent clique of each clique, ``-1`` for a root.
    clique_offset, sep_offset
        Start of each clique's (separator's) table in the flat arrays, one extra entry at the end.
    up_index
        Per clique cell: its cell of the separator to the parent (``-1`` in a root).
    down_index, down_offset
        Per clique with a parent, from ``down_offset[i]`` on: each cell of the parent's table mapped
        to its cell of separator ``i``.
    var_offset, var_state, var_home
        Per variable: its home clique (the smallest holding it) and, from ``var_offset[v]`` on,
        its state in every cell of that clique.
    clique_shapes
        Each clique table's shape.
    """

    order: np.ndarray
    parent: np.ndarray
    clique_offset: np.ndarray
    sep_offset: np.ndarray
    up_index: np.ndarray
    down_index: np.ndarray
    down_offset: np.ndarray
    var_offset: np.ndarray
    var_state: np.ndarray
    var_home: np.ndarray
    clique_shapes: tuple[tuple[int, ...], ...]

    @property
    def maps(self) -> tuple[np.ndarray, ...]:
        """The index maps in the kernels' argument order."""
        return (self.order, self.parent, self.clique_offset, self.sep_offset, self.up_index, self.down_index,
                self.down_offset, self.var_offset, self.var_state, self.var_home)

    @property
    def n_cells(self) -> int:
        """Cells of all clique tables."""
        return int(self.clique_offset[-1])

    def block(self, n_rows: int) -> int:
        """Rows per kernel block: the cells x rows working table stays within ~4 MB.

        Measured best on alarm, hailfinder and insurance; 1 MB blocks were up to 2x slower.
        """
        return min(int(min(256, max(1, (1 << 19) // max(1, self.n_cells)))), max(1, n_rows))

    def tables(self, flat: np.ndarray) -> list[np.ndarray]:
        """Each clique's table, shaped, as a view into ``flat`` (the layout's flat clique tables)."""
        offset = self.clique_offset
        return [flat[offset[i]:offset[i + 1]].reshape(shape) for i, shape in enumerate(self.clique_shapes)]


def compile_layout(structure: TreeStructure, variables: Sequence[str], cardinalities: Mapping[str, int]) -> TreeLayout:
    """Flat-table index maps of a junction tree over ``variables`` (states per variable in ``cardinalities``)."""
    cards = cardinalities
    cliques = structure.cliques
    sizes = [structure.table_size(c) for c in cliques]
    clique_offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    coordinates = [np.indices([cards[v] for v in c]).reshape(len(c), -1) for c in cliques]
    separators = [structure.separator(i) for i in range(len(cliques))]
    sep_sizes = [math.prod(cards[v] for v in s) if structure.parent[i] >= 0 else 0
                 for i, s in enumerate(separators)]
    sep_offset = np.concatenate([[0], np.cumsum(sep_sizes)]).astype(np.int64)
    up_index = np.full(int(clique_offset[-1]), -1, dtype=np.int64)
    down_parts, down_offset = [], np.zeros(len(cliques) + 1, dtype=np.int64)
    for i, clique in enumerate(cliques):
        p = structure.parent[i]
        if p >= 0:
            separator = separators[i]
            shape = [cards[v] for v in separator] or [1]

            def local(scope, coords, separator=separator, shape=shape):
                rows = [coords[scope.index(v)] for v in separator]
                if not rows:
                    return np.zeros(coords.shape[1], dtype=np.int64)
                return np.ravel_multi_index(rows, shape).astype(np.int64)

            up_index[clique_offset[i]:clique_offset[i + 1]] = sep_offset[i] + local(clique, coordinates[i])
            down_parts.append(sep_offset[i] + local(cliques[p], coordinates[p]))
        else:
            down_parts.append(np.zeros(0, dtype=np.int64))
        down_offset[i + 1] = down_offset[i] + len(down_parts[-1])
    home = {v: min((i for i, c in enumerate(cliques) if v in c), key=lambda i: sizes[i]) for v in variables}
    state_parts = [coordinates[home[v]][cliques[home[v]].index(v)].astype(np.int64) for v in variables]
    return TreeLayout(
        order=np.array(structure.order, dtype=np.int64),
        parent=np.array(structure.parent, dtype=np.int64),
        clique_offset=clique_offset,
        sep_offset=sep_offset,
        up_index=up_index,
        down_index=np.concatenate(down_parts) if down_parts else np.zeros(0, dtype=np.int64),
        down_offset=down_offset,
        var_offset=np.concatenate([[0], np.cumsum([len(s) for s in state_parts])]).astype(np.int64),
        var_state=np.concatenate(state_parts) if state_parts else np.zeros(0, dtype=np.int64),
        var_home=np.array([home[v] for v in variables], dtype=np.int64),
        clique_shapes=tuple(tuple(int(cards[v]) for v in c) for c in cliques),
    )


class SoftEvidence(NamedTuple):
    """Per-row likelihoods of some variables: ``matrix[:, offset[j]:offset[j + 1]]`` is variable ``variable[j]``'s."""

    matrix: np.ndarray
    variable: np.ndarray
    offset: np.ndarray

    @classmethod
    def none(cls, n_rows: int) -> SoftEvidence:
        """No soft evidence for ``n_rows`` rows."""
        return cls(np.zeros((n_rows, 0)), np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))


# -- the propagation entries: a layout, the initial clique tables, rows of evidence ----------------


def expected_counts(layout: TreeLayout, base: np.ndarray, base_log: float, codes: np.ndarray, observed: np.ndarray,
                    weights: np.ndarray, soft: SoftEvidence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)``, and ``sum_r w_r P(x_C | e_r)`` of every clique as flat tables (EM's E step).

    ``codes`` is ``(B, k)`` int64 (C order), ``-1`` = missing, column ``j`` the
    variable ``observed[j]``; rows of probability zero get ``-inf`` and add nothing.
    """
    soft = SoftEvidence.none(len(codes)) if soft is None else soft
    totals = np.zeros_like(base)
    log_evidence = np.empty(len(codes))
    _expected_kernel(codes, weights, observed, *soft, base, base_log, *layout.maps, layout.block(len(codes)),
                     log_evidence, totals)
    return log_evidence, totals


def posteriors(layout: TreeLayout, base: np.ndarray, base_log: float, codes: np.ndarray, observed: np.ndarray,
               soft: SoftEvidence, targets: np.ndarray, target_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)`` and the posterior marginals of ``targets`` side by side (NaN for rows of probability 0)."""
    out = np.full((len(codes), int(target_offset[-1])), np.nan)
    log_evidence = np.empty(len(codes))
    _posteriors_kernel(codes, observed, *soft, base, base_log, *layout.maps, targets, target_offset,
                       layout.block(len(codes)), log_evidence, out)
    return log_evidence, out


def map_assignments(layout: TreeLayout, base: np.ndarray, base_log: float, codes: np.ndarray, observed: np.ndarray,
                    soft: SoftEvidence) -> tuple[np.ndarray, np.ndarray]:
    """Per row the most probable code of every variable (``-1`` for rows of probability 0) and its log value."""
    out = np.empty((len(codes), len(layout.var_home)), dtype=np.int64)
    log_value = np.empty(len(codes))
    _map_kernel(codes, observed, *soft, base, base_log, *layout.maps, out, log_value)
    return out, log_value


def log_likelihood(weights: np.ndarray, log_evidence: np.ndarray) -> float:
    """``sum_r w_r log P(e_r)`` over rows of positive weight (``-inf`` if one has probability zero)."""
    positive = weights > 0
    if not np.isfinite(log_evidence[positive]).all():
        return -math.inf
    return float(np.dot(weights[positive], log_evidence[positive]))


# -- distinct evidence patterns -----------------------------------------------------------------


def distinct_rows(codes: np.ndarray, weights: np.ndarray | None,
                  cards: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct evidence rows, their total weights and the index of each row's pattern.

    ``cards[j]`` is the number of states of column ``j``. Columns are packed into
    mixed-radix int64 keys (``code + 1`` per column, as many columns per key as
    fit in 62 bits); several keys are combined by re-numbering, so the cost is a
    few ``np.unique`` calls on int64 arrays.
    """
    n = codes.shape[0]
    weights = np.ones(n) if weights is None else weights
    if codes.shape[1] == 0:
        if not n:
            return codes, np.zeros(0), np.zeros(0, dtype=np.int64)
        return codes[:1], np.array([weights.sum()]), np.zeros(n, dtype=np.int64)
    inverse, first, distinct = None, None, 1
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for j, c in enumerate(cards):
        if radix * (c + 1) >= 2**62:
            inverse, first, distinct = _combine(inverse, distinct, key)
            key, radix = np.zeros(n, dtype=np.int64), 1
        key = key * (c + 1) + (codes[:, j] + 1)
        radix *= c + 1
    inverse, first, distinct = _combine(inverse, distinct, key)
    patterns = np.ascontiguousarray(codes[first])
    return patterns, np.bincount(inverse, weights=weights, minlength=len(patterns)), inverse


def _combine(inverse: np.ndarray | None, distinct: int, key: np.ndarray):
    """Re-number rows by (previous group number, key)."""
    if inverse is not None:
        _, key = np.unique(key, return_inverse=True)
        key = inverse * (int(key.max()) + 1) + key
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first, len(first)

"""Evidence pruning of junction-tree propagation: only the clique cells a row's evidence leaves.

Hard evidence on a variable zeroes, after propagation, every cell of every clique and separator
that disagrees with the observed state. The dense kernels (:mod:`dpgm.inference._kernels`) still
visit those cells; the pruned kernels (:mod:`dpgm.inference._pruned_kernels`) visit only the
consistent ones, which is the junction tree of the network with the observed variables
instantiated (removed from every clique): a clique's table shrinks by the product of the
cardinalities of its observed variables. On water (width 10, 3.4e6 cells) ten observed
variables leave ~10^5 cells per row on average.

The cells to visit depend only on which variables are observed (the missingness pattern), so
rows are grouped by pattern: a pattern's cell lists are built once, and each row only moves each
table's start by its observed codes. The dense kernel runs blocks of rows side by side and costs
less per cell, so each row goes to whichever kernel visits fewer cells, weighted by their measured
cost per cell (:func:`dense_advantage`): :func:`pruned_rows` decides from the row's pattern and how
many rows share it, and
:func:`routed_posteriors` / :func:`routed_expected_counts` send each row to its kernel.

Examples
--------
>>> import numpy as np
>>> from dpgm.inference.propagation import compile_layout
>>> from dpgm.inference.triangulation import build_tree
>>> cards = {"a": 2, "b": 3, "c": 2}
>>> structure = build_tree(list(cards), cards, [("a", "b"), ("b", "c")])
>>> grids = compile_grids(structure, list(cards), cards)
>>> pruned_cells(grids, np.array([[False, False, False], [False, True, False]]), np.arange(3)).tolist()
[12, 4]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dpgm.inference import propagation
from dpgm.inference._pruned_kernels import _pruned_kernel
from dpgm.inference.propagation import SoftEvidence, TreeLayout
from dpgm.inference.triangulation import TreeStructure

__all__ = ["EvidenceGrids", "compile_grids", "dense_advantage", "expected_counts", "posteriors", "pruned_cells",
           "pruned_rows", "routed_expected_counts", "routed_posteriors"]


@dataclass(frozen=True, eq=False)
class EvidenceGrids:
    """Variables and C-order strides of every clique and separator table (built by :func:`compile_grids`).

    Tables ``0 .. n-1`` are the cliques, ``n .. 2n-1`` the separators to each clique's parent.

    Attributes
    ----------
    grid_ptr, grid_var, grid_stride
        Table ``t``'s variables (indices into the variable order) ``grid_var[grid_ptr[t]:grid_ptr[t + 1]]``
        and their strides in the table's flat C-order cells.
    table_offset
        Start of each table in the flat clique (``0 .. n-1``) or separator (``n .. 2n-1``) arrays.
    card
        States per variable.
    log_size
        ``log`` of each table's cells (cliques, then separators).
    membership
        ``(n_variables, 2n)``: ``log card(v)`` where table ``t`` holds ``v``, else 0.
    """

    grid_ptr: np.ndarray
    grid_var: np.ndarray
    grid_stride: np.ndarray
    table_offset: np.ndarray
    card: np.ndarray
    log_size: np.ndarray
    membership: np.ndarray

    @property
    def maps(self) -> tuple[np.ndarray, ...]:
        """The grid arrays in the kernels' argument order."""
        return (self.grid_ptr, self.grid_var, self.grid_stride, self.table_offset)


def compile_grids(structure: TreeStructure, variables: Sequence[str], cardinalities: Mapping[str, int]
                  ) -> EvidenceGrids:
    """The tables' variables and strides of a junction tree (the layout of :func:`~propagation.compile_layout`)."""
    index = {v: i for i, v in enumerate(variables)}
    n = len(structure.cliques)
    scopes = [*structure.cliques, *[structure.separator(i) if structure.parent[i] >= 0 else () for i in range(n)]]
    sizes = [math.prod(cardinalities[v] for v in s) for s in scopes]
    clique_sizes, sep_sizes = sizes[:n], [s if structure.parent[i] >= 0 else 0 for i, s in enumerate(sizes[n:])]
    table_offset = np.concatenate([np.cumsum([0, *clique_sizes[:-1]]), np.cumsum([0, *sep_sizes[:-1]])])
    ptr, var, stride = [0], [], []
    membership = np.zeros((len(variables), 2 * n))
    for t, scope in enumerate(scopes):
        step = 1
        strides = []
        for v in reversed(scope):
            strides.append(step)
            step *= cardinalities[v]
        var += [index[v] for v in scope]
        stride += strides[::-1]
        ptr.append(len(var))
        for v in scope:
            membership[index[v], t] = math.log(cardinalities[v])
    return EvidenceGrids(
        grid_ptr=np.array(ptr, dtype=np.int64), grid_var=np.array(var, dtype=np.int64),
        grid_stride=np.array(stride, dtype=np.int64), table_offset=table_offset.astype(np.int64),
        card=np.array([cardinalities[v] for v in variables], dtype=np.int64),
        log_size=np.log(np.maximum(sizes, 1)), membership=membership)


def pruned_cells(grids: EvidenceGrids, observed_mask: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Clique cells the pruned kernel visits per row (``observed_mask``: ``(B, k)``, True = observed)."""
    n = len(grids.log_size) // 2
    log_cut = np.zeros((len(observed_mask), n))
    for j, v in enumerate(observed):  # no BLAS call: a thread pool's start-up costs more than these sums
        log_cut += observed_mask[:, j, None] * grids.membership[v, :n]
    return np.rint(np.exp(grids.log_size[:n] - log_cut).sum(axis=1)).astype(np.int64)


_PRUNED_COST = 2.5  # per cell, pruned vs dense at equal blocks of rows


def _efficiency(block: np.ndarray | int) -> np.ndarray:
    """Cells per unit time of a kernel running ``block`` rows side by side, relative to one row (measured ~5x at 16+)."""
    return np.minimum(5.0, 1.0 + np.log2(np.maximum(block, 1)))


def dense_advantage(layout: TreeLayout, n_rows: int, pattern_rows: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """How many times less the dense kernel spends per clique cell than the pruned one, per row.

    Both kernels run blocks of rows side by side (the dense one any rows, :meth:`TreeLayout.block`; the
    pruned one the rows of one missingness pattern, ``pattern_rows`` of them, ``cells`` each), which is
    ~5x cheaper per cell from 16 rows on; at equal blocks the pruned kernel costs ~1-2.5x per cell
    (gathering its tables, building each pattern's compact tree; more on small trees). Measured on
    alarm, insurance and water.
    """
    pruned_block = np.minimum(np.minimum(256, pattern_rows), (1 << 19) // np.maximum(cells, 1))
    return _PRUNED_COST * _efficiency(layout.block(n_rows)) / _efficiency(pruned_block)


def pruned_rows(layout: TreeLayout, grids: EvidenceGrids, codes: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Rows (of ``codes``, ``(B, k)``) the pruned kernel answers faster than the dense one."""
    if codes.shape[1] == 0 or len(codes) == 0:
        return np.zeros(len(codes), dtype=bool)
    if pruned_cells(grids, np.ones((1, len(observed)), dtype=bool), observed)[0] * _PRUNED_COST >= layout.n_cells:
        return np.zeros(len(codes), dtype=bool)  # not even every column observed would pay
    cells = pruned_cells(grids, codes >= 0, observed)
    order, pattern = _by_pattern(codes)
    pattern_rows = np.empty(len(codes), dtype=np.int64)
    pattern_rows[order] = np.bincount(pattern)[pattern]
    return cells * dense_advantage(layout, len(codes), pattern_rows, cells) < layout.n_cells


def _by_pattern(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row order grouping rows by missingness pattern, and each sorted row's pattern id."""
    mask = np.packbits(codes >= 0, axis=1)
    if mask.shape[1] == 0:
        return np.arange(len(codes)), np.zeros(len(codes), dtype=np.int64)
    _, inverse = np.unique(mask, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    return order, np.ascontiguousarray(inverse[order].astype(np.int64))


def _run(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
         observed: np.ndarray, weights: np.ndarray | None, targets: np.ndarray, target_offset: np.ndarray):
    order, pattern = _by_pattern(codes)
    capacity = max(1, int(pruned_cells(grids, codes >= 0, observed).max(initial=1)))
    rows_per_pattern = int(np.bincount(pattern).max(initial=1))
    block = min(256, max(1, (1 << 19) // capacity), rows_per_pattern)
    log_evidence = np.empty(len(codes))
    accumulate = weights is not None
    out = np.empty((0 if accumulate else len(codes), int(target_offset[-1])))
    totals = np.zeros_like(base) if accumulate else np.zeros(0)
    sorted_weights = np.ascontiguousarray(weights[order]) if accumulate else np.zeros(0)
    _pruned_kernel(np.ascontiguousarray(codes[order]), pattern, sorted_weights, observed, grids.card, base, base_log,
                   *grids.maps, *layout.maps, targets, target_offset, capacity, block, log_evidence, out, totals)
    result_log = np.empty_like(log_evidence)
    result_log[order] = log_evidence
    if accumulate:
        return result_log, totals
    result = np.empty_like(out)
    result[order] = out
    return result_log, result


def posteriors(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
               observed: np.ndarray, targets: np.ndarray, target_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)`` and the posterior marginals of ``targets`` side by side (NaN for rows of probability 0).

    The same answer as :func:`dpgm.inference.propagation.posteriors` without soft evidence.
    """
    return _run(layout, grids, base, base_log, codes, observed, None, targets, target_offset)


def expected_counts(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
                    observed: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)``, and ``sum_r w_r P(x_C | e_r)`` of every clique as flat tables (EM's E step).

    The same answer as :func:`dpgm.inference.propagation.expected_counts` without soft evidence.
    """
    empty = np.zeros(0, dtype=np.int64)
    return _run(layout, grids, base, base_log, codes, observed, np.asarray(weights, dtype=float), empty,
                np.zeros(1, dtype=np.int64))


def routed_posteriors(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float,
                      codes: np.ndarray, observed: np.ndarray, soft: SoftEvidence, targets: np.ndarray,
                      target_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dpgm.inference.propagation.posteriors`, each row through the kernel that visits fewer cells."""
    chosen = pruned_rows(layout, grids, codes, observed) if soft.variable.size == 0 else np.zeros(0, dtype=bool)
    if not chosen.any():
        return propagation.posteriors(layout, base, base_log, codes, observed, soft, targets, target_offset)
    log_evidence = np.empty(len(codes))
    out = np.empty((len(codes), int(target_offset[-1])))
    log_evidence[chosen], out[chosen] = posteriors(layout, grids, base, base_log, codes[chosen], observed, targets,
                                                   target_offset)
    rest = ~chosen
    if rest.any():
        log_evidence[rest], out[rest] = propagation.posteriors(
            layout, base, base_log, np.ascontiguousarray(codes[rest]), observed, SoftEvidence.none(int(rest.sum())),
            targets, target_offset)
    return log_evidence, out


def routed_expected_counts(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float,
                           codes: np.ndarray, observed: np.ndarray, weights: np.ndarray,
                           soft: SoftEvidence) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dpgm.inference.propagation.expected_counts`, each row through the kernel that visits fewer cells."""
    chosen = pruned_rows(layout, grids, codes, observed) if soft.variable.size == 0 else np.zeros(0, dtype=bool)
    if not chosen.any():
        return propagation.expected_counts(layout, base, base_log, codes, observed, weights, soft)
    log_evidence = np.empty(len(codes))
    log_evidence[chosen], totals = expected_counts(layout, grids, base, base_log, codes[chosen], observed,
                                                   weights[chosen])
    rest = ~chosen
    if rest.any():
        log_evidence[rest], dense = propagation.expected_counts(
            layout, base, base_log, np.ascontiguousarray(codes[rest]), observed, np.ascontiguousarray(weights[rest]))
        totals += dense
    return log_evidence, totals

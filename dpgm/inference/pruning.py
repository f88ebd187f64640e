"""Evidence pruning of junction-tree propagation: only the clique cells a row's evidence leaves.

Hard evidence on a variable zeroes, after propagation, every cell of every clique and separator
that disagrees with the observed state. The dense kernels (:mod:`dpgm.inference._kernels`) still
visit those cells; the pruned kernels (:mod:`dpgm.inference._pruned_kernels`) visit only the
consistent ones, which is the junction tree of the network with the observed variables
instantiated (removed from every clique): a clique's table shrinks by the product of the
cardinalities of its observed variables. On water (width 10, 3.4e6 cells) ten observed
variables leave ~10^5 cells per row on average.

The cells to visit depend only on which variables are observed (the missingness pattern), so
rows are grouped by pattern: a pattern's compact tree is built once, each row only moves each
table's start by its observed codes, and the rows of a pattern run side by side. Rows that share
no pattern run one at a time, which costs several times more per cell than the dense kernel's
blocks; so only the columns that remove the most cells may be compacted (the other observed
variables zero cells, as in the dense kernel), trading smaller trees against larger blocks.
:func:`plan` picks those columns and the rows worth pruning from a cost model measured on the
shipped networks; :func:`routed_posteriors` / :func:`routed_expected_counts` send each row to its
kernel.

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
from dpgm.inference._pruned_kernels import _pruned_cells, _pruned_kernel
from dpgm.inference.propagation import SoftEvidence, TreeLayout
from dpgm.inference.triangulation import TreeStructure

__all__ = ["MIN_CELLS", "EvidenceGrids", "compile_grids", "expected_counts", "plan", "posteriors", "pruned_cells",
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
    out = np.empty(len(observed_mask), dtype=np.int64)
    _pruned_cells(np.ascontiguousarray(observed_mask, dtype=np.bool_), np.ascontiguousarray(grids.membership[observed, :n]),
                  grids.log_size[:n], out)
    return out


#: Trees with fewer clique cells always take the dense kernel: its blocks of rows win there, and planning
#: would cost more than it saves (alarm, child, hepar2, win95pts: 600-2,700 cells).
MIN_CELLS = 4096

#: Cost per cell of the pruned kernel over the dense one at equal blocks of rows (gathering its tables and
#: building each pattern's compact tree, against blocks padded to whole vectors and posteriors read from the
#: smallest clique): measured 0.8-1x on insurance and hailfinder; 0.8 routes every row of both to the pruned
#: kernel (1.3-1.5x faster than 1.0 or the former 2.5 on hailfinder, which then took the dense kernel alone).
_PRUNED_COST = 0.8


def _efficiency(block: np.ndarray | int) -> np.ndarray:
    """Cells per unit time of a kernel running ``block`` rows side by side, relative to one row.

    Both kernels run blocks of rows side by side (the dense one any rows, :meth:`TreeLayout.block`; the
    pruned one the rows of one pattern), measured ~5x cheaper per cell from 16 rows on.
    """
    return np.minimum(5.0, 1.0 + np.log2(np.maximum(block, 1)))


def _pattern_ids(mask: np.ndarray) -> np.ndarray:
    """Each row's pattern as an int64 key, equal for equal rows of ``mask`` (``(B, k)`` booleans)."""
    if mask.shape[1] <= 62:
        return mask.astype(np.int64) @ (np.int64(1) << np.arange(mask.shape[1], dtype=np.int64))
    _, inverse = np.unique(np.packbits(mask, axis=1), axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _pattern_rows(mask: np.ndarray) -> np.ndarray:
    """How many rows share each row's pattern (``mask``: ``(B, k)`` booleans)."""
    _, inverse, counts = np.unique(_pattern_ids(mask), return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)]


def plan(layout: TreeLayout, grids: EvidenceGrids, codes: np.ndarray, observed: np.ndarray,
         sample: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Which columns to compact, and which rows (of ``codes``, ``(B, k)``) the pruned kernel answers.

    Compacting a column removes its observed variable from every clique but splits the rows into
    more patterns (smaller blocks of rows side by side); the columns whose observation removes the
    most cells come first, and the number of them is chosen on an evenly spaced sample of ``sample``
    rows by a cost model: cells per row, times ``_PRUNED_COST`` for the pruned kernel, divided by the
    efficiency of each kernel's blocks of rows (:func:`_efficiency`). Returns ``(compact, rows)``
    boolean masks; no row when pruning does not pay.
    """
    n_rows, k = codes.shape
    nothing = np.ones(k, dtype=bool), np.zeros(n_rows, dtype=bool)
    if k == 0 or n_rows == 0 or layout.n_cells < MIN_CELLS:
        return nothing
    if pruned_cells(grids, np.ones((1, k), dtype=bool), observed)[0] * _PRUNED_COST >= layout.n_cells:
        return nothing  # not even every column observed would pay
    picked = np.unique(np.linspace(0, n_rows - 1, min(sample, n_rows)).astype(np.int64))
    mask = codes[picked] >= 0
    n = len(grids.log_size) // 2
    removed = np.exp(grids.log_size[:n]) * (1.0 - np.exp(-grids.membership[observed, :n]))
    rank = np.argsort(-(mask.mean(axis=0) * removed.sum(axis=1)), kind="stable")
    dense_cost = layout.n_cells / _efficiency(layout.block(n_rows))
    scale = n_rows / len(picked)
    best, best_columns = len(picked) * dense_cost * 0.9, None  # pruning must save at least a tenth
    for m in sorted({min(m, k) for m in (1, 2, 3, 4, 6, 8, 10, 12, 16, k)}):
        columns = np.zeros(k, dtype=bool)
        columns[rank[:m]] = True
        cells = pruned_cells(grids, mask & columns, observed)
        in_sample = _pattern_rows(mask & columns)  # a pattern seen once in the sample may be unique: count it once
        shared = np.where(in_sample >= 2, in_sample * scale, 1.0)
        block = np.minimum(np.minimum(256, shared), (1 << 19) // np.maximum(cells, 1))
        cost = np.minimum(cells * _PRUNED_COST / _efficiency(block), dense_cost).sum()
        if cost < best:
            best, best_columns = cost, columns
    if best_columns is None:
        return nothing
    masked = (codes >= 0) & best_columns
    cells = pruned_cells(grids, masked, observed)
    block = np.minimum(np.minimum(256, _pattern_rows(masked)), (1 << 19) // np.maximum(cells, 1))
    return best_columns, cells * _PRUNED_COST / _efficiency(block) < dense_cost


def pruned_rows(layout: TreeLayout, grids: EvidenceGrids, codes: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Rows (of ``codes``, ``(B, k)``) the pruned kernel answers faster than the dense one (see :func:`plan`)."""
    return plan(layout, grids, codes, observed)[1]


def _by_pattern(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row order grouping rows by pattern (``mask``: ``(B, k)`` booleans), and each sorted row's pattern id."""
    _, inverse = np.unique(_pattern_ids(mask), return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    return order, np.ascontiguousarray(inverse[order].astype(np.int64))


def _run(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
         observed: np.ndarray, weights: np.ndarray | None, targets: np.ndarray, target_offset: np.ndarray,
         compact: np.ndarray | None):
    compact = np.ones(codes.shape[1], dtype=bool) if compact is None else compact
    masked = (codes >= 0) & compact
    order, pattern = _by_pattern(masked)
    capacity = max(1, int(pruned_cells(grids, masked, observed).max(initial=1)))
    rows_per_pattern = int(np.bincount(pattern).max(initial=1))
    block = min(256, max(1, (1 << 19) // capacity), rows_per_pattern)
    log_evidence = np.empty(len(codes))
    accumulate = weights is not None
    out = np.empty((0 if accumulate else len(codes), int(target_offset[-1])))
    totals = np.zeros_like(base) if accumulate else np.zeros(0)
    sorted_weights = np.ascontiguousarray(weights[order]) if accumulate else np.zeros(0)
    _pruned_kernel(np.ascontiguousarray(codes[order]), pattern, compact, sorted_weights, observed, grids.card, base, base_log,
                   *grids.maps, *layout.maps, targets, target_offset, capacity, block, order, log_evidence, out, totals)
    return log_evidence, (totals if accumulate else out)


def posteriors(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
               observed: np.ndarray, targets: np.ndarray, target_offset: np.ndarray,
               compact: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)`` and the posterior marginals of ``targets`` side by side (NaN for rows of probability 0).

    The same answer as :func:`dpgm.inference.propagation.posteriors` without soft evidence. ``compact``
    (default all) marks the columns whose variables leave the cliques; the others zero cells.
    """
    return _run(layout, grids, base, base_log, codes, observed, None, targets, target_offset, compact)


def expected_counts(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float, codes: np.ndarray,
                    observed: np.ndarray, weights: np.ndarray,
                    compact: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``log P(e)``, and ``sum_r w_r P(x_C | e_r)`` of every clique as flat tables (EM's E step).

    The same answer as :func:`dpgm.inference.propagation.expected_counts` without soft evidence
    (``compact`` as in :func:`posteriors`).
    """
    empty = np.zeros(0, dtype=np.int64)
    return _run(layout, grids, base, base_log, codes, observed, np.asarray(weights, dtype=float), empty,
                np.zeros(1, dtype=np.int64), compact)


def routed_posteriors(layout: TreeLayout, grids: EvidenceGrids, base: np.ndarray, base_log: float,
                      codes: np.ndarray, observed: np.ndarray, soft: SoftEvidence, targets: np.ndarray,
                      target_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dpgm.inference.propagation.posteriors`, each row through the kernel that visits fewer cells."""
    compact, chosen = plan(layout, grids, codes, observed) if soft.variable.size == 0 else (None, np.zeros(0, bool))
    if not chosen.any():
        return propagation.posteriors(layout, base, base_log, codes, observed, soft, targets, target_offset)
    if chosen.all():
        return posteriors(layout, grids, base, base_log, codes, observed, targets, target_offset, compact)
    log_evidence = np.empty(len(codes))
    out = np.empty((len(codes), int(target_offset[-1])))
    log_evidence[chosen], out[chosen] = posteriors(layout, grids, base, base_log, codes[chosen], observed, targets,
                                                   target_offset, compact)
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
    compact, chosen = plan(layout, grids, codes, observed) if soft.variable.size == 0 else (None, np.zeros(0, bool))
    if not chosen.any():
        return propagation.expected_counts(layout, base, base_log, codes, observed, weights, soft)
    if chosen.all():
        return expected_counts(layout, grids, base, base_log, codes, observed, weights, compact)
    log_evidence = np.empty(len(codes))
    log_evidence[chosen], totals = expected_counts(layout, grids, base, base_log, codes[chosen], observed,
                                                   weights[chosen], compact)
    rest = ~chosen
    if rest.any():
        log_evidence[rest], dense = propagation.expected_counts(
            layout, base, base_log, np.ascontiguousarray(codes[rest]), observed, np.ascontiguousarray(weights[rest]))
        totals += dense
    return log_evidence, totals

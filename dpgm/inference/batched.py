"""Batched junction-tree inference: many evidence rows through one compiled tree.

The engine is Hugin propagation (Jensen, Lauritzen and Olesen 1990) run row by
row inside a compiled numba kernel over flat clique tables:

* **compile once per structure.** Every clique table is a flat C-order array;
  for each tree edge two index maps (child cell -> separator cell, parent cell
  -> separator cell) are built once with NumPy. A row's propagation is then a
  few passes of gathers/scatters over the tables, ~10 floating-point operations
  per clique cell, with no Python, no allocation and no einsum dispatch per row.
* **Hugin, not Shafer-Shenoy.** Hugin keeps one working table per clique and
  one per separator and updates them in place (collect multiplies the
  separator message into the parent; distribute multiplies the child by
  new/old separator with 0/0 = 0). Per row this costs O(total table size)
  memory and about one pass per incident edge, whereas Shafer-Shenoy must hold
  every directed message and recombine all incoming messages per clique (a
  product of deg(C) tables per outgoing message). Hugin's one drawback — a
  division — is harmless here: a zero old separator entry always meets a zero
  clique entry (0/0 = 0).
* **scaling.** Each clique's initial table (the product of the factors assigned
  to it, each factor first divided by its largest entry) is stored with its log
  scale. Each collect message is divided by its sum and the log of the sum is
  accumulated, the child clique rescaled with it, and each root is normalized
  at the end: log Z (or log P(evidence)) is the sum of those logs, and no
  table ever under- or overflows because of the model's size. As in any
  scaled forward recursion, a cell smaller than ~1e-308 times the largest term
  of the same sum is lost.
* **evidence.** Hard evidence zeroes the cells of the variable's home clique
  (the smallest clique holding it) that disagree with the observed code; soft
  evidence multiplies those cells by the likelihood of their state. ``-1``
  means unobserved. A row whose evidence has probability zero gets
  ``log P = -inf`` and contributes nothing else (never NaN).
* **distinct patterns once.** ``expected_counts`` and ``posteriors`` first
  reduce the rows to their distinct evidence patterns (a mixed-radix key and
  ``np.unique``) with summed weights, then run the kernel once per pattern.
* **EM form.** ``expected_counts`` adds ``w * P(x_C | e)`` of each row into one
  accumulator per clique inside the kernel: memory is the total table size,
  whatever the number of rows, so no batch size has to be chosen.

References
----------
Jensen, F. V., Lauritzen, S. L. and Olesen, K. G. (1990). Bayesian updating in
causal probabilistic networks by local computations. *Computational Statistics
Quarterly* 4, 269-282.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numba
import numpy as np
import opt_einsum

from dpgm.inference.triangulation import TreeStructure, build_tree

__all__ = ["BatchedTree", "ImpossibleEvidenceError"]


class ImpossibleEvidenceError(ValueError):
    """A row's evidence has probability zero under the model.

    Attributes
    ----------
    row
        Index of the first such row in the ``codes`` given.
    """

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row

    def __reduce__(self):  # keep the row when pickled across a cluster
        return (type(self), (self.args[0], self.row))


# -- the compiled kernels ---------------------------------------------------------------


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _load_row(work, base, b, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state, var_home,
              clique_offset):
    """Copy the clique tables and enter one row's hard and soft evidence."""
    work[:] = base
    for j in range(codes.shape[1]):
        code = codes[b, j]
        if code < 0:
            continue
        v = observed_var[j]
        h = var_home[v]
        start = clique_offset[h]
        size = clique_offset[h + 1] - start
        states = var_state[var_offset[v]: var_offset[v] + size]
        for cell in range(size):
            if states[cell] != code:
                work[start + cell] = 0.0
    for j in range(soft_var.shape[0]):
        v = soft_var[j]
        h = var_home[v]
        start = clique_offset[h]
        size = clique_offset[h + 1] - start
        states = var_state[var_offset[v]: var_offset[v] + size]
        for cell in range(size):
            work[start + cell] *= soft[b, soft_offset[j] + states[cell]]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                var_home, clique_offset):
    """Copy the clique tables for a block of rows (cells x rows) and enter their evidence."""
    for cell in range(base.shape[0]):
        value = base[cell]
        for r in range(rows):
            work[cell, r] = value
    for j in range(codes.shape[1]):
        v = observed_var[j]
        h = var_home[v]
        start = clique_offset[h]
        for cell in range(clique_offset[h + 1] - start):
            state = var_state[var_offset[v] + cell]
            for r in range(rows):
                code = codes[r0 + r, j]
                if code >= 0 and code != state:
                    work[start + cell, r] = 0.0
    for j in range(soft_var.shape[0]):
        v = soft_var[j]
        h = var_home[v]
        start = clique_offset[h]
        for cell in range(clique_offset[h + 1] - start):
            column = soft_offset[j] + var_state[var_offset[v] + cell]
            for r in range(rows):
                work[start + cell, r] *= soft[r0 + r, column]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset, up_index,
                   down_index, down_offset):
    """Hugin collect and distribute with sum for a block of rows; ``log_total[r]`` gets log of each row's total.

    On return every clique table holds the posterior marginal of its clique for
    each row (sums to 1), or zeros for a row of probability zero (``-inf``).
    """
    n = order.shape[0]
    for r in range(rows):
        log_total[r] = 0.0
    for k in range(n):
        c = order[k]
        p = parent[c]
        start, stop = clique_offset[c], clique_offset[c + 1]
        for r in range(rows):
            total[r] = 0.0
        if p < 0:
            for cell in range(start, stop):
                for r in range(rows):
                    total[r] += work[cell, r]
        else:
            s0, s1 = sep_offset[c], sep_offset[c + 1]
            for s in range(s0, s1):
                for r in range(rows):
                    sep[s, r] = 0.0
            for cell in range(start, stop):
                s = up_index[cell]
                for r in range(rows):
                    sep[s, r] += work[cell, r]
            for s in range(s0, s1):
                for r in range(rows):
                    total[r] += sep[s, r]
        for r in range(rows):
            if total[r] > 0.0:
                log_total[r] += math.log(total[r])
                total[r] = 1.0 / total[r]
            else:
                log_total[r] = -np.inf
                total[r] = 0.0
        for cell in range(start, stop):
            for r in range(rows):
                work[cell, r] *= total[r]
        if p < 0:
            continue
        for s in range(sep_offset[c], sep_offset[c + 1]):
            for r in range(rows):
                sep[s, r] *= total[r]
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            s = down_index[d0 + j]
            for r in range(rows):
                work[p0 + j, r] *= sep[s, r]
    for k in range(n - 1, -1, -1):
        c = order[k]
        p = parent[c]
        if p < 0:
            continue
        s0, s1 = sep_offset[c], sep_offset[c + 1]
        for s in range(s1 - s0):
            for r in range(rows):
                scratch[s, r] = 0.0
        p0 = clique_offset[p]
        d0 = down_offset[c]
        for j in range(clique_offset[p + 1] - p0):
            s = down_index[d0 + j] - s0
            for r in range(rows):
                scratch[s, r] += work[p0 + j, r]
        for s in range(s1 - s0):  # the Hugin update ratio new / old, with 0 / 0 = 0
            for r in range(rows):
                old = sep[s0 + s, r]
                scratch[s, r] = scratch[s, r] / old if old > 0.0 else 0.0
        for cell in range(clique_offset[c], clique_offset[c + 1]):
            s = up_index[cell] - s0
            for r in range(rows):
                work[cell, r] *= scratch[s, r]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _posteriors_kernel(codes, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent,
                       clique_offset, sep_offset, up_index, down_index, down_offset, var_offset, var_state,
                       var_home, targets, target_offset, block, out_log, out):
    work = np.empty((base.shape[0], block))
    sep = np.empty((sep_offset[-1], block))
    scratch = np.empty((sep_offset[-1], block))
    total = np.empty(block)
    log_total = np.empty(block)
    for r0 in range(0, codes.shape[0], block):
        rows = min(block, codes.shape[0] - r0)
        _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                    var_home, clique_offset)
        _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset,
                       up_index, down_index, down_offset)
        for r in range(rows):
            out_log[r0 + r] = log_total[r] + base_log
        for t in range(targets.shape[0]):
            v = targets[t]
            h = var_home[v]
            start = clique_offset[h]
            o = target_offset[t]
            card = target_offset[t + 1] - o
            for r in range(rows):
                for s in range(card):
                    out[r0 + r, o + s] = 0.0
            for cell in range(clique_offset[h + 1] - start):
                column = o + var_state[var_offset[v] + cell]
                for r in range(rows):
                    out[r0 + r, column] += work[start + cell, r]
            for r in range(rows):
                if log_total[r] == -np.inf:
                    for s in range(card):
                        out[r0 + r, o + s] = np.nan
                    continue
                norm = 0.0
                for s in range(card):
                    norm += out[r0 + r, o + s]
                for s in range(card):
                    out[r0 + r, o + s] /= norm


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _expected_kernel(codes, weights, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent,
                     clique_offset, sep_offset, up_index, down_index, down_offset, var_offset, var_state,
                     var_home, block, out_log, totals):
    work = np.empty((base.shape[0], block))
    sep = np.empty((sep_offset[-1], block))
    scratch = np.empty((sep_offset[-1], block))
    total = np.empty(block)
    log_total = np.empty(block)
    w = np.empty(block)
    for r0 in range(0, codes.shape[0], block):
        rows = min(block, codes.shape[0] - r0)
        _load_block(work, base, r0, rows, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                    var_home, clique_offset)
        _sum_propagate(work, sep, scratch, total, log_total, rows, order, parent, clique_offset, sep_offset,
                       up_index, down_index, down_offset)
        for r in range(rows):
            out_log[r0 + r] = log_total[r] + base_log
            w[r] = weights[r0 + r] if log_total[r] > -np.inf else 0.0
        for cell in range(base.shape[0]):
            acc = 0.0
            for r in range(rows):
                acc += w[r] * work[cell, r]
            totals[cell] += acc


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _map_kernel(codes, observed_var, soft, soft_var, soft_offset, base, base_log, order, parent, clique_offset,
                sep_offset, up_index, down_index, down_offset, var_offset, var_state, var_home, out, out_log):
    work = np.empty_like(base)
    sep = np.empty(sep_offset[-1])
    chosen = np.empty(parent.shape[0], dtype=np.int64)
    n = order.shape[0]
    for b in range(codes.shape[0]):
        _load_row(work, base, b, codes, observed_var, soft, soft_var, soft_offset, var_offset, var_state,
                  var_home, clique_offset)
        log_best = base_log
        impossible = False
        for k in range(n):  # max-product collect
            c = order[k]
            p = parent[c]
            start, stop = clique_offset[c], clique_offset[c + 1]
            if p < 0:
                top = 0.0
                best = start
                for cell in range(start, stop):
                    if work[cell] > top:
                        top = work[cell]
                        best = cell
                if not top > 0.0:
                    impossible = True
                    break
                log_best += math.log(top)
                chosen[c] = best - start
                continue
            s0, s1 = sep_offset[c], sep_offset[c + 1]
            for s in range(s0, s1):
                sep[s] = 0.0
            for cell in range(start, stop):
                if work[cell] > sep[up_index[cell]]:
                    sep[up_index[cell]] = work[cell]
            top = 0.0
            for s in range(s0, s1):
                if sep[s] > top:
                    top = sep[s]
            if not top > 0.0:
                impossible = True
                break
            for s in range(s0, s1):
                sep[s] /= top
            log_best += math.log(top)
            p0 = clique_offset[p]
            d0 = down_offset[c]
            for j in range(clique_offset[p + 1] - p0):
                work[p0 + j] *= sep[down_index[d0 + j]]
        if impossible:
            out_log[b] = -np.inf
            for v in range(out.shape[1]):
                out[b, v] = -1
            continue
        out_log[b] = log_best
        for k in range(n - 1, -1, -1):  # decode: parents before children
            c = order[k]
            p = parent[c]
            if p < 0:
                continue
            target = down_index[down_offset[c] + chosen[p]]
            start, stop = clique_offset[c], clique_offset[c + 1]
            top = -1.0
            best = start
            for cell in range(start, stop):
                if up_index[cell] == target and work[cell] > top:
                    top = work[cell]
                    best = cell
            chosen[c] = best - start
        for v in range(out.shape[1]):
            out[b, v] = var_state[var_offset[v] + chosen[var_home[v]]]


# -- the compiled layout ----------------------------------------------------------------


def _layout(structure: TreeStructure, variables: Sequence[str], cards: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Flat-table index maps of one junction tree (built once per structure)."""
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
    var_home = np.array([home[v] for v in variables], dtype=np.int64)
    state_parts = [coordinates[home[v]][cliques[home[v]].index(v)].astype(np.int64) for v in variables]
    var_offset = np.concatenate([[0], np.cumsum([len(s) for s in state_parts])]).astype(np.int64)
    return {
        "order": np.array(structure.order, dtype=np.int64),
        "parent": np.array(structure.parent, dtype=np.int64),
        "clique_offset": clique_offset,
        "sep_offset": sep_offset,
        "up_index": up_index,
        "down_index": np.concatenate(down_parts) if down_parts else np.zeros(0, dtype=np.int64),
        "down_offset": down_offset,
        "var_offset": var_offset,
        "var_state": np.concatenate(state_parts) if state_parts else np.zeros(0, dtype=np.int64),
        "var_home": var_home,
    }


def _clique_tables(structure: TreeStructure, variables: Sequence[str], cards: Mapping[str, int],
                   scopes: Sequence[tuple[str, ...]], tables: Sequence[np.ndarray]) -> tuple[np.ndarray, float]:
    """Flat product of the factors of each clique, each factor scaled to max 1, and the log of the scales."""
    symbol = {v: opt_einsum.get_symbol(i) for i, v in enumerate(variables)}
    parts, log_scale = [], 0.0
    for index, clique in enumerate(structure.cliques):
        operands, terms = [], []
        for factor, home in enumerate(structure.assignment):
            if home != index:
                continue
            table = np.asarray(tables[factor], dtype=float)
            top = table.max() if table.size else 0.0
            if top > 0:
                table = table / top
                log_scale += math.log(top)
            operands.append(table)
            terms.append("".join(symbol[v] for v in scopes[factor]))
        shape = [cards[v] for v in clique]
        table = np.ones(shape)
        if operands:
            expression = ",".join([*terms, "".join(symbol[v] for v in clique)]) + "->" + "".join(
                symbol[v] for v in clique)
            table = opt_einsum.contract(expression, *operands, table)
        parts.append(np.ascontiguousarray(table, dtype=float).ravel())
    return np.concatenate(parts), log_scale


def _check_factors(variables, cardinalities, factors) -> tuple[list[tuple[str, ...]], list[np.ndarray]]:
    scopes, tables = [], []
    for scope, table in factors:
        scope = tuple(map(str, scope))
        unknown = [v for v in scope if v not in cardinalities]
        if unknown:
            raise ValueError(f"factor scope {scope!r} names unknown variables {unknown}; known: {list(variables)}")
        table = np.asarray(table, dtype=float)
        expected = tuple(cardinalities[v] for v in scope)
        if table.shape != expected:
            raise ValueError(f"the table over {scope!r} has shape {table.shape!r}, expected {expected!r}")
        if (table < 0).any() or not np.isfinite(table).all():
            raise ValueError(f"the table over {scope!r} must be finite and nonnegative")
        scopes.append(scope)
        tables.append(table)
    return scopes, tables


class BatchedTree:
    """A junction tree over fixed factor scopes, calibrated for batches of evidence rows.

    The array-level engine behind :class:`dpgm.inference.JunctionTree` (which
    takes a model instead of raw factors). Picklable; the compiled index maps
    travel with it, the numba kernels are compiled once per process (cached on
    disk).

    Parameters
    ----------
    variables
        Variable order (the column order of :meth:`map_batch`'s result).
    cardinalities
        States per variable.
    factors
        ``(scope, table)`` pairs, tables nonnegative with axes in scope order (a
        Bayesian network's CPDs or a Markov network's potentials).
    structure
        A tree built for the same scopes (reuse across parameter updates).
    max_batch_cells
        Unused; kept for backward compatibility (the kernel needs no batching).

    Examples
    --------
    >>> import numpy as np
    >>> tree = BatchedTree(["a", "b"], {"a": 2, "b": 2},
    ...                    [(("a",), np.array([0.3, 0.7])), (("b", "a"), np.array([[0.9, 0.2], [0.1, 0.8]]))])
    >>> loglik, counts = tree.expected_counts(np.array([[1], [-1]]), ["b"])
    >>> round(float(np.exp(loglik)), 6)   # P(b=1) * 1
    0.59
    """

    def __init__(
        self,
        variables: Sequence[str],
        cardinalities: Mapping[str, int],
        factors: Sequence[tuple[Sequence[str], np.ndarray]],
        structure: TreeStructure | None = None,
        max_batch_cells: int = 1 << 24,
        *,
        layout: Mapping[str, np.ndarray] | None = None,
    ):
        self.variables = tuple(map(str, variables))
        self.cardinalities = {v: int(cardinalities[v]) for v in self.variables}
        self.scopes, tables = _check_factors(self.variables, self.cardinalities, factors)
        self.structure = structure or build_tree(self.variables, self.cardinalities, self.scopes)
        if len(self.structure.assignment) != len(self.scopes):
            raise ValueError(f"the structure was built for {len(self.structure.assignment)} factors, "
                             f"got {len(self.scopes)}")
        self.max_batch_cells = max_batch_cells
        self._index = {v: i for i, v in enumerate(self.variables)}
        self._layout = dict(layout) if layout is not None else _layout(self.structure, self.variables,
                                                                        self.cardinalities)
        # rows per kernel block: the cells x rows working table stays within ~4 MB (measured best on
        # alarm, hailfinder and insurance; 1 MB blocks were up to 2x slower)
        self._block = int(min(256, max(1, (1 << 19) // max(1, int(self._layout["clique_offset"][-1])))))
        self._tables = tables
        self._base, self._base_log = _clique_tables(self.structure, self.variables, self.cardinalities,
                                                    self.scopes, tables)

    def __reduce__(self):
        # ship the factor tables and the structure, not the flat clique tables and index maps:
        # those are rebuilt on arrival (water: ~0.1 MB pickled instead of 114 MB, ~0.3 s to rebuild)
        return (type(self), (self.variables, self.cardinalities, list(zip(self.scopes, self._tables, strict=True)),
                             self.structure, self.max_batch_cells))

    def with_factors(self, factors: Sequence[tuple[Sequence[str], np.ndarray]]) -> BatchedTree:
        """The same tree with new tables for the same scopes (no re-triangulation, no recompilation)."""
        scopes = [tuple(map(str, s)) for s, _ in factors]
        if scopes != self.scopes:
            raise ValueError(f"with_factors needs the same scopes in the same order: expected {self.scopes!r}, "
                             f"got {scopes!r}")
        return BatchedTree(self.variables, self.cardinalities, factors, self.structure, self.max_batch_cells,
                           layout=self._layout)

    @property
    def width(self) -> int:
        """Treewidth of the triangulation (largest clique size minus one)."""
        return self.structure.width

    @property
    def total_table_size(self) -> int:
        """Cells of all clique tables."""
        return self.structure.total_table_size

    @property
    def potentials(self) -> list[np.ndarray]:
        """Initial clique tables (products of the assigned factors, each scaled to max 1)."""
        offset = self._layout["clique_offset"]
        return [self._base[offset[i]:offset[i + 1]].reshape([self.cardinalities[v] for v in c])
                for i, c in enumerate(self.structure.cliques)]

    # -- evidence ----------------------------------------------------------------------

    def _codes(self, codes: np.ndarray, variables: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        observed = [str(v) for v in variables]
        unknown = [v for v in observed if v not in self._index]
        if unknown:
            raise ValueError(f"evidence variables {unknown} are not model variables; variables: {list(self.variables)}")
        if len(set(observed)) != len(observed):
            raise ValueError(f"evidence variables {observed!r} name a variable twice")
        codes = np.asarray(codes)
        if codes.ndim == 1 and len(observed) == 0:
            codes = codes.reshape(-1, 0)
        if codes.ndim != 2 or codes.shape[1] != len(observed):
            raise ValueError(f"codes must be (rows, {len(observed)}) for variables {observed!r}, "
                             f"got shape {codes.shape!r}")
        if codes.size and not np.issubdtype(codes.dtype, np.integer):
            raise TypeError(f"codes must be integers (-1 = missing), got dtype {codes.dtype}")
        codes = codes.astype(np.int64, copy=False)
        for j, v in enumerate(observed):
            column = codes[:, j]
            bad = (column < -1) | (column >= self.cardinalities[v])
            if bad.any():
                row = int(np.argmax(bad))
                raise ValueError(f"code {int(column[row])!r} of variable {v!r} in row {row} is out of range: "
                                 f"expected -1 (missing) or 0..{self.cardinalities[v] - 1}")
        return np.ascontiguousarray(codes), np.array([self._index[v] for v in observed], dtype=np.int64)

    def _soft(self, soft: Mapping[str, np.ndarray] | None, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        soft = dict(soft or {})
        columns, names = [], []
        for v, values in soft.items():
            if v not in self._index:
                raise ValueError(f"soft evidence on {v!r}, not a model variable; variables: {list(self.variables)}")
            values = np.asarray(values, dtype=float)
            card = self.cardinalities[v]
            if values.shape not in ((card,), (n, card)):
                raise ValueError(f"soft evidence on {v!r} must have shape ({card},) or ({n}, {card}), "
                                 f"got {values.shape!r}")
            if (values < 0).any() or not np.isfinite(values).all():
                raise ValueError(f"soft evidence on {v!r} must be finite and nonnegative, got {values!r}")
            columns.append(np.broadcast_to(values, (n, card)))
            names.append(v)
        offsets = np.concatenate([[0], np.cumsum([c.shape[1] for c in columns])]).astype(np.int64)
        matrix = np.ascontiguousarray(np.concatenate(columns, axis=1)) if columns else np.zeros((n, 0))
        return matrix, np.array([self._index[v] for v in names], dtype=np.int64), offsets

    def _patterns(self, codes: np.ndarray, weights: np.ndarray | None):
        return _unique_rows(codes, weights, None)

    # -- entry points --------------------------------------------------------------------

    def expected_counts(
        self,
        codes: np.ndarray,
        variables: Sequence[str],
        weights: np.ndarray | None = None,
        *,
        soft: Mapping[str, np.ndarray] | None = None,
        errors: str = "ignore",
    ) -> tuple[float, dict[tuple[str, ...], np.ndarray]]:
        """Weighted log-likelihood and weighted sum of clique posteriors over the rows.

        Parameters
        ----------
        codes
            ``(B, k)`` integer codes of the observed variables, ``-1`` = missing.
        variables
            The ``k`` observed variables (the others are latent).
        weights
            Frequency weight per row (default 1).
        soft
            Soft evidence: variable -> likelihoods ``(card,)`` or ``(B, card)``.
        errors
            ``"ignore"``: a row of probability zero (with positive weight) makes the
            log-likelihood ``-inf`` and adds nothing to the counts; ``"raise"``:
            raise :class:`ImpossibleEvidenceError` naming the first such row.

        Returns
        -------
        (float, dict)
            ``sum_b w_b log P(e_b)`` and, per clique scope, ``sum_b w_b P(x_C | e_b)``.
        """
        codes, observed = self._codes(codes, variables)
        n = codes.shape[0]
        weights = np.ones(n) if weights is None else np.asarray(weights, dtype=float).reshape(-1)
        if weights.shape != (n,):
            raise ValueError(f"weights must have one entry per row ({n}), got shape {weights.shape!r}")
        if (weights < 0).any() or not np.isfinite(weights).all():
            raise ValueError("weights must be finite and nonnegative")
        if soft:  # soft evidence may differ per row: no pattern folding
            patterns, pattern_weights, inverse = codes, weights, np.arange(n)
        else:
            patterns, pattern_weights, inverse = _unique_rows(
                codes, weights, [self.cardinalities[self.variables[i]] for i in observed])
        lay = self._layout
        soft, soft_var, soft_offset = self._soft(soft, len(patterns))
        totals = np.zeros_like(self._base)
        log_evidence = np.empty(len(patterns))
        _expected_kernel(patterns, pattern_weights, observed, soft, soft_var, soft_offset, self._base,
                         self._base_log, lay["order"], lay["parent"], lay["clique_offset"], lay["sep_offset"],
                         lay["up_index"], lay["down_index"], lay["down_offset"], lay["var_offset"],
                         lay["var_state"], lay["var_home"], min(self._block, max(1, len(patterns))), log_evidence, totals)
        impossible = (pattern_weights > 0) & ~np.isfinite(log_evidence)
        if impossible.any():
            if errors == "raise":
                row = int(np.argmax(impossible[inverse]))
                raise ImpossibleEvidenceError(
                    f"row {row} (codes {codes[row].tolist()!r} of {[self.variables[i] for i in observed]!r}) "
                    "has probability zero under the model", row)
            loglik = -math.inf
        else:
            positive = pattern_weights > 0
            loglik = float(np.dot(pattern_weights[positive], log_evidence[positive]))
        offset = lay["clique_offset"]
        counts = {c: totals[offset[i]:offset[i + 1]].reshape([self.cardinalities[v] for v in c])
                  for i, c in enumerate(self.structure.cliques)}
        return loglik, counts

    def posteriors(
        self,
        codes: np.ndarray,
        variables: Sequence[str],
        soft: Mapping[str, np.ndarray] | None = None,
        targets: Sequence[str] | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per row: log P(evidence) and each target variable's posterior marginal ``(B, card)``.

        ``soft`` maps variables to likelihood vectors ``(card,)`` or ``(B, card)``
        (soft evidence), multiplied in on top of any hard evidence. ``targets``
        defaults to every variable. Rows of probability zero get ``-inf`` and
        all-NaN posteriors (there is no posterior to report).
        """
        codes, observed = self._codes(codes, variables)
        n = codes.shape[0]
        targets = self.variables if targets is None else tuple(map(str, targets))
        unknown = [v for v in targets if v not in self._index]
        if unknown:
            raise ValueError(f"targets {unknown} are not model variables; variables: {list(self.variables)}")
        if soft:  # soft evidence may differ per row: no pattern folding
            patterns, inverse = codes, None
            soft_matrix, soft_var, soft_offset = self._soft(soft, n)
        else:
            patterns, _, inverse = _unique_rows(codes, None, [self.cardinalities[self.variables[i]]
                                                              for i in observed])
            soft_matrix, soft_var, soft_offset = self._soft(None, len(patterns))
        target_index = np.array([self._index[v] for v in targets], dtype=np.int64)
        target_offset = np.concatenate([[0], np.cumsum([self.cardinalities[v] for v in targets])]).astype(np.int64)
        out = np.full((len(patterns), int(target_offset[-1])), np.nan)
        out_log = np.empty(len(patterns))
        lay = self._layout
        _posteriors_kernel(patterns, observed, soft_matrix, soft_var, soft_offset, self._base, self._base_log,
                           lay["order"], lay["parent"], lay["clique_offset"], lay["sep_offset"], lay["up_index"],
                           lay["down_index"], lay["down_offset"], lay["var_offset"], lay["var_state"],
                           lay["var_home"], target_index, target_offset, min(self._block, max(1, len(patterns))), out_log,
                           out)
        if inverse is not None:
            out, out_log = out[inverse], out_log[inverse]
        return out_log, {v: out[:, target_offset[t]:target_offset[t + 1]] for t, v in enumerate(targets)}

    def map_batch(
        self,
        codes: np.ndarray,
        variables: Sequence[str],
        soft: Mapping[str, np.ndarray] | None = None,
        *,
        return_log_value: bool = False,
    ):
        """Most probable assignment of every variable for each evidence row (max-product).

        Returns ``(B, n_variables)`` codes in :attr:`variables` order; observed
        variables keep their observed value; rows of probability zero are all
        ``-1``. Ties go to the first maximal cell. With ``return_log_value``
        also the log of the unnormalized model value at the assignment (times
        any soft-evidence likelihoods), ``(B,)``.
        """
        codes, observed = self._codes(codes, variables)
        n = codes.shape[0]
        soft_matrix, soft_var, soft_offset = self._soft(soft, n)
        out = np.empty((n, len(self.variables)), dtype=np.int64)
        out_log = np.empty(n)
        lay = self._layout
        _map_kernel(codes, observed, soft_matrix, soft_var, soft_offset, self._base, self._base_log, lay["order"],
                    lay["parent"], lay["clique_offset"], lay["sep_offset"], lay["up_index"], lay["down_index"],
                    lay["down_offset"], lay["var_offset"], lay["var_state"], lay["var_home"], out, out_log)
        return (out, out_log) if return_log_value else out

    def family_counts(
        self, clique_counts: Mapping[tuple[str, ...], np.ndarray], scopes: Sequence[Sequence[str]]
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Tables over ``scopes`` (each inside some clique) summed out of clique tables.

        Each scope is read from the smallest clique that contains it.
        """
        out = {}
        for scope in scopes:
            scope = tuple(scope)
            holders = [c for c in self.structure.cliques if set(scope) <= set(c)]
            if not holders:
                raise ValueError(f"no clique contains the scope {scope!r}; cliques: {list(self.structure.cliques)}")
            clique = min(holders, key=self.structure.table_size)
            table = clique_counts[clique]
            axes = tuple(i for i, v in enumerate(clique) if v not in scope)
            reduced = table.sum(axis=axes) if axes else table
            kept = [v for v in clique if v in scope]
            out[scope] = np.transpose(reduced, [kept.index(v) for v in scope])
        return out


def _unique_rows(codes: np.ndarray, weights: np.ndarray | None, cards: Sequence[int] | None):
    """Distinct evidence rows, their total weights and the index of each row's pattern.

    Columns are packed into mixed-radix int64 keys (``code + 1`` per column, as
    many columns per key as fit in 62 bits); several keys are combined by
    re-numbering, so the cost is a few ``np.unique`` calls on int64 arrays
    (``np.unique(axis=0)`` only when no cardinalities are known).
    """
    n = codes.shape[0]
    weights = np.ones(n) if weights is None else weights
    if codes.shape[1] == 0:
        if not n:
            return codes, np.zeros(0), np.zeros(0, dtype=np.int64)
        return codes[:1], np.array([weights.sum()]), np.zeros(n, dtype=np.int64)
    if cards is None:
        patterns, inverse = np.unique(codes, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        return np.ascontiguousarray(patterns), np.bincount(inverse, weights=weights, minlength=len(patterns)), inverse
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

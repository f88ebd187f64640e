"""Batched junction-tree inference: many evidence rows through one compiled tree.

Shafer-Shenoy message passing on plain arrays with a leading batch axis.
Evidence enters as one indicator vector per observed variable (all ones where
the value is missing), passed as extra operands of the contractions rather than
multiplied into clique tables, so memory per batch row is the size of the
separators, not of the cliques. Every message is rescaled to sum 1 per row and
its log scale accumulated, so nothing under- or overflows; log P(evidence) is
the sum of the collect scales plus the log of the root's total.

The EM form, ``expected_counts``, folds the weighted sum over rows into the
final contraction of each clique (``'b,b...->...'``): the batch x clique
posterior table is never materialized. Identical evidence rows are computed
once (unique patterns with summed weights). Contractions are opt_einsum
expressions compiled once per tree and batch layout.

References
----------
Shafer, G. and Shenoy, P. P. (1990). Probability propagation. *Ann. Math. Artif.
Intell.* 2, 327-351.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import opt_einsum

from dpgm.inference.triangulation import TreeStructure, build_tree

__all__ = ["BatchedTree"]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _symbols(n: int) -> list[str]:
    return [opt_einsum.get_symbol(i) for i in range(n)]


class BatchedTree:
    """A junction tree over fixed factor scopes, calibrated for batches of evidence rows.

    Parameters
    ----------
    variables
        Variable order.
    cardinalities
        States per variable.
    factors
        ``(scope, table)`` pairs, tables nonnegative with axes in scope order (a
        Bayesian network's CPDs or a Markov network's potentials).
    structure
        A tree built for the same scopes (reuse across parameter updates).

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
    ):
        self.variables = tuple(variables)
        self.cardinalities = {v: int(cardinalities[v]) for v in self.variables}
        self.scopes = [tuple(s) for s, _ in factors]
        self.structure = structure or build_tree(self.variables, self.cardinalities, self.scopes)
        self.max_batch_cells = max_batch_cells
        self.potentials = self._clique_potentials([np.asarray(t, dtype=float) for _, t in factors])
        self._neighbours = [[] for _ in self.structure.cliques]
        for child, parent in enumerate(self.structure.parent):
            if parent >= 0:
                self._neighbours[child].append(parent)
                self._neighbours[parent].append(child)
        self._home = {}
        for v in self.variables:
            self._home[v] = min(
                (i for i, c in enumerate(self.structure.cliques) if v in c),
                key=lambda i: self.structure.table_size(self.structure.cliques[i]),
            )

    def with_factors(self, factors: Sequence[tuple[Sequence[str], np.ndarray]]) -> BatchedTree:
        """The same tree with new tables for the same scopes (no re-triangulation)."""
        scopes = [tuple(s) for s, _ in factors]
        if scopes != self.scopes:
            raise ValueError("with_factors needs the same scopes in the same order")
        return BatchedTree(self.variables, self.cardinalities, factors, self.structure, self.max_batch_cells)

    @property
    def width(self) -> int:
        """Treewidth of the triangulation."""
        return self.structure.width

    @property
    def total_table_size(self) -> int:
        """Cells of all clique tables."""
        return self.structure.total_table_size

    def _clique_potentials(self, tables: list[np.ndarray]) -> list[np.ndarray]:
        structure = self.structure
        out = []
        for index, clique in enumerate(structure.cliques):
            operands, subscripts = [], []
            letters = {v: _symbols(len(self.variables))[self.variables.index(v)] for v in clique}
            for factor, home in enumerate(structure.assignment):
                if home == index:
                    operands.append(tables[factor])
                    subscripts.append("".join(letters[v] for v in self.scopes[factor]))
            shape = [self.cardinalities[v] for v in clique]
            if operands:
                present = [v for v in clique if any(v in self.scopes[f] for f, h in enumerate(structure.assignment)
                                                    if h == index)]
                expression = ",".join(subscripts) + "->" + "".join(letters[v] for v in present)
                table = opt_einsum.contract(expression, *operands)
                # factors need not mention every clique variable: broadcast over the others
                table = table.reshape([self.cardinalities[v] if v in present else 1 for v in clique])
                table = np.broadcast_to(table, shape).copy()
            else:
                table = np.ones(shape)
            out.append(table)
        return out

    # -- the batched passes -------------------------------------------------------------

    def _plan(self, observed: tuple[str, ...]):
        return _compile(self.structure, self.variables, tuple(self.cardinalities[v] for v in self.variables),
                        observed, tuple(self._home[v] for v in observed))

    def _calibrate(self, evidence: list[np.ndarray], plan, n: int) -> tuple[list, list, np.ndarray]:
        """Collect and distribute for one batch; returns inward, outward messages and log scales."""
        structure = self.structure
        ones = np.ones(n)
        inward: list[np.ndarray | None] = [None] * len(structure.cliques)
        outward: list[np.ndarray | None] = [None] * len(structure.cliques)
        log_scale = np.zeros(n)
        for clique in structure.order:
            parent = structure.parent[clique]
            children = [c for c in self._neighbours[clique] if c != parent]
            if parent < 0:
                continue
            message = plan.collect[clique](
                self.potentials[clique], *(inward[c] for c in children),
                *(evidence[i] for i in plan.evidence_of[clique]), ones,
            )
            total = message.reshape(n, -1).sum(axis=1)
            safe = np.where(total > 0, total, 1.0)
            inward[clique] = message / safe.reshape((n,) + (1,) * (message.ndim - 1))
            with np.errstate(divide="ignore"):
                log_scale += np.log(total)
        for clique in reversed(structure.order):
            parent = structure.parent[clique]
            if parent < 0:
                continue
            others = [c for c in self._neighbours[parent] if c != clique and c != structure.parent[parent]]
            incoming = [inward[c] for c in others]
            if structure.parent[parent] >= 0:
                incoming.append(outward[parent])
            message = plan.distribute[clique](
                self.potentials[parent], *incoming, *(evidence[i] for i in plan.evidence_of[parent]), ones
            )
            total = message.reshape(n, -1).sum(axis=1)
            outward[clique] = message / np.where(total > 0, total, 1.0).reshape((n,) + (1,) * (message.ndim - 1))
        return inward, outward, log_scale

    def _incoming(self, clique: int, inward, outward) -> list[np.ndarray]:
        parent = self.structure.parent[clique]
        messages = [inward[c] for c in self._neighbours[clique] if c != parent]
        if parent >= 0:
            messages.append(outward[clique])
        return messages

    def _evidence(self, codes: np.ndarray, observed: Sequence[str], soft=None) -> list[np.ndarray]:
        vectors = []
        for j, v in enumerate(observed):
            if soft is not None and v in soft:
                likelihood = np.asarray(soft[v], dtype=float)
                vectors.append(np.broadcast_to(likelihood, (codes.shape[0], self.cardinalities[v])))
                continue
            card = self.cardinalities[v]
            column = codes[:, j].astype(np.int64)
            vector = np.zeros((len(column), card))
            known = column >= 0
            vector[known, column[known]] = 1.0
            vector[~known] = 1.0
            vectors.append(vector)
        return vectors

    def _batch_size(self, n: int) -> int:
        widest = max(self.structure.table_size(c) for c in self.structure.cliques)
        return max(1, min(n, self.max_batch_cells // max(widest, 1)))

    def expected_counts(
        self, codes: np.ndarray, variables: Sequence[str], weights: np.ndarray | None = None
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

        Returns
        -------
        (float, dict)
            ``sum_b w_b log P(e_b)`` (``-inf`` if a row with positive weight is
            impossible) and, per clique scope, ``sum_b w_b P(x_C | e_b)``.
        """
        observed = tuple(variables)
        patterns, pattern_weights = _unique_rows(np.asarray(codes), weights, [self.cardinalities[v] for v in observed])
        plan = self._plan(observed)
        totals = [np.zeros(self.potentials[i].shape) for i in range(len(self.structure.cliques))]
        loglik = 0.0
        size = self._batch_size(len(patterns))
        for start in range(0, len(patterns), size):
            block = patterns[start : start + size]
            w = pattern_weights[start : start + size]
            evidence = self._evidence(block, observed)
            inward, outward, log_scale = self._calibrate(evidence, plan, len(block))
            ones = np.ones(len(block))
            for clique in range(len(self.structure.cliques)):
                incoming = self._incoming(clique, inward, outward)
                local = [*(evidence[i] for i in plan.evidence_of[clique]), ones]
                row_totals = plan.row_total[clique](self.potentials[clique], *incoming, *local)
                if self.structure.parent[clique] < 0:
                    with np.errstate(divide="ignore"):
                        log_scale = log_scale + np.log(row_totals)
                possible = row_totals > 0
                scaled = np.where(possible, w / np.where(possible, row_totals, 1.0), 0.0)
                totals[clique] += plan.weighted[clique](scaled, self.potentials[clique], *incoming, *local)
            impossible = (w > 0) & ~np.isfinite(log_scale)
            if impossible.any():
                loglik = -math.inf
            else:
                loglik += float(np.dot(w[w > 0], log_scale[w > 0]))
        return loglik, {c: t for c, t in zip(self.structure.cliques, totals, strict=True)}

    def posteriors(
        self, codes: np.ndarray, variables: Sequence[str], soft: Mapping[str, np.ndarray] | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per row: log P(evidence) and every variable's posterior marginal ``(B, card)``.

        ``soft`` maps variables to likelihood vectors ``(card,)`` or ``(B, card)``
        (soft evidence), multiplied in as the evidence of those variables.
        """
        soft = dict(soft or {})
        extra = [v for v in soft if v not in variables]
        observed = (*tuple(variables), *extra)
        codes = np.asarray(codes)
        if extra:
            codes = np.concatenate([codes.reshape(codes.shape[0], -1), np.full((codes.shape[0], len(extra)), -1)],
                                   axis=1)
        plan = self._plan(observed)
        n = codes.shape[0]
        log_evidence = np.zeros(n)
        marginals = {v: np.zeros((n, self.cardinalities[v])) for v in self.variables}
        size = self._batch_size(n)
        for start in range(0, n, size):
            block = codes[start : start + size]
            block_soft = {v: (np.asarray(x)[start : start + size] if np.ndim(x) == 2 else x) for v, x in soft.items()}
            evidence = self._evidence(block, observed, block_soft)
            inward, outward, log_scale = self._calibrate(evidence, plan, len(block))
            ones = np.ones(len(block))
            stop = start + len(block)
            for v in self.variables:
                clique = self._home[v]
                incoming = self._incoming(clique, inward, outward)
                local = [*(evidence[i] for i in plan.evidence_of[clique]), ones]
                table = plan.variable_marginal[(clique, v)](self.potentials[clique], *incoming, *local)
                total = table.sum(axis=1, keepdims=True)
                marginals[v][start:stop] = table / np.where(total > 0, total, 1.0)
            roots = [c for c, p in enumerate(self.structure.parent) if p < 0]
            for root in roots:
                incoming = self._incoming(root, inward, outward)
                local = [*(evidence[i] for i in plan.evidence_of[root]), ones]
                with np.errstate(divide="ignore"):
                    log_scale = log_scale + np.log(plan.row_total[root](self.potentials[root], *incoming, *local))
            log_evidence[start:stop] = log_scale
        return log_evidence, marginals

    def map_batch(self, codes: np.ndarray, variables: Sequence[str]) -> np.ndarray:
        """Most probable assignment of every variable for each evidence row (max-product).

        Returns ``(B, n_variables)`` codes in :attr:`variables` order; observed
        variables keep their observed value. Ties go to the lowest code.
        """
        observed = tuple(variables)
        codes = np.asarray(codes)
        n = codes.shape[0]
        structure = self.structure
        result = np.zeros((n, len(self.variables)), dtype=np.int64)
        plan = self._plan(observed)
        size = self._batch_size(n)
        for start in range(0, n, size):
            block = codes[start : start + size]
            b = len(block)
            evidence = self._evidence(block, observed)
            local = []
            for clique, scope in enumerate(structure.cliques):
                table = np.broadcast_to(self.potentials[clique], (b, *self.potentials[clique].shape)).copy()
                for i in plan.evidence_of[clique]:
                    table = table * _on_axes(evidence[i], (observed[i],), scope)
                local.append(table)
            upward: dict[int, np.ndarray] = {}
            for clique in structure.order:
                parent = structure.parent[clique]
                table = local[clique]
                for child in self._neighbours[clique]:
                    if child != parent:
                        table = table * _on_axes(upward[child], _shared(structure, child, clique), structure.cliques[clique])
                local[clique] = table
                if parent >= 0:
                    separator = _shared(structure, clique, parent)
                    axes = tuple(1 + i for i, v in enumerate(structure.cliques[clique]) if v not in separator)
                    message = table.max(axis=axes) if axes else table
                    top = message.reshape(b, -1).max(axis=1)
                    upward[clique] = message / np.where(top > 0, top, 1.0).reshape((b,) + (1,) * (message.ndim - 1))
            assignment: dict[str, np.ndarray] = {}
            rows = np.arange(b)
            for clique in reversed(structure.order):
                scope = structure.cliques[clique]
                table = local[clique]
                fixed = [v for v in scope if v in assignment]
                index = [rows] + [assignment[v] if v in assignment else slice(None) for v in scope]
                # advanced indices on the fixed axes, slices on the free ones
                free = [v for v in scope if v not in assignment]
                if fixed:
                    table = table[tuple(index)] if len(fixed) == len(scope) else _gather(table, scope, assignment, rows)
                flat = table.reshape(b, -1).argmax(axis=1) if free else np.zeros(b, dtype=np.int64)
                if free:
                    for v, values in zip(free, np.unravel_index(flat, [self.cardinalities[u] for u in free]),
                                         strict=True):
                        assignment[v] = values
            for j, v in enumerate(self.variables):
                result[start : start + b, j] = assignment[v]
        return result

    def family_counts(
        self, clique_counts: Mapping[tuple[str, ...], np.ndarray], scopes: Sequence[Sequence[str]]
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Tables over ``scopes`` (each inside some clique) summed out of clique tables."""
        out = {}
        for scope in scopes:
            scope = tuple(scope)
            clique = next(c for c in self.structure.cliques if set(scope) <= set(c))
            table = clique_counts[clique]
            axes = tuple(i for i, v in enumerate(clique) if v not in scope)
            reduced = table.sum(axis=axes) if axes else table
            kept = [v for v in clique if v in scope]
            out[scope] = np.transpose(reduced, [kept.index(v) for v in scope])
        return out


def _shared(structure: TreeStructure, a: int, b: int) -> tuple[str, ...]:
    return tuple(v for v in structure.cliques[a] if v in structure.cliques[b])


def _on_axes(table: np.ndarray, scope: Sequence[str], clique: Sequence[str]) -> np.ndarray:
    """A batched table over ``scope`` reshaped to broadcast against a batched clique table."""
    order = sorted(range(len(scope)), key=lambda i: list(clique).index(scope[i]))
    moved = np.transpose(table, [0] + [1 + i for i in order])
    shape = [table.shape[0]] + [1] * len(clique)
    for i in order:
        shape[1 + list(clique).index(scope[i])] = table.shape[1 + i]
    return moved.reshape(shape)


def _gather(table: np.ndarray, scope: Sequence[str], assignment: Mapping[str, np.ndarray], rows: np.ndarray):
    """Per row, the slice of a batched clique table at the already assigned variables."""
    free = [i for i, v in enumerate(scope) if v not in assignment]
    fixed = [i for i, v in enumerate(scope) if v in assignment]
    moved = np.transpose(table, [0] + [1 + i for i in fixed] + [1 + i for i in free])
    return moved[(rows, *(assignment[scope[i]] for i in fixed))]


def _unique_rows(codes: np.ndarray, weights: np.ndarray | None, cards: Sequence[int]):
    """Distinct evidence rows and their total weights."""
    n = codes.shape[0]
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if codes.shape[1] == 0:
        return codes[:1] if n else codes, np.array([weights.sum()]) if n else np.zeros(0)
    if math.prod(c + 1 for c in cards) < 2**62:
        key = np.zeros(n, dtype=np.int64)
        for j, c in enumerate(cards):
            key = key * (c + 1) + (codes[:, j].astype(np.int64) + 1)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return codes[first], np.bincount(inverse, weights=weights)
    patterns, inverse = np.unique(codes, axis=0, return_inverse=True)
    return patterns, np.bincount(inverse.ravel(), weights=weights)


class _Plan:
    def __init__(self):
        self.collect: dict[int, object] = {}
        self.distribute: dict[int, object] = {}
        self.row_total: dict[int, object] = {}
        self.weighted: dict[int, object] = {}
        self.variable_marginal: dict[tuple[int, str], object] = {}
        self.evidence_of: dict[int, list[int]] = {}


@lru_cache(maxsize=64)
def _compile(structure: TreeStructure, variables: tuple[str, ...], cards: tuple[int, ...],
             observed: tuple[str, ...], homes: tuple[int, ...]) -> _Plan:
    """Einsum expressions for every message and clique total of one tree and evidence layout."""
    card = dict(zip(variables, cards, strict=True))
    symbol = {v: opt_einsum.get_symbol(i + 1) for i, v in enumerate(variables)}
    batch = opt_einsum.get_symbol(0)
    plan = _Plan()
    neighbours = [[] for _ in structure.cliques]
    for child, parent in enumerate(structure.parent):
        if parent >= 0:
            neighbours[child].append(parent)
            neighbours[parent].append(child)
    for clique in range(len(structure.cliques)):
        plan.evidence_of[clique] = [i for i, home in enumerate(homes) if home == clique]

    def separator(a: int, b: int) -> tuple[str, ...]:
        return tuple(v for v in structure.cliques[a] if v in structure.cliques[b])

    def shape(scope, batched=True):
        return ((1,) if batched else ()) + tuple(card[v] for v in scope)

    def expression(clique: int, messages: list[tuple[str, ...]], output: str, batched_output=True):
        scope = structure.cliques[clique]
        terms = ["".join(symbol[v] for v in scope)]
        shapes = [shape(scope, batched=False)]
        for m in messages:
            terms.append(batch + "".join(symbol[v] for v in m))
            shapes.append(shape(m))
        for i in plan.evidence_of[clique]:
            terms.append(batch + symbol[observed[i]])
            shapes.append((1, card[observed[i]]))
        terms.append(batch)  # a vector of ones: every contraction carries the batch axis
        shapes.append((1,))
        return terms, shapes

    def build(terms, shapes, output, extra_first=None):
        if extra_first is not None:
            terms = [extra_first[0], *terms]
            shapes = [extra_first[1], *shapes]
        # batch size unknown at compile time: compile for a representative size
        sized = [tuple(64 if (k == 0 and t[0] == batch) else d for k, d in enumerate(s)) for t, s in zip(terms, shapes, strict=True)]
        return opt_einsum.contract_expression(",".join(terms) + "->" + output, *sized, optimize="dp")

    for clique in range(len(structure.cliques)):
        parent = structure.parent[clique]
        children = [c for c in neighbours[clique] if c != parent]
        scope = structure.cliques[clique]
        if parent >= 0:
            terms, shapes = expression(clique, [separator(c, clique) for c in children], "")
            out = batch + "".join(symbol[v] for v in separator(clique, parent))
            plan.collect[clique] = build(terms, shapes, out)
            # distribute into `clique` from its parent
            grand = structure.parent[parent]
            others = [c for c in neighbours[parent] if c != clique and c != grand]
            messages = [separator(c, parent) for c in others]
            if grand >= 0:
                messages.append(separator(parent, grand))
            terms, shapes = expression(parent, messages, "")
            plan.distribute[clique] = build(terms, shapes, out)
        incoming = [separator(c, clique) for c in children]
        if parent >= 0:
            incoming.append(separator(clique, parent))
        terms, shapes = expression(clique, incoming, "")
        plan.row_total[clique] = build(terms, shapes, batch)
        plan.weighted[clique] = build(terms, shapes, "".join(symbol[v] for v in scope), extra_first=(batch, (64,)))
        for v in scope:
            plan.variable_marginal[(clique, v)] = build(terms, shapes, batch + symbol[v])
    return plan

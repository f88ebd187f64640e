"""Expected scope counts of a Markov network (or log-linear model) for EM, by enumerating each row's
unobserved variables where that is cheaper than a junction-tree propagation.

EM's M step for an undirected model needs, per scope ``S``, ``sum_rows w P(x_S | e)``.
In a row, only the unobserved variables ``U`` (latent or missing) make that more than a
count. They split into independent **groups** (variables joined by a factor that holds
both): the row's unnormalized probability factorizes as

    P~(e) = prod_{S observed} psi_S(e_S) · prod_G sum_{x_G} prod_{S meets G} psi_S(x_S),

so each group is enumerated on its own (``|states of G|`` cells times the factors that
meet it), in log space, for all rows of one missingness pattern at once (distinct rows
folded first). A scope's posterior lies inside one group (a scope that meets two groups
would join them). A pattern whose enumeration costs more than ``enumeration_limit`` goes
through the batched junction tree instead, and its clique counts are reduced to scopes.

The object honours the E-step protocol of :mod:`dpgm.stats.expected`:
``expected_counts(codes, variables, weights) -> (loglik, {scope: table})`` with the
unnormalized log-likelihood ``sum w log P~(e)`` (as the junction tree's; ``log Z`` is the
value for rows with no evidence), and :meth:`family_counts` returns the scope tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpgm.inference.propagation import distinct_rows, log_likelihood
from dpgm.inference.triangulation import TreeStructure, build_tree

__all__ = ["FACTOR_COST", "MASK_OVERHEAD", "ScopeEnumeration"]

# set-up cost of enumerating one missingness pattern, per factor, in cells of a propagation
# (measured: ~12 us per factor against ~0.04 us per tree cell per row; benchmarks/undirected_estep.py)
MASK_OVERHEAD = 300

# per-row cost of a factor's gather and scatter whatever its size, in propagated cells (measured: a
# latent class model, 21 factors of 4 enumerated cells each, is no faster enumerated than on the tree)
FACTOR_COST = 16

# missingness pattern -> plan, per model structure and limit (kept across E steps and restarts)
_PLANS: dict[tuple, dict[bytes, tuple | None]] = {}

Scope = tuple[str, ...]


class ScopeEnumeration:
    """Expected counts of given scopes of ``p(x) ∝ prod_S psi_S(x_S)``, rows with evidence.

    Parameters
    ----------
    variables
        Model variables.
    cardinalities
        States per variable.
    factors
        ``(scope, table)`` pairs, tables nonnegative with axes in scope order (potentials,
        structural-zero indicators).
    scopes
        Scopes whose expected tables are returned (each one of the factors' scopes).
    structure
        Junction tree of the factors' scopes for the rows sent to the tree (built on
        first use if not given).
    enumeration_limit
        Largest enumeration cost of a pattern (sum over its groups of ``|states| x (factors
        meeting the group + 1)``, plus :data:`FACTOR_COST` per factor) handled here; costlier patterns go to the junction tree,
        and so do patterns with too few distinct rows to repay their set-up
        (:data:`MASK_OVERHEAD`). Default: half the tree's cost (its cells plus 8 per clique),
        at least 16: enumeration was measured faster up to ~0.55 of the tree's cost
        (``benchmarks/undirected_estep.py``); ``0`` sends every row to the tree.
    mask_overhead
        Set-up cost of a pattern per factor, in propagated cells (``0``: every pattern within
        ``enumeration_limit`` is enumerated, however few its rows).

    Examples
    --------
    >>> import numpy as np
    >>> plan = ScopeEnumeration(["a", "b"], {"a": 2, "b": 2}, [(("a", "b"), np.array([[1.0, 2.0], [3.0, 4.0]]))],
    ...                         [("a", "b")])
    >>> loglik, counts = plan.expected_counts(np.array([[1]]), ["b"])   # b = 1: P~ = 2 + 4
    >>> round(float(np.exp(loglik)), 6), counts[("a", "b")].round(4).tolist()
    (6.0, [[0.0, 0.3333], [0.0, 0.6667]])
    """

    def __init__(
        self,
        variables: Sequence[str],
        cardinalities: Mapping[str, int],
        factors: Sequence[tuple[Sequence[str], np.ndarray]],
        scopes: Sequence[Sequence[str]],
        structure: TreeStructure | None = None,
        enumeration_limit: int | None = None,
        mask_overhead: int = MASK_OVERHEAD,
    ):
        self.variables = tuple(map(str, variables))
        self.cardinalities = {v: int(cardinalities[v]) for v in self.variables}
        self.index = {v: i for i, v in enumerate(self.variables)}
        self.factor_scopes: list[Scope] = []
        self.log_tables: list[np.ndarray] = []
        self.tables: list[np.ndarray] = []
        for scope, table in factors:
            scope = tuple(map(str, scope))
            table = np.asarray(table, dtype=float)
            expected = tuple(self.cardinalities[v] for v in scope)
            if table.shape != expected:
                raise ValueError(f"the table over {scope!r} has shape {table.shape!r}, expected {expected!r}")
            if (table < 0).any() or not np.isfinite(table).all():
                raise ValueError(f"the table over {scope!r} must be finite and nonnegative")
            self.factor_scopes.append(scope)
            self.tables.append(table)
            with np.errstate(divide="ignore"):
                self.log_tables.append(np.log(table).ravel())
        self.scopes = [tuple(map(str, s)) for s in scopes]
        self.target_factor = {}
        for scope in self.scopes:
            if scope not in self.factor_scopes:
                raise ValueError(f"scope {scope!r} is not a factor's scope; factors: {self.factor_scopes}")
            self.target_factor[scope] = self.factor_scopes.index(scope)
        self.strides = [_strides([self.cardinalities[v] for v in s]) for s in self.factor_scopes]
        self._structure = structure
        self._tree = None
        tree = self.structure
        self.tree_cost = tree.total_table_size + 8 * len(tree.cliques)
        if enumeration_limit is None:
            enumeration_limit = max(16, self.tree_cost // 2)
        self.enumeration_limit = int(enumeration_limit)
        self.mask_overhead = int(mask_overhead)
        # plans depend on the structure only (not on the tables): shared by every E step of a fit
        self._plans = _PLANS.setdefault(
            (self.variables, tuple(self.cardinalities.values()), tuple(self.factor_scopes), self.enumeration_limit), {})
        if len(_PLANS) > 64:
            _PLANS.clear()

    # -- the junction tree for costly patterns ------------------------------------------------

    @property
    def structure(self) -> TreeStructure:
        if self._structure is None:
            self._structure = build_tree(self.variables, self.cardinalities, self.factor_scopes)
        return self._structure

    @property
    def tree(self):
        if self._tree is None:
            from dpgm.inference.batched import BatchedTree

            self._tree = BatchedTree(self.variables, self.cardinalities,
                                     list(zip(self.factor_scopes, self.tables, strict=True)), self.structure)
        return self._tree

    def __reduce__(self):  # the plans and the compiled tree are rebuilt where the object lands
        return (type(self), (self.variables, self.cardinalities, list(zip(self.factor_scopes, self.tables, strict=True)),
                             self.scopes, self._structure, self.enumeration_limit, self.mask_overhead))

    # -- the E-step protocol --------------------------------------------------------------------

    def expected_counts(self, codes: np.ndarray, variables: Sequence[str],
                        weights: np.ndarray | None = None) -> tuple[float, dict[Scope, np.ndarray]]:
        """``(sum_rows w log P~(e), {scope: sum_rows w P(x_S | e)})``; a row of probability zero makes
        the log-likelihood ``-inf`` and adds nothing to the counts (as the junction tree's ``"ignore"``).
        """
        variables = [str(v) for v in variables]
        unknown = [v for v in variables if v not in self.index]
        if unknown:
            raise ValueError(f"evidence variables {unknown} are not model variables; variables: {list(self.variables)}")
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != len(variables):
            raise ValueError(f"codes must be (rows, {len(variables)}) for variables {variables!r}, "
                             f"got shape {codes.shape!r}")
        codes = codes.astype(np.int64, copy=False)
        n = codes.shape[0]
        weights = np.ones(n) if weights is None else np.asarray(weights, dtype=float).reshape(-1)
        patterns, pattern_weights, _ = distinct_rows(codes, weights, [self.cardinalities[v] for v in variables])
        evidence = np.full((len(patterns), len(self.variables)), -1, dtype=np.int64)
        if variables:
            evidence[:, [self.index[v] for v in variables]] = patterns
        counts = {s: np.zeros(self.tables[self.target_factor[s]].size) for s in self.scopes}
        log_evidence = np.zeros(len(patterns))
        missing = evidence < 0
        masks, _, inverse = distinct_rows(missing.astype(np.int64), None, [2] * len(self.variables))
        masks = masks.astype(bool)
        tree_rows = []
        for m, mask in enumerate(masks):
            rows = np.flatnonzero(inverse == m)
            plan = self._plan(mask)
            # a pattern is enumerated when it is cheaper per row and its rows repay the fixed cost of
            # setting it up (a few small NumPy calls per factor, ~MASK_OVERHEAD cells of a propagation each)
            if plan is None or (self.mask_overhead
                                and len(rows) * (self.tree_cost - plan[2]) <= self.mask_overhead * len(self.factor_scopes)):
                tree_rows.append(rows)
                continue
            log_evidence[rows] = self._enumerate(plan, evidence[rows], pattern_weights[rows], counts)
        out = {s: counts[s].reshape(self.tables[self.target_factor[s]].shape) for s in self.scopes}
        loglik = log_likelihood(pattern_weights, log_evidence)
        if tree_rows:
            rows = np.concatenate(tree_rows)
            tree_loglik, clique_counts = self.tree.expected_counts(patterns[rows], variables, pattern_weights[rows])
            for scope, table in self.tree.family_counts(clique_counts, self.scopes).items():
                out[scope] = out[scope] + table
            loglik += tree_loglik
        return loglik, out

    def family_counts(self, counts: Mapping[Scope, np.ndarray], scopes: Sequence[Sequence[str]]) -> dict:
        """The tables of ``scopes`` from :meth:`expected_counts`' result (already by scope)."""
        return {tuple(s): counts[tuple(s)] for s in scopes}

    # -- enumeration ------------------------------------------------------------------------------

    def _plan(self, missing: np.ndarray) -> tuple | None:
        """Groups of the unobserved variables and the factors each meets; None above the limit."""
        key = np.packbits(missing).tobytes()
        if key in self._plans:
            return self._plans[key]
        unobserved = [i for i in range(len(self.variables)) if missing[i]]
        parent = {i: i for i in unobserved}

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        factor_vars = [[self.index[v] for v in s] for s in self.factor_scopes]
        for members in factor_vars:
            hidden = [i for i in members if missing[i]]
            for i in hidden[1:]:
                parent[find(i)] = find(hidden[0])
        groups: dict[int, list[int]] = {}
        for i in unobserved:
            groups.setdefault(find(i), []).append(i)
        observed_factors = [f for f, members in enumerate(factor_vars) if not any(missing[i] for i in members)]
        meetings = [[f for f, fv in enumerate(factor_vars) if any(i in members for i in fv)]
                    for members in groups.values()]
        sizes = [math.prod(self.cardinalities[self.variables[i]] for i in members) for members in groups.values()]
        cost = (sum(size * (len(meeting) + 1) for size, meeting in zip(sizes, meetings, strict=True))
                + FACTOR_COST * len(factor_vars))
        if cost > self.enumeration_limit:  # decided before any group's states are built
            self._plans[key] = None
            return None
        plan_groups = []
        for members, size, meeting in zip(groups.values(), sizes, meetings, strict=True):
            cards = [self.cardinalities[self.variables[i]] for i in members]
            states = np.indices(cards).reshape(len(cards), -1)  # (group variables, size)
            terms = []
            for f in meeting:
                stride = self.strides[f]
                enumerated = np.zeros(size, dtype=np.int64)
                observed_axes = []
                for axis, i in enumerate(factor_vars[f]):
                    if missing[i]:
                        enumerated += states[members.index(i)] * stride[axis]
                    else:
                        observed_axes.append((i, stride[axis]))
                terms.append((f, enumerated, observed_axes))
            plan_groups.append((size, terms))
        plan = (plan_groups, observed_factors, cost)
        self._plans[key] = plan
        return plan

    def _enumerate(self, plan: tuple, evidence: np.ndarray, weights: np.ndarray,
                   counts: dict[Scope, np.ndarray]) -> np.ndarray:
        """Add the rows' expected counts to ``counts``; return each row's ``log P~(e)``."""
        groups, observed_factors, _ = plan
        n = len(evidence)
        log_evidence = np.zeros(n)
        observed_cells = {}
        for f in observed_factors:
            cell = np.zeros(n, dtype=np.int64)
            for axis, v in enumerate(self.factor_scopes[f]):
                cell += evidence[:, self.index[v]] * self.strides[f][axis]
            observed_cells[f] = cell
            log_evidence += self.log_tables[f][cell]
        group_cells = []
        for size, terms in groups:
            log_weight = np.zeros((n, size))
            cells = []
            for f, enumerated, observed_axes in terms:
                base = np.zeros(n, dtype=np.int64)
                for i, stride in observed_axes:
                    base += evidence[:, i] * stride
                cell = base[:, None] + enumerated[None, :]
                log_weight += self.log_tables[f][cell]
                cells.append((f, cell))
            top = log_weight.max(axis=1)
            finite = np.isfinite(top)
            shifted = np.exp(log_weight - np.where(finite, top, 0.0)[:, None])
            total = shifted.sum(axis=1)
            with np.errstate(divide="ignore"):
                log_evidence += np.where(finite, top + np.log(total), -np.inf)
            group_cells.append((shifted / np.where(finite, total, 1.0)[:, None], cells))
        # a row of probability zero adds nothing to the counts
        scale = np.where(np.isfinite(log_evidence), weights, 0.0)
        targets = {f: s for s, f in self.target_factor.items()}
        for f, cell in observed_cells.items():
            if f in targets:
                counts[targets[f]] += np.bincount(cell, weights=scale, minlength=counts[targets[f]].size)
        for posterior, cells in group_cells:
            mass = posterior * scale[:, None]
            for f, cell in cells:
                if f in targets:
                    counts[targets[f]] += np.bincount(cell.ravel(), weights=mass.ravel(),
                                                      minlength=counts[targets[f]].size)
        return log_evidence


def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]

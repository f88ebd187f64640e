"""Discrete Markov networks: nonnegative potentials on scopes, ``p(x) ∝ prod_S psi_S(x_S)``."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import state_lists, zeros_record
from dpgm.models.saving import model_kind, pop_zeros, zeros_table
from dpgm.models.zeros import check_structural_zeros, zeros_factors
from dpgm.potentials import expand, labelled_table, state_index

__all__ = ["MarkovNetwork", "canonical_log_potentials"]


@model_kind
class MarkovNetwork:
    """A Markov network with labelled potentials.

    Parameters
    ----------
    potentials
        Scope (tuple of variable names) -> nonnegative ``xarray.DataArray`` over it.
    structural_zeros
        Optional boolean ``DataArray`` over any of the variables: cells fixed at
        probability zero (``True``), applied as one more factor by every inference
        path and kept through save/load (see :mod:`dpgm.models.zeros`).

    Notes
    -----
    The potentials of a distribution are not unique (a potential can be scaled, and a
    term shared by two overlapping scopes can sit in either). :meth:`canonical` gives
    the one form every complete-data fit returns (``dpgm.fit`` with ``ipf``,
    ``closed_form``, ``lbfgs``, ``newton``, ``gis``), the treatment-coded log-linear
    model of the scopes: ``log p(x) = sum_A lambda_A(x_A) - log Z`` over every nonempty
    subset ``A`` of a scope, with ``lambda_A(x_A) = 0`` when any variable of ``A`` is at
    its first state; each term belongs to the first scope (in :attr:`scopes` order) that
    contains it, and a potential is ``exp`` of the sum of its terms. So every potential
    is 1 wherever the variables of its terms are at their first states (in particular
    at its all-first-states cell), the normalizer ``Z`` is kept apart (inference
    computes it), and a potential's log entries are sums of the ``lambda`` a
    :class:`~dpgm.LogLinearModel` with the same treatment-coded features fits as its
    weights. Potentials with zero entries have no such form (their terms are
    infinite): a fit on data with an empty margin cell keeps the potentials it found.

    Examples
    --------
    >>> mn = MarkovNetwork.from_cliques([("a", "b"), ("b", "c")], {"a": ["0", "1"], "b": ["0", "1"], "c": ["x", "y"]})
    >>> mn.scopes, mn.potentials[("b", "c")].dims
    ([('a', 'b'), ('b', 'c')], ('b', 'c'))
    """

    def __init__(self, potentials: Mapping[Sequence[str], xr.DataArray],
                 structural_zeros: xr.DataArray | None = None):
        self.potentials: dict[tuple[str, ...], xr.DataArray] = {}
        states: dict[str, tuple[str, ...]] = {}
        for scope, table in potentials.items():
            scope = tuple(map(str, scope))
            if not isinstance(table, xr.DataArray):
                raise TypeError(f"the potential on {scope!r} must be an xarray.DataArray, got {type(table).__name__}")
            if set(map(str, table.dims)) != set(scope) or len(table.dims) != len(scope):
                raise ValueError(f"the potential on {scope!r} has dims {table.dims!r}")
            for dim in scope:
                if dim not in table.coords:
                    raise ValueError(f"the potential on {scope!r} has no state labels for {dim!r}")
                labels = tuple(map(str, table.coords[dim].values))
                if states.setdefault(dim, labels) != labels:
                    raise ValueError(f"variable {dim!r} has labels {states[dim]!r} and {labels!r}")
            values = np.asarray(table.values, dtype=float)
            if (values < 0).any() or not np.isfinite(values).all():
                raise ValueError(f"the potential on {scope!r} must be finite and nonnegative")
            self.potentials[scope] = table.transpose(*scope).astype(float)
        self.states = states
        self.variables: tuple[str, ...] = tuple(states)
        self.structural_zeros = check_structural_zeros(structural_zeros, self.variables, states)

    @classmethod
    def from_cliques(
        cls, cliques: Sequence[Sequence[str]], states: Mapping[str, Sequence[str]]
    ) -> MarkovNetwork:
        """Uniform (all-ones) potentials on the given scopes."""
        potentials = {}
        for clique in cliques:
            clique = tuple(clique)
            unknown = [v for v in clique if v not in states]
            if unknown:
                raise ValueError(f"clique {clique!r} names variables without states: {unknown}")
            potentials[clique] = xr.DataArray(
                np.ones([len(states[v]) for v in clique]), dims=clique,
                coords={v: state_index(v, tuple(map(str, states[v]))) for v in clique},
            )
        return cls(potentials)

    @property
    def scopes(self) -> list[tuple[str, ...]]:
        """The potentials' scopes."""
        return list(self.potentials)

    def factors(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """``(scope, table)`` of every potential in :attr:`scopes` order, then the structural zeros as
        an indicator of the allowed cells."""
        return ([(s, np.asarray(self.potentials[s].values, dtype=float)) for s in self.scopes]
                + zeros_factors(self.structural_zeros))

    def cardinality(self, variable: str) -> int:
        """Number of states of ``variable``."""
        return len(self.states[variable])

    def with_log_potentials(self, log_potentials: Mapping[tuple[str, ...], np.ndarray]) -> MarkovNetwork:
        """A copy whose potentials are ``exp`` of the given log tables (``-inf`` -> 0), axes in scope order."""
        tables = {}
        for scope in self.scopes:
            values = np.exp(np.asarray(log_potentials[scope], dtype=float))
            if values.shape != self.potentials[scope].shape or not np.isfinite(values).all():
                raise ValueError(f"the log potential on {scope!r} must be an array of shape "
                                 f"{self.potentials[scope].shape} below +inf")
            tables[scope] = labelled_table(values, scope, self.states)
        return self._copy(tables, self.structural_zeros)

    def canonical(self) -> MarkovNetwork:
        """The same distribution with the potentials in canonical form (see the class's Notes).

        Raises
        ------
        ValueError
            A potential has a zero entry (its log-linear terms are infinite).

        Examples
        --------
        >>> import xarray as xr
        >>> s = {"a": ["0", "1"], "b": ["0", "1"]}
        >>> mn = MarkovNetwork({("a", "b"): xr.DataArray([[2.0, 6.0], [4.0, 24.0]], dims=("a", "b"), coords=s),
        ...                     ("b",): xr.DataArray([5.0, 10.0], dims="b", coords={"b": s["b"]})})
        >>> [table.values.round(12).tolist() for table in mn.canonical().potentials.values()]
        [[[1.0, 6.0], [2.0, 24.0]], [1.0, 1.0]]
        """
        logs = {}
        for scope in self.scopes:
            values = np.asarray(self.potentials[scope].values, dtype=float)
            if (values <= 0).any():
                raise ValueError(f"the potential on {scope!r} has zero entries: its log-linear terms are infinite "
                                 "and it has no canonical form")
            logs[scope] = np.log(values)
        return self.with_log_potentials(canonical_log_potentials(self.scopes, logs))

    def canonical_terms(self) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
        """Each scope's terms in canonical form: the nonempty subsets of the scope (variables in scope
        order, by size, then in scope order) that no earlier scope contains."""
        terms: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        for j, scope in enumerate(self.scopes):
            earlier = [set(s) for s in self.scopes[:j]]
            subsets = (tuple(scope[i] for i in chosen) for size in range(1, len(scope) + 1)
                       for chosen in itertools.combinations(range(len(scope)), size))
            terms[scope] = [a for a in subsets if not any(set(a) <= s for s in earlier)]
        return terms

    def with_structural_zeros(self, structural_zeros: xr.DataArray | None) -> MarkovNetwork:
        """A copy with the given structural-zero pattern (``None`` removes it)."""
        return self._copy(self.potentials, check_structural_zeros(structural_zeros, self.variables, self.states))

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> MarkovNetwork:
        """The same network with the labels of the variables named in ``states`` in that order.

        Every potential and the structural zeros are permuted along those variables by
        label (exact, no arithmetic); variables not in the network are ignored.

        Raises
        ------
        ValueError
            The labels given for a variable are not a permutation of its states.
        """
        from dpgm.models.state_order import reorder_tables

        reordered = reorder_tables(self.states, states, self.potentials, self.structural_zeros)
        return self if reordered is None else MarkovNetwork(*reordered)

    def _copy(self, potentials: dict, structural_zeros: xr.DataArray | None) -> MarkovNetwork:
        """A copy with checked potentials (axes in scope order) and a checked zero pattern."""
        model = object.__new__(MarkovNetwork)
        model.potentials, model.states, model.variables = dict(potentials), self.states, self.variables
        model.structural_zeros = structural_zeros
        return model

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the network to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        structure = {"cliques": [list(s) for s in self.scopes]} | zeros_record(self.structural_zeros)
        return state_lists(self.states, self.variables), structure, True

    def _to_store(self) -> dict[str, Any]:
        return {",".join(s): t for s, t in self.potentials.items()} | zeros_table(self.structural_zeros)

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> MarkovNetwork:
        zeros = pop_zeros(tables)
        return cls({tuple(k.split(",")): t for k, t in tables.items()}, zeros)

    def n_free_parameters(self) -> int:
        """Free parameters of the hierarchical model of the scopes (what a fit reports): one per cell of
        every scope's subsets, each axis less its reference state."""
        from dpgm.models.summary import hierarchical_free_parameters

        return hierarchical_free_parameters(self.scopes, self.states)

    def summary(self, digits: int = 6) -> str:
        """Every potential as text (one column per state of the scope's last variable), then the structural
        zeros (1 = cell fixed at zero), ``digits`` significant digits."""
        from dpgm.models.summary import labelled_block, render, zeros_blocks

        header = (f"MarkovNetwork: {len(self.variables)} variables, {len(self.potentials)} potentials, "
                  f"{self.n_free_parameters()} free parameters")
        blocks = [labelled_block(f"potential on ({', '.join(scope)})", table, digits=digits)
                  for scope, table in self.potentials.items()]
        return render(header, blocks + zeros_blocks(self.structural_zeros, digits))

    def __repr__(self) -> str:
        zeros = "" if self.structural_zeros is None else f", {int(self.structural_zeros.sum())} structural zeros"
        return f"MarkovNetwork({len(self.variables)} variables, {len(self.potentials)} potentials{zeros})"


def canonical_log_potentials(scopes: Sequence[tuple[str, ...]], log_potentials: Mapping[tuple[str, ...], np.ndarray]
                             ) -> dict[tuple[str, ...], np.ndarray]:
    """Finite log tables (axes in scope order) rewritten in canonical form (:meth:`MarkovNetwork.canonical`):
    the same sum over the scopes up to a constant.

    From the last scope to the first, the part of each table on the variables it shares with an
    earlier scope (its value with the other variables at their first states) moves to that
    scope, the earlier scopes first: a term on ``A`` then sits in the first scope containing
    ``A``. Last, each table's value at its all-first-states cell (the constant) is dropped.
    """
    scopes = [tuple(s) for s in scopes]
    tables = {s: np.array(log_potentials[s], dtype=float) for s in scopes}
    holders: dict[str, list[int]] = {}
    for i, scope in enumerate(scopes):
        for v in scope:
            holders.setdefault(v, []).append(i)
    for j in range(len(scopes) - 1, 0, -1):
        later = scopes[j]
        for i in sorted({i for v in later for i in holders[v] if i < j}):
            shared = tuple(v for v in later if v in scopes[i])
            part = tables[later][tuple(slice(None) if v in shared else 0 for v in later)]
            tables[later] = tables[later] - expand(part, shared, later)
            tables[scopes[i]] = tables[scopes[i]] + expand(part, shared, scopes[i])
    return {s: t - t.flat[0] for s, t in tables.items()}

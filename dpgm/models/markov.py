"""Discrete Markov networks: nonnegative potentials on scopes, ``p(x) ∝ prod_S psi_S(x_S)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import state_lists, zeros_record
from dpgm.models.saving import model_kind, pop_zeros, zeros_table
from dpgm.models.zeros import check_structural_zeros, zeros_factors
from dpgm.potentials import labelled_table, state_index

__all__ = ["MarkovNetwork"]


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

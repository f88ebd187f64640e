"""Discrete Bayesian networks with tabular conditional probability tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np
import xarray as xr

from dpgm.models.description import edge_lists, state_lists
from dpgm.models.saving import model_kind
from dpgm.potentials import state_index

__all__ = ["BayesianNetwork"]


@model_kind
class BayesianNetwork:
    """A discrete Bayesian network with labelled conditional probability tables.

    Parameters
    ----------
    cpds
        Mapping variable -> conditional probability table, an ``xarray.DataArray``
        whose first dimension is the variable itself and whose remaining dimensions
        are its parents; coordinates are state labels. Every column (one parent
        configuration) sums to 1 over the first dimension.

    Raises
    ------
    ValueError
        If a table is not a distribution over its first dimension, a parent is not
        a variable of the network, the labels of a variable disagree between tables,
        or the graph has a cycle.

    Examples
    --------
    >>> import xarray as xr
    >>> rain = xr.DataArray([0.2, 0.8], dims=["rain"], coords={"rain": ["yes", "no"]})
    >>> wet = xr.DataArray(
    ...     [[0.9, 0.1], [0.1, 0.9]], dims=["wet", "rain"],
    ...     coords={"wet": ["yes", "no"], "rain": ["yes", "no"]})
    >>> BayesianNetwork({"rain": rain, "wet": wet}).variables
    ('rain', 'wet')
    """

    def __init__(self, cpds: Mapping[str, xr.DataArray]):
        self.cpds: dict[str, xr.DataArray] = {}
        states: dict[str, tuple[str, ...]] = {}
        for variable, table in cpds.items():
            if not isinstance(table, xr.DataArray):
                raise TypeError(
                    f"the table of {variable!r} must be an xarray.DataArray, got {type(table).__name__}"
                )
            if not table.dims or table.dims[0] != variable:
                raise ValueError(
                    f"the table of {variable!r} must have {variable!r} as its first dimension, "
                    f"got dims {table.dims!r}"
                )
            for dim in table.dims:
                if dim not in table.coords:
                    raise ValueError(f"the table of {variable!r} has no state labels for {dim!r}")
                labels = tuple(map(str, table.indexes[dim])) if dim in table.indexes else tuple(
                    str(v) for v in table.coords[dim].values
                )
                if dim in states and states[dim] != labels:
                    raise ValueError(
                        f"variable {dim!r} has labels {states[dim]!r} in one table and "
                        f"{labels!r} in the table of {variable!r}"
                    )
                states[dim] = labels
            values = np.asarray(table.values, dtype=float)
            if (values < 0).any() or not np.isfinite(values).all():
                raise ValueError(f"the table of {variable!r} has negative or non-finite entries")
            sums = values.sum(axis=0)
            if not np.allclose(sums, 1.0, rtol=0, atol=1e-9):
                worst = float(np.abs(sums - 1).max())
                raise ValueError(
                    f"the table of {variable!r} does not sum to 1 over {variable!r} "
                    f"(largest deviation {worst:.3g})"
                )
            self.cpds[variable] = table if table.dtype == np.float64 else table.astype(float)
        unknown = sorted(set(states) - set(self.cpds))
        if unknown:
            raise ValueError(f"parents {unknown} have no table; known: {sorted(self.cpds)}")
        graph = nx.DiGraph()
        graph.add_nodes_from(self.cpds)
        graph.add_edges_from((p, v) for v, t in self.cpds.items() for p in t.dims[1:])
        if not nx.is_directed_acyclic_graph(graph):
            cycle = nx.find_cycle(graph)
            raise ValueError(f"the network has a directed cycle: {cycle}")
        order = {v: i for i, v in enumerate(self.cpds)}
        self.variables: tuple[str, ...] = tuple(
            nx.lexicographical_topological_sort(graph, key=order.__getitem__)
        )
        self.states: dict[str, tuple[str, ...]] = {v: states[v] for v in self.variables}
        self._parents = {v: tuple(map(str, self.cpds[v].dims[1:])) for v in self.variables}

    def randomized(self, rng: np.random.Generator, concentration: float = 1.0) -> BayesianNetwork:
        """Tables drawn from Dirichlet(``concentration``) column by column (a random EM start)."""
        from dpgm.cpt import random_tables

        tables = random_tables(rng, {v: table.shape for v, table in self.cpds.items()}, concentration)
        return BayesianNetwork({v: table.copy(data=tables[v]) for v, table in self.cpds.items()})

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> BayesianNetwork:
        """The same network with the labels of the variables named in ``states`` in that order.

        Every table is permuted along those variables by label (exact, no arithmetic);
        variables not in the network are ignored, and a structure without tables is
        returned as it is. :func:`dpgm.fit` uses it to meet data whose labels are in
        another order, and hands the fitted network back in the model's own order.

        Raises
        ------
        ValueError
            The labels given for a variable are not a permutation of its states.

        Examples
        --------
        >>> bn = BayesianNetwork.from_edges([("rain", "wet")], {"rain": ["y", "n"], "wet": ["y", "n"]})
        >>> bn.with_state_order({"rain": ["n", "y"]}).states["rain"]
        ('n', 'y')
        """
        from dpgm.models.state_order import reorder_tables

        reordered = reorder_tables(self.states, states, self.cpds)
        if not self.is_parameterized or reordered is None:
            return self
        return BayesianNetwork(reordered[0])

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the network to a Zarr group; :func:`dpgm.load` reads it back exactly."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        return state_lists(self.states, self.variables), {"edges": edge_lists(self.edges)}, self.is_parameterized

    def _to_store(self) -> dict[str, Any]:
        return dict(self.cpds)

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> BayesianNetwork:
        return cls(tables)

    def factors(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """``(scope, table)`` of every CPD, scope ``(variable, *parents)``, in variable order.

        Raises
        ------
        ValueError
            For a structure without tables (:attr:`is_parameterized` is false).
        """
        if not self.is_parameterized:
            raise ValueError("the network has no tables (a structure without states); give it states first")
        return [(tuple(map(str, self.cpds[v].dims)), np.asarray(self.cpds[v].values, dtype=float))
                for v in self.variables]

    @property
    def is_parameterized(self) -> bool:
        """False for a structure from :meth:`from_edges` without states (parameters come from a fit)."""
        return bool(self.cpds) or not self.variables

    def parents(self, variable: str) -> tuple[str, ...]:
        """The parents of ``variable``, in the order of its table's dimensions."""
        return self._parents[variable]

    @classmethod
    def from_edges(
        cls,
        edges: Iterable[tuple[str, str]],
        states: Mapping[str, Sequence[str]] | None = None,
        variables: Iterable[str] = (),
    ) -> BayesianNetwork:
        """A network structure from directed edges, with uniform tables.

        Parameters
        ----------
        edges
            ``(parent, child)`` pairs; a child's parents keep the order of the edges.
        states
            State labels of every variable. Without them the structure has no
            tables yet and :func:`dpgm.fit` takes the states from the data.
        variables
            Extra variables without edges.

        Examples
        --------
        >>> bn = BayesianNetwork.from_edges([("rain", "wet")], {"rain": ["y", "n"], "wet": ["y", "n"]})
        >>> bn.cpds["wet"].values.tolist()
        [[0.5, 0.5], [0.5, 0.5]]
        """
        edges = [(str(a), str(b)) for a, b in edges]
        names = list(dict.fromkeys([*map(str, variables), *(v for e in edges for v in e)]))
        parents: dict[str, list[str]] = {v: [] for v in names}
        for parent, child in edges:
            if parent in parents[child]:
                raise ValueError(f"edge {(parent, child)!r} is given twice")
            parents[child].append(parent)
        if states is not None:
            unknown = sorted(set(names) - set(states))
            if unknown:
                raise ValueError(f"no states given for {unknown}")
            tables = {
                v: np.full([len(states[v]), *(len(states[p]) for p in parents[v])], 1.0 / len(states[v]))
                for v in names
            }
            return cls.from_arrays(parents, states, tables)
        structure = cls({})
        graph = nx.DiGraph()
        graph.add_nodes_from(names)
        graph.add_edges_from(edges)
        if not nx.is_directed_acyclic_graph(graph):
            raise ValueError(f"the network has a directed cycle: {nx.find_cycle(graph)}")
        structure.variables = tuple(topological(names, edges))
        structure._parents = {v: tuple(parents[v]) for v in structure.variables}
        return structure

    @property
    def edges(self) -> list[tuple[str, str]]:
        """Directed edges ``(parent, child)``."""
        return [(p, v) for v in self.variables for p in self.parents(v)]

    @property
    def families(self) -> list[tuple[str, ...]]:
        """Each variable with its parents: the scopes of the tables."""
        return [(v, *self.parents(v)) for v in self.variables]

    def cardinality(self, variable: str) -> int:
        """Number of states of ``variable``."""
        return len(self.states[variable])

    def __repr__(self) -> str:
        return f"BayesianNetwork({len(self.variables)} variables, {len(self.edges)} edges)"

    def n_free_parameters(self) -> int:
        """Free parameters: ``(k - 1)`` per parent configuration of every table.

        Raises
        ------
        ValueError
            For a structure without tables (:attr:`is_parameterized` is false).
        """
        from dpgm.models.summary import table_free_parameters

        if not self.is_parameterized:
            raise ValueError("the network has no tables (a structure without states); give it states first")
        return table_free_parameters([self.cpds[v].shape for v in self.variables])

    def summary(self, digits: int = 6) -> str:
        """Every conditional probability table as text: one row per parent configuration, one column per
        state of the variable, ``digits`` significant digits.

        Examples
        --------
        >>> bn = BayesianNetwork.from_edges([("rain", "wet")], {"rain": ["y", "n"], "wet": ["y", "n"]})
        >>> print(bn.summary())
        BayesianNetwork: 2 variables, 1 edges, 3 free parameters
        <BLANKLINE>
        P(rain)
        | y    n
        | 0.5  0.5
        <BLANKLINE>
        P(wet | rain)
        rain | y    n
        y    | 0.5  0.5
        n    | 0.5  0.5
        """
        from dpgm.models.summary import labelled_block, render

        header = f"BayesianNetwork: {len(self.variables)} variables, {len(self.edges)} edges"
        if not self.is_parameterized:
            edges = ", ".join(f"{p} -> {c}" for p, c in self.edges)
            return render([header + " (a structure: its states and tables come from the data)",
                           f"  edges: {edges or 'none'}"], [])
        blocks = [labelled_block(f"P({v}" + (f" | {', '.join(self.parents(v))})" if self.parents(v) else ")"),
                                 self.cpds[v], columns=v, digits=digits) for v in self.variables]
        return render(f"{header}, {self.n_free_parameters()} free parameters", blocks)

    def to_pgmpy(self):
        """The network as a pgmpy ``DiscreteBayesianNetwork`` of ``TabularCPD`` tables, state names kept.

        Raises
        ------
        ImportError
            pgmpy is not installed (``pip install pgmpy``).
        ValueError
            For a structure without tables.
        """
        from dpgm.models.interop import bayesian_network_to_pgmpy

        return bayesian_network_to_pgmpy(self)

    def to_pyagrum(self):
        """The network as a ``pyagrum.BayesNet`` with labelled variables and the same tables (doubles).

        Raises
        ------
        ImportError
            pyAgrum is not installed (``pip install pyagrum``).
        ValueError
            For a structure without tables.
        """
        from dpgm.models.interop import bayesian_network_to_pyagrum

        return bayesian_network_to_pyagrum(self)

    @classmethod
    def from_arrays(
        cls,
        parents: Mapping[str, Sequence[str]],
        states: Mapping[str, Sequence[str]],
        tables: Mapping[str, np.ndarray],
    ) -> BayesianNetwork:
        """Build a network from plain arrays shaped ``(variable, *parents)``."""
        cpds = {}
        for variable, table in tables.items():
            dims = [variable, *parents.get(variable, ())]
            cpds[variable] = xr.DataArray(
                np.asarray(table, dtype=float),
                dims=dims,
                coords={d: state_index(d, tuple(map(str, states[d]))) for d in dims},
            )
        return cls(cpds)


def topological(variables: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[str]:
    """Variables in a topological order of ``edges`` (ties broken by input order)."""
    variables = list(variables)
    graph = nx.DiGraph()
    graph.add_nodes_from(variables)
    graph.add_edges_from(edges)
    order = {v: i for i, v in enumerate(variables)}
    return list(nx.lexicographical_topological_sort(graph, key=order.__getitem__))


def latent_class_model(
    observed_states: Mapping[str, Sequence[str]], n_classes: int, *, latent: str = "class"
) -> BayesianNetwork:
    """Latent class analysis (naive Bayes with a hidden class): ``latent -> every observed variable``.

    Parameters
    ----------
    observed_states
        Observed variable -> its state labels.
    n_classes
        States of the hidden class (labelled ``"0"``, ``"1"``, ...).
    latent
        Name of the hidden variable (absent from the data; fitted by EM).

    Examples
    --------
    >>> model = latent_class_model({"q1": ["no", "yes"], "q2": ["no", "yes"]}, 3)
    >>> model.parents("q1"), model.states["class"]
    (('class',), ('0', '1', '2'))
    """
    if n_classes < 1:
        raise ValueError(f"n_classes must be at least 1, got {n_classes!r}")
    if latent in observed_states:
        raise ValueError(f"the latent variable {latent!r} is also an observed one")
    states = {latent: [str(i) for i in range(n_classes)], **{v: list(s) for v, s in observed_states.items()}}
    return BayesianNetwork.from_edges([(latent, v) for v in observed_states], states, variables=[latent])

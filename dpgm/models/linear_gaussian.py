"""Linear-Gaussian Bayesian networks: each continuous node a linear regression on its parents."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np
import xarray as xr

from dpgm.models.description import CONTINUOUS, edge_lists
from dpgm.models.saving import model_kind

__all__ = ["LinearGaussianNetwork"]


@model_kind
class LinearGaussianNetwork:
    """``x_v = intercept_v + sum_p beta_vp x_p + e_v``, ``e_v ~ N(0, variance_v)``, over a DAG.

    Parameters
    ----------
    edges
        ``(parent, child)`` pairs.
    variables
        All variables (isolated ones included); default: those the edges name.
    parameters
        ``variable -> {"intercept": float, "coefficients": DataArray over dim "parent",
        "variance": float}``; default: a structure to be fitted.

    Examples
    --------
    >>> net = LinearGaussianNetwork([("a", "b"), ("b", "c")])
    >>> net.parents("c"), net.is_fitted
    (('b',), False)
    """

    def __init__(self, edges: Sequence[tuple[str, str]], variables: Sequence[str] | None = None,
                 parameters: Mapping[str, Mapping[str, Any]] | None = None):
        named = list(dict.fromkeys(str(v) for edge in edges for v in edge))
        graph = nx.DiGraph()
        graph.add_nodes_from(map(str, variables) if variables is not None else named)
        unknown = [v for v in named if v not in graph]
        if unknown:
            raise ValueError(f"the edges name variables {unknown} not in variables={list(graph)}")
        graph.add_edges_from((str(a), str(b)) for a, b in edges)
        if not nx.is_directed_acyclic_graph(graph):
            raise ValueError(f"the edges have a cycle: {nx.find_cycle(graph)}")
        self.variables: tuple[str, ...] = tuple(graph)
        self._parents = {v: tuple(p for p in self.variables if graph.has_edge(p, v)) for v in self.variables}
        self.parameters: dict[str, dict[str, Any]] | None = None
        if parameters is not None:
            self.parameters = {v: self._check(v, parameters[v]) for v in self.variables}

    def _check(self, v: str, table: Mapping[str, Any]) -> dict[str, Any]:
        coefficients = table["coefficients"]
        if tuple(map(str, coefficients.coords["parent"].values)) != self._parents[v]:
            raise ValueError(f"coefficients of {v!r} must be labelled by its parents {self._parents[v]}")
        if not float(table["variance"]) > 0:
            raise ValueError(f"the residual variance of {v!r} must be positive")
        return {"intercept": float(table["intercept"]), "coefficients": coefficients.astype(float),
                "variance": float(table["variance"])}

    @property
    def edges(self) -> list[tuple[str, str]]:
        """``(parent, child)`` pairs."""
        return [(p, v) for v in self.variables for p in self._parents[v]]

    @property
    def is_fitted(self) -> bool:
        """Whether the network has parameters."""
        return self.parameters is not None

    def parents(self, variable: str) -> tuple[str, ...]:
        """The parents of ``variable``, in variable order."""
        return self._parents[variable]

    def n_free_parameters(self) -> int:
        """Intercept, coefficients and residual variance of every node."""
        return sum(2 + len(p) for p in self._parents.values())

    def with_parameters(self, parameters: Mapping[str, Mapping[str, Any]]) -> LinearGaussianNetwork:
        """A copy with the given parameters."""
        return LinearGaussianNetwork(self.edges, self.variables, parameters)

    def log_likelihood(self, n: float) -> float:
        """The fitted network's log-likelihood of the data it was fitted to (MLE variances, divisor n)."""
        if self.parameters is None:
            raise ValueError("the network has no parameters yet: fit it with dpgm.fit(network, data)")
        return -0.5 * n * sum(math.log(2 * math.pi * p["variance"]) + 1.0 for p in self.parameters.values())

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the network to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        return dict.fromkeys(self.variables, CONTINUOUS), {"edges": edge_lists(self.edges)}, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables: dict[str, Any] = {}
        scalars: dict[str, Any] = {}
        for v, p in (self.parameters or {}).items():
            if len(p["coefficients"]):
                tables[f"coefficients.{v}"] = p["coefficients"].rename(parent=f"parents_of_{v}")
            scalars[v] = {"intercept": p["intercept"], "variance": p["variance"]}
        return tables | {"__attrs__": {"variables": list(self.variables), "edges": [list(e) for e in self.edges],
                                       "scalars": scalars}}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> LinearGaussianNetwork:
        edges = [tuple(e) for e in attrs["edges"]]
        network = cls(edges, attrs["variables"])
        if not attrs["scalars"]:
            return network
        parameters = {}
        for v, s in attrs["scalars"].items():
            table = tables.get(f"coefficients.{v}")
            coefficients = (table.rename({f"parents_of_{v}": "parent"}) if table is not None
                            else xr.DataArray(np.zeros(0), dims="parent", coords={"parent": []}))
            parameters[v] = {"intercept": s["intercept"], "coefficients": coefficients, "variance": s["variance"]}
        return network.with_parameters(parameters)

    def summary(self, digits: int = 6) -> str:
        """Each node's intercept, coefficient per parent and residual variance as text, ``digits``
        significant digits."""
        from dpgm.models.summary import block, render

        edges = ", ".join(f"{p} -> {c}" for p, c in self.edges)
        header = [f"LinearGaussianNetwork: {len(self.variables)} variables, {len(self.edges)} edges, "
                  f"{self.n_free_parameters()} free parameters" + ("" if self.is_fitted else " (not fitted)"),
                  f"  edges: {edges or 'none'}"]
        if self.parameters is None:
            return render(header, [])
        blocks = []
        for v in self.variables:
            p = self.parameters[v]
            parents = self.parents(v)
            values = [p["intercept"], *np.asarray(p["coefficients"].values, dtype=float), p["variance"]]
            blocks.append(block(f"{v} | {', '.join(parents)}" if parents else v, [], [()],
                                ["Intercept", *parents, "variance"], [values], digits))
        return render(header, blocks)

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "structure"
        return f"LinearGaussianNetwork({len(self.variables)} variables, {len(self.edges)} edges, {state})"

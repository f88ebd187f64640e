"""Hybrid Bayesian networks: tabular nodes for categorical variables, GLM nodes for the rest."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import xarray as xr

from dpgm.models.description import edge_lists
from dpgm.models.glm import GLMConditional, canonical_family
from dpgm.models.saving import model_kind

__all__ = ["HybridNetwork"]


@model_kind
class HybridNetwork:
    """A directed model whose nodes are probability tables or GLM conditionals.

    Every node is either *tabular* (a categorical variable whose parents are all
    categorical: a conditional probability table, as in :class:`~dpgm.BayesianNetwork`)
    or a *GLM node* (a :class:`~dpgm.GLMConditional` on its parents, given by its
    family): gaussian for a continuous variable, ``"bernoulli"`` or ``"categorical"``
    for a categorical variable with continuous parents, ``"poisson"`` for counts.
    :func:`dpgm.fit` fits every node in the same passes over the data: the tables
    from the counts of the first pass, all GLM nodes' IRLS steps together, one pass
    per iteration, until every node's deviance has converged.

    A categorical variable absent from the data is *latent* (``states`` gives its
    states; it has no parents): ``dpgm.fit(network, data, method="em")`` fits the
    network by EM. Each GLM child of a latent variable has one set of coefficients
    (and, gaussian, one variance) per latent state: a mixture of regressions or
    latent class regression.

    Parameters
    ----------
    edges
        ``(parent, child)`` pairs.
    families
        GLM nodes: variable -> family (``"gaussian"``, ``"bernoulli"``,
        ``"categorical"``, ``"poisson"``). Every other variable is tabular.
    nodes
        Variables without edges.
    states
        State labels of latent variables.
    l2
        Ridge penalty of every GLM node (see :class:`~dpgm.GLMConditional`).

    Attributes
    ----------
    tables
        After a fit: tabular node -> conditional probability table (first
        dimension the variable, then its parents), as in a BayesianNetwork.
    conditionals
        After a fit: GLM node -> fitted :class:`~dpgm.GLMConditional`; a child of a
        latent variable ``z`` has a ``z`` dimension on its coefficients.

    Examples
    --------
    >>> net = HybridNetwork([("region", "income"), ("age", "income"), ("income", "default")],
    ...                     families={"income": "gaussian", "default": "bernoulli", "age": "gaussian"})
    >>> net.variables, net.kind("income"), net.kind("region")
    (('region', 'age', 'income', 'default'), 'gaussian', 'tabular')
    """

    def __init__(self, edges: Iterable[tuple[str, str]], families: Mapping[str, str] | None = None, *,
                 nodes: Iterable[str] = (), states: Mapping[str, Sequence[str]] | None = None, l2: float = 0.0,
                 tables: Mapping[str, xr.DataArray] | None = None,
                 conditionals: Mapping[str, GLMConditional] | None = None):
        edges = [tuple(e) for e in edges]
        bad = [e for e in edges if len(e) != 2 or not all(isinstance(v, str) for v in e)]
        if bad:
            raise TypeError(f"edges must be (parent, child) pairs of variable names, got {bad[:3]!r}")
        graph = nx.DiGraph()
        for v in [*nodes, *(v for e in edges for v in e)]:
            graph.add_node(v)
        graph.add_edges_from(edges)
        self.families = {str(v): canonical_family(f) for v, f in (families or {}).items()}
        graph.add_nodes_from(self.families)
        if not nx.is_directed_acyclic_graph(graph):
            raise ValueError(f"the network has a directed cycle: {nx.find_cycle(graph)}")
        order = {v: i for i, v in enumerate(graph.nodes)}
        self.variables: tuple[str, ...] = tuple(nx.lexicographical_topological_sort(graph, key=order.__getitem__))
        self._parents = {v: tuple(dict.fromkeys(p for p, c in edges if c == v)) for v in self.variables}
        self.states = {str(v): tuple(map(str, s)) for v, s in (states or {}).items()}
        unknown = sorted(set(self.states) - set(self.variables))
        if unknown:
            raise ValueError(f"states given for {unknown}, which are not variables of the network; "
                             f"variables: {list(self.variables)}")
        if isinstance(l2, bool) or not isinstance(l2, int | float) or not math.isfinite(l2) or l2 < 0:
            raise ValueError(f"l2 must be a finite number >= 0, got {l2!r}")
        self.l2 = float(l2)
        self.edges = [(p, v) for v in self.variables for p in self._parents[v]]
        self.tables: dict[str, xr.DataArray] = dict(tables or {})
        self.conditionals: dict[str, GLMConditional] = dict(conditionals or {})

    def parents(self, variable: str) -> tuple[str, ...]:
        """The parents of ``variable``, in the order of the edges (the order of its GLM's terms)."""
        return self._parents[variable]

    def kind(self, variable: str) -> str:
        """``"tabular"`` or the GLM node's family."""
        if variable not in self._parents:
            raise ValueError(f"{variable!r} is not a variable of the network; variables: {list(self.variables)}")
        return self.families.get(variable, "tabular")

    @property
    def glm_nodes(self) -> tuple[str, ...]:
        """GLM nodes in topological order."""
        return tuple(v for v in self.variables if v in self.families)

    @property
    def is_fitted(self) -> bool:
        """Whether every node has parameters."""
        return all(v in self.tables or v in self.conditionals for v in self.variables)

    def glm(self, variable: str) -> GLMConditional:
        """The GLM node as a conditional (fitted if the network is)."""
        if variable not in self.families:
            raise ValueError(f"{variable!r} is not a GLM node; GLM nodes: {list(self.glm_nodes)}")
        return self.conditionals.get(variable) or GLMConditional(variable, self._parents[variable],
                                                                 self.families[variable], self.l2)

    def with_parameters(self, tables: Mapping[str, xr.DataArray],
                        conditionals: Mapping[str, GLMConditional]) -> HybridNetwork:
        """A copy with the given parameters (a model is a value: fitting returns a new one)."""
        return HybridNetwork(self.edges, self.families, nodes=self.variables, states=self.states, l2=self.l2,
                             tables=tables, conditionals=conditionals)

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> HybridNetwork:
        """The same network with the labels of the variables named in ``states`` in that order.

        Tables (and the per-state coefficients of a latent variable's GLM children) are
        permuted along those variables by label (exact); the declared :attr:`states` of
        those variables follow. GLM terms of categorical parents are labelled and keep
        their coding. Variables not in the network are ignored.

        Raises
        ------
        ValueError
            The labels given for a variable are not a permutation of its states.
        """
        from dpgm.models.state_order import check_same_labels, reorder_table

        wanted = {v: tuple(map(str, s)) for v, s in states.items() if v in self._parents}
        for v, s in wanted.items():
            if v in self.states:
                check_same_labels(v, self.states[v], s)
        declared = {v: wanted.get(v, s) for v, s in self.states.items()}
        return HybridNetwork(self.edges, self.families, nodes=self.variables, states=declared, l2=self.l2,
                             tables={v: reorder_table(t, wanted) for v, t in self.tables.items()},
                             conditionals={v: c.with_state_order(wanted) for v, c in self.conditionals.items()})

    def n_free_parameters(self) -> int:
        """Free parameters: ``(k - 1)`` per parent configuration of each table, plus every GLM's."""
        if not self.is_fitted:
            raise ValueError("the network has no parameters yet: fit it with dpgm.fit(network, data)")
        count = sum((t.shape[0] - 1) * math.prod(t.shape[1:]) for t in self.tables.values())
        for c in self.conditionals.values():
            count += c.n_free_parameters()
            if c.glm.has_scale and c.coefficients is not None and c.coefficients.ndim > 1:
                count += math.prod(c.coefficients.shape[1:]) - 1  # one variance per latent state
        return count

    def summary(self, digits: int = 6) -> str:
        """Each node's parameters as text: a table's probabilities (``digits`` significant digits), a GLM
        node's coefficient table (:meth:`GLMConditional.summary`), or, for a child of a latent variable,
        its coefficients (and variances) per latent state."""
        from dpgm.models.summary import labelled_block, render

        header = f"HybridNetwork: {len(self.variables)} variables, {len(self.glm_nodes)} GLM nodes"
        if self.is_fitted:
            header += f", {self.n_free_parameters()} free parameters"
        blocks = []
        for v in self.variables:
            given = f" | {', '.join(self._parents[v])}" if self._parents[v] else ""
            glm = self.conditionals.get(v)
            if glm is not None and glm.coefficients is not None \
                    and glm.coefficients.ndim == 1 + (self.families[v] == "categorical"):
                blocks.append(glm.summary())
            elif glm is not None and glm.coefficients is not None:
                blocks.append(labelled_block(f"{v}{given}: {self.families[v]}, coefficients by "
                                             f"{glm.coefficients.dims[-1]}", glm.coefficients, digits=digits))
                if glm.scale_by_state is not None:
                    blocks.append(labelled_block(f"{v}: residual variance by {glm.scale_by_state.dims[0]}",
                                                 glm.scale_by_state, digits=digits))
            elif v in self.tables:
                blocks.append(labelled_block(f"P({v}{given})", self.tables[v], columns=v, digits=digits))
            else:
                blocks.append(f"{v}{given}: {self.kind(v)} (not fitted)")
        return render(header, blocks)

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the network to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        variables: dict[str, Any] = {}
        for v in self.variables:
            if v in self.tables:
                variables[v] = [str(s) for s in self.tables[v].coords[v].values]
            elif v in self.states:
                variables[v] = list(self.states[v])
            elif v in self.conditionals:
                variables[v] = self.conditionals[v]._described_variables()[v]
            else:
                variables[v] = None
        structure = {"edges": edge_lists(self.edges), "nodes": {v: self.kind(v) for v in self.variables},
                     "latent": sorted(self.states)}
        return variables, structure, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables: dict[str, Any] = {f"table:{v}": t for v, t in self.tables.items()}
        scales = {}
        for v, c in self.conditionals.items():
            if c.coefficients is None or c.standard_errors is None:
                continue
            rename = {d: f"{v}:{d}" for d in ("term", "state") if d in c.coefficients.dims}
            tables[f"coefficients:{v}"] = c.coefficients.rename(rename)
            tables[f"standard_errors:{v}"] = c.standard_errors.rename(rename)
            scales[v] = c.scale_by_state.values.tolist() if c.scale_by_state is not None else c.scale
        return tables | {"__attrs__": {"edges": [list(e) for e in self.edges], "families": self.families,
                                       "nodes": list(self.variables), "states": self.states, "l2": self.l2,
                                       "scales": scales,
                                       "child_states": {v: None if c.child_states is None else list(c.child_states)
                                                        for v, c in self.conditionals.items()},
                                       "deviances": {v: c.deviance for v, c in self.conditionals.items()}}}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> HybridNetwork:
        model = cls([tuple(e) for e in attrs["edges"]], attrs["families"], nodes=attrs["nodes"],
                    states=attrs["states"], l2=attrs["l2"])
        cpds = {key.split(":", 1)[1]: t for key, t in tables.items() if key.startswith("table:")}
        conditionals = {}
        for v in attrs["scales"]:
            coefficients, errors = tables[f"coefficients:{v}"], tables[f"standard_errors:{v}"]
            rename = {d: d.split(":", 1)[1] for d in coefficients.dims if d.startswith(f"{v}:")}
            coefficients, errors = coefficients.rename(rename), errors.rename(rename)
            order = [d for d in ("term", "state") if d in coefficients.dims]
            order += [d for d in coefficients.dims if d not in order]
            scale = attrs["scales"][v]
            by_state = None
            if isinstance(scale, list):
                latent = order[-1]
                by_state = xr.DataArray(scale, dims=latent, coords={latent: coefficients.coords[latent].values})
                scale = float("nan")
            conditionals[v] = model.glm(v).with_parameters(
                coefficients.transpose(*order), errors.transpose(*order), scale=scale,
                deviance=attrs["deviances"][v], scale_by_state=by_state,
                child_states=attrs.get("child_states", {}).get(v))
        return model.with_parameters(cpds, conditionals)

    def __repr__(self) -> str:
        glm = ", ".join(f"{v}: {self.families[v]}" for v in self.glm_nodes)
        return (f"HybridNetwork({len(self.variables)} variables, {len(self.edges)} edges, GLM nodes {{{glm}}}, "
                f"{'fitted' if self.is_fitted else 'structure'})")

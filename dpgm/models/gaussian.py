"""Gaussian graphical models: an undirected graph over continuous variables, a mean and a precision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import CONTINUOUS, edge_lists
from dpgm.models.saving import model_kind

__all__ = ["GaussianGraphicalModel"]

_PAIR = ("variable", "variable_")


@model_kind
class GaussianGraphicalModel:
    """``x ~ N(mean, covariance)`` with ``precision[i, j] = 0`` wherever ``i`` and ``j`` share no edge.

    Parameters
    ----------
    graph
        Edges ``(a, b)`` or cliques ``(a, b, c, ...)`` over the variables (every pair
        in a clique is an edge); a 1-tuple names an isolated variable.
    variables
        Variable order (default: order of first appearance in ``graph``).
    mean, covariance
        Parameters (``mean`` dim ``variable``; ``covariance`` dims
        ``("variable", "variable_")``); default: a structure to be fitted.

    Examples
    --------
    >>> ggm = GaussianGraphicalModel([("a", "b"), ("b", "c")])
    >>> ggm.variables, ggm.n_edges, ggm.is_fitted
    (('a', 'b', 'c'), 2, False)
    """

    def __init__(self, graph: Sequence[Sequence[str]], variables: Sequence[str] | None = None,
                 mean: xr.DataArray | None = None, covariance: xr.DataArray | None = None):
        named = list(dict.fromkeys(str(v) for scope in graph for v in scope))
        self.variables: tuple[str, ...] = tuple(map(str, variables)) if variables is not None else tuple(named)
        unknown = [v for v in named if v not in self.variables]
        if unknown:
            raise ValueError(f"the graph names variables {unknown} not in variables={list(self.variables)}")
        if len(set(self.variables)) != len(self.variables):
            raise ValueError(f"variables repeat: {self.variables!r}")
        index = {v: i for i, v in enumerate(self.variables)}
        p = len(self.variables)
        self.adjacency = np.zeros((p, p), dtype=bool)
        for scope in graph:
            for a in scope:
                for b in scope:
                    if a != b:
                        self.adjacency[index[str(a)], index[str(b)]] = True
        self.mean = self._check(mean, ("variable",), "mean")
        self.covariance = self._check(covariance, _PAIR, "covariance")
        if (self.mean is None) != (self.covariance is None):
            raise ValueError("give both mean and covariance, or neither (a structure to fit)")

    def _check(self, table: xr.DataArray | None, dims: tuple[str, ...], name: str) -> xr.DataArray | None:
        if table is None:
            return None
        if not isinstance(table, xr.DataArray) or tuple(table.dims) != dims:
            raise ValueError(f"{name} must be a DataArray with dims {dims}")
        for d in dims:
            if tuple(map(str, table.coords[d].values)) != self.variables:
                raise ValueError(f"{name}'s {d!r} labels must be the variables {list(self.variables)}")
        values = np.asarray(table.values, dtype=float)
        if not np.isfinite(values).all():
            raise ValueError(f"{name} must be finite")
        if len(dims) == 2:
            if not np.allclose(values, values.T, rtol=1e-12, atol=0):
                raise ValueError("covariance must be symmetric")
            try:
                np.linalg.cholesky(values)
            except np.linalg.LinAlgError:
                raise ValueError("covariance must be positive definite") from None
        return table.astype(float)

    @property
    def is_fitted(self) -> bool:
        """Whether the model has parameters."""
        return self.mean is not None

    @property
    def n_edges(self) -> int:
        """Edges of the graph."""
        return int(self.adjacency.sum()) // 2

    @property
    def edges(self) -> list[tuple[str, str]]:
        """The graph's edges, in variable order."""
        i, j = np.nonzero(np.triu(self.adjacency))
        return [(self.variables[a], self.variables[b]) for a, b in zip(i, j, strict=True)]

    @property
    def precision(self) -> xr.DataArray:
        """The inverse covariance, labelled like the covariance."""
        self._require_fit()
        return self.covariance.copy(data=np.linalg.inv(self.covariance.values))

    def n_free_parameters(self) -> int:
        """Means, variances and one partial covariance per edge."""
        return 2 * len(self.variables) + self.n_edges

    def with_parameters(self, mean: np.ndarray, covariance: np.ndarray) -> GaussianGraphicalModel:
        """A copy with new parameters (arrays in variable order)."""
        labels = list(self.variables)
        return GaussianGraphicalModel(
            self.edges + [(v,) for v in self.variables], self.variables,
            xr.DataArray(np.asarray(mean, dtype=float), dims="variable", coords={"variable": labels}),
            xr.DataArray(np.asarray(covariance, dtype=float), dims=_PAIR,
                         coords={"variable": labels, "variable_": labels}))

    def conditional(self, scope: Sequence[str], evidence: Mapping[str, float] | None = None) -> xr.Dataset:
        """Mean and covariance of ``scope`` given observed values of other variables.

        ``mean_A|B = mean_A + S_AB S_BB^-1 (x_B - mean_B)``,
        ``cov_A|B = S_AA - S_AB S_BB^-1 S_BA``.

        Returns
        -------
        xarray.Dataset
            ``mean`` (dim ``variable``) and ``covariance`` (dims ``variable``, ``variable_``).

        Raises
        ------
        ValueError
            An unknown variable, a variable both in ``scope`` and observed, or a non-finite value.
        """
        self._require_fit()
        scope = [str(v) for v in scope]
        evidence = {str(k): float(v) for k, v in (evidence or {}).items()}
        unknown = [v for v in [*scope, *evidence] if v not in self.variables]
        if unknown:
            raise ValueError(f"unknown variables {unknown}; variables: {list(self.variables)}")
        both = sorted(set(scope) & set(evidence))
        if both:
            raise ValueError(f"variables {both} are both queried and observed")
        if not scope:
            raise ValueError("the scope is empty")
        if not all(np.isfinite(list(evidence.values()))):
            raise ValueError("observed values must be finite")
        index = {v: i for i, v in enumerate(self.variables)}
        a = [index[v] for v in scope]
        b = [index[v] for v in evidence]
        sigma, mu = self.covariance.values, self.mean.values
        mean, cov = mu[a], sigma[np.ix_(a, a)]
        if b:
            gain = np.linalg.solve(sigma[np.ix_(b, b)], sigma[np.ix_(b, a)]).T
            mean = mean + gain @ (np.array(list(evidence.values())) - mu[b])
            cov = cov - gain @ sigma[np.ix_(b, a)]
        return xr.Dataset({"mean": ("variable", mean), "covariance": (_PAIR, (cov + cov.T) / 2)},
                          coords={"variable": scope, "variable_": scope})

    def _require_fit(self) -> None:
        if not self.is_fitted:
            raise ValueError("the model has no parameters yet: fit it with dpgm.fit(model, data)")

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the model to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> GaussianGraphicalModel:
        graph = [tuple(e) for e in attrs["edges"]] + [(v,) for v in attrs["variables"]]
        return cls(graph, attrs["variables"], tables.get("mean"), tables.get("covariance"))

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        return dict.fromkeys(self.variables, CONTINUOUS), {"edges": edge_lists(self.edges)}, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables: dict[str, Any] = {} if not self.is_fitted else {"mean": self.mean, "covariance": self.covariance}
        return tables | {"__attrs__": {"variables": list(self.variables), "edges": [list(e) for e in self.edges]}}

    def summary(self, digits: int = 6) -> str:
        """The mean, covariance and precision (zero off the graph) as text, ``digits`` significant digits."""
        from dpgm.models.summary import labelled_block, render

        edges = ", ".join(f"{a} - {b}" for a, b in self.edges)
        header = [f"GaussianGraphicalModel: {len(self.variables)} variables, {self.n_edges} edges, "
                  f"{self.n_free_parameters()} free parameters" + ("" if self.is_fitted else " (not fitted)"),
                  f"  edges: {edges or 'none'}"]
        if not self.is_fitted:
            return render(header, [])
        return render(header, [labelled_block("mean", self.mean, digits=digits),
                               labelled_block("covariance", self.covariance, digits=digits),
                               labelled_block("precision", self.precision, digits=digits)])

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "structure"
        return f"GaussianGraphicalModel({len(self.variables)} variables, {self.n_edges} edges, {state})"

"""Log-linear models with arbitrary nonnegative features on scopes."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.description import state_lists, zeros_record
from dpgm.models.saving import model_kind, pop_zeros, zeros_table
from dpgm.models.summary import hierarchical_free_parameters
from dpgm.models.zeros import check_structural_zeros, zeros_factors
from dpgm.potentials import labelled_table

__all__ = ["LogLinearModel", "hierarchical_free_parameters"]


@model_kind
class LogLinearModel:
    """``p(x) ∝ exp(sum_i theta_i f_i(x_{S_i}))`` with nonnegative features ``f_i``.

    Parameters
    ----------
    features
        Feature name -> ``xarray.DataArray`` over its scope (dims = variables,
        coords = state labels), nonnegative.
    weights
        Feature name -> ``theta_i`` (default 0; ``-inf`` forbids where ``f_i > 0``).
    structural_zeros
        Optional boolean ``DataArray`` over any of the variables: cells fixed at
        probability zero (``True``), applied by every inference path and kept
        through save/load (see :mod:`dpgm.models.zeros`).

    Examples
    --------
    >>> import xarray as xr
    >>> same = xr.DataArray([[1.0, 0.0], [0.0, 1.0]], dims=["a", "b"],
    ...                     coords={"a": ["x", "y"], "b": ["x", "y"]})
    >>> LogLinearModel({"agree": same}, {"agree": 0.5}).scopes
    [('a', 'b')]
    """

    def __init__(self, features: Mapping[str, xr.DataArray], weights: Mapping[str, float] | None = None,
                 structural_zeros: xr.DataArray | None = None):
        self.features: dict[str, xr.DataArray] = {}
        states: dict[str, tuple[str, ...]] = {}
        for name, table in features.items():
            if not isinstance(table, xr.DataArray):
                raise TypeError(f"feature {name!r} must be an xarray.DataArray, got {type(table).__name__}")
            for dim in table.dims:
                if dim not in table.coords:
                    raise ValueError(f"feature {name!r} has no state labels for {dim!r}")
                labels = tuple(str(s) for s in table.coords[dim].values)
                if states.setdefault(str(dim), labels) != labels:
                    raise ValueError(f"variable {dim!r} has labels {states[str(dim)]!r} and {labels!r}")
            values = np.asarray(table.values, dtype=float)
            if (values < 0).any() or not np.isfinite(values).all():
                raise ValueError(f"feature {name!r} must be finite and nonnegative")
            self.features[str(name)] = table.astype(float)
        unknown = sorted(set(weights or {}) - set(self.features))
        if unknown:
            raise ValueError(f"weights for unknown features {unknown}; features: {sorted(self.features)}")
        self.weights: dict[str, float] = {n: float((weights or {}).get(n, 0.0)) for n in self.features}
        self.states = states
        self.variables: tuple[str, ...] = tuple(states)
        self.margins: list[tuple[str, ...]] | None = None
        self.structural_zeros = check_structural_zeros(structural_zeros, self.variables, states)
        self._stacked: tuple | None = None

    def _copy(self, weights: Mapping[str, float], structural_zeros: xr.DataArray | None) -> LogLinearModel:
        """A copy sharing this model's (already checked) features, labels and stacked features."""
        model = object.__new__(LogLinearModel)
        model.features, model.states, model.variables = self.features, self.states, self.variables
        model.weights = dict(weights)
        model.margins = self.margins
        model.structural_zeros = structural_zeros
        model._stacked = self._stacked
        return model

    @classmethod
    def from_margins(
        cls, margins: Sequence[Sequence[str]], states: Mapping[str, Sequence[str]]
    ) -> LogLinearModel:
        """The hierarchical model with the given margins: one indicator feature per margin cell.

        Examples
        --------
        >>> s = {"a": ["0", "1"], "b": ["0", "1"], "c": ["0", "1"]}
        >>> len(LogLinearModel.from_margins([("a", "b"), ("b", "c")], s).features)
        8
        """
        features = {}
        labels = {v: tuple(map(str, s)) for v, s in states.items()}
        for margin in margins:
            margin = tuple(margin)
            unknown = [v for v in margin if v not in states]
            if unknown:
                raise ValueError(f"margin {margin!r} names variables without states: {unknown}")
            shape = [len(states[v]) for v in margin]
            for cell in itertools.product(*(range(k) for k in shape)):
                table = np.zeros(shape)
                table[cell] = 1.0
                label = ",".join(f"{v}={states[v][i]}" for v, i in zip(margin, cell, strict=True))
                features[f"[{label}]"] = labelled_table(table, margin, labels)  # coordinates built once
        model = cls(features)
        model.margins = [tuple(m) for m in margins]
        return model

    @property
    def scopes(self) -> list[tuple[str, ...]]:
        """Distinct feature scopes, in order of first appearance (variables in canonical order)."""
        return list(dict.fromkeys(self._canonical(t) for t in self.features.values()))

    def _canonical(self, table: xr.DataArray) -> tuple[str, ...]:
        return tuple(sorted(map(str, table.dims), key=self.variables.index))

    def stacked_features(self) -> tuple[dict[tuple[str, ...], np.ndarray], list[str]]:
        """Features stacked per scope, ``scope -> (k_S, *shape_S)``, and the feature names in that order
        (what :func:`dpgm.algorithms.features.feature_set` fits with)."""
        key = tuple((name, id(table)) for name, table in self.features.items())
        cached = self._stacked
        if cached is not None and cached[0] == key:  # copies share the features and this stacking
            return cached[1], list(cached[2])
        grouped: dict[tuple[str, ...], list[str]] = {}
        for name, table in self.features.items():
            grouped.setdefault(self._canonical(table), []).append(name)
        tables, order = {}, []
        for scope, names in grouped.items():
            tables[scope] = np.stack([self.features[n].transpose(*scope).values for n in names])
            order += names
        self._stacked = (key, tables, tuple(order))
        return tables, order

    def theta(self, order: Sequence[str]) -> np.ndarray:
        """Weights as a vector in ``order``."""
        return np.array([self.weights[n] for n in order], dtype=float)

    def with_weights(self, order: Sequence[str], theta: np.ndarray) -> LogLinearModel:
        """A copy with new weights."""
        weights = dict(zip(order, map(float, theta), strict=True))
        unknown = sorted(set(weights) - set(self.features))
        if unknown:
            raise ValueError(f"weights for unknown features {unknown}; features: {sorted(self.features)}")
        return self._copy({n: weights.get(n, 0.0) for n in self.features}, self.structural_zeros)

    def with_structural_zeros(self, structural_zeros: xr.DataArray | None) -> LogLinearModel:
        """A copy with the given structural-zero pattern (``None`` removes it)."""
        return self._copy(self.weights, check_structural_zeros(structural_zeros, self.variables, self.states))

    def with_state_order(self, states: Mapping[str, Sequence[str]]) -> LogLinearModel:
        """The same model with the labels of the variables named in ``states`` in that order.

        Every feature and the structural zeros are permuted along those variables by
        label (exact, no arithmetic); the weights, named by feature, are unchanged.
        Variables not in the model are ignored.

        Raises
        ------
        ValueError
            The labels given for a variable are not a permutation of its states.
        """
        from dpgm.models.state_order import reorder_tables

        reordered = reorder_tables(self.states, states, self.features, self.structural_zeros)
        if reordered is None:
            return self
        features, zeros = reordered
        model = LogLinearModel(features, self.weights, zeros)
        model.margins = self.margins
        return model

    def log_potentials(self) -> dict[tuple[str, ...], xr.DataArray]:
        """``sum_i theta_i f_i`` per scope, labelled."""
        stacked, order = self.stacked_features()
        theta, out, start = self.theta(order), {}, 0
        for scope, features in stacked.items():
            weights = theta[start:start + len(features)].reshape((-1,) + (1,) * (features.ndim - 1))
            start += len(features)
            with np.errstate(invalid="ignore"):  # a -inf weight acts only where its feature is positive
                table = np.where(features > 0, weights * features, 0.0).sum(axis=0)
            out[scope] = xr.DataArray(table, dims=scope, coords={v: list(self.states[v]) for v in scope})
        return out

    def factors(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """``(scope, exp(log potential))`` per scope, then the structural zeros as an indicator of the
        allowed cells."""
        return ([(s, np.exp(t.values)) for s, t in self.log_potentials().items()]
                + zeros_factors(self.structural_zeros))

    def n_free_parameters(self) -> int:
        """Free parameters of a hierarchical model (its margins' closure under subsets), else the feature count."""
        if self.margins is None:
            return len(self.features)
        return hierarchical_free_parameters(self.margins, self.states)

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the model (features, weights, margins, structural zeros) to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        structure = {"scopes": [list(s) for s in self.scopes], "n_features": len(self.features),
                     "margins": None if self.margins is None else [list(m) for m in self.margins]}
        return state_lists(self.states, self.variables), structure | zeros_record(self.structural_zeros), True

    def _to_store(self) -> dict[str, Any]:
        weights = {name: (None if not np.isfinite(w) else w) for name, w in self.weights.items()}
        return dict(self.features) | zeros_table(self.structural_zeros) | {
            "__attrs__": {"weights": weights, "margins": self.margins}}

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> LogLinearModel:
        weights = {n: (-np.inf if w is None else w) for n, w in attrs["weights"].items()}
        zeros = pop_zeros(tables)
        model = cls(tables, weights, zeros)
        model.margins = [tuple(m) for m in attrs["margins"]] if attrs.get("margins") else None
        return model

    def summary(self, digits: int = 6) -> str:
        """Every feature's weight as text (``-inf``: forbidden where the feature is positive), each with its
        scope, then the structural zeros (1 = cell fixed at zero), ``digits`` significant digits."""
        from dpgm.models.summary import block, render, zeros_blocks

        header = (f"LogLinearModel: {len(self.variables)} variables, {len(self.features)} features on "
                  f"{len(self.scopes)} scopes, {self.n_free_parameters()} free parameters")
        if self.margins is not None:
            header += "\n  margins: " + "; ".join(f"({', '.join(m)})" for m in self.margins)
        names = list(self.features)
        rows = [(name, ",".join(self._canonical(self.features[name]))) for name in names]
        blocks = [block("weights", ["feature", "scope"], rows, ["weight"],
                        [[self.weights[n]] for n in names], digits)] if names else []
        return render(header, blocks + zeros_blocks(self.structural_zeros, digits))

    def __repr__(self) -> str:
        return f"LogLinearModel({len(self.features)} features on {len(self.scopes)} scopes)"

"""Gaussian mixtures: ``x ~ sum_k weights[k] N(means[k], covariances[k])`` over continuous variables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.covariances import (
    COVARIANCE_TYPES,
    check_covariances,
    covariance_dims,
    full_covariances,
)
from dpgm.models.description import CONTINUOUS
from dpgm.models.saving import model_kind

__all__ = ["COVARIANCE_TYPES", "GaussianMixture"]

@model_kind
class GaussianMixture:
    """A mixture of ``n_components`` multivariate normal distributions.

    Parameters
    ----------
    n_components
        Number of components.
    variables
        The continuous variables (columns of the data), in order.
    covariance_type
        ``"full"`` (each component its own covariance matrix), ``"diag"`` (its own
        diagonal), ``"spherical"`` (its own variance), ``"tied"`` (one matrix shared).
    weights, means, covariances
        Parameters (scikit-learn's shapes, labelled): ``weights`` dim ``component``;
        ``means`` dims ``(component, variable)``; ``covariances`` dims
        ``(component, variable, variable_)`` (full), ``(component, variable)``
        (diag), ``(component,)`` (spherical) or ``(variable, variable_)`` (tied).
        Default: a structure to be fitted (``dpgm.fit(model, data)``, EM).

    Examples
    --------
    >>> gmm = GaussianMixture(3, variables=["x", "y"], covariance_type="diag")
    >>> gmm.n_components, gmm.variables, gmm.is_fitted, gmm.n_free_parameters()
    (3, ('x', 'y'), False, 14)
    """

    def __init__(self, n_components: int, variables: Sequence[str], covariance_type: str = "full",
                 weights: xr.DataArray | None = None, means: xr.DataArray | None = None,
                 covariances: xr.DataArray | None = None):
        import numbers

        if isinstance(n_components, bool) or not isinstance(n_components, numbers.Integral):
            raise TypeError(f"n_components must be an integer, got {n_components!r}")
        if n_components < 1:
            raise ValueError(f"n_components must be at least 1, got {n_components!r}")
        if isinstance(variables, str):
            raise TypeError(f"variables must be a list of names, got the string {variables!r}")
        self.variables: tuple[str, ...] = tuple(map(str, variables))
        if not self.variables:
            raise ValueError("a GaussianMixture needs at least one variable")
        if len(set(self.variables)) != len(self.variables):
            raise ValueError(f"variables repeat: {self.variables!r}")
        if covariance_type not in COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {list(COVARIANCE_TYPES)}, got {covariance_type!r}")
        self.n_components = int(n_components)
        self.covariance_type = covariance_type
        given = [t is not None for t in (weights, means, covariances)]
        if any(given) and not all(given):
            raise ValueError("give weights, means and covariances together, or none (a structure to fit)")
        self.weights = self._check(weights, ("component",), "weights")
        self.means = self._check(means, ("component", "variable"), "means")
        self.covariances = self._check(covariances, covariance_dims(covariance_type), "covariances")
        if self.weights is not None:
            w = self.weights.values
            if (w < 0).any() or abs(w.sum() - 1.0) > 1e-8:
                raise ValueError(f"weights must be nonnegative and sum to 1, got {w.tolist()!r}")
            check_covariances(self.covariances.values, covariance_type, self.variables, reg_covar=None)

    def _labels(self, dim: str) -> list:
        return list(range(self.n_components)) if dim == "component" else list(self.variables)

    def _check(self, table: xr.DataArray | None, dims: tuple[str, ...], name: str) -> xr.DataArray | None:
        if table is None:
            return None
        if not isinstance(table, xr.DataArray) or tuple(table.dims) != dims:
            raise ValueError(f"{name} must be a DataArray with dims {dims}")
        shape = tuple(len(self._labels(d)) for d in dims)
        if table.shape != shape:
            raise ValueError(f"{name} must have shape {shape} for dims {dims}, got {table.shape}")
        for d in dims:
            if d != "component" and d in table.coords and tuple(map(str, table.coords[d].values)) != self.variables:
                raise ValueError(f"{name}'s {d!r} labels must be the variables {list(self.variables)}")
        values = np.asarray(table.values, dtype=float)
        if not np.isfinite(values).all():
            raise ValueError(f"{name} must be finite")
        return xr.DataArray(values, dims=dims, coords={d: self._labels(d) for d in dims}, name=name)

    @property
    def is_fitted(self) -> bool:
        """Whether the model has parameters."""
        return self.weights is not None

    @property
    def precisions(self) -> xr.DataArray:
        """The inverse covariances (reciprocal variances for diag and spherical), labelled alike."""
        self._require_fit()
        c = self.covariances.values
        if self.covariance_type in ("diag", "spherical"):
            return self.covariances.copy(data=1.0 / c)
        inverse = np.linalg.inv(c)
        return self.covariances.copy(data=(inverse + np.swapaxes(inverse, -1, -2)) / 2)

    def component_covariances(self) -> np.ndarray:
        """Every component's ``p x p`` covariance matrix (``(component, variable, variable_)``, unlabelled)."""
        self._require_fit()
        return full_covariances(self.covariances.values, self.covariance_type, self.n_components,
                                len(self.variables))

    def n_free_parameters(self) -> int:
        """Weights (``K - 1``), means (``K p``) and the covariance parameters of the type."""
        k, p = self.n_components, len(self.variables)
        covariance = {"full": k * p * (p + 1) // 2, "diag": k * p, "spherical": k,
                      "tied": p * (p + 1) // 2}[self.covariance_type]
        return k - 1 + k * p + covariance

    def with_parameters(self, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> GaussianMixture:
        """A copy with new parameters (arrays in scikit-learn's shapes, components and variables in order)."""
        dims = covariance_dims(self.covariance_type)
        return GaussianMixture(
            self.n_components, self.variables, self.covariance_type,
            xr.DataArray(np.asarray(weights, dtype=float), dims="component"),
            xr.DataArray(np.asarray(means, dtype=float), dims=("component", "variable")),
            xr.DataArray(np.asarray(covariances, dtype=float), dims=dims))

    def structure(self) -> GaussianMixture:
        """The same mixture without parameters."""
        return GaussianMixture(self.n_components, self.variables, self.covariance_type)

    def _require_fit(self) -> None:
        if not self.is_fitted:
            raise ValueError("the mixture has no parameters yet: fit it with dpgm.fit(model, data)")

    def save(self, path: str, *, mode: str = "w-") -> None:
        """Write the model to a Zarr group."""
        from dpgm.models.saving import save

        save(self, path, mode=mode)

    @classmethod
    def _from_store(cls, tables: dict[str, Any], attrs: dict[str, Any]) -> GaussianMixture:
        model = cls(attrs["n_components"], attrs["variables"], attrs["covariance_type"])
        if "weights" not in tables:
            return model
        return model.with_parameters(tables["weights"].values, tables["means"].values,
                                     tables["covariances"].values)

    def _describe(self) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Variables, structure and whether fitted, for :func:`dpgm.models.description.describe`."""
        structure = {"n_components": self.n_components, "covariance_type": self.covariance_type}
        return dict.fromkeys(self.variables, CONTINUOUS), structure, self.is_fitted

    def _to_store(self) -> dict[str, Any]:
        tables: dict[str, Any] = {} if not self.is_fitted else {
            "weights": self.weights, "means": self.means, "covariances": self.covariances}
        return tables | {"__attrs__": {"n_components": self.n_components, "variables": list(self.variables),
                                       "covariance_type": self.covariance_type}}

    def summary(self, digits: int = 6) -> str:
        """Weights, means and covariances (one matrix per component for ``"full"``, the variances for
        ``"diag"`` and ``"spherical"``, the shared matrix for ``"tied"``) as text, ``digits`` significant
        digits."""
        from dpgm.models.summary import labelled_block, render

        header = (f"GaussianMixture: {self.n_components} components over {len(self.variables)} variables "
                  f"({', '.join(self.variables)}), covariance_type {self.covariance_type!r}, "
                  f"{self.n_free_parameters()} free parameters" + ("" if self.is_fitted else " (not fitted)"))
        if not self.is_fitted:
            return render(header, [])
        blocks = [labelled_block("weights", self.weights, digits=digits),
                  labelled_block("means", self.means, digits=digits)]
        if self.covariance_type == "full":
            blocks += [labelled_block(f"covariance of component {k}", self.covariances.isel(component=k),
                                      digits=digits) for k in range(self.n_components)]
        else:
            title = {"diag": "variances", "spherical": "variance", "tied": "covariance (shared)"}
            blocks.append(labelled_block(title[self.covariance_type], self.covariances, digits=digits))
        return render(header, blocks)

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "structure"
        return (f"GaussianMixture({self.n_components} components, {len(self.variables)} variables, "
                f"covariance_type={self.covariance_type!r}, {state})")

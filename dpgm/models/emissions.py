"""A hidden Markov model's emission families: what each step's observations are, given the hidden state.

Each family owns one or more observed variables and its parameters, labelled by the
hidden state (dim ``hidden``); families are independent given the state, so a step's
emission density is the product of theirs (a sensor with a categorical status and two
continuous channels is a categorical and a Gaussian family).

* :class:`CategoricalEmission`: ``p(x = c | z = s)``, a table over ``(hidden, variable)``
  whose rows sum to 1; codes, ``-1`` missing.
* :class:`GaussianEmission`: ``x | z = s ~ N(means[s], covariances[s])`` over one or
  more continuous variables, covariance type ``full``, ``diag``, ``spherical`` or
  ``tied`` (hmmlearn's ``GaussianHMM`` shapes, labelled); NaN missing, coordinate by
  coordinate.
* :class:`GaussianMixtureEmission`: per state a mixture of ``n_mix`` Gaussians over one or
  more continuous variables (hmmlearn's ``GMMHMM`` shapes, labelled by ``hidden`` and
  ``mix``; ``tied``: the mixes of a state share one covariance); NaN missing,
  coordinate by coordinate.
* :class:`PoissonEmission`: independent ``Poisson(rates[s, v])`` counts (hmmlearn's
  ``PoissonHMM``); NaN missing.

A continuous family built without parameters (``means=None`` or ``rates=None``) is a
structure: :func:`dpgm.fit` starts it from the data. The workers get each family's
plain-array form (:mod:`dpgm.stats.emissions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.covariances import (
    COVARIANCE_TYPES,
    check_covariances,
    covariance_dims,
    full_covariances,
)

__all__ = ["CategoricalEmission", "Emission", "GaussianEmission", "GaussianMixtureEmission", "PoissonEmission",
           "emission_from_store"]


def _relabel(table: xr.DataArray | None, wanted: Mapping[str, Sequence[str]]) -> xr.DataArray | None:
    if table is None:
        return None
    from dpgm.models.state_order import reorder_table

    return reorder_table(table, {d: v for d, v in wanted.items() if d in table.dims})


@dataclass(frozen=True)
class CategoricalEmission:
    """One categorical variable: ``table`` over ``(hidden, variable)``, rows summing to 1."""

    table: xr.DataArray

    family = "categorical"

    @property
    def variables(self) -> tuple[str, ...]:
        return (str(self.table.dims[1]),)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(map(str, self.table.coords[self.table.dims[1]].values))

    @property
    def is_fitted(self) -> bool:
        return True

    def states(self) -> dict[str, tuple[str, ...]]:
        return {self.variables[0]: self.symbols}

    def n_free_parameters(self) -> int:
        n, m = self.table.shape
        return n * (m - 1)

    def tables(self) -> dict[str, xr.DataArray]:
        return {"table": self.table}

    def with_tables(self, tables: Mapping[str, Any]) -> CategoricalEmission:
        return CategoricalEmission(self.table.copy(data=np.asarray(tables["table"], dtype=float)))

    def with_state_order(self, wanted: Mapping[str, Sequence[str]]) -> CategoricalEmission:
        return CategoricalEmission(_relabel(self.table, wanted))

    def randomized(self, rng: np.random.Generator) -> CategoricalEmission:
        n, m = self.table.shape
        return CategoricalEmission(self.table.copy(data=rng.dirichlet(np.ones(m), n)))

    def spec(self) -> dict[str, Any]:
        return {"family": "categorical", "variables": list(self.variables)}


@dataclass(frozen=True)
class GaussianEmission:
    """Continuous ``variables`` jointly normal given the state.

    ``means`` over ``(hidden, variable)``; ``covariances`` over the covariance type's dims
    (full: ``(hidden, variable, variable_)``, diag: ``(hidden, variable)``, spherical:
    ``(hidden,)``, tied: ``(variable, variable_)``); both None for a structure.
    """

    variables: tuple[str, ...]
    covariance_type: str = "diag"
    hidden: str = "state"
    n_states: int = 2
    means: xr.DataArray | None = None
    covariances: xr.DataArray | None = None

    family = "gaussian"

    def __post_init__(self):
        if self.covariance_type not in COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {self.covariance_type!r}")
        if (self.means is None) != (self.covariances is None):
            raise ValueError("give both means and covariances, or neither")
        if self.covariances is not None:
            check_covariances(self.covariances.values, self.covariance_type, self.variables, None)

    @property
    def is_fitted(self) -> bool:
        return self.means is not None

    def states(self) -> dict[str, tuple[str, ...]]:
        return {}

    def n_free_parameters(self) -> int:
        n, p = self.n_states, len(self.variables)
        covariance = {"full": n * p * (p + 1) // 2, "diag": n * p, "spherical": n, "tied": p * (p + 1) // 2}
        return n * p + covariance[self.covariance_type]

    def dims(self) -> tuple[str, ...]:
        """The covariances' dims."""
        return tuple(self.hidden if d == "component" else d for d in covariance_dims(self.covariance_type))

    def tables(self) -> dict[str, xr.DataArray]:
        return {} if self.means is None else {"means": self.means, "covariances": self.covariances}

    def with_arrays(self, means: np.ndarray, covariances: np.ndarray, labels: Sequence[str]) -> GaussianEmission:
        """Parameters from plain arrays (hmmlearn's shapes), ``labels`` the hidden states."""
        coords = {self.hidden: list(labels), "variable": list(self.variables), "variable_": list(self.variables)}
        dims = self.dims()
        return replace(self, means=xr.DataArray(np.asarray(means, dtype=float), dims=(self.hidden, "variable"),
                                                coords={d: coords[d] for d in (self.hidden, "variable")}),
                       covariances=xr.DataArray(np.asarray(covariances, dtype=float), dims=dims,
                                                coords={d: coords[d] for d in dims}))

    def with_tables(self, tables: Mapping[str, Any]) -> GaussianEmission:
        return replace(self, means=self.means.copy(data=np.asarray(tables["means"], dtype=float)),
                       covariances=self.covariances.copy(data=np.asarray(tables["covariances"], dtype=float)))

    def with_state_order(self, wanted: Mapping[str, Sequence[str]]) -> GaussianEmission:
        return replace(self, means=_relabel(self.means, wanted), covariances=_relabel(self.covariances, wanted))

    def full(self) -> np.ndarray:
        """Every state's ``p x p`` covariance."""
        return full_covariances(self.covariances.values, self.covariance_type, self.n_states, len(self.variables))

    def spec(self) -> dict[str, Any]:
        return {"family": "gaussian", "variables": list(self.variables), "covariance_type": self.covariance_type}


@dataclass(frozen=True)
class PoissonEmission:
    """Counts of ``variables``, independent ``Poisson(rates[s, v])`` given the state; ``rates`` over
    ``(hidden, variable)``, None for a structure."""

    variables: tuple[str, ...]
    hidden: str = "state"
    n_states: int = 2
    rates: xr.DataArray | None = None

    family = "poisson"

    def __post_init__(self):
        if self.rates is not None and not (np.asarray(self.rates.values) > 0).all():
            raise ValueError("Poisson rates must be positive")

    @property
    def is_fitted(self) -> bool:
        return self.rates is not None

    def states(self) -> dict[str, tuple[str, ...]]:
        return {}

    def n_free_parameters(self) -> int:
        return self.n_states * len(self.variables)

    def tables(self) -> dict[str, xr.DataArray]:
        return {} if self.rates is None else {"rates": self.rates}

    def with_arrays(self, rates: np.ndarray, labels: Sequence[str]) -> PoissonEmission:
        return replace(self, rates=xr.DataArray(np.asarray(rates, dtype=float), dims=(self.hidden, "variable"),
                                                coords={self.hidden: list(labels), "variable": list(self.variables)}))

    def with_tables(self, tables: Mapping[str, Any]) -> PoissonEmission:
        return replace(self, rates=self.rates.copy(data=np.asarray(tables["rates"], dtype=float)))

    def with_state_order(self, wanted: Mapping[str, Sequence[str]]) -> PoissonEmission:
        return replace(self, rates=_relabel(self.rates, wanted))

    def spec(self) -> dict[str, Any]:
        return {"family": "poisson", "variables": list(self.variables)}


@dataclass(frozen=True)
class GaussianMixtureEmission:
    """Continuous ``variables`` given the state: a mixture of ``n_mix`` Gaussians per state (hmmlearn's
    ``GMMHMM``).

    ``weights`` over ``(hidden, mix)`` (rows sum to 1); ``means`` over ``(hidden, mix,
    variable)``; ``covariances`` over the covariance type's dims: full ``(hidden, mix,
    variable, variable_)``, diag ``(hidden, mix, variable)``, spherical ``(hidden, mix)``,
    tied ``(hidden, variable, variable_)`` (the mixes of a state share it). All three None
    for a structure.
    """

    variables: tuple[str, ...]
    n_mix: int = 2
    covariance_type: str = "diag"
    hidden: str = "state"
    n_states: int = 2
    weights: xr.DataArray | None = None
    means: xr.DataArray | None = None
    covariances: xr.DataArray | None = None

    family = "gmm"

    def __post_init__(self):
        if self.covariance_type not in COVARIANCE_TYPES:
            raise ValueError(f"covariance_type must be one of {COVARIANCE_TYPES}, got {self.covariance_type!r}")
        if isinstance(self.n_mix, bool) or not isinstance(self.n_mix, int | np.integer) or self.n_mix < 1:
            raise ValueError(f"n_mix must be a positive integer, got {self.n_mix!r}")
        given = [t is not None for t in (self.weights, self.means, self.covariances)]
        if any(given) and not all(given):
            raise ValueError("give weights, means and covariances, or none of them")
        if self.weights is not None:
            weights = np.asarray(self.weights.values, dtype=float)
            if (weights < 0).any() or not np.allclose(weights.sum(axis=1), 1.0, rtol=0, atol=1e-9):
                raise ValueError("each state's mix weights must be nonnegative and sum to 1")
            for s in range(self.n_states):
                check_covariances(self.covariances.values[s], self.covariance_type, self.variables, None)

    @property
    def is_fitted(self) -> bool:
        return self.means is not None

    def states(self) -> dict[str, tuple[str, ...]]:
        return {}

    def n_free_parameters(self) -> int:
        """Weights (``n_mix - 1`` per state), means and covariances."""
        n, m, p = self.n_states, self.n_mix, len(self.variables)
        covariance = {"full": n * m * p * (p + 1) // 2, "diag": n * m * p, "spherical": n * m,
                      "tied": n * p * (p + 1) // 2}
        return n * (m - 1) + n * m * p + covariance[self.covariance_type]

    def dims(self) -> tuple[str, ...]:
        """The covariances' dims."""
        return {"full": (self.hidden, "mix", "variable", "variable_"), "diag": (self.hidden, "mix", "variable"),
                "spherical": (self.hidden, "mix"), "tied": (self.hidden, "variable", "variable_")
                }[self.covariance_type]

    def tables(self) -> dict[str, xr.DataArray]:
        return {} if self.means is None else {"weights": self.weights, "means": self.means,
                                              "covariances": self.covariances}

    def with_arrays(self, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray, labels: Sequence[str]
                    ) -> GaussianMixtureEmission:
        """Parameters from plain arrays (hmmlearn's ``GMMHMM`` shapes), ``labels`` the hidden states."""
        coords = {self.hidden: list(labels), "mix": [str(k) for k in range(self.n_mix)],
                  "variable": list(self.variables), "variable_": list(self.variables)}

        def table(values: np.ndarray, dims: tuple[str, ...]) -> xr.DataArray:
            return xr.DataArray(np.asarray(values, dtype=float), dims=dims, coords={d: coords[d] for d in dims})

        return replace(self, weights=table(weights, (self.hidden, "mix")),
                       means=table(means, (self.hidden, "mix", "variable")),
                       covariances=table(covariances, self.dims()))

    def with_tables(self, tables: Mapping[str, Any]) -> GaussianMixtureEmission:
        return replace(self, **{name: getattr(self, name).copy(data=np.asarray(tables[name], dtype=float))
                                for name in ("weights", "means", "covariances")})

    def with_state_order(self, wanted: Mapping[str, Sequence[str]]) -> GaussianMixtureEmission:
        return replace(self, weights=_relabel(self.weights, wanted), means=_relabel(self.means, wanted),
                       covariances=_relabel(self.covariances, wanted))

    def full(self) -> np.ndarray:
        """Every mix's ``p x p`` covariance, ``(n_states, n_mix, p, p)``."""
        p, c = len(self.variables), np.asarray(self.covariances.values, dtype=float)
        if self.covariance_type == "tied":
            return np.broadcast_to(c[:, None], (self.n_states, self.n_mix, p, p)).copy()
        return np.stack([full_covariances(c[s], self.covariance_type, self.n_mix, p) for s in range(self.n_states)])

    def spec(self) -> dict[str, Any]:
        return {"family": "gmm", "variables": list(self.variables), "n_mix": int(self.n_mix),
                "covariance_type": self.covariance_type}


Emission = CategoricalEmission | GaussianEmission | GaussianMixtureEmission | PoissonEmission


def emission_from_store(spec: Mapping[str, Any], tables: Mapping[str, xr.DataArray], hidden: str,
                        n_states: int) -> Emission:
    """An emission family from its saved ``spec`` (family, variables, covariance type) and tables."""
    family, variables = spec["family"], tuple(spec["variables"])
    if family == "categorical":
        return CategoricalEmission(tables["table"])
    if family == "gaussian":
        return GaussianEmission(variables, spec["covariance_type"], hidden, n_states, tables.get("means"),
                                tables.get("covariances"))
    if family == "gmm":
        return GaussianMixtureEmission(variables, int(spec["n_mix"]), spec["covariance_type"], hidden, n_states,
                                       tables.get("weights"), tables.get("means"), tables.get("covariances"))
    if family == "poisson":
        return PoissonEmission(variables, hidden, n_states, tables.get("rates"))
    raise ValueError(f"unknown emission family {family!r}")

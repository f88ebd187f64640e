"""Fully observed Bayesian networks: MLE and Dirichlet (Bayesian) estimates from family counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from dpgm.fit.result import FitResult
from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["PRIORS", "bayesian_network_estimate", "pseudo_counts"]

PRIORS = ("BDeu", "K2", "dirichlet")


def pseudo_counts(
    family: tuple[str, ...],
    shape: tuple[int, ...],
    prior: str | None,
    equivalent_sample_size: float,
    pseudo: Any = None,
) -> np.ndarray:
    """Dirichlet pseudo-counts of one family's table, shaped ``(variable, *parents)``.

    ``BDeu``: ``equivalent_sample_size / (r * q)`` in every cell (``r`` states,
    ``q`` parent configurations); ``K2``: 1 in every cell; ``dirichlet``: the
    user's ``pseudo`` (a number, or an array / DataArray of the table's shape).
    """
    if prior is None:
        return np.zeros(shape)
    if prior == "BDeu":
        return np.full(shape, equivalent_sample_size / np.prod(shape))
    if prior == "K2":
        return np.ones(shape)
    if prior == "dirichlet":
        if pseudo is None:
            raise ValueError(f"prior='dirichlet' needs pseudo_counts for {family[0]!r}")
        if isinstance(pseudo, xr.DataArray):
            values = pseudo.transpose(*family).values
        else:
            values = np.asarray(pseudo, dtype=float)
        values = np.broadcast_to(values, shape).astype(float)
        if (values < 0).any() or not np.isfinite(values).all():
            raise ValueError(f"pseudo-counts of {family[0]!r} must be finite and nonnegative")
        return values
    raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")


def bayesian_network_estimate(
    structure: BayesianNetwork,
    family_counts: Mapping[tuple[str, ...], xr.DataArray],
    *,
    prior: str | None = None,
    equivalent_sample_size: float = 5.0,
    pseudo_counts_by_variable: Mapping[str, Any] | None = None,
) -> tuple[BayesianNetwork, dict[str, Any]]:
    """Tables from family counts: MLE, or the posterior mean under a Dirichlet prior.

    ``theta[x | u] = (n(x, u) + a(x, u)) / sum_x (n(x, u) + a(x, u))``, with ``a = 0``
    for the MLE. A parent configuration with no count and no pseudo-count gets the
    uniform distribution (its MLE is undefined); how many did is returned in
    ``info["empty_parent_configurations"]``.

    Returns
    -------
    (BayesianNetwork, dict)
        The estimate, and ``info``.
    """
    cpds = {}
    empty = 0
    for family in structure.families:
        table = family_counts[family]
        if table.dims != family:
            table = table.transpose(*family)
        values = np.asarray(table.values, dtype=float)
        pseudo = (pseudo_counts_by_variable or {}).get(family[0])
        values = values + pseudo_counts(family, values.shape, prior, equivalent_sample_size, pseudo)
        totals = values.sum(axis=0, keepdims=True)
        zero = totals == 0
        empty += int(zero.sum())
        estimate = np.where(zero, 1.0 / values.shape[0], values / np.where(zero, 1.0, totals))
        # the counts' labels are the table's: a shallow copy with new values keeps their indexes
        cpd = table.copy(deep=False, data=estimate)
        cpd.attrs, cpd.name = {}, None
        cpds[family[0]] = cpd
    return BayesianNetwork(cpds), {"empty_parent_configurations": empty}


def family_loglik(model: BayesianNetwork, family_counts: Mapping[tuple[str, ...], xr.DataArray]) -> float:
    """Complete-data log-likelihood ``sum n(x, u) log theta[x | u]`` (0 log 0 = 0)."""
    total = 0.0
    for family in model.families:
        counts = np.asarray(_ordered(family_counts[family], family), dtype=float)
        theta = _ordered(model.cpds[family[0]], family)
        positive = counts > 0
        with np.errstate(divide="ignore"):
            total += float((counts[positive] * np.log(theta[positive])).sum())
    return total


def _ordered(table: xr.DataArray, dims: tuple[str, ...]) -> np.ndarray:
    """The table's values with axes in ``dims`` order (no transpose when already so)."""
    return table.values if table.dims == dims else table.transpose(*dims).values


def n_free_parameters(model: BayesianNetwork) -> int:
    """Free parameters: ``sum (r - 1) q`` over the variables."""
    return int(sum((model.cardinality(v) - 1) * int(np.prod([model.cardinality(p) for p in model.parents(v)]))
                   for v in model.variables))


def result_for(model: BayesianNetwork, family_counts, n_rows: float, method: str, info: dict) -> FitResult:
    """A closed-form FitResult for a Bayesian network."""
    return FitResult(
        model=model,
        method=method,
        loglik=family_loglik(model, family_counts),
        converged=True,
        n_iter=0,
        n_rows=n_rows,
        n_params=n_free_parameters(model),
        info=info,
    )

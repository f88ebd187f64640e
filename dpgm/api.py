"""``dpgm.fit``: one entry point that validates, gathers statistics and dispatches by method."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.fit.bayesian import PRIORS, bayesian_network_estimate, result_for
from dpgm.fit.goodness import MAX_SATURATED_CELLS, deviance_and_pearson
from dpgm.fit.result import FitResult
from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.stats.counts import Counts, counts

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["fit"]


def _data_states(data: xr.Dataset | xr.DataArray) -> dict[str, tuple[str, ...]]:
    if isinstance(data, xr.DataArray):
        return {str(d): tuple(str(s) for s in data.coords[d].values) for d in data.dims if d in data.coords}
    return Schema.from_dataset(data).states


def _check_variables(variables: Sequence[str], model_states: dict, data_states: dict) -> None:
    absent = [v for v in variables if v not in data_states]
    if absent:
        raise DataError(
            f"model variables {absent} are not in the data; latent variables need method='em'; "
            f"data variables: {sorted(data_states)}"
        )
    for v in variables:
        if v in model_states and tuple(model_states[v]) != tuple(data_states[v]):
            raise DataError(
                f"the model's states {tuple(model_states[v])!r} differ from the data's {tuple(data_states[v])!r}",
                variable=v,
            )


def _complete_counts(data, scopes, client, progress) -> Counts:
    tables = counts(data, scopes, client=client, progress=progress)
    incomplete = {s: m for s, m in tables.n_missing.items() if m}
    if incomplete:
        scope, missing = next(iter(incomplete.items()))
        raise DataError(
            f"{missing:,} rows have missing values in {scope!r} ({len(incomplete)} scopes affected); "
            "complete-data methods refuse them rather than drop them: fit with method='em'"
        )
    return tables


def _saturated_scope(variables: Sequence[str], states: dict) -> tuple[str, ...] | None:
    cells = math.prod(len(states[v]) for v in variables)
    return tuple(variables) if cells <= MAX_SATURATED_CELLS else None


def _bn_joint(model: BayesianNetwork, order: Sequence[str]) -> np.ndarray:
    letters = {v: chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i, v in enumerate(order)}
    operands, subscripts = [], []
    for v in model.variables:
        table = model.cpds[v]
        operands.append(table.values)
        subscripts.append("".join(letters[d] for d in table.dims))
    return np.einsum(",".join(subscripts) + "->" + "".join(letters[v] for v in order), *operands)


def fit(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    method: str | None = None,
    *,
    tol: float = 1e-8,
    max_iter: int = 1000,
    client: Client | None = None,
    progress: bool = False,
    callback: Callable[[dict[str, float]], None] | None = None,
    **options: Any,
) -> FitResult:
    """Fit a model's parameters to data.

    Parameters
    ----------
    model
        A :class:`~dpgm.BayesianNetwork` (parameterized, or a structure from
        ``BayesianNetwork.from_edges`` whose states come from the data).
    data
        A dataset (lazy Zarr-backed or in memory) or a labelled contingency table.
    method
        Bayesian networks: ``"mle"`` (default) or ``"bayes"`` (posterior mean under
        a Dirichlet prior: ``prior="BDeu"`` with ``equivalent_sample_size``,
        ``"K2"``, or ``"dirichlet"`` with ``pseudo_counts={variable: table}``).
    tol, max_iter
        Stopping rule of iterative methods.
    client
        Dask client for the pass(es) over the data.
    progress
        Show progress of the passes.
    callback
        Called with each iteration's history record.
    **options
        Method options (see above).

    Returns
    -------
    FitResult

    Raises
    ------
    DataError
        Model variables absent from the data, states that differ, missing values
        with a complete-data method.
    ValueError
        An unknown method or option.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> data = dpgm.sample_bayesian_network(truth, 10_000, seed=0)
    >>> result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), data)
    >>> result.converged, result.n_params
    (True, 18)
    """
    if isinstance(model, BayesianNetwork):
        return _fit_bayesian_network(model, data, method or "mle", client=client, progress=progress, **options)
    raise TypeError(f"cannot fit a {type(model).__name__}; expected a BayesianNetwork")


def _fit_bayesian_network(model, data, method, *, client, progress, prior=None, equivalent_sample_size=5.0,
                          pseudo_counts=None, goodness_of_fit=True) -> FitResult:
    methods = ("mle", "bayes")
    if method not in methods:
        raise ValueError(f"unknown method {method!r} for a BayesianNetwork; expected one of {methods} (or 'em')")
    if method == "bayes" and prior is None:
        prior = "BDeu"
    if method == "mle" and prior is not None:
        method = "bayes"
    if prior is not None and prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    states = _data_states(data)
    _check_variables(model.variables, model.states, states)
    families = model.families
    saturated = _saturated_scope(model.variables, states) if goodness_of_fit else None
    scopes = families + ([saturated] if saturated else [])
    tables = _complete_counts(data, scopes, client, progress)
    estimate, info = bayesian_network_estimate(
        model, tables, prior=prior, equivalent_sample_size=equivalent_sample_size,
        pseudo_counts_by_variable=pseudo_counts,
    )
    result = result_for(estimate, tables, float(tables.n_rows), method, info)
    if saturated:
        observed = tables[saturated].values
        result.g2, result.pearson = deviance_and_pearson(observed, _bn_joint(estimate, saturated))
        result.df = int(observed.size - 1 - result.n_params)
    return result

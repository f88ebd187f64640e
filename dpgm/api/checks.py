"""Validation and statistics shared by every fit: data states, model/data agreement, complete counts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import xarray as xr

from dpgm.data.schema import Schema
from dpgm.errors import DataError
from dpgm.fit.goodness import MAX_SATURATED_CELLS
from dpgm.stats.counts import Counts, counts


def data_states(data: xr.Dataset | xr.DataArray) -> dict[str, tuple[str, ...]]:
    if isinstance(data, xr.DataArray):
        return {str(d): tuple(str(s) for s in data.coords[d].values) for d in data.dims if d in data.coords}
    return Schema.from_dataset(data).states


def check_variables(variables: Sequence[str], model_states: dict, data_states: dict) -> None:
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


def complete_counts(data, scopes, client, progress) -> Counts:
    tables = counts(data, scopes, client=client, progress=progress)
    incomplete = {s: m for s, m in tables.n_missing.items() if m}
    if incomplete:
        scope, missing = next(iter(incomplete.items()))
        raise DataError(
            f"{missing:,} rows have missing values in {scope!r} ({len(incomplete)} scopes affected); "
            "complete-data methods refuse them rather than drop them: fit with method='em'"
        )
    return tables


# the counting pass holds a table with one extra 'missing' state per variable
MAX_SATURATED_COUNTED_CELLS = 1 << 24


def saturated_scope(variables: Sequence[str], states: dict) -> tuple[str, ...] | None:
    """All variables, when their table is small enough to count for G^2 and X^2 (else None).

    Two bounds: the table itself (``MAX_SATURATED_CELLS``) and the table the counting
    kernel holds per chunk, with a 'missing' state on every axis (20 binary variables:
    2**20 cells but 3**20 counted, 26 GiB; refused here rather than allocated).
    """
    cells = math.prod(len(states[v]) for v in variables)
    counted = math.prod(len(states[v]) + 1 for v in variables)
    small = cells <= MAX_SATURATED_CELLS and counted <= MAX_SATURATED_COUNTED_CELLS
    return tuple(variables) if small else None

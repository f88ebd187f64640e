"""Structural zeros: cells of an undirected model fixed at probability zero.

A structural-zero pattern is a boolean ``xarray.DataArray`` (``True`` = the cell
is impossible) over any subset of a model's variables, dims in the model's
variable order. A model that carries one applies it as one more factor (an
indicator of the allowed cells) in every inference path, so marginals, log Z,
MAP, batched posteriors and save/load all see the zeros; the fitting methods
start IPF from it (R's ``loglin(start=)``) or add ``-inf`` on it to the log
potentials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from dpgm.models.state_order import reorder_table
from dpgm.potentials import labelled_table

__all__ = ["check_structural_zeros", "merge_structural_zeros", "zeros_factors", "zeros_log_factor"]


def check_structural_zeros(
    mask: xr.DataArray | None, variables: Sequence[str], states: Mapping[str, Sequence[str]], *, source: str = "data"
) -> xr.DataArray | None:
    """A validated mask, dims in ``variables`` order, boolean; ``None`` when ``mask`` is None.

    Raises
    ------
    TypeError
        ``mask`` is not a DataArray.
    ValueError
        Dims not among ``variables``, missing state labels or other labels than ``states`` (labels
        are matched by name: a mask in another order of the same labels is permuted into
        ``states``' order), or every cell a zero.
    """
    if mask is None:
        return None
    if not isinstance(mask, xr.DataArray):
        raise TypeError(f"structural_zeros must be a boolean xarray.DataArray, got {type(mask).__name__}")
    dims = [str(d) for d in mask.dims]
    unknown = [d for d in dims if d not in variables]
    if unknown:
        raise ValueError(f"structural_zeros names variables not in the model: {unknown}; model: {list(variables)}")
    if not dims:
        raise ValueError("structural_zeros must have at least one dimension (a variable of the model)")
    for d in dims:
        if d not in mask.coords:
            raise ValueError(f"structural_zeros has no state labels for {d!r}; expected {list(states[d])}")
        labels = [str(s) for s in mask.coords[d].values]
        expected = [str(s) for s in states[d]]
        if sorted(labels) != sorted(expected) or len(set(labels)) != len(labels):
            lacking = [s for s in expected if s not in labels]
            unknown = [s for s in labels if s not in expected]
            raise ValueError(f"structural_zeros labels {labels} for {d!r} are not its states {expected} "
                             f"(in any order): the mask lacks {lacking} and has unknown labels {unknown}")
    mask = reorder_table(mask, {d: states[d] for d in dims})  # matched by label, whatever the mask's order
    values = np.asarray(mask.values)
    if values.dtype != bool:
        if not np.isin(values, (0, 1)).all():
            raise ValueError("structural_zeros must be boolean (True = cell fixed at zero)")
        values = values.astype(bool)
    scope = tuple(sorted(dims, key=list(variables).index))
    values = np.transpose(values, [dims.index(v) for v in scope])
    if values.all():
        raise ValueError("structural_zeros marks every cell as zero: the model would have no mass")
    return labelled_table(values, scope, {v: tuple(map(str, states[v])) for v in scope})


def merge_structural_zeros(
    first: xr.DataArray | None, second: xr.DataArray | None, variables: Sequence[str]
) -> xr.DataArray | None:
    """The union of two masks (a cell is zero if either says so), over the union of their dims."""
    if first is None or second is None:
        return second if first is None else first
    scope = tuple(v for v in variables if v in first.dims or v in second.dims)
    a, b = xr.broadcast(first, second)
    return (a | b).transpose(*scope)


def zeros_log_factor(mask: xr.DataArray) -> tuple[tuple[str, ...], np.ndarray]:
    """``(scope, log table)``: 0 on allowed cells, ``-inf`` on structural zeros."""
    return tuple(map(str, mask.dims)), np.where(mask.values, -np.inf, 0.0)


def zeros_factors(mask: xr.DataArray | None) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """The allowed cells' indicator as a factor (1 allowed, 0 structural zero): ``[]`` without a mask."""
    if mask is None:
        return []
    return [(tuple(map(str, mask.dims)), (~np.asarray(mask.values, dtype=bool)).astype(float))]

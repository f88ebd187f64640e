"""Labelled tables put into another order of the same state labels: a permutation by label, exact.

A model's ``with_state_order(states)`` permutes each of its tables along the
variables named in ``states`` with :func:`reorder_table`; the data's order and the
model's meet only through these permutations, never through arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["changed_orders", "check_same_labels", "permutation", "reorder_array", "reorder_table", "reorder_tables"]


def changed_orders(current: Mapping[str, Sequence[str]],
                   states: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]] | None:
    """The orders ``states`` asks for the variables of ``current`` (a model's states); ``None`` when
    every one of them is already in that order (the model is returned as it is)."""
    wanted = {v: tuple(map(str, s)) for v, s in states.items() if v in current}
    if all(tuple(map(str, current[v])) == s for v, s in wanted.items()):
        return None
    return wanted


def check_same_labels(variable: str, current: Sequence[str], wanted: Sequence[str]) -> None:
    """Refuse an order that is not a permutation of the variable's labels.

    Raises
    ------
    ValueError
        Naming the variable, both label lists and the labels missing on each side.
    """
    current, wanted = [str(s) for s in current], [str(s) for s in wanted]
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"the states {wanted} of {variable!r} repeat a label")
    if sorted(current) != sorted(wanted):
        lacking = [s for s in current if s not in wanted]
        extra = [s for s in wanted if s not in current]
        raise ValueError(f"the states {wanted} of {variable!r} are not a reordering of its states {current} "
                         f"(missing: {lacking}; unknown: {extra})")


def permutation(current: Sequence[str], wanted: Sequence[str]) -> np.ndarray:
    """Positions in ``current`` of each label of ``wanted`` (``values.take(p)`` puts ``values`` in ``wanted``'s
    order)."""
    index = {str(s): i for i, s in enumerate(current)}
    return np.array([index[str(s)] for s in wanted], dtype=np.intp)


def reorder_table(table: xr.DataArray, states: Mapping[str, Sequence[str]]) -> xr.DataArray:
    """``table`` with every dimension named in ``states`` permuted into that order of its labels.

    Dimensions not in ``states`` (and dimensions already in order) are left alone.

    Raises
    ------
    ValueError
        The labels given for a dimension are not a permutation of the table's.

    Examples
    --------
    >>> t = xr.DataArray([0.2, 0.8], dims=["rain"], coords={"rain": ["yes", "no"]})
    >>> reorder_table(t, {"rain": ["no", "yes"]}).values.tolist()
    [0.8, 0.2]
    """
    positions = {}
    for dim in map(str, table.dims):
        if dim not in states:
            continue
        current = [str(s) for s in table.coords[dim].values]
        wanted = [str(s) for s in states[dim]]
        if current != wanted:
            check_same_labels(dim, current, wanted)
            positions[dim] = permutation(current, wanted)
    return table.isel(positions) if positions else table


def reorder_tables(current: Mapping[str, Sequence[str]], states: Mapping[str, Sequence[str]],
                   tables: Mapping[Any, xr.DataArray], structural_zeros: xr.DataArray | None = None
                   ) -> tuple[dict[Any, xr.DataArray], xr.DataArray | None] | None:
    """A model's ``tables`` (keys kept) and its structural zeros permuted by :func:`reorder_table` into the
    orders ``states`` asks for; ``None`` when the model's states ``current`` are already in those orders."""
    wanted = changed_orders(current, states)
    if wanted is None:
        return None
    zeros = None if structural_zeros is None else reorder_table(structural_zeros, wanted)
    return {key: reorder_table(table, wanted) for key, table in tables.items()}, zeros


def reorder_array(values: np.ndarray, dims: Sequence[str], current: Mapping[str, Sequence[str]],
                  wanted: Mapping[str, Sequence[str]]) -> np.ndarray:
    """A plain array over ``dims`` whose axes are labelled ``current[dim]``, permuted into ``wanted[dim]`` for
    every dim named in ``wanted`` (the unlabelled form of :func:`reorder_table`)."""
    for axis, dim in enumerate(dims):
        if dim in wanted and tuple(map(str, current[dim])) != tuple(map(str, wanted[dim])):
            values = np.take(values, permutation(current[dim], wanted[dim]), axis=axis)
    return values

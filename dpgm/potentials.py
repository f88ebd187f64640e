"""Potentials: tables over scopes of variables, and the one home of their algebra and labels.

A potential has two forms, one per layer that uses it:

* **labelled**: an ``xarray.DataArray`` whose dims are variable names and whose
  coords are state labels (model parameters, query results, counts handed to
  users). :func:`labelled_table` and :func:`state_index` build the labels once
  per variable; :func:`product`, :func:`marginal`, :func:`marginalize`,
  :func:`reduce`, :func:`divide`, :func:`normalize` and their ``log_`` versions
  are the algebra.
* **plain**: a NumPy array whose axes follow a *scope* (a tuple of variable
  names), for inner loops (counts, junction trees, fitting algorithms).
  :func:`reduce_to` sums a table down to a sub-scope (or reorders its axes) and
  :func:`expand` broadcasts one up to a larger scope.

Every binary labelled operation runs under ``xr.set_options(arithmetic_join="exact")``
after checking that shared variables have the same labels in the same order: two
potentials that disagree on a variable's states (labels, order or cardinality)
raise ``ValueError`` naming the variable, instead of xarray's default silent
alignment (which drops or NaN-fills mismatched states). Results put dims in
order of first appearance.

Log-space versions (``log_`` prefix) take and return log potentials; sums become
log-sum-exp, stable for entries near ``-inf`` or very large.

This module sits at the bottom of the package (it imports NumPy, pandas and
xarray only), so every layer, from counting to the API, uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

__all__ = [
    "Scope",
    "divide",
    "expand",
    "labelled_table",
    "log_divide",
    "log_marginalize",
    "log_normalize",
    "log_product",
    "marginal",
    "marginalize",
    "normalize",
    "product",
    "reduce",
    "reduce_to",
    "state_index",
]

Scope = tuple[str, ...]


# -- labels ----------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def state_index(name: str, states: tuple[str, ...]) -> pd.Index:
    """The labels of a variable as a pandas Index, built once (xarray coords from an Index are ~10x cheaper)."""
    return pd.Index(list(states), name=name, dtype=object)


@lru_cache(maxsize=4096)
def _state_coordinate(name: str, states: tuple[str, ...]) -> tuple[Any, Any]:
    from xarray.indexes import PandasIndex

    index = PandasIndex(state_index(name, states), name)
    return index.create_variables()[name], index


def labelled_table(values: np.ndarray, scope: Sequence[str], states: Mapping[str, Sequence[str]],
                   attrs: dict | None = None) -> xr.DataArray:
    """A table labelled with its variables' states: a shallow copy of a template built once per
    scope and labels, sharing its (immutable) indexes.

    About 4x cheaper than passing labels to ``xr.DataArray``, which rebuilds (and
    deep-copies) each index: that cost dominated assembling many small tables.

    Examples
    --------
    >>> t = labelled_table(np.array([[1.0, 2.0]]), ("x", "y"), {"x": ["0"], "y": ["u", "v"]})
    >>> t.dims, t.coords["y"].values.tolist()
    (('x', 'y'), ['u', 'v'])
    """
    template = _template(tuple(scope), tuple(tuple(states[v]) for v in scope))
    values = np.asarray(values)
    if values.shape != template.shape:
        raise ValueError(f"a table over {tuple(scope)!r} must have shape {template.shape}, got {values.shape}")
    table = template.copy(deep=False, data=values)
    if attrs:
        table.attrs = dict(attrs)
    return table


@lru_cache(maxsize=4096)
def _template(scope: tuple[str, ...], labels: tuple[tuple[str, ...], ...]) -> xr.DataArray:
    variables, indexes = {}, {}
    for v, states in zip(scope, labels, strict=True):
        variables[v], indexes[v] = _state_coordinate(v, states)
    coordinates = xr.Coordinates(coords=variables, indexes=indexes)
    shape = tuple(len(states) for states in labels)
    return xr.DataArray(np.broadcast_to(np.zeros((), dtype=np.int8), shape), dims=scope, coords=coordinates)


# -- plain tables: NumPy arrays whose axes follow a scope ------------------------------------


def reduce_to(table: np.ndarray, scope: Sequence[str], target: Sequence[str]) -> np.ndarray:
    """Sum a table over ``scope`` down to ``target`` (a subset), axes in ``target`` order.

    With ``target`` holding the same variables as ``scope`` this only reorders the axes.

    Examples
    --------
    >>> t = np.arange(6.0).reshape(2, 3)                 # scope ("x", "y")
    >>> reduce_to(t, ("x", "y"), ("y",)).tolist(), reduce_to(t, ("x", "y"), ("y", "x")).shape
    ([3.0, 5.0, 7.0], (3, 2))
    """
    keep = [scope.index(v) for v in target]
    other = tuple(i for i in range(len(scope)) if i not in keep)
    summed = table.sum(axis=other) if other else table
    kept_sorted = sorted(keep)
    return np.transpose(summed, [kept_sorted.index(k) for k in keep])


def expand(table: np.ndarray, scope: Sequence[str], variables: Sequence[str]) -> np.ndarray:
    """View of a table over ``scope`` broadcastable against a table over ``variables`` (a superset).

    Examples
    --------
    >>> expand(np.array([1.0, 2.0]), ("y",), ("x", "y", "z")).shape
    (1, 2, 1)
    """
    order = sorted(range(len(scope)), key=lambda i: variables.index(scope[i]))
    moved = np.transpose(table, order)
    shape = [1] * len(variables)
    for i in order:
        shape[variables.index(scope[i])] = table.shape[i]
    return moved.reshape(shape)


# -- labelled potentials ---------------------------------------------------------------------


def _check_compatible(potentials: Sequence[xr.DataArray]) -> None:
    labels: dict[str, tuple] = {}
    for potential in potentials:
        if not isinstance(potential, xr.DataArray):
            raise TypeError(f"a potential must be an xarray.DataArray, got {type(potential).__name__}")
        for dim in potential.dims:
            if dim not in potential.coords:
                raise ValueError(f"variable {dim!r} has no state labels (coords); give them as coords={{{dim!r}: [...]}}")
            these = tuple(map(str, potential.coords[dim].values))
            if labels.setdefault(str(dim), these) != these:
                raise ValueError(
                    f"variable {dim!r} has states {labels[str(dim)]!r} in one potential and {these!r} in another"
                )


def _order(potentials: Sequence[xr.DataArray]) -> list:
    return list(dict.fromkeys(d for p in potentials for d in p.dims))


def _check_variables(potential: xr.DataArray, variables: Iterable[str]) -> list[str]:
    variables = [variables] if isinstance(variables, str) else list(variables)
    unknown = [v for v in variables if v not in potential.dims]
    if unknown:
        raise ValueError(f"cannot sum out {unknown}: not variables of the potential; variables: {list(potential.dims)}")
    return variables


def product(*potentials: xr.DataArray) -> xr.DataArray:
    """The product of potentials, aligned by variable name.

    Parameters
    ----------
    *potentials
        One or more DataArrays; a variable shared by several must have the same
        labels in each.

    Returns
    -------
    xarray.DataArray
        Over the union of the variables, dims in order of first appearance.

    Raises
    ------
    ValueError
        No potentials, or a variable whose labels differ between potentials.

    Examples
    --------
    >>> a = xr.DataArray([0.2, 0.8], dims=["x"], coords={"x": ["0", "1"]})
    >>> b = xr.DataArray([[1.0, 2.0], [3.0, 4.0]], dims=["x", "y"], coords={"x": ["0", "1"], "y": ["u", "v"]})
    >>> product(a, b).values.tolist()
    [[0.2, 0.4], [2.4000000000000004, 3.2]]
    """
    if not potentials:
        raise ValueError("product of no potentials")
    _check_compatible(potentials)
    with xr.set_options(arithmetic_join="exact"):
        result = potentials[0]
        for potential in potentials[1:]:
            result = result * potential
    return result.transpose(*_order(potentials))


def log_product(*log_potentials: xr.DataArray) -> xr.DataArray:
    """Product in log space: the sum of log potentials (see :func:`product`).

    Examples
    --------
    >>> a = xr.DataArray([0.0, -np.inf], dims=["x"], coords={"x": ["0", "1"]})
    >>> log_product(a, a).values.tolist()
    [0.0, -inf]
    """
    if not log_potentials:
        raise ValueError("product of no potentials")
    _check_compatible(log_potentials)
    with xr.set_options(arithmetic_join="exact"):
        result = log_potentials[0]
        for potential in log_potentials[1:]:
            result = result + potential
    return result.transpose(*_order(log_potentials))


def marginalize(potential: xr.DataArray, variables: Iterable[str]) -> xr.DataArray:
    """Sum out ``variables``.

    Raises
    ------
    ValueError
        A variable the potential does not have.

    Examples
    --------
    >>> f = xr.DataArray([[1.0, 2.0], [3.0, 4.0]], dims=["x", "y"], coords={"x": ["0", "1"], "y": ["u", "v"]})
    >>> marginalize(f, ["y"]).values.tolist()
    [3.0, 7.0]
    """
    variables = _check_variables(potential, variables)
    return potential.sum(dim=variables) if variables else potential


def marginal(potential: xr.DataArray, scope: Sequence[str]) -> xr.DataArray:
    """Sum a potential down to ``scope`` (a subset of its variables), dims in ``scope`` order.

    Raises
    ------
    ValueError
        A variable of ``scope`` the potential does not have.

    Examples
    --------
    >>> f = xr.DataArray([[1.0, 2.0], [3.0, 4.0]], dims=["x", "y"], coords={"x": ["0", "1"], "y": ["u", "v"]})
    >>> marginal(f, ["y"]).values.tolist()
    [4.0, 6.0]
    """
    scope = [scope] if isinstance(scope, str) else list(scope)
    unknown = [v for v in scope if v not in potential.dims]
    if unknown:
        raise ValueError(f"scope {scope!r} names variables not in the potential: {unknown}; "
                         f"variables: {list(potential.dims)}")
    return marginalize(potential, [v for v in potential.dims if v not in scope]).transpose(*scope)


def log_marginalize(log_potential: xr.DataArray, variables: Iterable[str]) -> xr.DataArray:
    """Sum out ``variables`` in log space (log-sum-exp; all ``-inf`` stays ``-inf``).

    Examples
    --------
    >>> f = xr.DataArray([[-1000.0, -1000.0]], dims=["x", "y"], coords={"x": ["0"], "y": ["u", "v"]})
    >>> round(float(log_marginalize(f, ["y"])[0]) + 1000, 12) == round(float(np.log(2)), 12)
    True
    """
    variables = _check_variables(log_potential, variables)
    if not variables:
        return log_potential
    top = log_potential.max(dim=variables)
    safe = xr.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(log_potential - safe).sum(dim=variables)) + safe


def reduce(potential: xr.DataArray, evidence: Mapping[str, str]) -> xr.DataArray:
    """Condition on hard evidence: select the observed states and drop those variables.

    Evidence on variables the potential does not have is ignored (so one
    evidence dict serves every factor of a model). Works for log potentials too.

    Raises
    ------
    ValueError
        A label that is not a state of its variable.

    Examples
    --------
    >>> f = xr.DataArray([[1.0, 2.0], [3.0, 4.0]], dims=["x", "y"], coords={"x": ["0", "1"], "y": ["u", "v"]})
    >>> reduce(f, {"y": "v", "z": "ignored"}).values.tolist()
    [2.0, 4.0]
    """
    selection = {}
    for variable, label in evidence.items():
        if variable not in potential.dims:
            continue
        labels = list(map(str, potential.coords[variable].values))
        if str(label) not in labels:
            raise ValueError(f"{label!r} is not a state of {variable!r}; states: {labels}")
        selection[variable] = labels.index(str(label))
    return potential.isel(selection, drop=True)


def divide(numerator: xr.DataArray, denominator: xr.DataArray) -> xr.DataArray:
    """``numerator / denominator`` with ``0 / 0 = 0`` (Hugin's separator update).

    Raises
    ------
    ValueError
        A nonzero entry over a zero one (not a ratio of consistent potentials), or
        mismatched labels.

    Examples
    --------
    >>> a = xr.DataArray([0.0, 2.0], dims=["x"], coords={"x": ["0", "1"]})
    >>> b = xr.DataArray([0.0, 4.0], dims=["x"], coords={"x": ["0", "1"]})
    >>> divide(a, b).values.tolist()
    [0.0, 0.5]
    """
    _check_compatible([numerator, denominator])
    with xr.set_options(arithmetic_join="exact"):
        bad = (denominator == 0) & (numerator != 0)
        if bool(bad.any()):
            raise ValueError("division of a nonzero entry by zero")
        result = xr.where(denominator == 0, 0.0, numerator / xr.where(denominator == 0, 1.0, denominator))
    return result.transpose(*_order([numerator, denominator]))


def log_divide(log_numerator: xr.DataArray, log_denominator: xr.DataArray) -> xr.DataArray:
    """Division in log space, ``-inf - (-inf) = -inf`` (0 / 0 = 0).

    Raises
    ------
    ValueError
        A finite entry over ``-inf``, or mismatched labels.

    Examples
    --------
    >>> a = xr.DataArray([-np.inf, 1.0], dims=["x"], coords={"x": ["0", "1"]})
    >>> log_divide(a, a).values.tolist()
    [-inf, 0.0]
    """
    _check_compatible([log_numerator, log_denominator])
    with xr.set_options(arithmetic_join="exact"):
        zero = np.isneginf(log_denominator)
        bad = zero & ~np.isneginf(log_numerator)
        if bool(bad.any()):
            raise ValueError("division of a nonzero entry by zero")
        result = xr.where(zero, -np.inf, log_numerator - xr.where(zero, 0.0, log_denominator))
    return result.transpose(*_order([log_numerator, log_denominator]))


def normalize(potential: xr.DataArray) -> xr.DataArray:
    """Scale to sum 1.

    Raises
    ------
    ValueError
        A potential that sums to zero (or is not finite).

    Examples
    --------
    >>> normalize(xr.DataArray([1.0, 3.0], dims=["x"], coords={"x": ["0", "1"]})).values.tolist()
    [0.25, 0.75]
    """
    total = float(potential.sum())
    if not total > 0 or not np.isfinite(total):
        raise ValueError(f"cannot normalize a potential that sums to {total!r}")
    return potential / total


def log_normalize(log_potential: xr.DataArray) -> xr.DataArray:
    """Subtract the log-sum-exp of all entries (the result's ``exp`` sums to 1).

    Raises
    ------
    ValueError
        Every entry ``-inf``.

    Examples
    --------
    >>> f = xr.DataArray([-1000.0, -1000.0], dims=["x"], coords={"x": ["0", "1"]})
    >>> np.exp(log_normalize(f)).values.tolist()
    [0.5, 0.5]
    """
    top = float(log_potential.max())
    if not np.isfinite(top):
        raise ValueError(f"cannot normalize a log potential whose log-sum-exp is {top!r}")
    shifted = log_potential - top  # subtract the max first: exact for the largest entries
    return shifted - float(np.log(np.exp(shifted).sum()))

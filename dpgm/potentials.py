"""Factor algebra on labelled arrays: potentials are ``xarray.DataArray``s whose dims are
variable names and whose coords are state labels.

Every operation runs with ``arithmetic_join="exact"``: two potentials whose labels for a
shared variable differ raise ``ValueError`` naming the variable instead of aligning
silently (xarray's default would drop or NaN-fill the mismatched states).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

__all__ = [
    "divide",
    "log_marginalize",
    "log_normalize",
    "log_product",
    "marginalize",
    "normalize",
    "product",
    "reduce",
]


def _check_compatible(potentials: Sequence[xr.DataArray]) -> None:
    labels: dict[str, tuple] = {}
    for potential in potentials:
        for dim in potential.dims:
            if dim not in potential.coords:
                raise ValueError(f"variable {dim!r} has no state labels")
            these = tuple(map(str, potential.coords[dim].values))
            if labels.setdefault(str(dim), these) != these:
                raise ValueError(
                    f"variable {dim!r} has states {labels[str(dim)]!r} in one potential and {these!r} in another"
                )


def product(*potentials: xr.DataArray) -> xr.DataArray:
    """The product, aligned by variable name (dims in order of first appearance).

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
    order = list(dict.fromkeys(d for p in potentials for d in p.dims))
    return result.transpose(*order)


def log_product(*log_potentials: xr.DataArray) -> xr.DataArray:
    """Product in log space: the sum of log potentials."""
    if not log_potentials:
        raise ValueError("product of no potentials")
    _check_compatible(log_potentials)
    with xr.set_options(arithmetic_join="exact"):
        result = log_potentials[0]
        for potential in log_potentials[1:]:
            result = result + potential
    order = list(dict.fromkeys(d for p in log_potentials for d in p.dims))
    return result.transpose(*order)


def marginalize(potential: xr.DataArray, variables: Iterable[str]) -> xr.DataArray:
    """Sum out ``variables``."""
    variables = list(variables)
    unknown = [v for v in variables if v not in potential.dims]
    if unknown:
        raise ValueError(f"cannot sum out {unknown}: not in {list(potential.dims)}")
    return potential.sum(dim=variables) if variables else potential


def log_marginalize(log_potential: xr.DataArray, variables: Iterable[str]) -> xr.DataArray:
    """Sum out ``variables`` in log space (log-sum-exp, stable for entries near ``-inf`` or huge)."""
    variables = list(variables)
    unknown = [v for v in variables if v not in log_potential.dims]
    if unknown:
        raise ValueError(f"cannot sum out {unknown}: not in {list(log_potential.dims)}")
    if not variables:
        return log_potential
    top = log_potential.max(dim=variables)
    safe = xr.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(log_potential - safe).sum(dim=variables)) + safe


def reduce(potential: xr.DataArray, evidence: Mapping[str, str]) -> xr.DataArray:
    """Condition on hard evidence: select the observed states and drop those variables."""
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
    """``numerator / denominator`` with ``0 / 0 = 0`` (a nonzero over zero is an error)."""
    _check_compatible([numerator, denominator])
    with xr.set_options(arithmetic_join="exact"):
        bad = (denominator == 0) & (numerator != 0)
        if bool(bad.any()):
            raise ValueError("division of a nonzero entry by zero")
        result = xr.where(denominator == 0, 0.0, numerator / xr.where(denominator == 0, 1.0, denominator))
    return result.transpose(*numerator.dims, *[d for d in denominator.dims if d not in numerator.dims])


def normalize(potential: xr.DataArray) -> xr.DataArray:
    """Scale to sum 1 (an all-zero potential is an error)."""
    total = float(potential.sum())
    if total <= 0:
        raise ValueError("cannot normalize a potential that sums to zero")
    return potential / total


def log_normalize(log_potential: xr.DataArray) -> xr.DataArray:
    """Subtract the log-sum-exp of all entries."""
    return log_potential - log_marginalize(log_potential, list(log_potential.dims))

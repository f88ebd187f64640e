"""Test oracles: brute-force enumeration of a small model's joint table, and assertion helpers.

Deliberately naive — one ``np.einsum`` over all factors into the full joint,
then sums, slices and ``argmax`` on it — so that it shares no code with the
junction-tree engine it checks. Use it for models of up to ~12 variables
(the joint has ``prod(cardinalities)`` cells).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import opt_einsum
import xarray as xr

__all__ = [
    "brute_log_partition",
    "brute_map_value",
    "brute_marginal",
    "condition",
    "joint_table",
]


def joint_table(model: Any) -> xr.DataArray:
    """The unnormalized joint over all variables (dims in ``model.variables`` order), labelled.

    Examples
    --------
    >>> import dpgm
    >>> joint = joint_table(dpgm.load_network("cancer"))
    >>> joint.dims[:2], round(float(joint.sum()), 12)
    (('Pollution', 'Smoker'), 1.0)
    """
    variables = tuple(model.variables)
    if len(variables) > 52:
        raise ValueError(f"{len(variables)} variables is too many to enumerate")
    symbol = {v: opt_einsum.get_symbol(i) for i, v in enumerate(variables)}
    factors = model.factors()  # the model's own definition: (scope, table) pairs
    expression = ",".join("".join(symbol[v] for v in s) for s, _ in factors) + "->" + "".join(
        symbol[v] for v in variables)
    values = np.einsum(expression, *[t for _, t in factors])
    return xr.DataArray(values, dims=variables, coords={v: list(model.states[v]) for v in variables})


def condition(joint: xr.DataArray, evidence: Mapping[str, Any] | None) -> xr.DataArray:
    """The joint times the evidence: indicators for labels, likelihood vectors for soft evidence."""
    out = joint
    for variable, value in dict(evidence or {}).items():
        labels = [str(s) for s in joint.coords[variable].values]
        if isinstance(value, str):
            vector = np.array([1.0 if s == value else 0.0 for s in labels])
        elif isinstance(value, xr.DataArray):
            vector = np.asarray(value.sel({variable: labels}).values, dtype=float)
        else:
            vector = np.asarray(value, dtype=float)
        shape = [len(labels) if d == variable else 1 for d in joint.dims]
        out = out.copy(data=out.values * vector.reshape(shape))
    return out


def brute_log_partition(joint: xr.DataArray, evidence: Mapping[str, Any] | None = None) -> float:
    """log of the sum of the (conditioned) joint."""
    with np.errstate(divide="ignore"):
        return float(np.log(condition(joint, evidence).values.sum()))


def brute_marginal(joint: xr.DataArray, scope: Sequence[str], evidence: Mapping[str, Any] | None = None
                   ) -> xr.DataArray:
    """The normalized marginal of ``scope`` (dims in that order) of the conditioned joint."""
    conditioned = condition(joint, evidence)
    table = conditioned.sum([d for d in joint.dims if d not in scope]).transpose(*scope)
    return table / float(table.sum())


def brute_map_value(joint: xr.DataArray, evidence: Mapping[str, Any] | None = None) -> float:
    """The largest entry of the conditioned joint (ties make the argmax ambiguous; the value is not)."""
    return float(condition(joint, evidence).values.max())

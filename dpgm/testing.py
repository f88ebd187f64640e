"""Test oracles: brute-force enumeration of a small model's joint table, and evidence rows to query.

Deliberately naive — one ``np.einsum`` over all factors into the full joint,
then sums, slices and ``argmax`` on it — so that it shares no code with the
junction-tree engine it checks. Use it for models of up to ~12 variables
(the joint has ``prod(cardinalities)`` cells). :func:`forward_sample` and
:func:`observe_at_random` make rows of codes with evidence, for the tests and
the benchmarks of batched inference.
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
    "forward_sample",
    "joint_array",
    "joint_table",
    "observe_at_random",
    "restrict",
]


def joint_array(variables: Sequence[str], factors: Sequence[tuple[Sequence[str], np.ndarray]]) -> np.ndarray:
    """The product of ``(scope, table)`` factors as one array over ``variables`` (axes in that order).

    Examples
    --------
    >>> joint_array(["a", "b"], [(("a",), np.array([1.0, 2.0])), (("b", "a"), np.ones((3, 2)))]).shape
    (2, 3)
    """
    variables = tuple(variables)
    if len(variables) > 52:
        raise ValueError(f"{len(variables)} variables is too many to enumerate")
    symbol = {v: opt_einsum.get_symbol(i) for i, v in enumerate(variables)}
    expression = ",".join("".join(symbol[v] for v in s) for s, _ in factors) + "->" + "".join(
        symbol[v] for v in variables)
    return np.einsum(expression, *[t for _, t in factors])


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
    values = joint_array(variables, model.factors())  # the model's own definition: (scope, table) pairs
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


def restrict(joint: np.ndarray, variables: Sequence[str], observed: Sequence[str], row: Sequence[int]
             ) -> np.ndarray:
    """``joint`` (axes ``variables``) with the cells that disagree with one row of codes set to zero.

    ``row[k]`` is the state code of ``observed[k]``, ``-1`` where it is missing.
    """
    variables = list(variables)
    index: list[Any] = [slice(None)] * len(variables)
    for v, c in zip(observed, row, strict=True):
        if c >= 0:
            index[variables.index(v)] = slice(int(c), int(c) + 1)
    restricted = np.zeros_like(joint)
    restricted[tuple(index)] = joint[tuple(index)]
    return restricted


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


def forward_sample(model: Any, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Forward samples of a Bayesian network: codes ``(rows, n_variables)`` in ``model.variables`` order.

    Examples
    --------
    >>> import dpgm
    >>> forward_sample(dpgm.load_network("cancer"), 4, np.random.default_rng(0)).shape
    (4, 5)
    """
    index = {v: j for j, v in enumerate(model.variables)}
    codes = np.zeros((rows, len(model.variables)), dtype=np.int64)
    for v in model.variables:  # in topological order: every parent is drawn before its children
        table = model.cpds[v].values
        flat = table.reshape(table.shape[0], -1)
        column = np.zeros(rows, dtype=np.int64)
        for p in model.parents(v):
            column = column * model.cardinality(p) + codes[:, index[p]]
        cumulative = np.cumsum(flat[:, column], axis=0)
        codes[:, index[v]] = np.minimum((rng.random(rows) > cumulative).sum(axis=0), table.shape[0] - 1)
    return codes


def observe_at_random(codes: np.ndarray, observed: int, rng: np.random.Generator) -> np.ndarray:
    """``codes`` with all but ``observed`` entries of each row, chosen at random per row, set missing (-1)."""
    return np.where(np.argsort(rng.random(codes.shape), axis=1) < observed, codes, -1)

"""One pass for a whole hybrid network: the tables' counts and every GLM node's IRLS statistics.

Each chunk counts the family ``(child, *parents)`` of every tabular node (on the
first pass) and computes the IRLS statistics of every GLM node still iterating at
its current coefficients (:func:`dpgm.stats.irls.irls_chunk`); the partials are
nested dicts added leaf by leaf, so one pass serves all nodes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.errors import DataError
from dpgm.stats.engine import map_reduce
from dpgm.stats.irls import Design, irls_chunk

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["HybridPlan", "hybrid_pass"]


@dataclass(frozen=True)
class HybridPlan:
    """The tabular families to count (with each variable's number of states) and the GLM designs."""

    families: tuple[tuple[str, ...], ...]
    cardinality: tuple[tuple[str, int], ...]
    designs: tuple[tuple[str, Design], ...]

    @property
    def variables(self) -> list[str]:
        names = [v for f in self.families for v in f]
        names += [v for _, d in self.designs for v in (d.child, *(p for p, _ in d.parents))]
        return list(dict.fromkeys(names))


def count_family(columns: dict[str, np.ndarray], family: tuple[str, ...], cardinality: dict[str, int],
                 weights: np.ndarray | None, index: int) -> tuple[np.ndarray, float]:
    """The family's contingency table (flat) over complete rows, and the weight of incomplete rows."""
    shape = tuple(cardinality[v] for v in family)
    codes = [np.asarray(columns[v]).astype(np.intp) for v in family]
    for v, c in zip(family, codes, strict=True):
        if (c >= cardinality[v]).any() or (c < -1).any():
            raise DataError(f"holds codes outside 0..{cardinality[v] - 1} (-1 marks a missing value)",
                            variable=v, chunk=index)
    complete = np.logical_and.reduce([c >= 0 for c in codes])
    flat = np.ravel_multi_index([c[complete] for c in codes], shape)
    w = None if weights is None else weights[complete]
    table = np.bincount(flat, weights=w, minlength=math.prod(shape)).astype(np.float64)
    incomplete = float((~complete).sum() if weights is None else weights[~complete].sum())
    return table, incomplete


def hybrid_chunk(index: int, columns: dict[str, np.ndarray], shared: Any, plan: HybridPlan,
                 weight: str | None) -> dict[str, Any]:
    """One chunk: ``{"counts": {family: (table, missing)}, "glm": {node: statistics}}``."""
    columns = dict(columns)
    weights = None
    if weight is not None:
        columns["__weight__"] = weights = np.asarray(columns.pop(weight), np.float64)
    out: dict[str, Any] = {"glm": {}}
    if shared["count"]:
        cardinality = dict(plan.cardinality)
        out["counts"] = {"|".join(f): count_family(columns, f, cardinality, weights, index) for f in plan.families}
    designs = dict(plan.designs)
    for node, beta in shared["betas"].items():
        out["glm"][node] = irls_chunk(index, columns, beta, designs[node])
    return out


def hybrid_pass(source: DataSource, plan: HybridPlan, betas: dict[str, np.ndarray | None], *,
                count: bool) -> dict[str, Any]:
    """One pass over ``source``: the tabular families' counts (if ``count``) and the IRLS statistics of the nodes in ``betas``.

    Returns
    -------
    dict
        ``counts``: ``"child|parent|..." -> (flat table, weight of rows missing a
        value of the family)``; ``glm``: node -> the statistics of
        :func:`dpgm.stats.irls.irls_pass` at its coefficients (``None``: the start).
    """
    kernel = functools.partial(hybrid_chunk, plan=plan, weight=source.weight)
    shared = {"count": count, "betas": {v: None if b is None else np.asarray(b, np.float64) for v, b in betas.items()}}
    return source.compute(map_reduce(source.columns(plan.variables), kernel, name="dpgm-hybrid", shared=shared))

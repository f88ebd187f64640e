"""Conditional probability tables of a Bayesian network as one flat vector.

Each variable's table is shaped ``(variable, *parents)``; a *column* is one
parent configuration, a distribution over the variable's states. The layout
puts every table, in C order, one after the other in variable order: the
parameters are one vector ``θ`` and so are (expected) family counts, so the
M step of EM and the complete-data estimate are the same call,
:meth:`CPTLayout.normalize`, on counts plus Dirichlet pseudo-counts
(:func:`pseudo_counts`). :func:`random_tables` is the one random draw of
tables (a random EM start).

Examples
--------
>>> import numpy as np
>>> layout = CPTLayout(["a", "b"], {"a": 2, "b": 2}, {"b": ("a",)})
>>> theta, empty = layout.normalize(np.array([3.0, 1.0, 2.0, 0.0, 1.0, 0.0]))
>>> layout.tables(theta)["b"].tolist(), empty     # column a=1 never seen: uniform
([[0.6666666666666666, 0.5], [0.3333333333333333, 0.5]], 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["PRIORS", "CPTLayout", "pseudo_counts", "random_tables"]

PRIORS = ("BDeu", "K2", "dirichlet")


class CPTLayout:
    """Where each table of a Bayesian network sits in the flat parameter vector.

    Parameters
    ----------
    variables
        The variables; family ``i`` is variable ``i`` with its parents.
    cardinalities
        States per variable.
    parents
        Variable -> its parents, in the order of its table's axes after the variable.

    Attributes
    ----------
    families
        ``(variable, *parents)`` of each variable.
    family_offset
        Family ``i``'s cells are ``θ[family_offset[i]:family_offset[i + 1]]``.
    column
        Each cell's column (parent configuration), numbered across all tables.
    column_states
        Each column's number of states (float).
    """

    def __init__(self, variables: Sequence[str], cardinalities: Mapping[str, int],
                 parents: Mapping[str, Sequence[str]]):
        self.variables = tuple(map(str, variables))
        self.cardinalities = {v: int(cardinalities[v]) for v in self.variables}
        self.families = [(v, *map(str, parents.get(v, ()))) for v in self.variables]
        sizes = [math.prod(self.cardinalities[u] for u in f) for f in self.families]
        self.family_offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n_cells = int(self.family_offset[-1])
        card = [self.cardinalities[v] for v in self.variables]
        column_sizes = [size // r for size, r in zip(sizes, card, strict=True)]
        column_offset = np.concatenate([[0], np.cumsum(column_sizes)]).astype(np.int64)
        self.column = np.concatenate(
            [column_offset[i] + np.tile(np.arange(column_sizes[i]), card[i]) for i in range(len(sizes))]
        ).astype(np.int64) if sizes else np.zeros(0, dtype=np.int64)
        self.n_columns = int(column_offset[-1])
        self.column_states = np.repeat(card, column_sizes).astype(float)

    def shape(self, variable: str) -> tuple[int, ...]:
        """The shape ``(variable, *parents)`` of one variable's table."""
        return tuple(self.cardinalities[u] for u in self.families[self.variables.index(variable)])

    def flatten(self, tables: Mapping[str, np.ndarray]) -> np.ndarray:
        """One vector from each variable's table shaped ``(v, *parents)``."""
        return np.concatenate([np.asarray(tables[v], dtype=float).ravel() for v in self.variables])

    def tables(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Each variable's table shaped ``(v, *parents)`` (views into ``theta``)."""
        return {v: theta[self.family_offset[i]:self.family_offset[i + 1]].reshape(
            [self.cardinalities[u] for u in self.families[i]]) for i, v in enumerate(self.variables)}

    def normalize(self, counts: np.ndarray) -> tuple[np.ndarray, int]:
        """Tables from (pseudo-)counts: each column divided by its sum; empty columns uniform.

        ``theta[x | u] = n(x, u) / sum_x n(x, u)`` (the MLE, or with pseudo-counts
        added the Dirichlet posterior mean). A column with nothing in it gets the
        uniform distribution (its estimate is undefined).

        Returns
        -------
        (numpy.ndarray, int)
            The new ``θ`` and the number of empty parent configurations.
        """
        totals = np.bincount(self.column, weights=counts, minlength=self.n_columns)
        empty = totals == 0
        theta = counts / np.where(empty, 1.0, totals)[self.column]
        if empty.any():
            theta = np.where(empty[self.column], 1.0 / self.column_states[self.column], theta)
        return theta, int(empty.sum())

    def pseudo_counts(self, prior: str | None, equivalent_sample_size: float = 5.0,
                      by_variable: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """Every family's Dirichlet pseudo-counts (:func:`pseudo_counts`) as one vector; None without a prior."""
        if prior is None:
            return None
        return np.concatenate([
            pseudo_counts(f, self.shape(f[0]), prior, equivalent_sample_size, (by_variable or {}).get(f[0])).ravel()
            for f in self.families])


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


def random_tables(rng: np.random.Generator, shapes: Mapping[str, tuple[int, ...]],
                  concentration: float = 1.0) -> dict[str, np.ndarray]:
    """Tables drawn from Dirichlet(``concentration``) column by column, in the order of ``shapes``.

    Parameters
    ----------
    rng
        The generator the draws come from.
    shapes
        Variable -> its table's shape ``(variable, *parents)``.
    concentration
        The Dirichlet parameter of every cell.

    Examples
    --------
    >>> tables = random_tables(np.random.default_rng(0), {"a": (2,), "b": (3, 2)})
    >>> [t.sum(axis=0).round(12).tolist() for t in tables.values()]
    [1.0, [1.0, 1.0]]
    """
    out = {}
    for v, shape in shapes.items():
        columns = rng.dirichlet(np.full(shape[0], concentration), math.prod(shape[1:]))
        out[v] = columns.T.reshape(shape)
    return out

"""Weighted count, mean and centred cross-products of continuous variables, in one pass.

Each chunk computes its own count ``n``, mean ``m`` (NumPy's pairwise sum) and
centred cross-product matrix ``C = sum_r w_r (x_r - m)(x_r - m)^T``; partials
combine by the pairwise update of Chan, Golub & LeVeque (1979)::

    n = n_a + n_b,   d = m_b - m_a,   m = m_a + d n_b / n,
    C = C_a + C_b + d d^T n_a n_b / n

so data far from zero (mean 1e8, variance 1) keep full precision: nothing ever
sums raw squares. The partial is a :class:`MomentPartial`, whose ``+`` is that
update, so the shared map-reduce (:func:`dpgm.stats.engine.map_reduce`) combines
chunks in a tree exactly as it adds counts.

Rows with a NaN in any requested variable are left out (listwise) and counted in
``n_missing``; ``pairwise=True`` instead keeps, for every pair of variables, the
rows where both are present (each entry its own count, means and cross-product).

References
----------
Chan, T. F., Golub, G. H. and LeVeque, R. J. (1979). Updating formulae and a
pairwise algorithm for computing sample variances. Stanford CS report STAN-CS-79-773.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.errors import DataError
from dpgm.stats.engine import map_reduce

if TYPE_CHECKING:
    from distributed import Client

    from dpgm.stats.source import DataSource

__all__ = ["MomentPartial", "Moments", "moments", "source_moments"]


@dataclass
class MomentPartial:
    """Moments of some rows: counts ``n``, means ``mean``, centred cross-products ``cross``.

    Listwise: ``n`` is a scalar (total weight), ``mean`` a vector, ``cross`` a matrix.
    Pairwise: every entry ``[i, j]`` describes the rows where variables i and j are both
    present: ``n[i, j]``, ``mean[i, j]`` (the mean of variable i over those rows) and
    ``cross[i, j]``. ``rows``/``missing`` count rows seen and rows left out (listwise).
    """

    n: Any
    mean: np.ndarray
    cross: np.ndarray
    rows: float
    missing: float

    def __add__(self, other: MomentPartial) -> MomentPartial:
        n = self.n + other.n
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(n > 0, other.n / np.where(n > 0, n, 1), 0.0)
            delta = other.mean - self.mean
            mean = self.mean + delta * share
            if np.ndim(self.n) == 0:  # listwise: vector means
                cross = self.cross + other.cross + np.outer(delta, delta) * (self.n * share)
            else:  # pairwise: entry (i, j) uses the means of i and j over the same rows
                cross = self.cross + other.cross + delta * delta.T * (self.n * share)
        # an empty side contributes nothing (its mean is 0 by convention, not data)
        mean = np.where(np.asarray(self.n) > 0, np.where(np.asarray(other.n) > 0, mean, self.mean), other.mean)
        return MomentPartial(n, mean, cross, self.rows + other.rows, self.missing + other.missing)


def _chunk_moments(values: np.ndarray, weights: np.ndarray | None, pairwise: bool) -> MomentPartial:
    """Moments of one chunk (rows x variables, float64)."""
    rows = values.shape[0]
    w = np.ones(rows) if weights is None else weights
    present = ~np.isnan(values)
    if not pairwise:
        keep = present.all(axis=1)
        complete = bool(keep.all())
        x = values if complete else values[keep]
        wk = w if complete else w[keep]
        n = float(wk.sum())
        if n == 0:
            p = values.shape[1]
            return MomentPartial(0.0, np.zeros(p), np.zeros((p, p)), float(w.sum()), float(w[~keep].sum()))
        shift = x[0].copy()  # a data point: the sums below stay near the data's spread, not its offset
        centred = x - shift  # the one copy of the chunk
        if weights is None:
            step = centred.mean(axis=0)
            centred -= step
            cross = centred.T @ centred
        else:
            step = (wk @ centred) / n
            centred -= step
            cross = (centred * wk[:, None]).T @ centred
        return MomentPartial(n, shift + step, cross, float(w.sum()), float(w[~keep].sum()))
    filled = np.where(present, values, 0.0)
    mask = present.astype(float) * w[:, None]
    n = present.astype(float).T @ mask  # n[i, j] = weight of rows with both i and j
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, (mask * filled).T @ present.astype(float) / np.where(n > 0, n, 1), 0.0)
        # mean[i, j]: weighted mean of x_i over rows where i and j are both present
        cross = np.empty_like(n)
        for i in range(values.shape[1]):
            both = present[:, i:i + 1] & present
            di = np.where(both, filled[:, i:i + 1] - mean[i][None, :], 0.0)
            dj = np.where(both, filled - mean.T[i][None, :], 0.0)
            cross[i] = (di * dj * w[:, None]).sum(axis=0)
    missing = float(w[~present.all(axis=1)].sum())
    return MomentPartial(n, mean, cross, float(w.sum()), missing)


def _kernel(index: int, columns: dict[str, np.ndarray], shared: Any, variables: tuple[str, ...],
            weight: str | None, pairwise: bool) -> MomentPartial:
    values = np.column_stack([np.asarray(columns[v], dtype=np.float64) for v in variables])
    weights = None
    if weight is not None:
        weights = np.asarray(columns[weight], dtype=np.float64)
        if not np.isfinite(weights).all() or (weights < 0).any():
            raise DataError("weights must be finite and nonnegative", variable=weight, chunk=index)
    if np.isinf(values).any():
        bad = variables[int(np.argmax(np.isinf(values).any(axis=0)))]
        raise DataError("holds an infinite value (NaN marks a missing one)", variable=bad, chunk=index)
    return _chunk_moments(values, weights, pairwise)


@dataclass(frozen=True)
class Moments:
    """What :func:`moments` returns.

    Attributes
    ----------
    n
        Total weight of the rows used (listwise), or a ``(variable, variable_)``
        DataArray of pairwise counts.
    mean
        Means over those rows, dim ``variable`` (pairwise: ``(variable, variable_)``,
        the mean of ``variable`` over rows where both are present).
    cross
        Centred cross-products ``sum w (x - mean)(x - mean)^T``, dims ``(variable, variable_)``.
    n_rows
        Rows (total weight) read.
    n_missing
        Rows (weight) with a NaN in some requested variable: left out (listwise) or
        used where their pairs are complete (pairwise).
    """

    n: float | xr.DataArray
    mean: xr.DataArray
    cross: xr.DataArray
    n_rows: float
    n_missing: float

    @property
    def covariance(self) -> xr.DataArray:
        """Maximum-likelihood covariance ``cross / n`` (divisor n; multiply by ``n / (n - 1)`` for the unbiased one)."""
        return self.cross / self.n


def moments(
    data: xr.Dataset,
    variables: Sequence[str],
    *,
    pairwise: bool = False,
    client: Client | None = None,
    progress: bool | None = None,
) -> Moments:
    """Weighted count, mean and centred cross-product matrix of continuous variables, in one pass.

    Parameters
    ----------
    data
        A dpgm dataset (Zarr-backed and lazy, or in memory); its ``weight`` variable,
        if any, gives frequency weights.
    variables
        Continuous variables (float columns, NaN = missing).
    pairwise
        Keep every pair's complete rows instead of only rows complete in all variables.
    client
        Dask client (default: the active client, else threads).
    progress
        Show a progress bar of the pass. None (default): a bar where stderr is a terminal or in Jupyter, nothing in a script.

    Returns
    -------
    Moments

    Raises
    ------
    DataError
        An unknown or categorical variable, an infinite value, or a bad weight
        (naming the variable and chunk).

    Examples
    --------
    >>> import numpy as np, pandas as pd, dpgm
    >>> ds = dpgm.from_pandas(pd.DataFrame({"x": [1.0, 2.0, 3.0, np.nan], "y": [2.0, 4.0, 7.0, 1.0]}))
    >>> m = dpgm.moments(ds, ["x", "y"])
    >>> m.n, m.n_missing, m.mean.round(6).values.tolist()
    (3.0, 1.0, [2.0, 4.333333])
    """
    from dpgm.stats.source import DataSource

    return source_moments(DataSource.of(data, client=client, progress=progress), variables, pairwise=pairwise)


def source_moments(source: DataSource, variables: Sequence[str], *, pairwise: bool = False) -> Moments:
    """:func:`moments` of a fit's data source (its schema already read; the pass on its client)."""
    if isinstance(variables, str) or not all(isinstance(v, str) for v in variables):
        return _source_moments(source, variables, pairwise)
    return source.memo(("moments", tuple(variables), pairwise), lambda: _source_moments(source, variables, pairwise))


def _source_moments(source: DataSource, variables: Sequence[str], pairwise: bool) -> Moments:
    if source.is_table:
        raise TypeError(f"moments are computed on a dataset of rows, got a {type(source.data).__name__}")
    schema = source.schema
    variables = tuple(variables)
    if not variables:
        raise ValueError("moments need at least one variable")
    for v in variables:
        if v not in schema:
            raise DataError(f"is not in the data; continuous variables: {schema.continuous}", variable=v)
        if schema[v].categorical:
            raise DataError(f"is categorical; moments need continuous variables: {schema.continuous}", variable=v)
    if len(set(variables)) != len(variables):
        raise ValueError(f"variables repeat: {variables!r}")
    kernel = functools.partial(_kernel, variables=variables, weight=schema.weight, pairwise=pairwise)
    total = source.compute(map_reduce(source.columns(variables), kernel, name="dpgm-moments"))
    pair = ("variable", "variable_")
    coords = {"variable": list(variables), "variable_": list(variables)}
    matrix = functools.partial(xr.DataArray, dims=pair, coords=coords)
    if pairwise:
        return Moments(matrix(total.n), matrix(total.mean), matrix(total.cross), total.rows, total.missing)
    return Moments(float(total.n), xr.DataArray(total.mean, dims="variable", coords={"variable": list(variables)}),
                   matrix(total.cross), total.rows, total.missing)

"""The data source of one fit: the dataset, its schema (read once), where and how passes run.

A :class:`DataSource` is built once per fit (:func:`dpgm.fit` builds it after opening
the data) and handed to the fit function, its checks and every pass and E step it
runs. The schema is read from the dataset's attributes when the source is built and
never again, however many iterations an EM fit runs; a pass reads the columns it
needs with :meth:`DataSource.columns` and runs with :meth:`DataSource.compute`.

Examples
--------
>>> import dpgm
>>> from dpgm.stats.source import DataSource
>>> data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, seed=0)
>>> source = DataSource.of(data)
>>> source.n_rows, source.states["smoke"]
(1000, ('yes', 'no'))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.data.columns import ZarrColumns, zarr_columns
from dpgm.data.schema import WEIGHT, Schema

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DataSource", "Resampling"]


@dataclass(frozen=True)
class Resampling:
    """Replicate ``replicate`` of ``replicates`` of a Poisson bootstrap (:mod:`dpgm.stats.resample`) of ``data``.

    Attributes
    ----------
    data
        The data before the replicate's weights (its own ``weight`` variable, if any, kept).
    replicate, replicates
        This replicate and their number; replicate -1 is the data themselves (weighted by their own
        ``weight`` alone), whose tables the replicates' kernel counts too.
    random_state
        Seed of the Poisson weights.
    stored
        The same data as opened from its store (its encoding kept): the replicates' count
        kernel reads the chunks directly where it can (:func:`dpgm.data.columns.zarr_columns`).
    """

    data: xr.Dataset
    replicate: int
    replicates: int
    random_state: int
    stored: xr.Dataset | None = None


@dataclass(frozen=True)
class DataSource:
    """One fit's data and where its passes run.

    Attributes
    ----------
    data
        The dataset (``row`` first; a table's cells, a ``DataArray``, for complete-data methods).
    schema
        The dataset's :class:`~dpgm.data.schema.Schema`, read once; ``None`` for a table.
    client
        The Dask client the passes run on, or ``None`` (the default scheduler).
    progress
        What every pass reports to (see :func:`dpgm.cluster.compute`).
    resampling
        A bootstrap replicate's data (:class:`Resampling`): ``data`` is ``resampling.data``
        weighted by the replicate's Poisson weights; count tables of every replicate come
        from one kernel (:func:`dpgm.stats.counts.count_arrays`). None otherwise.
    """

    data: xr.Dataset | xr.DataArray
    schema: Schema | None
    client: Client | None = None
    progress: Any = False
    resampling: Resampling | None = None

    @classmethod
    def of(cls, data: xr.Dataset | xr.DataArray | DataSource, *, client: Client | None = None,
           progress: Any = False) -> DataSource:
        """The source of ``data`` (its schema read and checked here); a source is returned as it is."""
        if isinstance(data, DataSource):
            return data
        schema = None if isinstance(data, xr.DataArray) else Schema.from_dataset(data)
        return cls(data, schema, client, progress)

    def with_data(self, data: xr.Dataset) -> DataSource:
        """The same source over ``data`` with the same variables (e.g. persisted, or with the client's copy)."""
        return dataclasses.replace(self, data=data)

    def with_client(self, client: Client | None) -> DataSource:
        """The same source, its passes running on ``client``."""
        return dataclasses.replace(self, client=client)

    @property
    def is_table(self) -> bool:
        """The data is a table of counts (a ``DataArray``), not rows."""
        return self.schema is None

    @property
    def states(self) -> dict[str, tuple[str, ...]]:
        """State labels of every categorical variable (a table's: its coordinates)."""
        if self.schema is None:
            data = self.data
            return {str(d): tuple(str(s) for s in data.coords[d].values) for d in data.dims if d in data.coords}
        return self.schema.states

    @property
    def weight(self) -> str | None:
        """The frequency-weight variable, or ``None``."""
        return None if self.schema is None else self.schema.weight

    @property
    def n_rows(self) -> int:
        """Rows of the dataset (a table's cells)."""
        return int(self.data.size) if self.schema is None else self.schema.n_rows

    @property
    def chunk_rows(self) -> int:
        """Rows of the largest chunk a pass hands one task (a table's cells become rows for EM)."""
        if self.schema is None:
            return int(self.data.size)
        chunks = self.data.chunks.get("row") if self.data.chunks else None
        return int(max(chunks)) if chunks else self.schema.n_rows

    def columns(self, variables: Sequence[str], *, weight: bool = True,
                reuse: bool = False) -> ZarrColumns | dict[str, Any]:
        """The columns a pass maps over: ``variables`` and (``weight=True``) the weight if there is one.

        Direct chunk reads of the Zarr store when the columns are untouched
        (:func:`dpgm.data.columns.zarr_columns`), else the dataset's arrays.
        """
        needed = [*variables, *([WEIGHT] if weight and self.weight else [])]
        return zarr_columns(self.data, needed, reuse=reuse) or {v: self.data.variables[v].data for v in needed}

    def memo(self, key: Any, make: Any) -> Any:
        """The statistic ``make()`` of this source's data, named by ``key`` (a hashable description of it).

        A plain source computes it; sources of fits that run side by side on the same data
        (:class:`dpgm.api.shared_passes.SharedSource`) compute it once for all of them.
        """
        return make()

    def memo_across(self, key: Any, make: Any) -> Any:
        """The statistic ``make()`` of every replicate of a bootstrap at once (:attr:`resampling`), named by
        ``key``: a plain source computes it; sources of replicates run side by side share it."""
        return make()

    def compute(self, lazy: Any) -> Any:
        """Run one pass (:func:`dpgm.cluster.compute`) on this source's client, reporting to its progress."""
        from dpgm.cluster import compute

        return compute(lazy, client=self.client, progress=self.progress)

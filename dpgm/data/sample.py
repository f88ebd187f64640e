"""Synthetic datasets sampled from discrete Bayesian networks, chunk by chunk on the cluster."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import xarray as xr
import zarr

from dpgm.cluster import compute
from dpgm.data.claim import location, writing
from dpgm.data.integrity import mark_complete
from dpgm.data.io import _quiet_zarr, create_store, open_dataset
from dpgm.data.manifest import merge_digests, merge_tree, stored_digests
from dpgm.data.names import check_variables
from dpgm.data.schema import ROW, SCHEMA_VERSION, smallest_code_dtype, state_attrs

if TYPE_CHECKING:  # the sampler reads a network's variables, parents and tables; models sit above data
    from distributed import Client

    from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["sample_bayesian_network"]


class _Sampler:
    """Forward-sampling tables of a network as plain arrays (small; shipped to workers once)."""

    def __init__(self, model: BayesianNetwork):
        self.variables = model.variables
        self.index = {v: i for i, v in enumerate(self.variables)}
        self.parents = [[self.index[p] for p in model.parents(v)] for v in self.variables]
        self.cards = [model.cardinality(v) for v in self.variables]
        self.dtypes = [smallest_code_dtype(c, v) for v, c in zip(self.variables, self.cards, strict=True)]
        self.cumulative = []
        for v in self.variables:
            table = np.asarray(model.cpds[v].values, dtype=np.float64)
            columns = table.reshape(table.shape[0], -1).T  # (parent configuration, state)
            cumulative = np.cumsum(columns, axis=1)
            cumulative[:, -1] = np.inf  # rounding never yields an out-of-range state
            self.cumulative.append(cumulative)

    def sample(self, n: int, rng: np.random.Generator, missing: float) -> list[np.ndarray]:
        codes: list[np.ndarray] = []
        for i, parents in enumerate(self.parents):
            configuration = np.zeros(n, dtype=np.int64)
            for p in parents:
                configuration = configuration * self.cards[p] + codes[p]
            u = rng.random(n)
            cumulative = self.cumulative[i]
            state = np.zeros(n, dtype=np.int64)
            rows = cumulative[configuration]
            for k in range(self.cards[i] - 1):
                state += u >= rows[:, k]
            codes.append(state.astype(self.dtypes[i]))
        if missing > 0:
            for column in codes:
                column[rng.random(n) < missing] = -1
        return codes


def _chunk_rng(seed: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(chunk,)))


def _write_chunk(
    sampler: _Sampler, path: str, storage_options: dict | None, chunk: int, start: int, stop: int, seed: int, missing: float
) -> dict[str, dict[str, int | None]]:
    """Sample and write one chunk of every variable; the written chunks' digests (for the manifest)."""
    codes = sampler.sample(stop - start, _chunk_rng(seed, chunk), missing)
    group = zarr.open_group(path, mode="r+", storage_options=storage_options)
    digests = {}
    for name, column in zip(sampler.variables, codes, strict=True):
        array = group[name]
        array[start:stop] = column
        digests.update(stored_digests(path, storage_options, name, array, [(chunk,)]))
    return digests


def _write(sampler: _Sampler, n_rows: int, path: str, storage_options: dict | None, attrs: dict, seed: int,
           missing: float, chunk_rows: int, client: Client | None, progress: bool | str) -> None:
    """Create the store ``path`` (claimed), one task per chunk writes its rows, then mark it complete."""
    template = xr.Dataset(
        {
            v: xr.Variable(ROW, da.full(n_rows, -1, dtype=sampler.dtypes[i], chunks=chunk_rows), attrs=attrs[v])
            for i, v in enumerate(sampler.variables)
        }
    )
    create_store(template, path, chunk_rows, storage_options)  # metadata only, marked incomplete
    starts = list(range(0, n_rows, chunk_rows))
    # writes are side effects: keys unique to this run (never skipped as results of an earlier one)
    token = dask.base.tokenize(path, seed, missing, chunk_rows, n_rows, uuid.uuid4().hex)
    shared = dask.delayed(sampler, pure=True, traverse=False, name=f"dpgm-generate-model-{token}")
    tasks = [
        dask.delayed(_write_chunk, pure=True)(
            shared, path, storage_options, i, s, min(s + chunk_rows, n_rows), seed, missing,
            dask_key_name=(f"dpgm-generate-{token}", i),
        )
        for i, s in enumerate(starts)
    ]
    context = _quiet_zarr()
    try:
        digests = compute(merge_tree(tasks, merge_digests, "dpgm-generate-digests", token), client=client,
                          progress=progress)
    finally:
        context.__exit__(None, None, None)
    # after every chunk task returned: a failed run leaves it unmarked; the tasks' digests make the manifest
    mark_complete(path, storage_options, digests=digests)


def sample_bayesian_network(
    model: BayesianNetwork,
    n_rows: int,
    path: str | os.PathLike[str] | None = None,
    *,
    seed: int = 0,
    missing: float = 0.0,
    chunk_rows: int = 1_000_000,
    client: Client | None = None,
    progress: bool = False,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
) -> xr.Dataset:
    """Forward-sample rows of a Bayesian network, straight to Zarr, one task per chunk.

    Chunk ``i`` draws from its own stream ``SeedSequence(seed, spawn_key=(i,))``, so
    the data depend on ``seed`` and ``chunk_rows`` only, never on how many workers
    run the tasks.

    Parameters
    ----------
    model
        The network to sample from.
    n_rows
        Number of rows.
    path
        Zarr store to write (local path or fsspec URL); ``None`` returns the rows in memory.
    seed
        Random seed.
    missing
        Fraction of values set missing (``-1``) completely at random, per variable.
    chunk_rows
        Rows per chunk (task and Zarr chunk; a Zarr chunk is cut to ``n_rows`` if longer).
    client
        Dask client (default: the active one, else threads in this process).
    progress
        Show a progress bar.
    mode
        ``"w-"`` refuses to overwrite an existing store; ``"w"`` writes the new store beside it and
        replaces it only once complete (:func:`dpgm.data.claim.writing`).
    storage_options
        Passed to fsspec for URLs.

    Returns
    -------
    xarray.Dataset
        The written dataset opened lazily (or the rows in memory if ``path`` is None).

    Examples
    --------
    >>> import dpgm
    >>> ds = sample_bayesian_network(dpgm.load_network("asia"), 1000, seed=1)
    >>> int(ds.sizes["row"]), sorted(ds.data_vars)[:3]
    (1000, ['asia', 'bronc', 'dysp'])
    """
    n_rows = int(n_rows)
    chunk_rows = int(chunk_rows)
    if n_rows < 0 or chunk_rows <= 0:
        raise ValueError(f"n_rows must be >= 0 and chunk_rows > 0, got {n_rows!r} and {chunk_rows!r}")
    if not 0.0 <= missing < 1.0:
        raise ValueError(f"missing must be a fraction in [0, 1), got {missing!r}")
    sampler = _Sampler(model)
    starts = list(range(0, n_rows, chunk_rows))
    attrs = {
        v: state_attrs(model.states[v], sampler.dtypes[i]) for i, v in enumerate(sampler.variables)
    }
    if path is None:
        parts = [
            sampler.sample(min(chunk_rows, n_rows - s), _chunk_rng(seed, i), missing) for i, s in enumerate(starts)
        ]
        data_vars = {
            v: xr.Variable(ROW, np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, sampler.dtypes[i]),
                           attrs=attrs[v])
            for i, v in enumerate(sampler.variables)
        }
        return xr.Dataset(data_vars, attrs={"dpgm_schema_version": SCHEMA_VERSION})
    check_variables(sampler.variables, "network variable", hint="rename it in the network")
    path = location(path)  # absolute: workers running in another folder write the same store
    with writing(path, mode=mode, storage_options=storage_options) as target:
        _write(sampler, n_rows, target, storage_options, attrs, seed, missing, chunk_rows, client, progress)
    return open_dataset(path, storage_options=storage_options)

"""Streaming conversion of CSV and Parquet files to Zarr datasets, one chunk at a time.

Files are never loaded whole: rows are read ``chunk_rows`` at a time, encoded and
appended to the store. Column kinds are decided on the first chunk: a column
whose values all parse as numbers and include a non-integer is continuous;
every other column is categorical (integers included), with its labels in order
of first appearance. ``categorical=`` / ``continuous=`` override the rule.
Streamed categorical codes are int16 (up to 32767 states), since the number of
states is only known at the end. The store is marked complete after its last
chunk and its labels (see :mod:`dpgm.data.integrity`): a conversion that stops
midway leaves a store that readers refuse.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from dpgm.data.integrity import COMPLETE, mark_complete
from dpgm.data.io import _quiet_zarr, column_encoding
from dpgm.data.schema import ROW, SCHEMA_VERSION, WEIGHT, state_attrs
from dpgm.errors import DataError

__all__ = ["convert"]

_MAX_STATES = 32767


def _csv_chunks(path: str, chunk_rows: int, storage_options: dict | None) -> Iterator[pd.DataFrame]:
    sep = "\t" if path.endswith((".tsv", ".tsv.gz")) else ","
    yield from pd.read_csv(
        path, sep=sep, dtype=str, keep_default_na=True, chunksize=chunk_rows, storage_options=storage_options
    )


def _parquet_chunks(path: str, chunk_rows: int, storage_options: dict | None) -> Iterator[pd.DataFrame]:
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb", **(storage_options or {})) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=chunk_rows):
            frame = batch.to_pandas()
            for column in frame.columns:
                if frame[column].dtype.kind != "f":
                    frame[column] = frame[column].astype("string").astype(object).where(frame[column].notna(), None)
            yield frame


class _Column:
    """Running encoding of one column across chunks."""

    def __init__(self, name: str, continuous: bool):
        self.name = name
        self.continuous = continuous
        self.codes: dict[str, int] = {}

    def encode(self, values: pd.Series, chunk: int) -> np.ndarray:
        if self.continuous:
            try:
                return pd.to_numeric(values, errors="raise").to_numpy(dtype=np.float64)
            except (ValueError, TypeError) as error:
                raise DataError(f"a continuous column holds a non-number: {error}", variable=self.name, chunk=chunk) from None
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        lookup = np.empty(len(uniques) + 1, dtype=np.int16)
        lookup[-1] = -1
        for i, label in enumerate(uniques):
            label = str(label)
            if label not in self.codes:
                if len(self.codes) >= _MAX_STATES:
                    raise DataError(
                        f"has more than {_MAX_STATES} distinct values; declare it continuous",
                        variable=self.name,
                        chunk=chunk,
                    )
                self.codes[label] = len(self.codes)
            lookup[i] = self.codes[label]
        return lookup[codes]


def _looks_continuous(values: pd.Series) -> bool:
    numbers = pd.to_numeric(values.dropna(), errors="coerce")
    if numbers.isna().any() or numbers.empty:
        return False
    return bool((numbers != np.round(numbers)).any())


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    chunk_rows: int = 1_000_000,
    categorical: Sequence[str] = (),
    continuous: Sequence[str] = (),
    weight: str | None = None,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
) -> xr.Dataset:
    """Convert a CSV/TSV (optionally compressed) or Parquet file to a Zarr dataset.

    Parameters
    ----------
    source
        ``.csv``, ``.csv.gz``, ``.tsv`` or ``.parquet`` file (path or fsspec URL).
    target
        The Zarr store to create.
    chunk_rows
        Rows read and written at a time (the Zarr chunk size).
    categorical, continuous
        Columns whose kind is given rather than inferred.
    weight
        Column of frequency weights (a column named ``weight`` is taken as weights too).
    mode
        ``"w-"`` refuses to overwrite, ``"w"`` overwrites.
    storage_options
        Passed to fsspec.

    Returns
    -------
    xarray.Dataset
        The new dataset, opened lazily.

    Raises
    ------
    DataError
        A non-number in a continuous column or too many states, naming the column and chunk.
    FileNotFoundError
        No such file.
    """
    from dpgm.data.io import open_dataset

    source, target = os.fspath(source), os.fspath(target)
    if "://" not in source and not Path(source).exists():
        raise FileNotFoundError(f"no file at {source!r}")
    if source.endswith((".parquet", ".pq")):
        chunks: Iterable[pd.DataFrame] = _parquet_chunks(source, chunk_rows, storage_options)
    elif source.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz", ".csv.bz2", ".csv.zst")):
        chunks = _csv_chunks(source, chunk_rows, storage_options)
    else:
        raise ValueError(f"cannot tell the format of {source!r}: expected .csv, .csv.gz, .tsv or .parquet")
    columns: dict[str, _Column] = {}
    rows = 0
    context = _quiet_zarr()
    try:
        for index, frame in enumerate(chunks):
            if index == 0:
                unknown = sorted((set(categorical) | set(continuous)) - set(map(str, frame.columns)))
                if unknown:
                    raise DataError(f"columns {unknown} are not in the file; columns: {list(frame.columns)}")
                for name in map(str, frame.columns):
                    is_weight = name == WEIGHT or name == weight
                    kind = is_weight or name in continuous or (
                        name not in categorical and _looks_continuous(frame[name])
                    )
                    columns[name] = _Column(WEIGHT if is_weight else name, kind)
            data_vars = {}
            for name, column in columns.items():
                values = column.encode(frame[name], index)
                data_vars[column.name] = xr.Variable(ROW, values)
            # every write sets the group's attributes (xarray's append replaces them): unfinished until the end
            chunk = xr.Dataset(data_vars, attrs={"dpgm_schema_version": SCHEMA_VERSION, COMPLETE: False})
            if index == 0:
                encoding = {n: column_encoding(v.dtype, (chunk_rows,), weight=n == WEIGHT) for n, v in data_vars.items()}
                chunk.to_zarr(target, mode=mode, zarr_format=3, consolidated=False, encoding=encoding,
                              storage_options=storage_options)
            else:
                chunk.to_zarr(target, append_dim=ROW, consolidated=False, storage_options=storage_options)
            rows += len(frame)
        if not columns:
            raise DataError(f"{source!r} has no rows")
        group = zarr.open_group(target, mode="r+", storage_options=storage_options)
        for column in columns.values():
            if not column.continuous:
                group[column.name].attrs.update(state_attrs(list(column.codes), "int16"))
        group.attrs.update({"dpgm_schema_version": SCHEMA_VERSION, "variables": [c.name for c in columns.values()]})
        mark_complete(target, storage_options)  # last: after every chunk and label
    finally:
        context.__exit__(None, None, None)
    return open_dataset(target, storage_options=storage_options)

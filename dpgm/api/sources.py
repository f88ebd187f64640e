"""What :func:`dpgm.fit` reads: a dataset, a labelled table, or a path to a Zarr store or to CSV/Parquet.

A path to a Zarr store is opened (:func:`dpgm.open_dataset`). A CSV, TSV or
Parquet path (a file, a folder of parts or a glob) is not a dataset: without
``convert=True`` it is refused with what to do; with it, it is converted on the
cluster (:func:`dpgm.convert`) into ``<stem>.zarr`` next to the input, never over
an existing store, and the fit reads that.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
from typing import TYPE_CHECKING, Any

import xarray as xr

from dpgm.data import open_dataset
from dpgm.errors import ConfigTypeError, DataError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["TABLE_SUFFIXES", "converted_path", "group_attributes", "open_source"]

TABLE_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".tsv", ".tsv.gz", ".parquet", ".pq")
_GLOB = "*?["


def open_source(data: Any, *, convert: bool = False, client: Client | None = None) -> Any:
    """The data a fit reads: ``data`` itself, or the dataset a path names (converted first if asked).

    Parameters
    ----------
    data
        A dataset or labelled table (returned as is), a path or URL to a Zarr store
        (opened), or to CSV/TSV/Parquet input: a file, a folder of files or a glob.
    convert
        Convert CSV/TSV/Parquet input with :func:`dpgm.convert` into
        :func:`converted_path` (refusing to overwrite it) and return that dataset.
    client
        Dask client the conversion runs on.

    Raises
    ------
    DataError
        CSV/TSV/Parquet input without ``convert=True`` (saying how to convert it),
        ``convert=True`` whose store already exists, or a path to a saved model.
    TypeError
        A pandas DataFrame (``dpgm.from_pandas`` makes it a dataset); ``convert``
        not a bool.
    """
    if not isinstance(convert, bool):
        raise ConfigTypeError(f"convert must be True or False, got {convert!r}")
    if isinstance(data, xr.Dataset | xr.DataArray):
        return data
    if type(data).__name__ == "DataFrame":
        raise TypeError(f"data is a {type(data).__module__}.DataFrame, not a dataset: dpgm.from_pandas(frame) "
                        "makes one (dpgm.write_dataset saves it to Zarr)")
    if not isinstance(data, str | os.PathLike):
        return data
    path = os.fspath(data)
    attrs = group_attributes(path)
    if attrs is not None and "dpgm_model" in attrs:
        raise DataError(f"{path!r} holds a saved {attrs['dpgm_model']}, not data: dpgm.load({path!r}) reads it")
    if attrs is None and _is_table_input(path):
        target = converted_path(path)
        if not convert:
            raise DataError(
                f"{path!r} is CSV/Parquet input, not a Zarr dataset: convert it once on the cluster "
                f"(`dpgm convert {shlex.quote(path)} {shlex.quote(target)}`, or dpgm.convert({path!r}, {target!r})) "
                f"and fit the store, "
                f"or pass convert=True to do both")
        if _exists(target):
            raise DataError(f"convert=True would write {target!r}, which already exists: fit it with "
                            f"dpgm.fit(model, {target!r}), or remove it to convert again")
        from dpgm.data.convert import convert as run

        return run(path, target, client=client)
    return open_dataset(path)


def group_attributes(path: str | os.PathLike[str], storage_options: dict | None = None) -> dict | None:
    """The attributes of the Zarr v3 group at ``path`` (its ``zarr.json``); ``None`` where there is none."""
    import fsspec

    url = os.fspath(path).rstrip("/") + "/zarr.json"
    try:
        with fsspec.open(url, "rt", **(storage_options or {})) as file:
            document = json.load(file)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("node_type") != "group":
        return None
    return dict(document.get("attributes") or {})


def converted_path(source: str | os.PathLike[str]) -> str:
    """Where ``convert=True`` writes CSV/Parquet input: ``<stem>.zarr`` next to it.

    ``data/survey.csv.gz`` -> ``data/survey.zarr``; a folder ``data/parts/`` ->
    ``data/parts.zarr``; a glob ``exports/2026-*.csv`` -> ``exports/2026.zarr``
    (its name without the wildcards), ``exports/*.csv`` -> ``exports/exports.zarr``.

    Examples
    --------
    >>> converted_path("data/survey.csv.gz"), converted_path("s3://bucket/parts/")
    ('data/survey.zarr', 's3://bucket/parts.zarr')
    """
    source = os.fspath(source)
    protocol, _, rest = source.rpartition("://")
    prefix = f"{protocol}://" if protocol else ""
    rest = rest.rstrip("/") or rest
    folder, name = posixpath.split(rest)
    lowered = name.lower()
    suffix = next((s for s in sorted(TABLE_SUFFIXES, key=len, reverse=True) if lowered.endswith(s)), "")
    stem = name[:len(name) - len(suffix)]
    if any(ch in stem for ch in _GLOB):
        for ch in "*?[]":
            stem = stem.replace(ch, "")
        stem = stem.strip("-_. ") or posixpath.basename(folder) or "data"
    return prefix + posixpath.join(folder, f"{stem}.zarr")


def _is_table_input(path: str) -> bool:
    """A CSV/TSV/Parquet file, a glob, or a folder holding such files (and no Zarr group)."""
    if path.lower().rstrip("/").endswith(TABLE_SUFFIXES) or any(ch in path for ch in _GLOB):
        return True
    import fsspec

    try:
        fs, _, paths = fsspec.get_fs_token_paths(path)
        if not paths or not fs.isdir(paths[0]):
            return False
        top = {posixpath.basename(p.rstrip("/")) for p in fs.ls(paths[0], detail=False)}
        if top & {"zarr.json", ".zgroup", ".zattrs"}:  # a Zarr store (v3 or v2): never list its chunks
            return False
        return any(p.lower().endswith(TABLE_SUFFIXES) for p in fs.find(paths[0], maxdepth=2))
    except (OSError, ValueError):
        return False


def _exists(path: str) -> bool:
    if "://" not in path:
        return os.path.lexists(path)
    import fsspec

    fs, _, paths = fsspec.get_fs_token_paths(path)
    return fs.exists(paths[0])

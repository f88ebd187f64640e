"""Labelled tables in a Zarr group: the storage under model stores and checkpoints.

The tables are written as one ``xarray.Dataset``: dimensions are variable names
and each table is a data variable (``table.<i>``) whose dimensions are its scope.
The group's attributes list the tables' keys, hold every variable's state labels
(JSON, not a string array: Zarr v3 has no stable string dtype yet) and the
caller's attributes; float64 values are stored losslessly, each chunk with a
checksum, and the group is marked complete only after its last table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import xarray as xr

from dpgm.data.integrity import COMPLETE, check_complete, checksum_codec, mark_complete
from dpgm.errors import DataError

__all__ = ["read_tables", "write_tables"]


def write_tables(path: str | os.PathLike[str], tables: Mapping[str, xr.DataArray], attrs: Mapping[str, Any], *,
                 mode: str = "w-", storage_options: dict | None = None) -> None:
    """Write labelled ``tables`` (key -> DataArray) and JSON-able ``attrs`` to a Zarr group."""
    from zarr.codecs import ZstdCodec

    keys = list(tables)
    states = {str(d): [str(s) for s in t.coords[d].values] for t in tables.values() for d in t.dims}
    ds = xr.Dataset(
        {f"table.{i}": (tables[k].dims, tables[k].values.astype("float64")) for i, k in enumerate(keys)}
    )
    ds.attrs = {
        **attrs,
        "tables": keys,
        "states": states,
        COMPLETE: False,  # set true after the last table: an unfinished write is refused by read_tables
    }
    for array in ds.variables.values():
        array.encoding = {}
    encoding = {name: {"compressors": [ZstdCodec(), checksum_codec()]} for name in ds.data_vars}
    ds.to_zarr(os.fspath(path), mode=mode, zarr_format=3, consolidated=False, storage_options=storage_options,
               encoding=encoding)
    mark_complete(path, storage_options)


def read_tables(path: str | os.PathLike[str], *, what: str = "store", storage_options: dict | None = None,
                check: Any = None) -> tuple[dict[str, Any], dict[str, xr.DataArray]]:
    """The attributes and the labelled tables of a group written by :func:`write_tables`.

    ``check(attrs)`` runs on the attributes before any table is read (e.g. to refuse
    another kind of store); ``what`` names the store in error messages.

    Raises
    ------
    FileNotFoundError
        No store at the path.
    DataError
        The write did not finish, a table is missing, or a table's checksum does not
        match (a corrupted file).
    """
    path = os.fspath(path)
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"no {what} at {path!r}")
    try:
        ds = xr.open_zarr(path, consolidated=False, storage_options=storage_options)
    except FileNotFoundError:
        raise
    except Exception as error:  # unreadable metadata
        raise DataError(f"cannot open the {what} {path!r}: {' '.join(str(error).split())}") from None
    check_complete(ds.attrs, path, what)
    attrs = dict(ds.attrs)
    if check is not None:
        check(attrs)
    tables = {}
    for i, key in enumerate(attrs["tables"]):
        if f"table.{i}" not in ds.data_vars:
            raise DataError(f"the {what} {path!r} has no array 'table.{i}' for its table {key!r}")
        try:
            array = ds[f"table.{i}"].load()
        except ValueError as error:  # Zarr's crc32c codec: stored and computed checksums differ
            raise DataError(f"cannot read table {key!r} ('table.{i}') of the {what} {path!r}: "
                            f"checksum mismatch or undecodable chunk ({' '.join(str(error).split())})") from None
        tables[key] = xr.DataArray(array.values, dims=array.dims,
                                   coords={d: attrs["states"][d] for d in array.dims})
    return attrs, tables

"""Integrity of the stores dpgm writes: a completion marker, chunk checksums, fingerprints.

Completion
    Every dpgm writer (datasets, conversions, generated data, added variables,
    models) creates a store with the group attribute ``dpgm_complete: false`` and
    sets it to ``true`` only after its last chunk is written; readers refuse a store
    marked ``false``. A marker rather than writing under a temporary name and
    renaming: object stores (S3, GCS) have no atomic rename of a directory (fsspec
    copies every object), adding variables to an existing store (``predict --write``)
    cannot be a rename, and generated data are written by many workers into one
    store. Zarr writes each metadata document atomically on a local disk (temporary
    file and ``os.replace``), so the marker flips in one step.

    Added variables follow the same rule through the group's ``variables``
    attribute: a variable enters that list only once its chunks are written.

    Stores without the attribute (written by dpgm before markers existed, or by
    xarray or Zarr directly) carry no evidence either way and are read as before.

Checksums
    Every array dpgm writes ends its codec chain with Zarr v3's ``crc32c`` codec;
    dpgm's direct chunk reader (:mod:`dpgm.data.columns`) verifies it, and Zarr
    verifies it on every other read.

Manifest and schema record
    In the same update as the marker, the writer records every array's chunk grid and
    each chunk's CRC-32C (or that Zarr left it empty), and a digest of every array's
    metadata (:mod:`dpgm.data.manifest`). Readers refuse a chunk the writer wrote that is
    gone (never reading it as the fill value, which for dpgm means *missing*) and a store
    whose labels, dtypes, shapes or chunking changed after the marker; :func:`dpgm.verify`
    checks every chunk's bytes on the cluster.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import xarray as xr

from dpgm.errors import DataError

__all__ = ["COMPLETE", "checksum_codec", "check_complete", "dataset_fingerprint", "mark_complete"]

COMPLETE = "dpgm_complete"


def checksum_codec() -> Any:
    """The bytes-to-bytes codec dpgm ends every array's codec chain with (CRC-32C of the stored bytes)."""
    from zarr.codecs import Crc32cCodec

    return Crc32cCodec()


def mark_complete(path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None, *,
                  digests: dict[str, dict[str, int | None]] | None = None, **attrs: Any) -> None:
    """Set ``dpgm_complete: true`` (and ``attrs``) on the store's group: call after its last chunk.

    The same update records the chunk manifest and the schema record of every array in the
    group (:func:`dpgm.data.manifest.completion_records`); ``digests`` are the chunks' digests
    returned by the tasks that wrote them (``{array: {chunk key: crc32c or None}}``), the
    others are read back from the chunk files' last 4 bytes.
    """
    import zarr

    from dpgm.data.manifest import completion_records

    path = os.fspath(path)
    group = zarr.open_group(path, mode="r+", storage_options=storage_options)
    records = completion_records(path, storage_options, sorted(group.array_keys()), digests)
    group.attrs.update({**attrs, **records, COMPLETE: True})


def check_complete(attrs: dict[str, Any], path: str | os.PathLike[str], what: str = "store") -> None:
    """Refuse a store its writer marked unfinished (``dpgm_complete`` present and not true).

    Raises
    ------
    DataError
        The store is marked incomplete, naming it.
    """
    if COMPLETE in attrs and attrs[COMPLETE] is not True:
        raise DataError(
            f"{os.fspath(path)!r} is an incomplete {what}: its writer stopped before the last chunk "
            "(killed, out of space or failed); write it again (e.g. with --overwrite / mode='w')"
        )


def dataset_fingerprint(ds: xr.Dataset, *, schema: Any = None) -> dict[str, Any]:
    """What identifies the data a fit ran on: store path, rows, chunking and schema.

    Cheap (metadata only). A dataset not opened from a store has ``path`` None;
    ``schema``: ``ds``'s :class:`~dpgm.data.schema.Schema` if already read.
    """
    from dpgm.data.columns import ZarrStore, _local_path
    from dpgm.data.schema import ROW, Schema

    store = ds.encoding.get("dpgm_store")
    path = None
    if isinstance(store, ZarrStore):
        local = _local_path(store.path)
        path = str(os.path.realpath(local)) if local is not None else store.path
    first = next(iter(ds.data_vars), None)
    chunks = getattr(ds[first].data, "chunks", None) if first is not None else None
    states = (schema or Schema.from_dataset(ds)).states
    return {
        "path": path,
        "n_rows": int(ds.sizes.get(ROW, 0)),
        "chunks": [int(c) for c in chunks[0]] if chunks else None,
        "schema": {
            str(name): {"dtype": str(ds[name].dtype),
                        "states": list(states[str(name)]) if str(name) in states else None}
            for name in ds.data_vars
        },
    }

"""A Zarr store that holds every read through Zarr to the store's chunk manifest.

Zarr reads a chunk whose file is absent as the fill value, which for dpgm means *missing*.
:func:`dpgm.open_dataset` and dpgm's chunk tasks open stores through :func:`open_store`: once
the store's records are checked (:func:`dpgm.data.manifest.check_records`), a read of a chunk
the writer wrote but whose file is gone raises a :class:`~dpgm.errors.DataError` naming the
variable, the chunk and the file, as does a file where the writer recorded an empty chunk.
The check is a dictionary lookup made only when Zarr asks for a chunk.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Mapping
from typing import Any

from dpgm.data.manifest import ChunkFiles, ChunkRecord, local_path, missing_chunk, unexpected_chunk

__all__ = ["open_store"]


def open_store(path: str, storage_options: dict | None) -> Any:
    """The store at ``path`` wrapped in a :class:`ManifestStore` (records set once checked)."""
    from zarr.core.sync import sync
    from zarr.storage._common import make_store_path

    store_path = sync(make_store_path(path, mode="r", storage_options=storage_options))
    return _manifest_store_class()(store_path.store, path=path, storage_options=storage_options,
                                   prefix=store_path.path)


@functools.cache
def _manifest_store_class() -> type:
    from zarr.storage import WrapperStore

    class ManifestStore(WrapperStore):
        """A read-only Zarr store that refuses, when Zarr reads a chunk, a chunk file the manifest
        records but which is gone, and a file where the writer recorded an empty chunk.

        Zarr reads a missing chunk as the fill value (for dpgm: *missing*); through this store
        every read by Zarr (xarray's arrays, dpgm's Zarr reads) is held to the manifest, at the
        cost of a dictionary lookup per chunk. ``records`` stays None until the store's records
        have been checked (:func:`check_records`)."""

        def __init__(self, store: Any, *, path: str = "", storage_options: dict | None = None, prefix: str = "",
                     records: Mapping[str, ChunkRecord] | None = None) -> None:
            super().__init__(store)
            self.path, self.storage_options, self.prefix, self.records = path, storage_options, prefix, records

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, path=self.path, storage_options=self.storage_options, prefix=self.prefix,
                              records=self.records)

        def __dask_tokenize__(self) -> tuple:
            local = local_path(self.path)
            stamp = None
            if local is not None:
                with contextlib.suppress(OSError):
                    stamp = os.stat(os.path.join(local, "zarr.json")).st_mtime_ns
            return ("dpgm-manifest-store", self.path, json.dumps(self.storage_options or {}, sort_keys=True), stamp)

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            value = await self._store.get(key, prototype, byte_range)
            if self.records:
                self._check(key, value is not None)
            return value

        def _check(self, key: str, found: bool) -> None:
            relative = key[len(self.prefix):].lstrip("/") if self.prefix else key
            array, _, chunk_key = relative.partition("/")
            record = self.records.get(array) if self.records else None
            if record is None or chunk_key == "zarr.json":
                return
            coords = record.coords_of(chunk_key)
            if coords is None:
                return
            expected = record.expected(coords)
            if expected is not None and not found:
                raise missing_chunk(ChunkFiles(self.path, self.storage_options), record, coords)
            if expected is None and found:
                raise unexpected_chunk(ChunkFiles(self.path, self.storage_options), record, coords)

    ManifestStore.__module__, ManifestStore.__qualname__ = __name__, "ManifestStore"
    return ManifestStore


def __getattr__(name: str) -> Any:
    """``ManifestStore``, made on first use (Zarr is imported only then), so pickle finds it by name."""
    if name == "ManifestStore":
        return _manifest_store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

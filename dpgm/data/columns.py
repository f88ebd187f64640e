"""Chunk tasks that read their own columns from a Zarr store.

A pass over an opened dataset does not need one Dask task per column and chunk:
each chunk task reads the columns it needs itself (:class:`ZarrColumns`), so
every chunk's columns stay on one worker and the graph has one task per chunk.

Reading is the larger part of a counting pass. For the layout dpgm writes
(local store, regular 1-D chunks, ``bytes`` followed by one ``blosc`` or ``zstd``
codec, no sharding) a chunk is read by opening its file and decompressing
straight into the output array (:class:`DirectColumn`): about twice as fast per
core as Zarr's general codec pipeline on 20 int8 columns, which schedules every
chunk through its event loop and thread pool and copies the decoded buffer.
Anything else (fsspec URLs, other codecs, slices not aligned with Zarr chunks)
goes through Zarr itself. Both paths read the same bytes; the tests compare them.

A ``crc32c`` codec at the end of the chain (every array dpgm writes has one) is
verified by the direct reader too; a mismatch, or a chunk that does not decode,
is a :class:`~dpgm.errors.DataError` naming the variable, the chunk and its file.

A store with a chunk manifest (:mod:`dpgm.data.manifest`) is held to it, per chunk, in
the task that reads the chunk: a chunk file the writer wrote but which is gone is a
``DataError`` naming the variable, the chunk and the expected file (never the fill
value, which for dpgm means *missing*); the direct reader also compares each chunk's
stored CRC-32C with the one recorded (a valid chunk in the wrong place), and refuses a
file where the writer recorded an empty chunk. Both cost nothing on the common path:
the checks run only when a file is absent, and on an integer already read.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from dpgm.data.manifest import (
    ChunkFiles,
    ChunkRecord,
    local_path,
    missing_chunk,
    records,
    unexpected_chunk,
)
from dpgm.data.manifest_store import open_store
from dpgm.errors import DataError

__all__ = ["ChunkColumns", "DirectColumn", "ZarrColumns", "ZarrStore", "zarr_columns"]

_scratch = threading.local()


def scratch(name: str, n_bytes: int) -> np.ndarray:
    """A per-thread reusable byte buffer of at least ``n_bytes`` (grown, never shrunk).

    Chunk reads into scratch buffers skip a fresh allocation per chunk, which on
    distributed workers (whose allocator returns freed memory to the OS) costs page
    faults on every chunk. The buffer is overwritten by the next read in the thread.
    """
    buffers = _scratch.__dict__.setdefault("buffers", {})
    buffer = buffers.get(name)
    if buffer is None or buffer.size < n_bytes:
        buffer = buffers[name] = np.empty(max(n_bytes, 1), dtype=np.uint8)
    return buffer



@dataclass(frozen=True)
class ZarrStore:
    """Where an opened dataset's columns live, so a chunk task can read them itself.

    ``names`` records each variable's dask array name at open time: a variable
    whose array is still that one has not been sliced or transformed since.
    """

    path: str
    storage_options: dict[str, Any] | None
    names: dict[str, str]
    token: str

    def __hash__(self) -> int:
        return hash(self.token)


@dataclass(frozen=True)
class DirectColumn:
    """One column of a local Zarr v3 array whose chunks are decompressed in place.

    Attributes
    ----------
    directory
        The array's directory.
    length
        Rows in the array.
    chunk_rows
        Rows per Zarr chunk.
    dtype
        The stored dtype.
    fill_value
        What an unwritten chunk reads as.
    codec
        ``"blosc"``, ``"zstd"`` or ``"raw"`` (no compression).
    separator
        The chunk key separator (``"/"`` gives ``c/3``, ``"."`` gives ``c.3``).
    checksum
        Whether each stored chunk ends with a CRC-32C of the bytes before it
        (Zarr's ``crc32c`` codec, last in the chain); verified on every read.
    variable
        The variable's name, for error messages.
    record
        What the store's chunk manifest records of the array (None: no manifest, an
        absent chunk reads as the fill value as Zarr reads it).
    """

    directory: str
    length: int
    chunk_rows: int
    dtype: np.dtype
    fill_value: Any
    codec: str
    separator: str
    checksum: bool = False
    variable: str = ""
    record: ChunkRecord | None = None

    def aligned(self, start: int, stop: int) -> bool:
        """Whether rows ``[start, stop)`` are whole Zarr chunks (the last may end the array)."""
        return start % self.chunk_rows == 0 and (stop % self.chunk_rows == 0 or stop == self.length) and stop <= self.length

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[start, stop)``, which must satisfy :meth:`aligned`, into ``out`` if given."""
        if out is None:
            out = np.empty(stop - start, dtype=self.dtype)
        for k in range(start // self.chunk_rows, -(-stop // self.chunk_rows)):
            lo = k * self.chunk_rows - start
            hi = min(lo + self.chunk_rows, stop - start)
            if hi - lo == self.chunk_rows:
                self._decode(k, out[lo:hi])
            else:  # the array's last chunk is stored padded to the full chunk length
                full = np.empty(self.chunk_rows, dtype=self.dtype)
                self._decode(k, full)
                out[lo:hi] = full[: hi - lo]
        return out

    def _decode(self, k: int, out: np.ndarray) -> None:
        path = os.path.join(self.directory, "c" + self.separator + str(k))
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            if self.record is not None and k not in self.record.empty:
                raise missing_chunk(ChunkFiles(os.path.dirname(self.directory)), self.record, (k,)) from None
            out[:] = self.fill_value
            return
        if self.record is not None and k in self.record.empty:
            f.close()
            raise unexpected_chunk(ChunkFiles(os.path.dirname(self.directory)), self.record, (k,))
        with f:
            size = os.fstat(f.fileno()).st_size
            data = memoryview(scratch("compressed", size))[:size]
            if f.readinto(data) != size:
                raise OSError(f"short read of {path!r}")
        if self.checksum:
            import google_crc32c

            stored = int.from_bytes(data[-4:], "little")
            if size < 4 or google_crc32c.value(np.frombuffer(data, np.uint8, size - 4)) != stored:
                raise self._error(k, path, "checksum mismatch (stored CRC-32C differs from the bytes read)")
            if self.record is not None and self.record.stored and stored != self.record.crc32c[k]:
                raise self._error(k, path, "a chunk other than the one its writer recorded (its CRC-32C differs "
                                           "from the store's chunk manifest)")
            data = data[:-4]
        try:
            if self.codec == "blosc":
                from numcodecs import blosc

                blosc.decompress(data, out)
            elif self.codec == "zstd":
                from numcodecs import Zstd

                Zstd().decode(data, out=out)
            else:
                out[:] = np.frombuffer(data, dtype=self.dtype)
        except Exception as error:  # a damaged chunk without a checksum, or a wrong size
            raise self._error(k, path, f"cannot decode ({' '.join(str(error).split()) or type(error).__name__})") from None

    def _error(self, k: int, path: str, what: str) -> Exception:
        start = k * self.chunk_rows
        stop = min(start + self.chunk_rows, self.length)
        return DataError(f"{what} in Zarr chunk file {path!r} (rows {start}-{stop}): the file is corrupted; "
                         "restore or rewrite the store", variable=self.variable or None, chunk=k)


def direct_column(array: Any, directory: str, record: ChunkRecord | None = None) -> DirectColumn | None:
    """A :class:`DirectColumn` for a Zarr v3 array in ``directory`` if its layout allows, else None;
    ``record``: what the store's chunk manifest records of the array."""
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec
    from zarr.core.chunk_grids import RegularChunkGrid
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding

    metadata = array.metadata
    if getattr(metadata, "zarr_format", None) != 3 or len(metadata.shape) != 1:
        return None
    if not isinstance(metadata.chunk_grid, RegularChunkGrid):
        return None
    if not isinstance(metadata.chunk_key_encoding, DefaultChunkKeyEncoding):
        return None
    codecs = metadata.codecs
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    dtype = np.dtype(metadata.dtype.to_native_dtype())
    endian = codecs[0].endian
    if dtype.itemsize > 1 and endian is not None and getattr(endian, "value", endian) != sys.byteorder:
        return None
    checksum = isinstance(codecs[-1], Crc32cCodec)
    compressors = codecs[1:-1] if checksum else codecs[1:]
    if not compressors:
        codec = "raw"
    elif len(compressors) == 1 and isinstance(compressors[0], BloscCodec):
        codec = "blosc"
    elif len(compressors) == 1 and isinstance(compressors[0], ZstdCodec) and not compressors[0].checksum:
        codec = "zstd"
    else:
        return None
    return DirectColumn(
        directory=directory,
        length=int(metadata.shape[0]),
        chunk_rows=int(metadata.chunk_grid.chunk_shape[0]),
        dtype=dtype,
        fill_value=np.asarray(metadata.fill_value, dtype=dtype).item(),
        codec=codec,
        separator=metadata.chunk_key_encoding.separator,
        checksum=checksum,
        variable=os.path.basename(os.path.normpath(directory)),
        record=record,
    )


class ChunkColumns(dict):
    """Column name -> one chunk's 1-D array; ``matrix`` holds the integer columns
    ``matrix_variables`` as the rows of one C-contiguous 2-D array (None if not read so)."""

    matrix: np.ndarray | None = None
    matrix_variables: tuple[str, ...] = ()


@dataclass(frozen=True)
class ZarrColumns:
    """Columns of a Zarr store read by each chunk task directly (no separate read tasks).

    Reading in the task that uses the data keeps every chunk's columns on one
    worker (no transfers between workers) and skips one task per column and chunk.

    With ``reuse=True`` the directly decompressed integer columns land in one
    per-thread scratch matrix (variables x rows, see :class:`ChunkColumns`) that the
    next read in the same thread overwrites: for kernels that reduce a chunk to
    statistics and keep no reference to its columns (counts). Reads then allocate
    nothing per chunk.
    """

    store: ZarrStore
    variables: tuple[str, ...]
    starts: tuple[int, ...]
    reuse: bool = False

    @property
    def n_chunks(self) -> int:
        """Number of row chunks."""
        return len(self.starts) - 1

    def read(self, chunk: int, *, direct: bool = True) -> ChunkColumns:
        """The columns of one chunk: decompressed in place where the layout allows, else through Zarr."""
        import asyncio

        from zarr.core.sync import sync

        arrays, columns, records = _opened(self.store, self.variables)
        start, stop = self.starts[chunk], self.starts[chunk + 1]
        out = ChunkColumns()
        rest = []
        direct_columns = []
        for v, array, column, record in zip(self.variables, arrays, columns, records, strict=True):
            if direct and column is not None and column.aligned(start, stop):
                direct_columns.append((v, column))
            else:
                rest.append((v, array, record))
        if self.reuse and direct_columns:
            dtype = direct_columns[0][1].dtype
            in_matrix = [(v, c) for v, c in direct_columns if c.dtype == dtype and dtype.kind in "iu"]
            if in_matrix:
                n = stop - start
                flat = scratch("matrix", len(in_matrix) * n * dtype.itemsize)
                matrix = flat[: len(in_matrix) * n * dtype.itemsize].view(dtype).reshape(len(in_matrix), n)
                for row, (v, column) in enumerate(in_matrix):
                    out[v] = column.read(start, stop, matrix[row])
                out.matrix = matrix
                out.matrix_variables = tuple(v for v, _ in in_matrix)
        for v, column in direct_columns:
            if v not in out:
                out[v] = column.read(start, stop)
        if rest:  # the arrays' store refuses a chunk the manifest records but which is gone (open_store)

            async def fetch():
                return await asyncio.gather(*(a.getitem(slice(start, stop)) for _, a, _ in rest),
                                            return_exceptions=True)

            for (v, _, _), values in zip(rest, sync(fetch()), strict=True):
                if isinstance(values, DataError):
                    raise values
                if isinstance(values, Exception):
                    raise _read_error(self.store, v, chunk, start, stop, values) from None
                out[v] = values
        result = ChunkColumns((v, out[v]) for v in self.variables)
        result.matrix, result.matrix_variables = out.matrix, out.matrix_variables
        return result


def _read_error(store: ZarrStore, variable: str, chunk: int, start: int, stop: int, error: Exception) -> Exception:
    """A failed Zarr read of one chunk's column as a :class:`DataError` naming variable, chunk and store.

    Zarr's ``crc32c`` codec raises ``ValueError`` when a stored checksum does not match."""
    if isinstance(error, OSError | MemoryError) and not isinstance(error, FileNotFoundError):
        return error
    text = " ".join(str(error).split()) or type(error).__name__
    what = "checksum mismatch" if "checksum" in text.lower() else "cannot decode"
    return DataError(f"{what} reading rows {start}-{stop} from {os.path.join(store.path, variable)!r} "
                     f"({text}): the store is corrupted; restore or rewrite it", variable=variable, chunk=chunk)


_local_path = local_path


def _open_arrays(store: ZarrStore, variables: tuple[str, ...]) -> tuple[list, list[DirectColumn | None]]:
    """The store's arrays and direct readers, opened once per process and store version (:func:`_opened`)."""
    arrays, columns, _ = _opened(store, variables)
    return arrays, columns


def _opened(store: ZarrStore, variables: tuple[str, ...]) -> tuple[list, list[DirectColumn | None], list]:
    """The store's arrays, direct readers and chunk records, opened once per process and store version.

    Every ``open_dataset`` gives its store a new token, so a cache keyed by the token
    alone made each worker open every array's metadata again on each new pass (~20 ms
    for 37 columns). A local store is keyed instead by its path and the identity
    (inode, size, mtime) of its metadata files: the same files reuse the opened
    arrays, a rewritten store is opened anew. Other stores stay keyed by the token.
    """
    root = _local_path(store.path)
    version = _metadata_version(root, variables) if root is not None else None
    key = (root, variables, version) if version is not None else (store.token, variables)
    with _OPENED_LOCK:
        opened = _OPENED.pop(key, None)
    if opened is None:
        opened = _open(store, variables)
    with _OPENED_LOCK:
        _OPENED[key] = opened  # most recently used last
        while len(_OPENED) > 16:
            del _OPENED[next(iter(_OPENED))]
    return opened


def _metadata_version(root: str, variables: tuple[str, ...]) -> tuple | None:
    try:
        stats = [os.stat(os.path.join(root, "zarr.json"))]
        stats += [os.stat(os.path.join(root, v, "zarr.json")) for v in variables]
    except OSError:
        return None
    return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


_OPENED: dict[tuple, tuple[list, list, list]] = {}
_OPENED_LOCK = threading.Lock()


def _open(store: ZarrStore, variables: tuple[str, ...]) -> tuple[list, list, list]:
    import zarr.api.asynchronous as zarr_async
    from zarr.core.sync import sync

    checked = open_store(store.path, store.storage_options)  # Zarr's reads held to the manifest

    async def open_all():
        group = await zarr_async.open_group(checked, mode="r")
        return dict(group.attrs), [await group.getitem(v) for v in variables]

    attrs, arrays = sync(open_all())
    found = records(attrs, store.path)
    chunks = found[1] if found is not None else {}
    checked.records = chunks or None
    kept = [chunks.get(v) for v in variables]
    for v, array, record in zip(variables, arrays, kept, strict=True):
        if record is not None and (record.encoding, record.separator) != _key_encoding(array):
            raise DataError("its chunk key encoding changed after the store was marked complete; restore its "
                            "zarr.json or rewrite the store", variable=v)
    root = _local_path(store.path)
    columns = [None if root is None else direct_column(a, os.path.join(root, v), r)
               for v, a, r in zip(variables, arrays, kept, strict=True)]
    return arrays, columns, kept


def _key_encoding(array: Any) -> tuple[str, str]:
    encoding = array.metadata.chunk_key_encoding
    return str(encoding.name), str(encoding.separator)


def zarr_columns(ds: xr.Dataset, variables: Sequence[str], *, reuse: bool = False) -> ZarrColumns | None:
    """Direct chunk reads for ``variables`` if they are untouched columns of the store ``ds`` was opened from.

    ``reuse=True``: chunk reads go to per-thread scratch buffers (see :class:`ZarrColumns`).
    """
    store = ds.encoding.get("dpgm_store")
    if not isinstance(store, ZarrStore):
        return None
    chunks = None
    for v in variables:
        data = ds.variables[v].data
        if getattr(data, "name", None) != store.names.get(v):
            return None
        if chunks is None:
            chunks = data.chunks[0]
        elif data.chunks[0] != chunks:
            return None
    if chunks is None:
        return None
    starts = tuple(int(x) for x in np.concatenate([[0], np.cumsum(chunks)]))
    return ZarrColumns(store, tuple(variables), starts, reuse)

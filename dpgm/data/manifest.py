"""The chunk manifest and the schema record a writer leaves when it marks a store complete.

Chunk manifest (group attribute ``dpgm_manifest``)
    Per array: its shape, chunk shape and chunk key encoding, and per chunk of the grid the
    CRC-32C its writer stored with it (the last 4 bytes of the file, Zarr's ``crc32c`` codec: a
    digest of the compressed bytes; for an array without that codec, the CRC-32C of the whole
    file). Chunks Zarr did not write because they hold only the fill value are listed as
    ``empty``. Writers that write chunks on workers (:func:`dpgm.convert`,
    :func:`dpgm.sample_bayesian_network`) return each chunk's digest from the task that wrote
    it; other writers read the 4 bytes back when they mark the store complete.

Schema record (group attribute ``dpgm_schema``)
    Per array: dtype, shape, chunk grid, chunk key encoding, fill value and dimension names as
    written, and SHA-256 digests of its codecs, its state labels (``states``, ``flag_values``,
    ``flag_meanings``, ``labels``), its other attributes and its whole ``zarr.json``.

Both records carry a SHA-256 of themselves and are written in the same update of the
group's ``zarr.json`` as ``dpgm_complete: true``. :func:`check_records` (run by
:func:`dpgm.open_dataset`) refuses a store whose records do not match their digests or whose
arrays' metadata changed after the marker, naming the variable and what changed; readers
then check lazily, in the task that reads a chunk, that a chunk the writer wrote is there
(:mod:`dpgm.data.columns`; :mod:`dpgm.data.manifest_store` for every read through Zarr), and :func:`dpgm.verify` checks every
chunk's bytes. A store without these records (written by an earlier dpgm, xarray or Zarr
directly) is read as before and called unverifiable.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from dpgm.errors import DataError

__all__ = ["MANIFEST", "SCHEMA", "ChunkFiles", "ChunkRecord", "added_records", "check_present", "check_records",
           "completion_records", "dropped_records", "recorded_chunks", "stored_digests"]

MANIFEST = "dpgm_manifest"
SCHEMA = "dpgm_schema"
FORMAT = 1
LABELS = ("states", "flag_values", "flag_meanings", "labels")
# schema fields in the order a change is reported, with the words that name them
FIELDS = {"dtype": "dtype", "shape": "shape", "chunk_grid": "chunk shape", "chunk_key_encoding": "chunk key encoding",
          "fill_value": "fill value", "dimension_names": "dimension names", "codecs": "codecs",
          "labels": "state labels", "attributes": "attributes", "metadata": "metadata"}


def digest(document: Any) -> str:
    """SHA-256 (hex) of a JSON document in canonical form (sorted keys, no spaces)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def local_path(path: str) -> str | None:
    """The local file system path of a store, or None for an fsspec URL."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if "://" in path else path


@functools.lru_cache(maxsize=16)
def _filesystem(path: str, options: str) -> tuple[Any, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(path, **json.loads(options))
    return fs, root.rstrip("/")


@dataclass(frozen=True)
class ChunkFiles:
    """A store's files by array and key, on a local disk or through fsspec (picklable, for tasks)."""

    path: str
    storage_options: dict | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", os.fspath(self.path).rstrip("/") or "/")

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def local(self) -> str | None:
        return local_path(self.path)

    def name(self, array: str, key: str) -> str:
        """The file's path or URL, for messages."""
        return f"{self.path}/{array}/{key}" if array else f"{self.path}/{key}"

    def _remote(self, array: str, key: str) -> tuple[Any, str]:
        fs, root = _filesystem(self.path, json.dumps(self.storage_options or {}, sort_keys=True))
        return fs, "/".join(p for p in (root, array, key) if p)

    def exists(self, array: str, key: str) -> bool:
        if self.local is not None:
            return os.path.exists(os.path.join(self.local, array, key))
        fs, path = self._remote(array, key)
        return fs.exists(path)

    def read(self, array: str, key: str, tail: int | None = None) -> bytes | None:
        """The file's bytes (its last ``tail`` bytes only, if given); None if there is no such file."""
        if self.local is not None:
            try:
                with open(os.path.join(self.local, array, key), "rb") as f:
                    if tail is not None:
                        size = os.fstat(f.fileno()).st_size
                        f.seek(max(size - tail, 0))
                    return f.read()
            except (FileNotFoundError, NotADirectoryError):
                return None
        fs, path = self._remote(array, key)
        try:  # a negative start is one suffix-range request on object stores
            return fs.cat_file(path, start=-tail) if tail is not None else fs.cat_file(path)
        except FileNotFoundError:
            return None

    def read_many(self, array: str, keys: list[str], tail: int | None = None) -> list[bytes | None]:
        """:meth:`read` of several files; concurrent requests on an object store."""
        if self.local is not None or len(keys) < 2:
            return [self.read(array, key, tail) for key in keys]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
            return list(pool.map(lambda key: self.read(array, key, tail), keys))

    def document(self, array: str) -> dict | None:
        """An array's (or with ``""`` the group's) ``zarr.json``; None if absent or not JSON."""
        data = self.read(array, "zarr.json")
        try:
            document = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return document if isinstance(document, dict) else None

    def listing(self, array: str) -> set[str]:
        """Keys of the files under an array's folder (its ``zarr.json`` left out)."""
        if self.local is not None:
            top = os.path.join(self.local, array)
            found = {os.path.relpath(os.path.join(root, f), top).replace(os.sep, "/")
                     for root, _, files in os.walk(top) for f in files}
        else:
            fs, path = self._remote(array, "")
            found = {p[len(path) + 1:] for p in fs.find(path)}
        return found - {"zarr.json"}


def _grid(shape: Iterable[int], chunks: Iterable[int]) -> tuple[int, ...]:
    return tuple(-(-int(n) // int(c)) if int(c) > 0 else 0 for n, c in zip(shape, chunks, strict=True))


@dataclass(frozen=True)
class ChunkRecord:
    """What the manifest records of one array: its grid and each chunk's digest (None: empty)."""

    array: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    encoding: str
    separator: str
    stored: bool
    crc32c: tuple[int, ...]
    empty: frozenset[int]

    @property
    def grid(self) -> tuple[int, ...]:
        return _grid(self.shape, self.chunks)

    @property
    def n_chunks(self) -> int:
        return int(np.prod(self.grid, dtype=np.int64))

    def key(self, coords: tuple[int, ...]) -> str:
        """The chunk's key under the array's folder (``c/3``, ``c/3/0``)."""
        if self.encoding == "v2":
            return self.separator.join(map(str, coords)) or "0"
        return self.separator.join(["c", *map(str, coords)])

    def coords_of(self, key: str) -> tuple[int, ...] | None:
        """The chunk coordinates a key names, or None if it names no chunk of the grid."""
        parts = key.split(self.separator)
        if self.encoding != "v2":
            if not parts or parts[0] != "c":
                return None
            parts = parts[1:]
        if self.encoding == "v2" and parts == ["0"] and not self.shape:
            return ()
        if len(parts) != len(self.shape) or not all(p.isdigit() for p in parts):
            return None
        coords = tuple(int(p) for p in parts)
        return coords if all(c < g for c, g in zip(coords, self.grid, strict=True)) else None

    def flat(self, coords: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(coords, self.grid)) if coords else 0

    def expected(self, coords: tuple[int, ...]) -> int | None:
        """The recorded CRC-32C of a chunk, or None for a chunk the writer left empty."""
        flat = self.flat(coords)
        return None if flat in self.empty else self.crc32c[flat]

    def row_chunks(self, start: int, stop: int) -> Iterator[tuple[int, ...]]:
        """Coordinates of the chunks that hold rows ``[start, stop)`` (all chunks along other dimensions)."""
        if not self.shape or stop <= start:
            if not self.shape:
                yield ()
            return
        first, last = start // self.chunks[0], -(-stop // self.chunks[0])
        yield from product(range(first, min(last, self.grid[0])), *(range(g) for g in self.grid[1:]))

    def all_chunks(self) -> Iterator[tuple[int, ...]]:
        return product(*(range(g) for g in self.grid))

    @classmethod
    def from_entry(cls, array: str, entry: Mapping[str, Any]) -> ChunkRecord:
        crcs = np.frombuffer(base64.b64decode(entry["crc32c"]), dtype="<u4")
        record = cls(array, tuple(map(int, entry["shape"])), tuple(map(int, entry["chunks"])),
                     str(entry["keys"]["name"]), str(entry["keys"]["separator"]), entry["digest"] == "crc32c-stored",
                     tuple(int(c) for c in crcs), frozenset(map(int, entry["empty"])))
        if len(record.crc32c) != record.n_chunks:
            raise ValueError(f"{len(record.crc32c)} digests for {record.n_chunks} chunks")
        return record


def _keys_of(document: Mapping[str, Any]) -> tuple[str, str]:
    encoding = document.get("chunk_key_encoding") or {"name": "default"}
    name = encoding.get("name", "default")
    separator = (encoding.get("configuration") or {}).get("separator", "/" if name == "default" else ".")
    return str(name), str(separator)


def _chunk_shape(document: Mapping[str, Any]) -> list[int]:
    return list((document.get("chunk_grid") or {}).get("configuration", {}).get("chunk_shape", []))


def _stores_crc32c(document: Mapping[str, Any]) -> bool:
    codecs = document.get("codecs") or []
    return bool(codecs) and isinstance(codecs[-1], dict) and codecs[-1].get("name") == "crc32c"


def chunk_digest(data: bytes | None, stored: bool) -> int | None:
    """The digest the manifest records of a chunk file's bytes (None: no file)."""
    if data is None:
        return None
    if stored:
        return int.from_bytes(data[-4:], "little")
    import google_crc32c

    return int(google_crc32c.value(data))


def stored_digests(path: str, storage_options: dict | None, array: str, document_or_array: Any,
                   chunks: Iterable[tuple[int, ...]]) -> dict[str, dict[str, int | None]]:
    """Digests of chunks a task has just written (``{array: {key: crc32c or None}}``), for the manifest.

    ``document_or_array`` is the array's ``zarr.json`` document or the ``zarr.Array`` itself."""
    document = document_or_array
    if not isinstance(document, Mapping):
        document = document_or_array.metadata.to_dict()
    files = ChunkFiles(path, storage_options)
    record = _skeleton(array, document)
    stored = _stores_crc32c(document)
    return {array: {record.key(tuple(c)): chunk_digest(files.read(array, record.key(tuple(c)), 4 if stored else None),
                                                        stored) for c in chunks}}


def merge_digests(*parts: Mapping[str, Mapping[str, int | None]]) -> dict[str, dict[str, int | None]]:
    """Digests of several tasks' chunks merged into one mapping."""
    merged: dict[str, dict[str, int | None]] = {}
    for part in parts:
        for array, keys in (part or {}).items():
            merged.setdefault(array, {}).update(keys)
    return merged


def merge_tree(level: list, combine: Any, name: str, token: str, split_every: int = 8) -> Any:
    """Combine lazy partial results in a tree (``split_every`` at a time): one task per node."""
    import dask

    depth = 0
    while len(level) > 1:
        level = [dask.delayed(combine, pure=True, traverse=False)(
            *level[j:j + split_every], dask_key_name=(f"{name}-{token}", depth, j))
            for j in range(0, len(level), split_every)]
        depth += 1
    return level[0] if level else dask.delayed(combine, pure=True)(dask_key_name=f"{name}-{token}")


def _skeleton(array: str, document: Mapping[str, Any]) -> ChunkRecord:
    encoding, separator = _keys_of(document)
    return ChunkRecord(array, tuple(document.get("shape", ())), tuple(_chunk_shape(document)), encoding, separator,
                       _stores_crc32c(document), (), frozenset())


def _chunk_entry(files: ChunkFiles, array: str, document: Mapping[str, Any],
                 known: Mapping[str, int | None]) -> dict[str, Any]:
    record = _skeleton(array, document)
    crcs = np.zeros(record.n_chunks, dtype="<u4")
    empty = []
    keys = [record.key(coords) for coords in record.all_chunks()]
    unknown = [key for key in keys if key not in known]
    read = dict(zip(unknown, files.read_many(array, unknown, 4 if record.stored else None), strict=True))
    for flat, key in enumerate(keys):
        value = known[key] if key in known else chunk_digest(read[key], record.stored)
        if value is None:
            empty.append(flat)
        else:
            crcs[flat] = value
    return {"shape": list(record.shape), "chunks": list(record.chunks),
            "keys": {"name": record.encoding, "separator": record.separator},
            "digest": "crc32c-stored" if record.stored else "crc32c-file",
            "crc32c": base64.b64encode(crcs.tobytes()).decode(), "empty": empty}


def schema_entry(raw: bytes) -> dict[str, Any]:
    """What the schema record keeps of one array's ``zarr.json`` (its bytes): named fields as written,
    digests of its codecs, state labels and other attributes, and a SHA-256 of the whole file."""
    document = json.loads(raw)
    attributes = document.get("attributes") or {}
    return {
        "dtype": document.get("data_type"), "shape": document.get("shape"), "chunk_grid": document.get("chunk_grid"),
        "chunk_key_encoding": document.get("chunk_key_encoding"), "fill_value": document.get("fill_value"),
        "dimension_names": document.get("dimension_names"), "codecs": digest(document.get("codecs")),
        "labels": digest({k: attributes[k] for k in LABELS if k in attributes}),
        "attributes": digest({k: v for k, v in attributes.items() if k not in LABELS}),
        "metadata": hashlib.sha256(raw).hexdigest(),
    }


def _sealed(key: str, entries: Mapping[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, key: dict(entries), "digest": digest(dict(entries))}


def _documents(files: ChunkFiles, names: Iterable[str], path: str) -> dict[str, bytes]:
    """The bytes of the arrays' ``zarr.json``."""
    documents = {}
    for name in names:
        raw = files.read(name, "zarr.json")
        if raw is None:
            raise DataError(f"the store {path!r} has no metadata {files.name(name, 'zarr.json')!r}", variable=name)
        documents[name] = raw
    return documents


def completion_records(path: str, storage_options: dict | None, arrays: Iterable[str],
                       digests: Mapping[str, Mapping[str, int | None]] | None = None) -> dict[str, Any]:
    """The manifest and schema record of ``arrays``, as group attributes (``dpgm_manifest``, ``dpgm_schema``).

    ``digests``: chunks' digests returned by the tasks that wrote them; others are read back."""
    files = ChunkFiles(path, storage_options)
    documents = _documents(files, arrays, path)
    digests = digests or {}
    chunks = {name: _chunk_entry(files, name, json.loads(d), digests.get(name, {})) for name, d in documents.items()}
    return {MANIFEST: _sealed("arrays", chunks),
            SCHEMA: _sealed("variables", {name: schema_entry(d) for name, d in documents.items()})}


def dropped_records(attrs: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The records of ``attrs`` without the arrays ``names`` (variables being replaced); {} without records."""
    names = set(names)
    if MANIFEST not in attrs or SCHEMA not in attrs:
        return {}
    return {MANIFEST: _sealed("arrays", {k: v for k, v in attrs[MANIFEST]["arrays"].items() if k not in names}),
            SCHEMA: _sealed("variables", {k: v for k, v in attrs[SCHEMA]["variables"].items() if k not in names})}


def added_records(attrs: Mapping[str, Any], path: str, storage_options: dict | None, names: Iterable[str],
                  digests: Mapping[str, Mapping[str, int | None]] | None = None) -> dict[str, Any]:
    """The records of ``attrs`` with entries for the newly written arrays ``names``; the entries of
    the other arrays are kept as recorded (never recomputed from what is on disk now). A store
    without records stays without ({})."""
    if MANIFEST not in attrs or SCHEMA not in attrs:
        return {}
    new = completion_records(path, storage_options, names, digests)
    return {MANIFEST: _sealed("arrays", {**attrs[MANIFEST]["arrays"], **new[MANIFEST]["arrays"]}),
            SCHEMA: _sealed("variables", {**attrs[SCHEMA]["variables"], **new[SCHEMA]["variables"]})}


def _verified(attrs: Mapping[str, Any], key: str, inner: str, path: str) -> dict[str, Any]:
    record = attrs.get(key)
    what = "chunk manifest" if key == MANIFEST else "schema record"
    if (not isinstance(record, dict) or not isinstance(record.get(inner), dict)
            or record.get("digest") != digest(record[inner])):
        raise DataError(f"the {what} ({key!r}) in {os.fspath(path)}/zarr.json does not match its digest: the "
                        "store's group metadata was changed or damaged after the store was written; "
                        "restore it or rewrite the store")
    if record.get("format") != FORMAT:
        raise DataError(f"the {what} of {path!r} has format {record.get('format')!r}; this dpgm reads {FORMAT}")
    return record[inner]


def _show(field: str, value: Any) -> str:
    if field == "chunk_grid" and isinstance(value, dict):
        return repr(_chunk_shape(value))
    return repr(value)


def schema_changes(recorded: Mapping[str, Any], raw: bytes) -> list[str]:
    """What changed in an array's ``zarr.json`` (its bytes ``raw``) since its schema record was
    written (empty: nothing)."""
    if recorded.get("metadata") == hashlib.sha256(raw).hexdigest():  # the very bytes written: nothing changed
        return []
    try:
        document = json.loads(raw)
        current = schema_entry(raw)
    except (ValueError, AttributeError):
        return ["its zarr.json is no longer a JSON object (edited or damaged after the store was marked "
                "complete); restore it or rewrite the store"]
    changes = []
    for field, words in FIELDS.items():
        if recorded.get(field) == current[field] or (field == "metadata" and changes):
            continue
        if field == "labels":
            attributes = document.get("attributes") or {}
            now = attributes.get("states", attributes.get("flag_meanings", attributes.get("labels")))
            changes.append(f"its state labels changed after the store was marked complete (they now read {now!r}); "
                           "restore the variable's zarr.json or rewrite the store")
        elif field in ("codecs", "attributes", "metadata"):
            changes.append(f"its {words} changed after the store was marked complete (its zarr.json was edited "
                           "or damaged); restore it or rewrite the store")
        else:
            changes.append(f"its {words} changed after the store was marked complete: recorded "
                           f"{_show(field, recorded.get(field))}, now {_show(field, current[field])}; restore its "
                           "zarr.json or rewrite the store")
    return changes


def records(attrs: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, ChunkRecord]] | None:
    """The verified schema record and chunk records of a store's attributes; None without records.

    Raises
    ------
    DataError
        A record that does not match its digest, or one record without the other.
    """
    if MANIFEST not in attrs and SCHEMA not in attrs:
        return None
    schema = _verified(attrs, SCHEMA, "variables", path)
    manifest = _verified(attrs, MANIFEST, "arrays", path)
    if set(schema) != set(manifest):
        raise DataError(f"the chunk manifest and the schema record of {path!r} name different arrays: "
                        f"{sorted(set(schema) ^ set(manifest))}")
    try:
        chunks = {name: ChunkRecord.from_entry(name, entry) for name, entry in manifest.items()}
    except (KeyError, TypeError, ValueError) as error:
        raise DataError(f"the chunk manifest of {path!r} cannot be read ({error}); rewrite the store") from None
    return schema, chunks


def check_records(attrs: Mapping[str, Any], path: str, storage_options: dict | None,
                  names: Iterable[str]) -> dict[str, ChunkRecord] | None:
    """Check a store's records against the arrays ``names`` it is read with; their chunk records.

    Returns None for a store without records (unverifiable: read as before).

    Raises
    ------
    DataError
        A record damaged or edited, an array recorded but absent or present but not recorded,
        or an array's metadata changed after the store was marked complete (naming the variable
        and what changed).
    """
    found = records(attrs, path)
    if found is None:
        return None
    schema, chunks = found
    names = list(names)
    for name in names:
        if name not in schema:
            raise DataError(f"is not in the schema record of {path!r}: the array was added after the store was "
                            "marked complete; rewrite the store", variable=name)
    for name in schema:
        if name not in names:
            raise DataError(f"is recorded in {path!r} but the store has no such array; restore it or rewrite the "
                            "store", variable=name)
    documents = _documents(ChunkFiles(path, storage_options), names, path)
    for name in names:
        changes = schema_changes(schema[name], documents[name])
        if changes:
            raise DataError(changes[0], variable=name)
    return chunks


def missing_chunk(files: ChunkFiles, record: ChunkRecord, coords: tuple[int, ...]) -> DataError:
    """The error for a chunk the manifest records but whose file is gone."""
    rows = ""
    if coords and record.shape:
        start = coords[0] * record.chunks[0]
        rows = f" (rows {start}-{min(start + record.chunks[0], record.shape[0])})"
    return DataError(f"chunk file {files.name(record.array, record.key(coords))!r}{rows} is missing, though the "
                     "store's writer recorded it (an interrupted copy or sync, a lost object): restore the file or "
                     "rewrite the store", variable=record.array, chunk=coords[0] if coords else 0)


def unexpected_chunk(files: ChunkFiles, record: ChunkRecord, coords: tuple[int, ...]) -> DataError:
    """The error for a chunk file where the writer recorded an empty chunk (fill value only)."""
    return DataError(f"chunk file {files.name(record.array, record.key(coords))!r} exists, but the store's writer "
                     "recorded that chunk as empty (fill value only): the file is not the writer's; remove it or "
                     "rewrite the store", variable=record.array, chunk=coords[0] if coords else 0)


def check_chunks(files: ChunkFiles, record: ChunkRecord, chunks: Iterable[tuple[int, ...]]) -> None:
    """Refuse the first of ``chunks`` that the writer wrote but whose file is gone."""
    for coords in chunks:
        if record.expected(coords) is not None and not files.exists(record.array, record.key(coords)):
            raise missing_chunk(files, record, coords)


def check_present(path: str, storage_options: dict | None, names: Iterable[str] | None = None) -> int | None:
    """Check, by listing the store, that every chunk file the manifest records is there.

    Returns the number of chunk files found, or None for a store without a manifest.

    Raises
    ------
    DataError
        The first chunk file recorded but missing (naming variable, chunk and file), or a file
        where the writer recorded an empty chunk.
    """
    files = ChunkFiles(path, storage_options)
    attrs = (files.document("") or {}).get("attributes") or {}
    found = records(attrs, path)
    if found is None:
        return None
    _, chunks = found
    n_files = 0
    for name in (chunks if names is None else names):
        record = chunks[name]
        listed = files.listing(name)
        for coords in record.all_chunks():
            key = record.key(coords)
            if record.expected(coords) is None:
                if key in listed:
                    raise unexpected_chunk(files, record, coords)
            elif key not in listed:
                raise missing_chunk(files, record, coords)
            else:
                n_files += 1
    return n_files


def recorded_chunks(path: str | os.PathLike[str], storage_options: dict | None = None) -> dict[str, dict[str, int | None]]:
    """What a store's manifest records: array -> chunk key -> CRC-32C (None for a chunk left empty)."""
    path = os.fspath(path)
    attrs = (ChunkFiles(path, storage_options).document("") or {}).get("attributes") or {}
    found = records(attrs, path)
    if found is None:
        return {}
    return {name: {record.key(c): record.expected(c) for c in record.all_chunks()}
            for name, record in found[1].items()}

"""Checkpoints of iterative fits: the loop's exact state after every iteration, verified on resume.

The EM loop (:func:`dpgm.algorithms.em.em`) touches no storage: :func:`dpgm.api.em_control.run_em`
writes each :class:`~dpgm.algorithms.em.LoopSnapshot` it hands over with :func:`write_checkpoint`,
and gives it back what :func:`read_checkpoint` reads as a :class:`~dpgm.algorithms.em.SavedLoop`.

A checkpoint folder holds one folder per saved iteration (``iteration-000007``)
and a ``LATEST`` file naming the newest complete one. An iteration folder holds two files:

* ``arrays.npz``: the arrays of the loop's state (parameters, SQUAREM's vectors)
  and of each restart's best model so far, so a resume continues from exactly
  the numbers the run stopped at;
* ``state.json``: the history and status of every restart, the structure of the
  loop's state and models (a :mod:`dpgm.io.snapshot` structure), the run's
  fingerprint (below), the SHA-256 digest of ``arrays.npz``, and its own digest
  (``"sha256"``, of the rest of the file in canonical JSON).

``LATEST`` holds two lines: the iteration folder's name and ``sha256:`` with the
digest of its ``state.json``. Every file is written under a temporary name and
renamed (one PUT on an object store), ``LATEST`` last, only after the iteration
is complete, so a run killed at any moment leaves the previous iteration readable.
The older iteration is removed once a newer one is complete. An iteration costs
three writes whatever the model (about ten requests on an object store, against
some 600 when each restart's model was a Zarr group of its own: format 2, still
read).

On resume every link is checked: ``LATEST`` must name an iteration folder of this
checkpoint and carry the digest of its ``state.json``, which must be valid JSON
matching its own digest, and every file it lists must match its digest. A
checkpoint that fails any of these is a :class:`CheckpointDamaged` (a
:class:`~dpgm.errors.DataError`, CLI exit 65) naming the file. A full disk (or
quota, or read-only file system) while writing an iteration raises
:class:`CheckpointWriteError` (an ``OSError`` with the errno, naming the file;
CLI exit 74) after removing the unfinished iteration: ``LATEST`` still names the
previous one, which resumes as if nothing had happened.

Folders are paths or fsspec URLs (``s3://bucket/run``, ``memory://run``), or an
``fsspec.get_mapper(url, **storage_options)`` to pass options: a resume on another
node or pod finds the checkpoint where the data are.

A fingerprint of the run (the data's path, rows, chunking and schema, and the
model specification) set with :func:`set_fingerprint` is copied into every
iteration; :func:`check_fingerprint` refuses to resume a checkpoint written for
other data or another specification.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import uuid
from typing import Any, Union

import numpy as np

from dpgm.errors import CheckpointMismatch, DataError
from dpgm.io.snapshot import SnapshotError, decode, encode

__all__ = ["CheckpointDamaged", "CheckpointMismatch", "CheckpointWriteError", "check_fingerprint",
           "latest_iteration", "read_checkpoint", "set_fingerprint", "write_checkpoint"]

FINGERPRINT = "FINGERPRINT.json"
LATEST, STATE, ARRAYS = "LATEST", "state.json", "arrays.npz"
FORMAT = 3
FORMATS = (2, 3)  # format 2: fingerprint.json and model-<i>.zarr beside the arrays (still read)
_ITERATION = re.compile(r"iteration-(\d{6,})")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
# errors of the device written to, not of the path: reported as I/O errors (exit 74), the iteration before kept
DEVICE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO)


class CheckpointDamaged(DataError):
    """A checkpoint file that is not what dpgm wrote: unreadable, truncated, edited (its digest differs), or a
    ``LATEST`` naming anything but an iteration folder of the checkpoint. ``path`` is the file."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"checkpoint file {path!r} {problem}; the checkpoint cannot be trusted: restore it, or "
                         "start afresh without --resume (--overwrite)")
        self.path = path

    def __reduce__(self):
        return (_rebuild_damaged, (self.args[0], self.path))


def _rebuild_damaged(text: str, path: str) -> CheckpointDamaged:
    error = CheckpointDamaged.__new__(CheckpointDamaged)
    ValueError.__init__(error, text)
    error.path, error.variable, error.chunk = path, None, None
    return error


class CheckpointWriteError(OSError):
    """A checkpoint iteration could not be written (disk full, quota, read-only file system, device error).

    An ``OSError`` with the device's ``errno`` and ``filename`` the file being written;
    the unfinished iteration is removed and the previous one stays resumable.
    """


Location = Union[str, "os.PathLike[str]", Any]  # a path, an fsspec URL or an fsspec mapper (get_mapper)


class _Folder:
    """A checkpoint folder on any fsspec filesystem: local paths, ``memory://``, ``s3://`` ...

    ``location`` is a path, a URL (options from fsspec's configuration, e.g. the
    environment), or ``fsspec.get_mapper(url, **storage_options)`` to carry options.
    """

    def __init__(self, location: Location):
        import fsspec

        if hasattr(location, "fs") and hasattr(location, "root"):  # an fsspec mapper
            self.fs, self.root = location.fs, location.root
        else:
            self.fs, self.root = fsspec.core.url_to_fs(os.fspath(location))
        self.root = self.root.rstrip("/")
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        self.name = os.fspath(location) if isinstance(location, str | os.PathLike) else self.url(self.root)

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def url(self, path: str) -> str:
        return path if self.local else self.fs.unstrip_protocol(path)

    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts))

    def read_bytes(self, *parts: str) -> bytes:
        return self.fs.cat_file(self.path(*parts))

    def read_text(self, *parts: str) -> str:
        return self.read_bytes(*parts).decode()

    def write_bytes(self, data: bytes, *parts: str) -> None:
        """Replace a file in one step: a temporary name renamed on a local disk, one PUT on an object store."""
        target = self.path(*parts)
        if not self.local:
            self.fs.pipe_file(target, data)
            return
        pending = f"{target}.partial-{uuid.uuid4().hex[:8]}"
        try:
            with open(pending, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(pending, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(pending)
            raise

    def write_text(self, text: str, *parts: str) -> None:
        self.write_bytes(text.encode(), *parts)

    def children(self) -> set[str]:
        """The names directly under the folder, listed afresh (none if it does not exist)."""
        try:
            listed = self.fs.ls(self.root, detail=False, refresh=True)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        return {str(p).rstrip("/").rsplit("/", 1)[-1] for p in listed}

    def remove(self, *parts: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path(*parts), recursive=True)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def _device_error(error: BaseException) -> OSError | None:
    """The OSError of a full or read-only device behind ``error`` (itself, its cause or context), if one."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DEVICE_ERRORS:
            return error
        error = error.__cause__ or error.__context__
    return None


def write_checkpoint(folder: Location, iteration: int, models: list[Any], state: dict[str, Any],
                     loop: Any = None) -> str:
    """Save iteration ``iteration``: ``models`` (one per restart, for people), a JSON-able ``state``
    and ``loop``, the exact state a resume continues from (see :mod:`dpgm.io.snapshot`).

    Returns
    -------
    str
        The iteration folder's path or URL.

    Raises
    ------
    CheckpointWriteError
        The device is full, over quota, read-only or failing; the unfinished
        iteration is removed and ``LATEST`` still names the previous one.
    """
    where = _Folder(folder)
    name = f"iteration-{iteration:06d}"
    writing = where.path(name)
    try:
        present = where.children()
        if name in present:  # an earlier run's iteration of the same number: never half-replaced
            if _latest_name(where) == name:
                where.remove(LATEST)
            where.remove(name)
        if where.local:
            where.fs.makedirs(where.path(name), exist_ok=True)
        structure, arrays = encode({"loop": loop, "models": list(models)})
        buffer = io.BytesIO()
        np.savez(buffer, **{f"a{i}": a for i, a in enumerate(arrays)})
        writing = where.path(name, ARRAYS)
        where.write_bytes(buffer.getvalue(), name, ARRAYS)
        payload = dict(state) | {"format": FORMAT, "iteration": iteration, "n_models": len(models),
                                 "loop": structure, "files": {ARRAYS: _sha256(buffer.getvalue())}}
        if FINGERPRINT in present:
            payload["fingerprint"] = json.loads(where.read_bytes(FINGERPRINT))
        payload["sha256"] = _sha256(_canonical(payload))
        text = _canonical(payload)
        writing = where.path(name, STATE)
        where.write_bytes(text, name, STATE)
        writing = where.path(LATEST)
        where.write_text(f"{name}\nsha256:{_sha256(text)}\n", LATEST)  # last: the new iteration is complete
    except Exception as error:
        device = _device_error(error)
        if device is None:
            raise
        with contextlib.suppress(Exception):
            where.remove(name)
        previous = _latest_name(where)
        kept = (f"{previous} is complete and resumes" if previous else "no earlier iteration was complete")
        named = os.fsdecode(device.filename) if device.filename is not None else ""
        path = named if named and ".partial-" not in named else writing
        raise CheckpointWriteError(device.errno, f"{device.strerror or os.strerror(device.errno)} while writing "
                                   f"the checkpoint {where.name!r} ({kept}; free space, then rerun with "
                                   "--resume)", path) from error
    for old in present:
        if _ITERATION.fullmatch(old) and old != name:
            with contextlib.suppress(OSError):
                where.fs.rm(where.path(old), recursive=True)
    return where.url(where.path(name))


def _latest_name(where: _Folder) -> str | None:
    """The iteration ``LATEST`` names (unverified), or None."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return where.read_text(LATEST).split("\n", 1)[0].strip() or None
    return None


def latest_iteration(folder: Location) -> int | None:
    """The iteration number ``LATEST`` names (not verified: for messages), or None if there is none."""
    name = _latest_name(_Folder(folder))
    match = _ITERATION.fullmatch(name or "")
    return int(match.group(1)) if match else None


def _verified_state(where: _Folder) -> tuple[str, dict[str, Any]]:
    """``(iteration folder, state)`` of the newest iteration, every link checked (see the module docstring)."""
    if not where.exists(LATEST):
        raise FileNotFoundError(f"no checkpoint in {where.name!r}")
    latest = where.url(where.path(LATEST))
    try:
        lines = where.read_text(LATEST).split("\n")
    except UnicodeDecodeError:
        raise CheckpointDamaged(latest, "is not text") from None
    name = lines[0].strip()
    if not _ITERATION.fullmatch(name):
        raise CheckpointDamaged(latest, f"names {name[:80]!r}, not an iteration folder of this checkpoint "
                                        "(iteration-NNNNNN)")
    digest = _DIGEST.fullmatch(lines[1].strip()) if len(lines) > 1 else None
    if digest is None:
        raise CheckpointDamaged(latest, "carries no digest of its state.json (truncated, edited, or written by a "
                                        "dpgm without digests)")
    path = where.url(where.path(name, STATE))
    if not where.exists(name, STATE):
        raise CheckpointDamaged(latest, f"names {name!r}, whose {STATE} is missing")
    data = where.read_bytes(name, STATE)
    try:
        state = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointDamaged(path, f"is not valid JSON (truncated or edited: {error})") from None
    if not isinstance(state, dict) or not isinstance(state.get("sha256"), str):
        raise CheckpointDamaged(path, "carries no digest (edited, or written by a dpgm without digests)")
    recorded = state.pop("sha256")
    if _sha256(_canonical(state)) != recorded:
        raise CheckpointDamaged(path, "does not match its own digest: it was edited")
    if _sha256(data) != digest.group(1):
        raise CheckpointDamaged(path, f"is not the file {LATEST} vouches for (its digest differs): it was replaced")
    if state.get("format") not in FORMATS or state.get("iteration") != int(name.split("-")[1]):
        raise CheckpointDamaged(path, f"describes iteration {state.get('iteration')!r} of format "
                                      f"{state.get('format')!r}, not {name!r} of format {FORMAT}")
    return name, state


def _verified_bytes(where: _Folder, name: str, state: dict, file: str) -> bytes:
    path = where.url(where.path(name, file))
    expected = (state.get("files") or {}).get(file)
    if expected is None:
        raise CheckpointDamaged(where.url(where.path(name, STATE)), f"lists no digest of {file}")
    if not where.exists(name, file):
        raise CheckpointDamaged(path, "is missing")
    data = where.read_bytes(name, file)
    if _sha256(data) != expected:
        raise CheckpointDamaged(path, "does not match the digest state.json records: it was edited or truncated")
    return data


def read_checkpoint(folder: Location, *, models: bool = True) -> tuple[int, list[Any], dict[str, Any]]:
    """The newest complete checkpoint, verified: ``(iteration, models, state)``.

    ``state["loop"]`` is the loop's exact state as written (decoded); ``models`` are
    the restarts' labelled models (``models=False``: not read, an empty list).

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    CheckpointDamaged
        A file of the checkpoint is not what dpgm wrote (named).
    """
    where = _Folder(folder)
    name, state = _verified_state(where)
    arrays_path = where.url(where.path(name, ARRAYS))
    try:
        with np.load(io.BytesIO(_verified_bytes(where, name, state, ARRAYS)), allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
    except (ValueError, OSError, EOFError) as error:
        if isinstance(error, CheckpointDamaged):
            raise
        raise CheckpointDamaged(arrays_path, f"cannot be read ({error})") from None
    try:
        tree = decode(state.get("loop"), arrays)
    except SnapshotError as error:
        raise CheckpointDamaged(where.url(where.path(name, STATE)), f"describes a state dpgm cannot rebuild "
                                                                   f"({error})") from None
    if state["format"] == 2:
        state["loop"], loaded = tree, []
        if models:
            from dpgm.models.store import load

            loaded = [load(where.url(where.path(name, f"model-{i}.zarr")),
                           storage_options=None if where.local else where.fs.storage_options)
                      for i in range(int(state["n_models"]))]
    else:
        if not isinstance(tree, dict) or set(tree) != {"loop", "models"}:
            raise CheckpointDamaged(where.url(where.path(name, STATE)), "describes no loop state and models")
        state["loop"], loaded = tree["loop"], list(tree["models"]) if models else []
    return int(state["iteration"]), loaded, state


def set_fingerprint(folder: Location, fingerprint: dict[str, Any]) -> None:
    """Record what the run checkpointing into ``folder`` fits (copied into each later iteration).

    ``fingerprint`` maps a part (e.g. ``"data"``, ``"model"``, ``"specification"``)
    to a JSON-able description; parts already recorded and not in ``fingerprint``
    are kept (the CLI records the specification, :func:`dpgm.fit` the data and model).
    """
    where = _Folder(folder)
    recorded = {}
    try:
        where.fs.makedirs(where.root, exist_ok=True)
        if where.exists(FINGERPRINT):
            with contextlib.suppress(ValueError, OSError):
                recorded = json.loads(where.read_text(FINGERPRINT))
        where.write_text(json.dumps(recorded | json.loads(json.dumps(fingerprint))), FINGERPRINT)
    except Exception as error:
        device = _device_error(error)
        if device is None:
            raise
        raise CheckpointWriteError(device.errno, f"{device.strerror or os.strerror(device.errno)} while writing "
                                   f"the checkpoint {where.name!r}", where.url(where.path(FINGERPRINT))) from error


def check_fingerprint(folder: Location, fingerprint: dict[str, Any]) -> bool:
    """Whether the newest checkpoint in ``folder`` was written for ``fingerprint``.

    Returns
    -------
    bool
        True if it matches; False if the checkpoint has no fingerprint (written
        without :func:`set_fingerprint`: nothing to compare).

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    CheckpointDamaged
        ``LATEST`` or ``state.json`` is not what dpgm wrote (named).
    CheckpointMismatch
        A part differs, naming the checkpoint, the part and the first differing key.
        Only parts both describe are compared (``dpgm.fit`` from Python checks the
        data and the model of a checkpoint the CLI also tied to its specification).
    """
    where = _Folder(folder)
    name, state = _verified_state(where)
    if state["format"] == 2:
        if "fingerprint.json" not in (state.get("files") or {}):
            return False
        stored = json.loads(_verified_bytes(where, name, state, "fingerprint.json"))
    elif not isinstance(state.get("fingerprint"), dict):
        return False
    else:
        stored = state["fingerprint"]
    fingerprint = json.loads(json.dumps(fingerprint))  # tuples -> lists, as stored
    for part in [p for p in fingerprint if p in stored]:
        was, now = stored.get(part), fingerprint.get(part)
        if was != now:
            keys = _first_difference(was, now)
            key = ".".join(map(str, keys)) or part
            raise CheckpointMismatch(
                f"the checkpoint {where.name!r} was written for other {part}: {key} was "
                f"{_short(_at(was, keys))}, now {_short(_at(now, keys))}; resume with the same {part}, "
                "or start afresh without --resume"
            )
    return True


def _first_difference(was: Any, now: Any) -> list[str]:
    """Keys leading to the first place two JSON-like values differ ([] if they differ at the top)."""
    if isinstance(was, dict) and isinstance(now, dict):
        for key in _keys(now, was):
            if was.get(key) != now.get(key):
                return [key, *_first_difference(was.get(key), now.get(key))]
    return []


def _keys(first: dict, second: dict) -> list:
    """Keys of both, in ``first``'s order (the most telling first: path, rows, chunks, schema)."""
    return [*first, *(k for k in second if k not in first)]


def _at(value: Any, keys: list[str]) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _short(value: Any, limit: int = 80) -> str:
    """``value`` as JSON, its middle elided past ``limit`` characters: a path keeps its last folders."""
    text = json.dumps(value)
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]

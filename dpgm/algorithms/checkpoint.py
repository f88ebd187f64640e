"""Checkpoints of iterative fits: parameters and history after every iteration, resumable.

A checkpoint folder holds one folder per saved iteration (``iteration-000007``,
its models as Zarr groups) and a ``LATEST`` file naming the newest complete one,
replaced in one step (a rename on a local disk, one PUT on an object store) only
after the iteration is fully written, so a run killed at any moment leaves a
readable checkpoint. Older iterations are removed once a newer one is complete.
Folders are paths or fsspec URLs (``s3://bucket/run``, ``memory://run``), or an
``fsspec.get_mapper(url, **storage_options)`` to pass options: a resume on another
node or pod finds the checkpoint where the data are.

A fingerprint of the run (the data's path, rows, chunking and schema, and the
model specification) set with :func:`set_fingerprint` is copied into every
iteration's group; :func:`check_fingerprint` refuses to resume a checkpoint
written for other data or another specification.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Union

__all__ = ["CheckpointMismatch", "check_fingerprint", "read_checkpoint", "set_fingerprint", "write_checkpoint"]

FINGERPRINT = "FINGERPRINT.json"


class CheckpointMismatch(ValueError):
    """A checkpoint written for other data or another model specification than the resumed run's."""


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

    def read_text(self, *parts: str) -> str:
        return self.fs.cat_file(self.path(*parts)).decode()

    def write_text(self, text: str, *parts: str) -> None:
        """Replace a small file in one step: rename on a local disk, one PUT on an object store."""
        target = self.path(*parts)
        if self.local:
            pending = target + ".tmp"
            self.fs.pipe_file(pending, text.encode())
            os.replace(pending, target)
        else:
            self.fs.pipe_file(target, text.encode())

    def remove(self, *parts: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path(*parts), recursive=True)


def write_checkpoint(folder: Location, iteration: int, models: list[Any], state: dict[str, Any]) -> str:
    """Save ``models`` (one per restart) and a JSON-able ``state`` as iteration ``iteration``."""
    from dpgm.models.store import save

    where = _Folder(folder)
    where.fs.makedirs(where.root, exist_ok=True)
    name = f"iteration-{iteration:06d}"
    where.remove(name)
    where.fs.makedirs(where.path(name), exist_ok=True)
    for i, model in enumerate(models):
        save(model, where.url(where.path(name, f"model-{i}.zarr")), mode="w",
             storage_options=None if where.local else where.fs.storage_options)
    if where.exists(FINGERPRINT):
        where.write_text(where.read_text(FINGERPRINT), name, "fingerprint.json")
    where.write_text(json.dumps(state | {"iteration": iteration, "n_models": len(models)}), name, "state.json")
    where.write_text(name, "LATEST")  # last: the new iteration is complete
    for old in where.fs.glob(where.path("iteration-*")):
        if old.rstrip("/").rsplit("/", 1)[-1] != name:
            with contextlib.suppress(OSError):
                where.fs.rm(old, recursive=True)
    return where.url(where.path(name))


def read_checkpoint(folder: Location) -> tuple[int, list[Any], dict[str, Any]]:
    """The newest complete checkpoint: ``(iteration, models, state)``.

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    """
    from dpgm.models.store import load

    where = _Folder(folder)
    if not where.exists("LATEST"):
        raise FileNotFoundError(f"no checkpoint in {where.name!r}")
    name = where.read_text("LATEST").strip()
    state = json.loads(where.read_text(name, "state.json"))
    models = [load(where.url(where.path(name, f"model-{i}.zarr")),
                   storage_options=None if where.local else where.fs.storage_options)
              for i in range(state["n_models"])]
    return int(state["iteration"]), models, state


def set_fingerprint(folder: Location, fingerprint: dict[str, Any]) -> None:
    """Record what the run checkpointing into ``folder`` fits (copied into each later iteration).

    ``fingerprint`` maps a part (e.g. ``"data"``, ``"model"``, ``"specification"``)
    to a JSON-able description; parts already recorded and not in ``fingerprint``
    are kept (the CLI records the specification, :func:`dpgm.fit` the data and model).
    """
    where = _Folder(folder)
    where.fs.makedirs(where.root, exist_ok=True)
    recorded = {}
    if where.exists(FINGERPRINT):
        with contextlib.suppress(ValueError, OSError):
            recorded = json.loads(where.read_text(FINGERPRINT))
    where.write_text(json.dumps(recorded | json.loads(json.dumps(fingerprint))), FINGERPRINT)


def check_fingerprint(folder: Location, fingerprint: dict[str, Any]) -> bool:
    """Whether the newest checkpoint in ``folder`` was written for ``fingerprint``.

    Returns
    -------
    bool
        True if it matches; False if the checkpoint has no fingerprint (written
        by a dpgm without fingerprints: nothing to compare).

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    CheckpointMismatch
        A part differs, naming the checkpoint, the part and the first differing key.
        Only parts both describe are compared (``dpgm.fit`` from Python checks the
        data and the model of a checkpoint the CLI also tied to its specification).
    """
    where = _Folder(folder)
    if not where.exists("LATEST"):
        raise FileNotFoundError(f"no checkpoint in {where.name!r}")
    name = where.read_text("LATEST").strip()
    if not where.exists(name, "fingerprint.json"):
        return False
    stored = json.loads(where.read_text(name, "fingerprint.json"))
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
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

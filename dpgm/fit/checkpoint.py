"""Checkpoints of iterative fits: parameters and history after every iteration, resumable.

A checkpoint folder holds one Zarr group per saved iteration
(``iteration-000007.zarr``) and a ``LATEST`` file naming the newest complete one,
replaced atomically (``os.replace``) only after the group is fully written, so a
run killed at any moment leaves a readable checkpoint. Older groups are removed
once a newer one is complete.

A fingerprint of the run (the data's path, rows, chunking and schema, and the
model specification) set with :func:`set_fingerprint` is copied into every
iteration's group; :func:`check_fingerprint` refuses to resume a checkpoint
written for other data or another specification.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["CheckpointMismatch", "check_fingerprint", "read_checkpoint", "set_fingerprint", "write_checkpoint"]

FINGERPRINT = "FINGERPRINT.json"


class CheckpointMismatch(ValueError):
    """A checkpoint written for other data or another model specification than the resumed run's."""


def write_checkpoint(folder: str | os.PathLike[str], iteration: int, models: list[Any], state: dict[str, Any]) -> Path:
    """Save ``models`` (one per restart) and a JSON-able ``state`` as iteration ``iteration``."""
    from dpgm.models.store import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"iteration-{iteration:06d}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir()
    for i, model in enumerate(models):
        save(model, target / f"model-{i}.zarr", mode="w")
    if (folder / FINGERPRINT).exists():
        shutil.copyfile(folder / FINGERPRINT, target / "fingerprint.json")
    (target / "state.json").write_text(json.dumps(state | {"iteration": iteration, "n_models": len(models)}))
    pointer = folder / "LATEST.tmp"
    pointer.write_text(target.name)
    os.replace(pointer, folder / "LATEST")
    for old in folder.glob("iteration-*"):
        if old.name != target.name:
            shutil.rmtree(old, ignore_errors=True)
    return target


def read_checkpoint(folder: str | os.PathLike[str]) -> tuple[int, list[Any], dict[str, Any]]:
    """The newest complete checkpoint: ``(iteration, models, state)``.

    Raises
    ------
    FileNotFoundError
        No complete checkpoint in the folder.
    """
    from dpgm.models.store import load

    folder = Path(folder)
    latest = folder / "LATEST"
    if not latest.exists():
        raise FileNotFoundError(f"no checkpoint in {os.fspath(folder)!r}")
    target = folder / latest.read_text().strip()
    state = json.loads((target / "state.json").read_text())
    models = [load(target / f"model-{i}.zarr") for i in range(state["n_models"])]
    return int(state["iteration"]), models, state


def set_fingerprint(folder: str | os.PathLike[str], fingerprint: dict[str, Any]) -> None:
    """Record what the run checkpointing into ``folder`` fits (copied into each later iteration).

    ``fingerprint`` maps a part (e.g. ``"data"``, ``"model"``, ``"specification"``)
    to a JSON-able description; parts already recorded and not in ``fingerprint``
    are kept (the CLI records the specification, :func:`dpgm.fit` the data and model).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    recorded = {}
    if (folder / FINGERPRINT).exists():
        with contextlib.suppress(ValueError, OSError):
            recorded = json.loads((folder / FINGERPRINT).read_text())
    pending = folder / (FINGERPRINT + ".tmp")
    pending.write_text(json.dumps(recorded | json.loads(json.dumps(fingerprint))))
    os.replace(pending, folder / FINGERPRINT)


def check_fingerprint(folder: str | os.PathLike[str], fingerprint: dict[str, Any]) -> bool:
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
    folder = Path(folder)
    latest = folder / "LATEST"
    if not latest.exists():
        raise FileNotFoundError(f"no checkpoint in {os.fspath(folder)!r}")
    stored_path = folder / latest.read_text().strip() / "fingerprint.json"
    if not stored_path.exists():
        return False
    stored = json.loads(stored_path.read_text())
    fingerprint = json.loads(json.dumps(fingerprint))  # tuples -> lists, as stored
    for part in [p for p in fingerprint if p in stored]:
        was, now = stored.get(part), fingerprint.get(part)
        if was != now:
            keys = _first_difference(was, now)
            name = ".".join(map(str, keys)) or part
            raise CheckpointMismatch(
                f"the checkpoint {os.fspath(folder)!r} was written for other {part}: {name} was "
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

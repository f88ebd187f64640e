"""Checkpoints of iterative fits: parameters and history after every iteration, resumable.

A checkpoint folder holds one Zarr group per saved iteration
(``iteration-000007.zarr``) and a ``LATEST`` file naming the newest complete one,
replaced atomically (``os.replace``) only after the group is fully written, so a
run killed at any moment leaves a readable checkpoint. Older groups are removed
once a newer one is complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["read_checkpoint", "write_checkpoint"]


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

"""Models in Zarr groups: :func:`load` reads back any model kind :func:`save` wrote, exactly.

A model is written as its labelled tables (:mod:`dpgm.models.saving`, through
:mod:`dpgm.data.table_store`); the group's attributes name its kind, which picks
the class that rebuilds it here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dpgm.models.saving import CODECS, KINDS, read_model_tables, register, save

__all__ = ["load", "model_kinds", "register", "save"]


def model_kinds() -> dict[str, type]:
    """Every model kind of :mod:`dpgm.models` (importing each of its modules registers their kinds with
    :func:`dpgm.models.saving.model_kind`)."""
    import importlib
    import pkgutil

    import dpgm.models as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return dict(KINDS)


def _kinds() -> dict[str, Callable[[dict, dict], Any]]:
    """Model kind name -> ``build(tables, attrs)``: every dpgm model kind, then the registered classes."""
    return {name: cls._from_store for name, cls in model_kinds().items()} | {name: c[2] for name, c in CODECS.items()}


def load(path: str | os.PathLike[str], *, storage_options: dict | None = None) -> Any:
    """Read a model written by :func:`save` (or a model's ``save`` method).

    Raises
    ------
    FileNotFoundError
        No store at the path.
    ValueError
        The store does not hold a dpgm model.
    DataError
        The save that wrote it did not finish, a table is missing, or a table's
        checksum does not match (a corrupted file).
    """
    return read_model_tables(path, _kinds, storage_options=storage_options)

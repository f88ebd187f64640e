"""How a model becomes labelled tables in a Zarr group, and the tables it reads back.

Every model kind offers ``_to_store() -> {key: DataArray, "__attrs__": {...}}`` and
``_from_store(tables, attrs)`` (a classmethod); :func:`register` teaches other classes.
The tables are written by :mod:`dpgm.data.table_store`; :func:`dpgm.load`
(:mod:`dpgm.models.store`) picks the kind named in the group's attributes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import xarray as xr

from dpgm.data.table_store import read_tables, write_tables

__all__ = ["KINDS", "MODEL_FORMAT_VERSION", "model_kind", "read_model_tables", "register", "save"]

MODEL_FORMAT_VERSION = 1
# classes taught by register(): name -> (class, tables(model), build(tables, attrs))
CODECS: dict[str, tuple[type, Callable[[Any], dict], Callable[[dict, dict], Any]]] = {}


# dpgm's own model kinds: class name -> class, each registered by its own module (@model_kind)
KINDS: dict[str, type] = {}


def model_kind(cls: type) -> type:
    """Class decorator of a dpgm model kind: :func:`dpgm.load` rebuilds it (``cls._from_store``) and
    :func:`dpgm.models.description.describe` describes it (``model._describe()``); the kind's module is
    its only home in ``dpgm.models``."""
    for method in ("_to_store", "_from_store", "_describe"):
        if not callable(getattr(cls, method, None)):
            raise TypeError(f"model kind {cls.__name__} lacks {method}()")
    KINDS[cls.__name__] = cls
    return cls


def register(cls: type, tables: Callable[[Any], dict], build: Callable[[dict, dict], Any]) -> None:
    """Teach :func:`save` / :func:`dpgm.load` a model class without ``_to_store`` / ``_from_store``.

    ``tables(model) -> {key: DataArray}`` lists its tables (keys are JSON-able
    strings) and extra attributes under the key ``"__attrs__"``;
    ``build(tables, attrs) -> model`` rebuilds it.
    """
    CODECS[cls.__name__] = (cls, tables, build)


def save(model: Any, path: str | os.PathLike[str], *, mode: str = "w-", storage_options: dict | None = None,
         fit: dict | None = None) -> None:
    """Write a model to a Zarr group (``mode="w"`` overwrites); ``fit``: a JSON-able record of the fit that
    produced it (``dpgm fit --out`` keeps one; ``dpgm info`` shows it), in the group attribute ``dpgm_fit``."""
    name = type(model).__name__
    if name in CODECS:
        tables = dict(CODECS[name][1](model))
    elif callable(getattr(model, "_to_store", None)):
        tables = dict(model._to_store())
    else:
        raise TypeError(f"cannot save a {name}: it has no _to_store() and is not registered "
                        "(dpgm.models.saving.register)")
    extra = tables.pop("__attrs__", {})
    attrs = {"dpgm_model": name, "dpgm_model_version": MODEL_FORMAT_VERSION, "extra": extra}
    if fit is not None:
        attrs["dpgm_fit"] = fit
    write_tables(path, tables, attrs, mode=mode, storage_options=storage_options)


def read_model_tables(path: str | os.PathLike[str], kinds: Callable[[], dict[str, Callable[[dict, dict], Any]]], *,
                      storage_options: dict | None = None) -> Any:
    """The model saved at ``path``, rebuilt by ``kinds()[name](tables, attrs)`` for its kind ``name``."""
    builders: dict[str, Callable[[dict, dict], Any]] = {}

    def check_kind(attrs: dict) -> None:
        builders.update(kinds())
        if attrs.get("dpgm_model") not in builders:
            raise ValueError(f"{os.fspath(path)!r} does not hold a dpgm model (found model kind "
                             f"{attrs.get('dpgm_model')!r}); known: {sorted(builders)}")

    attrs, tables = read_tables(path, what="model store", storage_options=storage_options, check=check_kind)
    return builders[attrs["dpgm_model"]](tables, attrs.get("extra", {}))


ZEROS_KEY = "__structural_zeros__"


def zeros_table(mask: xr.DataArray | None) -> dict[str, xr.DataArray]:
    """An undirected model's structural zeros as a 0/1 table (stored like every other table)."""
    return {} if mask is None else {ZEROS_KEY: mask.astype("float64")}


def pop_zeros(tables: dict) -> xr.DataArray | None:
    """The structural zeros stored by :func:`zeros_table`, removed from ``tables``."""
    mask = tables.pop(ZEROS_KEY, None)
    return None if mask is None else mask.astype(bool)

"""Exact snapshots of a fit's state: a JSON structure plus NumPy arrays, bit for bit, no pickle.

:func:`encode` turns a tree of Python and NumPy values into a JSON-able structure
and a list of arrays (saved with ``np.savez``, read back with ``allow_pickle=False``);
:func:`decode` rebuilds the same tree. Floats are kept as their hexadecimal form
(``float.hex``: exact, infinities and NaN included), NumPy scalars and arrays with
their dtype, so a resumed fit continues from exactly the numbers it stopped at.
Shared references (the same array or dict reached twice) are kept shared.

What a tree may hold: ``None``, ``bool``, ``int``, ``float``, ``str``,
:class:`fractions.Fraction`, NumPy arrays (not of ``object`` dtype) and scalars,
``tuple``, ``list``, ``dict`` (any of these as keys), dataclasses defined in
``dpgm`` and dpgm models (their labelled tables, through ``_to_store`` /
``_from_store``).
"""

from __future__ import annotations

import dataclasses
import importlib
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["SnapshotError", "decode", "encode", "shapes"]


class SnapshotError(ValueError):
    """A structure :func:`decode` cannot read (not one :func:`encode` wrote)."""


def encode(value: Any) -> tuple[Any, list[np.ndarray]]:
    """``(structure, arrays)``: a JSON-able description of ``value`` and the arrays it refers to by index."""
    arrays: list[np.ndarray] = []
    memo: dict[int, int] = {}
    keep: list[Any] = []  # values whose id() is in memo stay alive until the end

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, bool | str):
            return item
        if isinstance(item, int) and not isinstance(item, np.generic):
            return item
        if isinstance(item, float) and not isinstance(item, np.generic):
            return {"float": item.hex()}
        if id(item) in memo:
            return {"ref": memo[id(item)]}
        node_id = len(memo)
        memo[id(item)] = node_id
        keep.append(item)
        if isinstance(item, np.ndarray | np.generic):
            array = np.asarray(item)
            if array.dtype.hasobject:
                raise TypeError(f"cannot snapshot an array of dtype {array.dtype}")
            arrays.append(array)
            node = {"array": len(arrays) - 1}
            if isinstance(item, np.generic):
                node["scalar"] = True
        elif isinstance(item, Fraction):
            node = {"fraction": [item.numerator, item.denominator]}
        elif isinstance(item, tuple):
            node = {"tuple": [walk(v) for v in item]}
        elif isinstance(item, list):
            node = {"list": [walk(v) for v in item]}
        elif isinstance(item, dict):
            node = {"dict": [[walk(k), walk(v)] for k, v in item.items()]}
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            cls = type(item)
            node = {"dataclass": f"{cls.__module__}:{cls.__qualname__}",
                    "fields": {f.name: walk(getattr(item, f.name)) for f in dataclasses.fields(item)}}
        elif callable(getattr(item, "_to_store", None)):
            tables = dict(item._to_store())
            attrs = tables.pop("__attrs__", {})
            node = {"model": type(item).__name__, "attrs": walk(attrs),
                    "tables": {str(k): _walk_table(t, walk) for k, t in tables.items()}}
        else:
            raise TypeError(f"cannot snapshot a {type(item).__name__}")
        node["id"] = node_id
        return node

    return walk(value), arrays


def _walk_table(table: Any, walk) -> dict:
    """A labelled table (DataArray): its values, dims and each dimension's labels."""
    return {"values": walk(np.asarray(table.values)), "dims": [str(d) for d in table.dims],
            "coords": {str(d): _walk_labels(np.asarray(table.coords[d].values), walk)
                       for d in table.dims if d in table.coords},
            "name": table.name if isinstance(table.name, str) else None}


def _walk_labels(labels: np.ndarray, walk) -> Any:
    """A dimension's labels: an array, or (object dtype: Python strings and integers) the list itself."""
    if not labels.dtype.hasobject:
        return walk(labels)
    if not all(isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in labels.tolist()):
        raise TypeError("cannot snapshot labels other than strings and integers")
    return {"labels": labels.tolist()}


def decode(structure: Any, arrays: list[np.ndarray] | dict[str, np.ndarray]) -> Any:
    """The tree :func:`encode` described (``arrays``: a list, or ``np.load``'s ``a0``, ``a1``, ... mapping).

    Raises
    ------
    SnapshotError
        The structure is not one :func:`encode` writes (an unknown node, a missing
        array, a class outside dpgm).
    """
    seen: dict[int, Any] = {}

    def array(index: Any) -> np.ndarray:
        try:
            return arrays[index] if isinstance(arrays, list) else arrays[f"a{int(index)}"]
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise SnapshotError(f"array {index!r} is missing") from error

    def walk(node: Any) -> Any:
        if node is None or isinstance(node, bool | str | int):
            return node
        if not isinstance(node, dict):
            raise SnapshotError(f"unexpected node {type(node).__name__}")
        if "float" in node:
            return float.fromhex(node["float"])
        if "ref" in node:
            if node["ref"] not in seen:
                raise SnapshotError(f"reference {node['ref']!r} to nothing")
            return seen[node["ref"]]
        if "array" in node:
            value = array(node["array"])
            value = value[()] if node.get("scalar") else value
        elif "fraction" in node:
            value = Fraction(*node["fraction"])
        elif "tuple" in node:
            value = tuple(walk(v) for v in node["tuple"])
        elif "list" in node:
            value = [walk(v) for v in node["list"]]
        elif "dict" in node:
            value = {_hashable(walk(k)): walk(v) for k, v in node["dict"]}
        elif "dataclass" in node:
            value = _dataclass(node["dataclass"])(**{k: walk(v) for k, v in node["fields"].items()})
        elif "model" in node:
            value = _model(node, walk)
        else:
            raise SnapshotError(f"unknown node with keys {sorted(node)}")
        seen[node.get("id", -1 - len(seen))] = value
        return value

    try:
        return walk(structure)
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        raise SnapshotError(f"{type(error).__name__}: {error}") from error


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict | np.ndarray):
        raise SnapshotError(f"a dict key of type {type(key).__name__}")
    return key


def _dataclass(name: str) -> type:
    module, _, qualname = str(name).partition(":")
    if not module.startswith("dpgm.") or not qualname.isidentifier():
        raise SnapshotError(f"{name!r} is not a dpgm dataclass")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise SnapshotError(f"{name!r} is not a dpgm dataclass")
    return cls


def _model(node: dict, walk) -> Any:
    import xarray as xr

    from dpgm.models.store import _kinds

    builders = _kinds()
    if node["model"] not in builders:
        raise SnapshotError(f"unknown model kind {node['model']!r}")
    tables = {}
    for key, table in node["tables"].items():
        coords = {d: np.array(c["labels"], dtype=object) if isinstance(c, dict) and "labels" in c else walk(c)
                  for d, c in table["coords"].items()}
        tables[key] = xr.DataArray(walk(table["values"]), dims=table["dims"], coords=coords, name=table["name"])
    return builders[node["model"]](tables, walk(node["attrs"]))


def shapes(value: Any) -> Any:
    """The tree of ``value`` with every array replaced by ``(shape, dtype kind)`` (to compare two trees)."""
    structure, arrays = encode(value)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "array" in node:
                return ("array", arrays[node["array"]].shape, arrays[node["array"]].dtype.kind)
            if "float" in node:
                return "float"
            return {k: walk(v) for k, v in node.items() if k not in ("id", "ref", "name")}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return type(node).__name__
    return walk(structure)

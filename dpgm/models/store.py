"""Models in Zarr groups: every table as a labelled array, round-tripping exactly.

A model is written as one ``xarray.Dataset``: dimensions are variable names and
each table is a data variable (``table.<i>``) whose dimensions are its scope. The
group's attributes name the model class, list the tables and hold every
variable's state labels (JSON, not a string array: Zarr v3 has no stable string
dtype yet); float64 values are stored losslessly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

__all__ = ["load", "register", "save"]

MODEL_FORMAT_VERSION = 1
_CODECS: dict[str, tuple[type, Callable[[Any], dict], Callable[[dict, dict], Any]]] = {}


def register(cls: type, tables: Callable[[Any], dict], build: Callable[[dict, dict], Any]) -> None:
    """Teach :func:`save` / :func:`load` a model class.

    ``tables(model) -> {key: DataArray}`` lists its tables (keys are JSON-able
    strings) and extra attributes under the key ``"__attrs__"``;
    ``build(tables, attrs) -> model`` rebuilds it.
    """
    _CODECS[cls.__name__] = (cls, tables, build)


def save(model: Any, path: str | os.PathLike[str], *, mode: str = "w-", storage_options: dict | None = None) -> None:
    """Write a model to a Zarr group (``mode="w"`` overwrites)."""
    _register_builtin()
    name = type(model).__name__
    if name not in _CODECS:
        raise TypeError(f"cannot save a {name}; known models: {sorted(_CODECS)}")
    tables = dict(_CODECS[name][1](model))
    extra = tables.pop("__attrs__", {})
    keys = list(tables)
    states = {str(d): [str(s) for s in t.coords[d].values] for t in tables.values() for d in t.dims}
    ds = xr.Dataset(
        {f"table.{i}": (tables[k].dims, tables[k].values.astype("float64")) for i, k in enumerate(keys)}
    )
    from zarr.codecs import ZstdCodec

    from dpgm.data.integrity import COMPLETE, checksum_codec, mark_complete

    ds.attrs = {
        "dpgm_model": name,
        "dpgm_model_version": MODEL_FORMAT_VERSION,
        "tables": keys,
        "states": states,
        "extra": extra,
        COMPLETE: False,  # set true after the last table: an unfinished save is refused by load
    }
    for array in ds.variables.values():
        array.encoding = {}
    encoding = {name: {"compressors": [ZstdCodec(), checksum_codec()]} for name in ds.data_vars}
    ds.to_zarr(os.fspath(path), mode=mode, zarr_format=3, consolidated=False, storage_options=storage_options,
               encoding=encoding)
    mark_complete(path, storage_options)


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
    from dpgm.data.integrity import check_complete
    from dpgm.errors import DataError

    _register_builtin()
    path = os.fspath(path)
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path!r}")
    try:
        ds = xr.open_zarr(path, consolidated=False, storage_options=storage_options)
    except FileNotFoundError:
        raise
    except Exception as error:  # unreadable metadata
        raise DataError(f"cannot open the model store {path!r}: {' '.join(str(error).split())}") from None
    check_complete(ds.attrs, path, "model store")
    name = ds.attrs.get("dpgm_model")
    if name not in _CODECS:
        raise ValueError(f"{path!r} does not hold a dpgm model (found model kind {name!r})")
    tables = {}
    for i, key in enumerate(ds.attrs["tables"]):
        if f"table.{i}" not in ds.data_vars:
            raise DataError(f"the model store {path!r} has no array 'table.{i}' for its table {key!r}")
        try:
            array = ds[f"table.{i}"].load()
        except ValueError as error:  # Zarr's crc32c codec: stored and computed checksums differ
            raise DataError(f"cannot read table {key!r} ('table.{i}') of the model store {path!r}: "
                            f"checksum mismatch or undecodable chunk ({' '.join(str(error).split())})") from None
        tables[key] = xr.DataArray(
            array.values,
            dims=array.dims,
            coords={d: ds.attrs["states"][d] for d in array.dims},
        )
    return _CODECS[name][2](tables, ds.attrs.get("extra", {}))


def _register_builtin() -> None:
    if "BayesianNetwork" in _CODECS:
        return
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.models.hmm import HiddenMarkovModel
    from dpgm.models.log_linear import LogLinearModel

    register(
        BayesianNetwork,
        lambda m: dict(m.cpds),
        lambda tables, attrs: BayesianNetwork(tables),
    )
    register(
        HiddenMarkovModel,
        lambda m: {"start": m.start, "transition": m.transition, "emission": m.emission},
        lambda tables, attrs: HiddenMarkovModel(tables["start"], tables["transition"], tables["emission"]),
    )

    def log_linear_tables(model: LogLinearModel) -> dict:
        weights = {name: (None if not np.isfinite(w) else w) for name, w in model.weights.items()}
        return dict(model.features) | _zeros_table(model) | {"__attrs__": {"weights": weights,
                                                                           "margins": model.margins}}

    def log_linear_build(tables: dict, attrs: dict) -> LogLinearModel:
        weights = {n: (-np.inf if w is None else w) for n, w in attrs["weights"].items()}
        zeros = _pop_zeros(tables)
        model = LogLinearModel(tables, weights, zeros)
        model.margins = [tuple(m) for m in attrs["margins"]] if attrs.get("margins") else None
        return model

    register(LogLinearModel, log_linear_tables, log_linear_build)

    from dpgm.models.gaussian import GaussianGraphicalModel

    register(GaussianGraphicalModel, lambda m: m._to_store(), GaussianGraphicalModel._from_store)

    from dpgm.models.mixture import GaussianMixture

    register(GaussianMixture, lambda m: m._to_store(), GaussianMixture._from_store)

    from dpgm.models.linear_gaussian import LinearGaussianNetwork

    register(LinearGaussianNetwork, lambda m: m._to_store(), LinearGaussianNetwork._from_store)

    from dpgm.models.glm import GLMConditional

    register(GLMConditional, lambda m: m._to_store(), GLMConditional._from_store)
    from dpgm.models.hybrid import HybridNetwork

    register(HybridNetwork, lambda m: m._to_store(), HybridNetwork._from_store)

    from dpgm.models.markov import MarkovNetwork

    def markov_build(tables: dict, attrs: dict) -> MarkovNetwork:
        zeros = _pop_zeros(tables)
        return MarkovNetwork({tuple(k.split(",")): t for k, t in tables.items()}, zeros)

    register(
        MarkovNetwork,
        lambda m: {",".join(s): t for s, t in m.potentials.items()} | _zeros_table(m),
        markov_build,
    )


_ZEROS_KEY = "__structural_zeros__"


def _zeros_table(model: Any) -> dict:
    """An undirected model's structural zeros as a 0/1 table (stored like every other table)."""
    mask = model.structural_zeros
    return {} if mask is None else {_ZEROS_KEY: mask.astype("float64")}


def _pop_zeros(tables: dict) -> xr.DataArray | None:
    mask = tables.pop(_ZEROS_KEY, None)
    return None if mask is None else mask.astype(bool)

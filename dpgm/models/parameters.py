"""A fitted model's parameters as labelled arrays: what the bootstrap resamples and standard errors label.

:func:`parameter_tables` reads the tables a model is saved as (``_to_store``) and keeps
what the fit estimated: a Bayesian network's CPTs, a Markov network's potentials, an
HMM's start, transition and emission tables, a Gaussian model's mean and covariance, a
mixture's weights, means and covariances, a GLM's coefficients and scale, a linear
Gaussian or hybrid network's coefficients, intercepts and variances, a log-linear
model's weights (over ``feature``). What describes the structure or the fit (a
log-linear model's feature tables, structural zeros, a penalty, a deviance, standard
errors) is left out.

Examples
--------
>>> import dpgm
>>> from dpgm.models.parameters import parameter_tables
>>> data = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 500, seed=0)
>>> fitted = dpgm.fit(dpgm.BayesianNetwork.from_edges([("smoke", "lung")]), data[["smoke", "lung"]]).model
>>> sorted(parameter_tables(fitted)), parameter_tables(fitted)["table:lung"].dims
(['table:lung', 'table:smoke'], ('lung', 'smoke'))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.saving import ZEROS_KEY

__all__ = ["parameter_tables", "with_parameters"]

# saved attributes that are not estimates: settings of the model and statistics of the fit
_NOT_ESTIMATES = frozenset({"l2", "deviance", "deviances", "n_components", "edges", "nodes", "variables"})


def parameter_tables(model: Any) -> dict[str, xr.DataArray]:
    """Every estimated parameter of a fitted ``model``: name -> labelled array (a scalar: 0-d).

    Names are the keys of the model's saved tables (``table:<key>`` where the key is also a
    dimension's name, as a CPT's, named for its variable), and ``a.b.c`` for a number saved among
    its attributes at ``a -> b -> c`` (a list of numbers is one array over ``<name>_index``).
    """
    if type(model).__name__ == "LogLinearModel":
        names = list(model.weights)
        return {"weights": xr.DataArray(np.array([model.weights[n] for n in names], dtype=float),
                                        dims=("feature",), coords={"feature": names})}
    tables = dict(model._to_store())
    attrs = tables.pop("__attrs__", {})
    found = {key: table for key, table in tables.items()
             if key != ZEROS_KEY and not key.startswith("standard_errors")}

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, str(key)))
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            return
        elif isinstance(value, int | float):
            found[".".join(path)] = xr.DataArray(float(value))
        elif isinstance(value, list) and value and all(isinstance(v, int | float) and not isinstance(v, bool)
                                                        for v in value):
            name = ".".join(path)
            found[name] = xr.DataArray(np.asarray(value, dtype=float), dims=(f"{name}_index",))

    for key, value in attrs.items():
        if key not in _NOT_ESTIMATES:
            walk(value, (key,))
    # a table named as a dimension (a CPT named for its variable) would be that dimension's coordinate
    dims = {d for table in found.values() for d in table.dims}
    return {(f"table:{key}" if key in dims else key): table.rename(None) for key, table in found.items()}


def with_parameters(model: Any, values: Mapping[str, np.ndarray]) -> Any:
    """A copy of ``model`` with some of its parameters replaced: ``{name: values}``, named and shaped as
    :func:`parameter_tables` gives them (the inverse of reading them).

    Examples
    --------
    >>> import numpy as np, dpgm
    >>> from dpgm.models.parameters import parameter_tables, with_parameters
    >>> model = dpgm.load_network("asia")
    >>> table = parameter_tables(model)["table:smoke"]
    >>> changed = with_parameters(model, {"table:smoke": np.array([0.25, 0.75])})
    >>> parameter_tables(changed)["table:smoke"].values.tolist(), table.values.tolist()
    ([0.25, 0.75], [0.5, 0.5])
    """
    tables = dict(model._to_store())
    attrs = copy.deepcopy(tables.pop("__attrs__", {}))
    if type(model).__name__ == "LogLinearModel" and "weights" in values:
        attrs["weights"] = {name: (None if not np.isfinite(w) else float(w))
                            for name, w in zip(attrs["weights"], np.asarray(values["weights"], dtype=float),
                                               strict=True)}
        values = {k: v for k, v in values.items() if k != "weights"}
    for name, value in values.items():
        key = name[len("table:"):] if name.startswith("table:") and name[len("table:"):] in tables else name
        if key in tables:
            table = tables[key]
            tables[key] = table.copy(data=np.asarray(value, dtype=float).reshape(table.shape))
            continue
        *path, last = name.split(".")
        node = attrs
        for part in path:
            node = node[part]
        value = np.asarray(value, dtype=float)
        node[last] = value.tolist() if isinstance(node[last], list) else float(value)
    return type(model)._from_store(tables, attrs)

"""Models of peer libraries as dpgm models: :func:`from_pgmpy`.

The way there is ``BayesianNetwork.to_pgmpy()`` / ``to_pyagrum()``
(:mod:`dpgm.models.interop`). pgmpy is not a dependency of dpgm: it is needed only
to build the model passed in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.interop import require
from dpgm.models.markov import MarkovNetwork
from dpgm.potentials import state_index

__all__ = ["from_pgmpy"]


def from_pgmpy(model: Any) -> BayesianNetwork | MarkovNetwork:
    """A pgmpy discrete model as a dpgm model, tables copied exactly.

    Parameters
    ----------
    model
        A ``pgmpy.models.DiscreteBayesianNetwork`` with a ``TabularCPD`` for every
        node (becomes a :class:`~dpgm.BayesianNetwork`: each table shaped
        ``(variable, *evidence)``), or a ``pgmpy.models.DiscreteMarkovNetwork``
        whose every node is in some factor (becomes a :class:`~dpgm.MarkovNetwork`
        with one potential per scope: factors on the same variables are multiplied).
        State names are kept as strings (pgmpy's default integer names become
        ``"0"``, ``"1"``, ...).

    Returns
    -------
    BayesianNetwork or MarkovNetwork

    Raises
    ------
    ImportError
        pgmpy is not installed.
    TypeError
        Another kind of model (e.g. a linear-Gaussian network).
    ValueError
        A node without a table (Bayesian network) or in no factor (Markov network),
        or tables pgmpy's own ``check_model`` refuses.

    Examples
    --------
    >>> import dpgm
    >>> asia = dpgm.load_network("asia")
    >>> back = dpgm.from_pgmpy(asia.to_pgmpy())
    >>> bool(back.cpds["dysp"].equals(asia.cpds["dysp"]))
    True
    """
    models = require("pgmpy.models", "pgmpy", "dpgm.from_pgmpy")
    if isinstance(model, models.DiscreteBayesianNetwork):
        return _bayesian_network(model)
    if isinstance(model, models.DiscreteMarkovNetwork):
        return _markov_network(model)
    raise TypeError(f"dpgm.from_pgmpy takes a pgmpy DiscreteBayesianNetwork or DiscreteMarkovNetwork, "
                    f"got {type(model).__module__}.{type(model).__name__}")


def _labels(state_names: dict, variable: str, cardinality: int) -> tuple[str, ...]:
    names = state_names.get(variable) if state_names else None
    labels = tuple(map(str, names)) if names is not None else tuple(map(str, range(cardinality)))
    if len(labels) != cardinality:
        raise ValueError(f"variable {variable!r} has {cardinality} states but {len(labels)} state names")
    return labels


def _labelled(values: np.ndarray, variables: list[str], labels: dict[str, tuple[str, ...]]) -> xr.DataArray:
    return xr.DataArray(np.asarray(values, dtype=float), dims=variables,
                        coords={v: state_index(v, labels[v]) for v in variables})


def _bayesian_network(model: Any) -> BayesianNetwork:
    missing = [str(v) for v in model.nodes() if model.get_cpds(v) is None]
    if missing:
        raise ValueError(f"the pgmpy network has no TabularCPD for {missing}")
    model.check_model()
    cpds = {}
    for cpd in model.get_cpds():
        variables = [str(v) for v in cpd.variables]
        cards = [int(k) for k in cpd.cardinality]
        labels = {v: _labels(cpd.state_names, v, k) for v, k in zip(cpd.variables, cards, strict=True)}
        labels = {str(v): s for v, s in labels.items()}
        cpds[variables[0]] = _labelled(np.asarray(cpd.values, dtype=float).reshape(cards), variables, labels)
    order = [str(v) for v in model.nodes()]
    return BayesianNetwork({v: cpds[v] for v in order})


def _markov_network(model: Any) -> MarkovNetwork:
    factors = model.get_factors()
    covered = {str(v) for f in factors for v in f.scope()}
    alone = [str(v) for v in model.nodes() if str(v) not in covered]
    if alone:
        raise ValueError(f"the pgmpy Markov network has no factor on {alone}: their states are unknown")
    model.check_model()
    potentials: dict[tuple[str, ...], xr.DataArray] = {}
    for factor in factors:
        variables = [str(v) for v in factor.variables]
        cards = [int(k) for k in factor.cardinality]
        labels = {str(v): _labels(factor.state_names, v, k) for v, k in zip(factor.variables, cards, strict=True)}
        table = _labelled(np.asarray(factor.values, dtype=float).reshape(cards), variables, labels)
        scope = next((s for s in potentials if set(s) == set(variables)), tuple(variables))
        if scope in potentials:
            table = potentials[scope] * table.transpose(*scope)
        potentials[scope] = table.transpose(*scope)
    return MarkovNetwork(potentials)

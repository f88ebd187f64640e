"""A Bayesian network as pgmpy's and pyAgrum's models (``BayesianNetwork.to_pgmpy`` / ``to_pyagrum``).

Neither library is a dependency of dpgm: each is imported when a conversion runs,
and its absence is an ``ImportError`` saying what to install. The tables are
copied as doubles, so inference on the converted model agrees with dpgm's to
rounding. The way back from pgmpy is :func:`dpgm.from_pgmpy` (:mod:`dpgm.io.peers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dpgm.models.bayesian_network import BayesianNetwork

__all__ = ["bayesian_network_to_pgmpy", "bayesian_network_to_pyagrum", "require"]


def require(module: str, package: str, what: str) -> Any:
    """Import ``module``, or raise an ``ImportError`` naming what needs it and how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"{what} needs {package}, which is not installed: pip install {package}") from error


def _tables(network: BayesianNetwork) -> None:
    if not network.is_parameterized:
        raise ValueError("the network has no tables (a structure without states): fit it first, or give it states")


def bayesian_network_to_pgmpy(network: BayesianNetwork) -> Any:
    """``pgmpy.models.DiscreteBayesianNetwork`` with one ``TabularCPD`` per variable, state names kept.

    A table shaped ``(variable, *parents)`` becomes pgmpy's ``(k, prod of the parents' k)`` matrix
    with the parents as evidence in the same order (the first parent varying slowest, as in pgmpy).
    """
    _tables(network)
    models = require("pgmpy.models", "pgmpy", "BayesianNetwork.to_pgmpy")
    discrete = require("pgmpy.factors.discrete", "pgmpy", "BayesianNetwork.to_pgmpy")
    converted = models.DiscreteBayesianNetwork(network.edges)
    converted.add_nodes_from(network.variables)
    cpds = []
    for v in network.variables:
        parents = list(network.parents(v))
        table = np.asarray(network.cpds[v].transpose(v, *parents).values, dtype=float)
        cpds.append(discrete.TabularCPD(
            v, network.cardinality(v), table.reshape(network.cardinality(v), -1),
            evidence=parents or None, evidence_card=[network.cardinality(p) for p in parents] or None,
            state_names={d: list(network.states[d]) for d in (v, *parents)}))
    converted.add_cpds(*cpds)
    converted.check_model()
    return converted


def bayesian_network_to_pyagrum(network: BayesianNetwork) -> Any:
    """``pyagrum.BayesNet`` with a ``LabelizedVariable`` per variable (its state labels) and the same tables.

    Each table is filled through pyAgrum's API in the order of its tensor's variables (the first one
    varying fastest), so the doubles are copied exactly; pyAgrum's BIF reader would parse them in
    single precision.
    """
    _tables(network)
    gum = require("pyagrum", "pyagrum", "BayesianNetwork.to_pyagrum")
    converted = gum.BayesNet()
    for v in network.variables:
        converted.add(gum.LabelizedVariable(v, v, list(network.states[v])))
    for parent, child in network.edges:
        converted.addArc(parent, child)
    for v in network.variables:
        tensor = converted.cpt(v)
        order = list(reversed(tensor.names))  # pyAgrum's first variable varies fastest
        tensor.fillWith(np.asarray(network.cpds[v].transpose(*order).values, dtype=float).ravel().tolist())
    return converted

"""What a model is, as plain JSON-able values: :func:`describe` (what ``dpgm info MODEL`` prints).

Every kind :func:`dpgm.load` reads is described by its kind, its variables (states,
or continuous), its structure (edges, cliques, scopes, components, terms) and its
number of free parameters (what a fit reports as ``n_params``).
"""

from __future__ import annotations

from typing import Any

from dpgm.models.bayesian_network import BayesianNetwork
from dpgm.models.gaussian import GaussianGraphicalModel
from dpgm.models.glm import GLMConditional
from dpgm.models.hmm import HiddenMarkovModel
from dpgm.models.hybrid import HybridNetwork
from dpgm.models.linear_gaussian import LinearGaussianNetwork
from dpgm.models.log_linear import LogLinearModel
from dpgm.models.markov import MarkovNetwork
from dpgm.models.mixture import GaussianMixture

__all__ = ["describe"]

CONTINUOUS = "continuous"
CATEGORICAL = "categorical"  # a GLM parent whose states the model does not store


def describe(model: Any) -> dict[str, Any]:
    """The model's kind, variables, structure and free parameters.

    Returns
    -------
    dict
        ``kind`` (class name), ``fitted``, ``n_params`` (``None`` before a fit where
        it depends on the data's states), ``variables`` (name -> list of state labels,
        ``"continuous"``, ``"categorical"`` for a GLM's categorical parent, whose reference state the
        model does not store, or ``None`` before a fit where the data will say), ``structure``
        (kind-specific: ``edges``, ``cliques``, ``scopes``, ``n_components``, ``terms``, ...).

    Raises
    ------
    TypeError
        Not a dpgm model.
    """
    for kind, describer in _DESCRIBERS:
        if isinstance(model, kind):
            variables, structure, fitted = describer(model)
            return {"kind": type(model).__name__, "fitted": fitted, "n_params": _n_params(model),
                    "variables": variables, "structure": structure}
    raise TypeError(f"cannot describe a {type(model).__name__}: not a dpgm model")


def _n_params(model: Any) -> int | None:
    try:
        return int(model.n_free_parameters())
    except ValueError:  # a structure whose parameters (or states) come from the data
        return None


def _states(states: dict[str, tuple[str, ...]], variables: tuple[str, ...]) -> dict[str, Any]:
    return {v: list(states[v]) if v in states else None for v in variables}


def _edges(edges: list[tuple[str, str]]) -> list[list[str]]:
    return [[a, b] for a, b in edges]


def _zeros(model: MarkovNetwork | LogLinearModel) -> dict[str, Any]:
    zeros = model.structural_zeros
    return {} if zeros is None else {"structural_zeros": {"scope": [str(d) for d in zeros.dims],
                                                          "cells": int(zeros.sum())}}


def _bayesian(model: BayesianNetwork):
    return _states(model.states, model.variables), {"edges": _edges(model.edges)}, model.is_parameterized


def _markov(model: MarkovNetwork):
    return (_states(model.states, model.variables), {"cliques": [list(s) for s in model.scopes]} | _zeros(model),
            True)


def _log_linear(model: LogLinearModel):
    structure = {"scopes": [list(s) for s in model.scopes], "n_features": len(model.features),
                 "margins": None if model.margins is None else [list(m) for m in model.margins]}
    return _states(model.states, model.variables), structure | _zeros(model), True


def _hmm(model: HiddenMarkovModel):
    structure = {"hidden": model.hidden, "observed": model.variable, "n_states": model.n_states,
                 "edges": _edges([(f"{model.hidden}_t", f"{model.hidden}_t+1"),
                                  (f"{model.hidden}_t", f"{model.variable}_t")])}
    return _states(model.states, (model.hidden, model.variable)), structure, True


def _gaussian(model: GaussianGraphicalModel):
    return dict.fromkeys(model.variables, CONTINUOUS), {"edges": _edges(model.edges)}, model.is_fitted


def _linear_gaussian(model: LinearGaussianNetwork):
    return dict.fromkeys(model.variables, CONTINUOUS), {"edges": _edges(model.edges)}, model.is_fitted


def _mixture(model: GaussianMixture):
    structure = {"n_components": model.n_components, "covariance_type": model.covariance_type}
    return dict.fromkeys(model.variables, CONTINUOUS), structure, model.is_fitted


def _glm_variables(model: GLMConditional) -> dict[str, Any]:
    """Child and parents: the child's states where it is categorical, else continuous; a parent is
    continuous when it is a term itself, ``"categorical"`` when it has indicator terms (``parent[state]``:
    its reference state is not stored); unknown (``None``) before a fit."""
    if not model.is_fitted:
        return dict.fromkeys(model.variables)
    terms = model.terms
    variables: dict[str, Any] = {
        model.child: list(model.child_states) if model.child_states is not None else CONTINUOUS}
    for p in model.parents:
        variables[p] = CONTINUOUS if p in terms else CATEGORICAL if any(t.startswith(f"{p}[") for t in terms) \
            else None
    return variables


def _glm(model: GLMConditional):
    structure = {"child": model.child, "parents": list(model.parents), "family": model.family, "link": model.link,
                 "terms": list(model.terms) if model.is_fitted else None,
                 "edges": _edges([(p, model.child) for p in model.parents])}
    return _glm_variables(model), structure, model.is_fitted


def _hybrid(model: HybridNetwork):
    variables: dict[str, Any] = {}
    for v in model.variables:
        if v in model.tables:
            variables[v] = [str(s) for s in model.tables[v].coords[v].values]
        elif v in model.states:
            variables[v] = list(model.states[v])
        elif v in model.conditionals:
            variables[v] = _glm_variables(model.conditionals[v])[v]
        else:
            variables[v] = None
    structure = {"edges": _edges(model.edges), "nodes": {v: model.kind(v) for v in model.variables},
                 "latent": sorted(model.states)}
    return variables, structure, model.is_fitted


_DESCRIBERS = [(BayesianNetwork, _bayesian), (MarkovNetwork, _markov), (LogLinearModel, _log_linear),
               (HiddenMarkovModel, _hmm), (GaussianGraphicalModel, _gaussian),
               (LinearGaussianNetwork, _linear_gaussian), (GaussianMixture, _mixture), (GLMConditional, _glm),
               (HybridNetwork, _hybrid)]

"""What a model is, as plain JSON-able values: :func:`describe` (what ``dpgm info MODEL`` prints).

Every kind :func:`dpgm.load` reads is described by its kind, its variables (states,
or continuous), its structure (edges, cliques, scopes, components, terms) and its
number of free parameters (what a fit reports as ``n_params``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CATEGORICAL", "CONTINUOUS", "describe", "edge_lists", "state_lists", "zeros_record"]

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
    from dpgm.models.saving import KINDS

    if not any(isinstance(model, kind) for kind in KINDS.values()):
        raise TypeError(f"cannot describe a {type(model).__name__}: not a dpgm model")
    variables, structure, fitted = model._describe()
    return {"kind": type(model).__name__, "fitted": fitted, "n_params": _n_params(model),
            "variables": variables, "structure": structure}


def _n_params(model: Any) -> int | None:
    try:
        return int(model.n_free_parameters())
    except ValueError:  # a structure whose parameters (or states) come from the data
        return None


def state_lists(states: dict[str, tuple[str, ...]], variables: tuple[str, ...]) -> dict[str, Any]:
    """Each variable's states as a list, ``None`` where the model does not know them yet."""
    return {v: list(states[v]) if v in states else None for v in variables}


def edge_lists(edges: list[tuple[str, str]]) -> list[list[str]]:
    """Edges as JSON lists."""
    return [[a, b] for a, b in edges]


def zeros_record(zeros: Any) -> dict[str, Any]:
    """A structural-zero mask's scope and number of zero cells (nothing when there is none)."""
    return {} if zeros is None else {"structural_zeros": {"scope": [str(d) for d in zeros.dims],
                                                          "cells": int(zeros.sum())}}

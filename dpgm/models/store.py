"""Models in Zarr groups: :func:`load` reads back any model kind :func:`save` wrote, exactly.

A model is written as its labelled tables (:mod:`dpgm.models.saving`, through
:mod:`dpgm.data.table_store`); the group's attributes name its kind, which picks
the class that rebuilds it here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dpgm.models.saving import CODECS, read_model_tables, register, save

__all__ = ["load", "register", "save"]


def _kinds() -> dict[str, Callable[[dict, dict], Any]]:
    """Model kind name -> ``build(tables, attrs)``: every dpgm model, then the registered classes."""
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.models.gaussian import GaussianGraphicalModel
    from dpgm.models.glm import GLMConditional
    from dpgm.models.hmm import HiddenMarkovModel
    from dpgm.models.hybrid import HybridNetwork
    from dpgm.models.linear_gaussian import LinearGaussianNetwork
    from dpgm.models.log_linear import LogLinearModel
    from dpgm.models.markov import MarkovNetwork
    from dpgm.models.mixture import GaussianMixture

    kinds = (BayesianNetwork, MarkovNetwork, LogLinearModel, HiddenMarkovModel, GaussianGraphicalModel,
             LinearGaussianNetwork, GaussianMixture, GLMConditional, HybridNetwork)
    return {cls.__name__: cls._from_store for cls in kinds} | {name: c[2] for name, c in CODECS.items()}


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

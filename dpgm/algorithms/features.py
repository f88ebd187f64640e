"""Nonnegative features grouped by scope: the plain-array form of a log-linear model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpgm.algorithms.tables import JointEngine
from dpgm.potentials import Scope, expand

__all__ = ["FeatureSet", "feature_set"]


class FeatureSet:
    """Features ``f_i(x_S) >= 0`` stacked per scope as matrices ``(k_S, cells_S)``.

    Parameters
    ----------
    tables
        Scope -> array ``(k_S, *shape_S)``: the ``k_S`` features on that scope.
    """

    def __init__(self, tables: Mapping[Scope, np.ndarray]):
        self.scopes: list[Scope] = list(tables)
        self.shapes = {s: tuple(np.shape(t)[1:]) for s, t in tables.items()}
        self.matrices = {s: np.asarray(t, dtype=float).reshape(np.shape(t)[0], -1) for s, t in tables.items()}
        for scope, matrix in self.matrices.items():
            if (matrix < 0).any() or not np.isfinite(matrix).all():
                raise ValueError(f"features on {scope!r} must be finite and nonnegative")
        offsets = np.cumsum([0] + [m.shape[0] for m in self.matrices.values()])
        self.slices = {s: slice(int(a), int(b)) for s, a, b in zip(self.scopes, offsets[:-1], offsets[1:], strict=True)}
        self.n_features = int(offsets[-1])

    @classmethod
    def indicators(cls, shapes: Mapping[Scope, Sequence[int]]) -> FeatureSet:
        """One indicator feature per cell of each scope (a fully parameterized Markov network)."""
        return cls({s: np.eye(math.prod(shape)).reshape(-1, *shape) for s, shape in shapes.items()})

    def log_potentials(self, theta: np.ndarray) -> dict[Scope, np.ndarray]:
        """``sum_i theta_i f_i`` per scope (``-inf`` weights act only where ``f_i > 0``)."""
        out = {}
        for scope in self.scopes:
            matrix = self.matrices[scope]
            weights = theta[self.slices[scope]][:, None]
            with np.errstate(invalid="ignore"):
                terms = np.where(matrix > 0, weights * matrix, 0.0)
            out[scope] = terms.sum(axis=0).reshape(self.shapes[scope])
        return out

    def expectations(self, tables: Mapping[Scope, np.ndarray]) -> np.ndarray:
        """``sum_x table_S(x) f_i(x)`` for every feature (tables: marginals or counts per scope)."""
        return np.concatenate([self.matrices[s] @ np.ravel(tables[s]) for s in self.scopes])

    def max_total(self, engine) -> float:
        """``max_x sum_i f_i(x)`` exactly on an enumerable joint, else ``sum_i max f_i`` (an upper bound)."""
        if isinstance(engine, JointEngine):
            total = np.zeros(engine.shape)
            for scope in self.scopes:
                table = self.matrices[scope].sum(axis=0).reshape(self.shapes[scope])
                total = total + expand(table, scope, engine.variables)
            return float(total.max())
        return float(sum(m.max(axis=1).sum() for m in self.matrices.values()))

    def design(self, variables: Sequence[str], shape: Sequence[int]) -> np.ndarray:
        """Every feature's value at every cell of the joint: ``(features, cells)``."""
        columns = []
        for scope in self.scopes:
            for row in self.matrices[scope]:
                columns.append(np.broadcast_to(expand(row.reshape(self.shapes[scope]), scope, variables),
                                               tuple(shape)).ravel())
        return np.stack(columns)

    def joint_covariance(self, engine: JointEngine, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Model mean and covariance of the features, by enumerating the joint (Newton's Hessian)."""
        joint = engine.joint(self.log_potentials(theta)).ravel()
        values = self.design(engine.variables, engine.shape)
        mean = values @ joint
        centered = values - mean[:, None]
        return mean, (centered * joint) @ centered.T


def feature_set(model: Any) -> tuple[FeatureSet, list[str]]:
    """A log-linear model's features stacked per scope, and the feature names in that order."""
    tables, order = model.stacked_features()
    return FeatureSet(tables), order

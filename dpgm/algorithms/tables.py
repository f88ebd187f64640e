"""Plain-array potentials for the fitting algorithms: scopes, log tables and their marginals.

Fitting algorithms work on NumPy arrays with a known axis order (a scope's
variables in order); xarray labels are attached at the API edge only.

An *engine* gives the normalized marginals of requested scopes and log Z of the
Markov network ``p(x) ∝ exp(sum_S log_potentials[S](x_S))``:

    engine(log_potentials, scopes) -> (marginals: dict[scope, ndarray], log_z: float)

:class:`JointEngine` enumerates the joint table (small models, up to
``MAX_JOINT_CELLS`` cells); a junction-tree engine serves large ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from dpgm.models.zeros import zeros_log_factor
from dpgm.potentials import Scope, expand, reduce_to

__all__ = ["MAX_JOINT_CELLS", "JointEngine", "TreeEngine", "engine_for", "loglik_from_potentials", "zero_offsets"]

MAX_JOINT_CELLS = 1 << 22


class JointEngine:
    """Marginals by enumerating the joint table (log-space, max-shifted).

    Parameters
    ----------
    variables
        Variable order of the joint.
    cardinalities
        States per variable.
    fixed
        Log tables added to every call's potentials and never fitted (structural
        zeros: ``-inf`` on the cells fixed at zero).
    """

    def __init__(self, variables: Sequence[str], cardinalities: Mapping[str, int],
                 fixed: Mapping[Scope, np.ndarray] | None = None):
        self.variables = tuple(variables)
        self.shape = tuple(int(cardinalities[v]) for v in self.variables)
        self.fixed = dict(fixed or {})
        self._fixed_log_joint: np.ndarray | None = None
        cells = math.prod(self.shape)
        if cells > MAX_JOINT_CELLS:
            raise ValueError(f"the joint table has {cells} cells, more than {MAX_JOINT_CELLS}; use a junction tree")

    def log_joint(self, log_potentials: Mapping[Scope, np.ndarray]) -> np.ndarray:
        """The unnormalized log joint (fixed tables included)."""
        total = np.zeros(self.shape)
        for scope, table in [*log_potentials.items(), *self.fixed.items()]:
            total = total + expand(table, scope, self.variables)
        return total

    def fixed_log_joint(self) -> np.ndarray:
        """The fixed tables' log joint, summed once (read-only)."""
        if self._fixed_log_joint is None:
            self._fixed_log_joint = self.log_joint({})
            self._fixed_log_joint.setflags(write=False)
        return self._fixed_log_joint

    def zeros(self) -> np.ndarray | None:
        """Boolean joint of the cells the fixed tables hold at zero (None without fixed tables)."""
        if not self.fixed:
            return None
        return np.isneginf(self.log_joint({}))

    def __call__(
        self, log_potentials: Mapping[Scope, np.ndarray], scopes: Sequence[Scope]
    ) -> tuple[dict[Scope, np.ndarray], float]:
        log_joint = self.log_joint(log_potentials)
        top = float(np.max(log_joint))
        if not np.isfinite(top):
            raise ValueError("every cell of the model has probability zero")
        joint = np.exp(log_joint - top)
        z = float(joint.sum())
        joint /= z
        return {s: reduce_to(joint, self.variables, s) for s in scopes}, top + math.log(z)

    def joint(self, log_potentials: Mapping[Scope, np.ndarray]) -> np.ndarray:
        """The normalized joint table."""
        log_joint = self.log_joint(log_potentials)
        joint = np.exp(log_joint - np.max(log_joint))
        return joint / joint.sum()


def loglik_from_potentials(
    counts: Mapping[Scope, np.ndarray], log_potentials: Mapping[Scope, np.ndarray], log_z: float, n: float
) -> float:
    """``sum_S sum_x n(x_S) log psi_S(x_S) - N log Z`` with 0 * log 0 = 0.

    ``counts`` must hold the counts of every scope of ``log_potentials``.
    """
    total = -n * log_z
    for scope, table in log_potentials.items():
        c = counts[scope]
        positive = c > 0
        total += float((c[positive] * table[positive]).sum())
    return total


class TreeEngine:
    """Marginals and log Z from one junction-tree calibration (models too large to enumerate).

    The triangulation is built once for the scopes it is first called with;
    later calls reuse it with new tables. ``fixed`` log tables (structural zeros)
    join every call as extra factors on cliques that hold their scopes.
    """

    def __init__(self, variables: Sequence[str], cardinalities: Mapping[str, int],
                 fixed: Mapping[Scope, np.ndarray] | None = None):
        self.variables = tuple(variables)
        self.cardinalities = dict(cardinalities)
        self.fixed = dict(fixed or {})
        self._tree = None

    def __call__(
        self, log_potentials: Mapping[Scope, np.ndarray], scopes: Sequence[Scope]
    ) -> tuple[dict[Scope, np.ndarray], float]:
        from dpgm.inference.batched import BatchedTree

        factors = [(s, np.exp(t)) for s, t in [*log_potentials.items(), *self.fixed.items()]]
        if self._tree is None or self._tree.scopes != [s for s, _ in factors]:
            self._tree = BatchedTree(self.variables, self.cardinalities, factors)
        else:
            self._tree = self._tree.with_factors(factors)
        log_z, cliques = self._tree.expected_counts(np.zeros((1, 0), dtype=np.int64), [])
        if not np.isfinite(log_z):
            raise ValueError("every cell of the model has probability zero")
        return self._tree.family_counts(cliques, scopes), float(log_z)


def engine_for(variables: Sequence[str], states: dict, offsets: dict[Scope, np.ndarray] | None = None):
    """Marginals engine for a model over ``variables``: the enumerated joint when small enough,
    else a junction tree; ``offsets`` (structural zeros) are fixed tables of every call."""
    cards = {v: len(states[v]) for v in variables}
    engine = TreeEngine if math.prod(cards.values()) > MAX_JOINT_CELLS else JointEngine
    return engine(variables, cards, fixed=offsets)


def zero_offsets(zeros: xr.DataArray | None) -> dict[Scope, np.ndarray]:
    """``{scope: log table}`` with ``-inf`` on the structural zeros (empty without any)."""
    if zeros is None:
        return {}
    scope, table = zeros_log_factor(zeros)
    return {scope: table}

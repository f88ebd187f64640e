"""Exact queries on a model through one junction-tree calibration: marginals, log Z, evidence.

Evidence is a dict ``variable -> state label`` (hard evidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.data.schema import state_index
from dpgm.inference.evidence import BatchedTree

__all__ = ["JunctionTree", "log_partition", "map_assignment", "marginal", "marginals"]


def _factors(model: Any) -> list[tuple[tuple[str, ...], np.ndarray]]:
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.models.log_linear import LogLinearModel
    from dpgm.models.markov import MarkovNetwork

    if isinstance(model, BayesianNetwork):
        return [(tuple(map(str, model.cpds[v].dims)), model.cpds[v].values) for v in model.variables]
    if isinstance(model, MarkovNetwork):
        return [(s, model.potentials[s].values) for s in model.scopes]
    if isinstance(model, LogLinearModel):
        return [(s, np.exp(t.values)) for s, t in model.log_potentials().items()]
    raise TypeError(f"expected a BayesianNetwork, MarkovNetwork or LogLinearModel, got {type(model).__name__}")


def _split_evidence(model: Any, evidence: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """Hard evidence (a state label) and soft evidence (a likelihood vector or DataArray over the states)."""
    hard, soft = {}, {}
    for variable, value in dict(evidence or {}).items():
        if variable not in model.states:
            raise ValueError(f"evidence on {variable!r}, which is not a model variable; variables: {list(model.variables)}")
        if isinstance(value, str):
            hard[variable] = value
            continue
        if isinstance(value, xr.DataArray):
            value = value.sel({variable: list(model.states[variable])}).values
        vector = np.asarray(value, dtype=float)
        if vector.shape != (len(model.states[variable]),) or (vector < 0).any() or not np.isfinite(vector).all():
            raise ValueError(f"soft evidence on {variable!r} must be {len(model.states[variable])} nonnegative "
                             f"likelihoods, got {value!r}")
        soft[variable] = vector
    return hard, soft


def _evidence_codes(model: Any, evidence: Mapping[str, str] | None) -> tuple[np.ndarray, list[str]]:
    evidence = dict(evidence or {})
    codes, observed = [], []
    for variable, label in evidence.items():
        if variable not in model.states:
            raise ValueError(f"evidence on {variable!r}, which is not a model variable; variables: {list(model.variables)}")
        labels = list(model.states[variable])
        if str(label) not in labels:
            raise ValueError(f"{label!r} is not a state of {variable!r}; states: {labels}")
        codes.append(labels.index(str(label)))
        observed.append(variable)
    return np.array([codes], dtype=np.int64).reshape(1, len(codes)), observed


def _tree(model: Any, extra: Sequence[str] = ()) -> BatchedTree:
    factors = _factors(model)
    if extra:
        extra = tuple(extra)
        factors = [*factors, (extra, np.ones([len(model.states[v]) for v in extra]))]
    return BatchedTree(model.variables, {v: len(model.states[v]) for v in model.variables}, factors)


def log_partition(model: Any, evidence: Mapping[str, str] | None = None) -> float:
    """log of the sum of the unnormalized model over the states consistent with ``evidence``.

    For a Bayesian network this is log P(evidence) (0 without evidence).

    Examples
    --------
    >>> import dpgm
    >>> round(log_partition(dpgm.load_network("asia"), {"asia": "yes"}), 6)  # log 0.01
    -4.60517
    """
    codes, observed = _evidence_codes(model, evidence)
    loglik, _ = _tree(model).expected_counts(codes, observed)
    return float(loglik)


def marginal(model: Any, scope: Sequence[str], evidence: Mapping[str, str] | None = None) -> xr.DataArray:
    """The normalized marginal of any set of variables (given evidence), labelled.

    A scope that no clique contains is added to the triangulation as a clique.

    Raises
    ------
    ValueError
        An unknown variable or label, or evidence of probability zero.
    """
    scope = tuple(scope)
    unknown = [v for v in scope if v not in model.states]
    if unknown:
        raise ValueError(f"scope {scope!r} names variables not in the model: {unknown}")
    codes, observed = _evidence_codes(model, evidence)
    tree = _tree(model, scope)
    loglik, cliques = tree.expected_counts(codes, observed)
    if not np.isfinite(loglik):
        raise ValueError(f"the evidence {dict(evidence or {})!r} has probability zero under the model")
    table = tree.family_counts(cliques, [scope])[scope]
    return xr.DataArray(table / table.sum(), dims=scope,
                        coords={v: state_index(v, tuple(model.states[v])) for v in scope})


def marginals(model: Any, evidence: Mapping[str, Any] | None = None) -> dict[str, xr.DataArray]:
    """Every variable's marginal given evidence, from one calibration.

    Evidence values are state labels (hard evidence) or likelihood vectors over the
    variable's states (soft evidence: a list, array or DataArray).
    """
    hard, soft = _split_evidence(model, evidence)
    codes, observed = _evidence_codes(model, hard)
    tree = _tree(model)
    log_evidence, tables = tree.posteriors(codes, observed, soft=soft)
    if not np.isfinite(log_evidence[0]):
        raise ValueError(f"the evidence {dict(evidence or {})!r} has probability zero under the model")
    return {v: xr.DataArray(tables[v][0], dims=(v,), coords={v: state_index(v, tuple(model.states[v]))})
            for v in model.variables}


def map_assignment(model: Any, evidence: Mapping[str, str] | None = None) -> dict[str, str]:
    """The most probable joint assignment (MAP / most probable explanation) given hard evidence.

    Examples
    --------
    >>> import dpgm
    >>> map_assignment(dpgm.load_network("asia"), {"xray": "yes", "dysp": "yes"})["either"]
    'yes'
    """
    codes, observed = _evidence_codes(model, evidence)
    tree = _tree(model)
    if not np.isfinite(tree.expected_counts(codes, observed)[0]):
        raise ValueError(f"the evidence {dict(evidence or {})!r} has probability zero under the model")
    best = tree.map_batch(codes, observed)[0]
    return {v: model.states[v][int(best[j])] for j, v in enumerate(model.variables)}


class JunctionTree:
    """A model compiled to a junction tree, for batches of evidence rows.

    Parameters
    ----------
    model
        A BayesianNetwork, MarkovNetwork or LogLinearModel.

    Attributes
    ----------
    width, total_table_size, cliques
        Size of the triangulation: check them before inference runs out of memory.

    Examples
    --------
    >>> import dpgm
    >>> tree = JunctionTree(dpgm.load_network("alarm"))
    >>> tree.width, tree.total_table_size
    (4, 1065)
    """

    def __init__(self, model: Any):
        self.model = model
        self.tree = _tree(model)
        self.variables = self.tree.variables

    @property
    def width(self) -> int:
        """Largest clique size minus one."""
        return self.tree.width

    @property
    def total_table_size(self) -> int:
        """Cells of all clique tables."""
        return self.tree.total_table_size

    @property
    def cliques(self) -> tuple[tuple[str, ...], ...]:
        """The cliques."""
        return self.tree.structure.cliques

    def posteriors(self, codes: np.ndarray, variables: Sequence[str]):
        """Per row: log P(evidence) and every variable's posterior ``(B, card)`` (codes: -1 = unobserved)."""
        return self.tree.posteriors(codes, variables)

    def expected_counts(self, codes: np.ndarray, variables: Sequence[str], weights: np.ndarray | None = None):
        """Weighted log-likelihood and weighted sum of clique posteriors (EM's E step)."""
        return self.tree.expected_counts(codes, variables, weights)

    def map_batch(self, codes: np.ndarray, variables: Sequence[str]) -> np.ndarray:
        """MAP assignment per row, ``(B, n_variables)`` codes."""
        return self.tree.map_batch(codes, variables)

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

__all__ = ["log_partition", "marginal", "marginals"]


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


def marginals(model: Any, evidence: Mapping[str, str] | None = None) -> dict[str, xr.DataArray]:
    """Every variable's marginal (given evidence), from one calibration."""
    codes, observed = _evidence_codes(model, evidence)
    tree = _tree(model)
    log_evidence, tables = tree.posteriors(codes, observed)
    if not np.isfinite(log_evidence[0]):
        raise ValueError(f"the evidence {dict(evidence or {})!r} has probability zero under the model")
    return {v: xr.DataArray(tables[v][0], dims=(v,), coords={v: state_index(v, tuple(model.states[v]))})
            for v in model.variables}

"""Exact queries on a model: marginals, the marginal of any scope, log Z / log P(evidence), MAP.

Each function compiles a :class:`~dpgm.inference.JunctionTree` for the model (or
takes one already compiled in place of the model) and runs one calibration;
:func:`clique_posteriors` runs one per evidence row of a compiled
:class:`~dpgm.inference.BatchedTree` and keeps every row's clique tables.
Evidence is a dict ``variable -> state label`` (hard) or ``variable ->
likelihood vector`` over the variable's states (soft: a list, array or a
DataArray over the variable), see :mod:`dpgm.inference.junction_tree`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from dpgm.inference import propagation
from dpgm.inference.batched import BatchedTree
from dpgm.inference.junction_tree import JunctionTree

__all__ = ["clique_posteriors", "log_partition", "map_assignment", "marginal", "marginals"]


def _tree(model: Any) -> JunctionTree:
    return model if isinstance(model, JunctionTree) else JunctionTree(model)


def marginals(model: Any, evidence: Mapping[str, Any] | None = None) -> dict[str, xr.DataArray]:
    """Every variable's posterior marginal given evidence, from one calibration.

    Parameters
    ----------
    model
        A BayesianNetwork, MarkovNetwork, LogLinearModel or a compiled JunctionTree.
    evidence
        ``variable -> state label`` (hard) or ``variable -> likelihoods`` (soft).

    Returns
    -------
    dict
        ``variable -> DataArray`` over its states, summing to 1 (an observed
        variable's marginal is its indicator).

    Raises
    ------
    ValueError
        An unknown variable or label, or evidence of probability zero
        (:class:`~dpgm.inference.ImpossibleEvidenceError`).

    Examples
    --------
    >>> import dpgm
    >>> post = marginals(dpgm.load_network("asia"), {"xray": "yes", "smoke": [0.2, 0.8]})
    >>> round(float(post["lung"].sel(lung="yes")), 4)
    0.3212
    """
    return _tree(model).marginals(evidence)


def marginal(model: Any, scope: Sequence[str], evidence: Mapping[str, Any] | None = None) -> xr.DataArray:
    """The normalized posterior marginal of any set of variables, labelled, dims in ``scope`` order.

    A scope that no clique contains is added to the triangulation as a clique
    (an all-ones factor), so the answer is exact for any scope. For a fitted
    :class:`~dpgm.GaussianGraphicalModel` the answer is the conditional ``mean``
    and ``covariance`` of the scope given observed values (an ``xarray.Dataset``).

    Raises
    ------
    ValueError
        An unknown variable or label, an empty scope, or evidence of probability zero.

    Examples
    --------
    >>> import dpgm
    >>> table = marginal(dpgm.load_network("asia"), ("asia", "dysp"), {"xray": "yes"})
    >>> table.dims, round(float(table.sum()), 12)
    (('asia', 'dysp'), 1.0)
    """
    if hasattr(model, "conditional"):  # a Gaussian model: mean and covariance, no junction tree
        return model.conditional(scope, evidence)
    return _tree(model).marginal(scope, evidence)


def log_partition(model: Any, evidence: Mapping[str, Any] | None = None) -> float:
    """log of the sum of the unnormalized model over the states consistent with ``evidence``.

    Without evidence, log Z; for a Bayesian network with evidence, log P(evidence)
    (0 without). Soft evidence weighs each state by its likelihood. ``-inf`` if
    no state is consistent (never NaN).

    Examples
    --------
    >>> import dpgm
    >>> round(log_partition(dpgm.load_network("asia"), {"asia": "yes"}), 6)  # log 0.01
    -4.60517
    """
    return _tree(model).log_partition(evidence)


def map_assignment(model: Any, evidence: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The most probable joint assignment (MAP / most probable explanation) given evidence.

    Max-product on the junction tree; among tied maxima the first in the
    clique tables' C order is returned.

    Raises
    ------
    ValueError
        Evidence of probability zero.

    Examples
    --------
    >>> import dpgm
    >>> map_assignment(dpgm.load_network("asia"), {"xray": "yes", "dysp": "yes"})["either"]
    'yes'
    """
    return _tree(model).map_assignment(evidence)


def clique_posteriors(tree: BatchedTree, codes: np.ndarray, variables: Sequence[str]
                      ) -> tuple[np.ndarray, dict[tuple[str, ...], np.ndarray]]:
    """Per row of hard evidence: ``log`` of the model summed over the states consistent with it, and every
    clique's posterior table given it, each over the rows first (``(B, *clique shape)``).

    What :meth:`BatchedTree.expected_counts` sums over the rows, kept apart: one calibration per
    row, so a scope that lies in no clique can be read as ``P(x_S) P(x_T | x_S)`` for every
    state of ``S``. A row of probability zero gets ``-inf`` and all-zero tables.

    Examples
    --------
    >>> import numpy as np
    >>> tree = BatchedTree(["a", "b"], {"a": 2, "b": 2},
    ...                    [(("a",), np.array([0.3, 0.7])), (("b", "a"), np.array([[0.9, 0.2], [0.1, 0.8]]))])
    >>> log_p, tables = clique_posteriors(tree, np.array([[0], [1]]), ["b"])
    >>> np.exp(log_p).round(6).tolist(), list(tables), tables[("a", "b")][1].round(6).tolist()  # P(b), P(a, b | b=1)
    ([0.41, 0.59], [('a', 'b')], [[0.0, 0.050847], [0.0, 0.949153]])
    """
    codes, observed = tree._codes(codes, variables)
    rows = len(codes)
    flat = np.empty((rows, tree.layout.n_cells))
    log_evidence = np.empty(rows)
    one = np.ones(1)
    for r in range(rows):
        value, flat[r] = propagation.expected_counts(tree.layout, tree._base, tree._base_log, codes[r:r + 1],
                                                     observed, one)
        log_evidence[r] = value[0]
    offset = tree.layout.clique_offset
    return log_evidence, {clique: flat[:, offset[i]:offset[i + 1]].reshape(rows, *tree.layout.clique_shapes[i])
                          for i, clique in enumerate(tree.structure.cliques)}

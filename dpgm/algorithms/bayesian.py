"""Fully observed Bayesian networks: MLE and Dirichlet (Bayesian) estimates, and the Bayesian
(Dirichlet) score, from family counts."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from scipy.special import gammaln

from dpgm.cpt import PRIORS, CPTLayout, pseudo_counts
from dpgm.models.bayesian_network import BayesianNetwork

__all__ = [
    "bayesian_network_estimate",
    "family_log_marginal_likelihood",
    "family_loglik",
    "log_marginal_likelihood",
    "n_free_parameters",
    "replicate_estimates",
]


def bayesian_network_estimate(
    structure: BayesianNetwork,
    family_counts: Mapping[tuple[str, ...], xr.DataArray],
    *,
    prior: str | None = None,
    equivalent_sample_size: float = 5.0,
    pseudo_counts_by_variable: Mapping[str, Any] | None = None,
) -> tuple[BayesianNetwork, dict[str, Any]]:
    """Tables from family counts: MLE, or the posterior mean under a Dirichlet prior.

    ``theta[x | u] = (n(x, u) + a(x, u)) / sum_x (n(x, u) + a(x, u))``, with ``a = 0``
    for the MLE. A parent configuration with no count and no pseudo-count gets the
    uniform distribution (its MLE is undefined); how many did is returned in
    ``info["empty_parent_configurations"]``. ``info["standard_errors"]`` holds each entry's
    ``sqrt(theta (1 - theta) / n_u)`` (the MLE's asymptotic standard error, ``n_u`` the rows of
    the parent configuration ``u``) or, under a prior, the Dirichlet posterior's standard
    deviation ``sqrt(theta (1 - theta) / (n_u + a_u + 1))``; NaN where ``u`` has no row.

    Returns
    -------
    (BayesianNetwork, dict)
        The estimate, and ``info``.
    """
    families = list(_families(structure, family_counts, prior, equivalent_sample_size, pseudo_counts_by_variable))
    layout = CPTLayout([f[0] for f, *_ in families], {f[0]: counts.shape[0] for f, _, counts, _ in families},
                       {f[0]: f[1:] for f, *_ in families})
    flat = [(counts + alpha).ravel() for _, _, counts, alpha in families]
    theta, empty = layout.normalize(np.concatenate(flat) if flat else np.zeros(0))
    labelled = {f[0]: table for f, table, _, _ in families}
    totals = {f[0]: (counts + alpha).sum(axis=0, keepdims=True) + (0.0 if prior is None else 1.0)
              for f, _, counts, alpha in families}
    cpds, errors = {}, {}
    for v, estimate in layout.tables(theta).items():
        # the counts' labels are the table's: a shallow copy with new values keeps their indexes
        cpd = labelled[v].copy(deep=False, data=estimate)
        cpd.attrs, cpd.name = {}, None
        cpds[v] = cpd
        with np.errstate(invalid="ignore", divide="ignore"):
            spread = np.where(totals[v] > (0.0 if prior is None else 1.0),
                              np.sqrt(estimate * (1 - estimate) / totals[v]), np.nan)
        errors[f"table:{v}"] = cpd.copy(deep=False, data=spread)
    return BayesianNetwork(cpds), {"empty_parent_configurations": empty, "standard_errors": errors}


def replicate_estimates(counts: Sequence[np.ndarray], alphas: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """Many fits' tables at once (bootstrap replicates): each family's counts normalised over the child's axis.

    ``counts[f]`` holds family ``f``'s counts of every fit, shaped ``(fits, variable, *parents)``, and
    ``alphas[f]`` its pseudo-counts shaped ``(variable, *parents)`` (zeros: the MLE). Fit ``b``'s tables
    are :func:`bayesian_network_estimate`'s of ``counts[f][b]``, entry for entry: the column sums
    are added up over the child's states in the same order as :meth:`dpgm.cpt.CPTLayout.normalize`, and
    an empty parent configuration (no count, no pseudo-count) gets the uniform distribution.

    Returns
    -------
    (list of numpy.ndarray, numpy.ndarray)
        Each family's tables ``(fits, variable, *parents)``, and each fit's complete-data
        log-likelihood :func:`family_loglik` (``sum n(x, u) log theta[x | u]``, 0 log 0 = 0).
    """
    tables, loglik = [], None
    for n, alpha in zip(counts, alphas, strict=True):
        n = np.asarray(n, dtype=np.float64)
        total_counts = n + alpha
        states = total_counts.shape[1]
        total = total_counts[:, 0].copy()
        for k in range(1, states):  # one state after another, as a bincount over the cells adds them
            total += total_counts[:, k]
        empty = total == 0
        theta = total_counts / np.where(empty, 1.0, total)[:, None]
        if empty.any():
            theta = np.where(empty[:, None], 1.0 / float(states), theta)
        tables.append(theta)
        positive = n > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(positive, n * np.log(np.where(positive, theta, 1.0)), 0.0)
        family = terms.reshape(terms.shape[0], -1).sum(axis=1)
        loglik = family if loglik is None else loglik + family
    fits = counts[0].shape[0] if counts else 0
    return tables, np.zeros(fits) if loglik is None else loglik


def _families(
    structure: BayesianNetwork,
    family_counts: Mapping[tuple[str, ...], xr.DataArray],
    prior: str | None,
    equivalent_sample_size: float,
    pseudo_counts_by_variable: Mapping[str, Any] | None,
) -> Iterator[tuple[tuple[str, ...], xr.DataArray, np.ndarray, np.ndarray]]:
    """Each family, its counts table in family order (labelled, and as floats) and its pseudo-counts."""
    for family in structure.families:
        table = family_counts[family]
        if table.dims != family:
            table = table.transpose(*family)
        counts = np.asarray(table.values, dtype=float)
        pseudo = (pseudo_counts_by_variable or {}).get(family[0])
        yield family, table, counts, pseudo_counts(family, counts.shape, prior, equivalent_sample_size, pseudo)


def family_log_marginal_likelihood(counts: np.ndarray, alpha: np.ndarray) -> float:
    """Log marginal likelihood of one family's counts under a Dirichlet prior.

    ``sum_j [lgamma(a_j) - lgamma(a_j + n_j) + sum_k (lgamma(a_jk + n_jk) - lgamma(a_jk))]``
    with ``j`` the parent configurations (every axis but the first), ``k`` the child's
    states (the first axis), ``a_j = sum_k a_jk`` and ``n_j = sum_k n_jk``.

    A parent configuration never observed contributes exactly 0 (it still counts in
    ``q`` for BDeu's pseudo-counts). Cells with a zero pseudo-count and no count drop out (the limit
    ``a -> 0``); a zero pseudo-count on a cell with a positive count gives ``-inf``
    (the prior gives the data probability zero).

    Parameters
    ----------
    counts
        Counts ``n_jk`` shaped ``(variable, *parents)``; need not be integers
        (weighted rows).
    alpha
        Pseudo-counts ``a_jk`` of the same shape, nonnegative.

    Returns
    -------
    float
        The natural log of ``P(counts | family)``.
    """
    if ((alpha == 0) & (counts > 0)).any():
        return -math.inf
    cells = alpha > 0
    config_alpha, config_counts = alpha.sum(axis=0), counts.sum(axis=0)
    configs = config_alpha > 0
    # elementwise differences before summing: an unobserved configuration or cell adds exactly 0
    per_config = gammaln(config_alpha[configs]) - gammaln(config_alpha[configs] + config_counts[configs])
    per_cell = gammaln(alpha[cells] + counts[cells]) - gammaln(alpha[cells])
    return float(per_config.sum() + per_cell.sum())


def log_marginal_likelihood(
    structure: BayesianNetwork,
    family_counts: Mapping[tuple[str, ...], xr.DataArray],
    *,
    prior: str,
    equivalent_sample_size: float = 5.0,
    pseudo_counts_by_variable: Mapping[str, Any] | None = None,
) -> float:
    """Bayesian score: log marginal likelihood of complete data given the structure.

    ``log P(D | G) = sum_i sum_j [lgamma(a_ij) - lgamma(a_ij + n_ij)
    + sum_k (lgamma(a_ijk + n_ijk) - lgamma(a_ijk))]`` over variables ``i``, their
    parent configurations ``j`` and states ``k``, with ``a_ij = sum_k a_ijk`` and
    ``n_ij = sum_k n_ijk``. The pseudo-counts ``a_ijk`` are the prior's (see
    :func:`pseudo_counts`): ``equivalent_sample_size / (q_i r_i)`` for ``"BDeu"``
    (``r_i`` states, ``q_i`` parent configurations: the product of the parents'
    cardinalities, observed or not), 1 for ``"K2"``, the given tables for
    ``"dirichlet"``. Computed from the same family counts as the estimate (no pass
    over the data); the structure prior is uniform (not added).

    Parameters
    ----------
    structure
        The network whose families are scored.
    family_counts
        Counts of every family, keyed by ``(variable, *parents)``.
    prior
        ``"BDeu"``, ``"K2"`` or ``"dirichlet"``.
    equivalent_sample_size
        ``BDeu``'s equivalent sample size.
    pseudo_counts_by_variable
        ``dirichlet``'s pseudo-counts, ``{variable: number or table}``.

    Returns
    -------
    float
        ``log P(D | G)`` (natural log).

    References
    ----------
    .. [1] G. F. Cooper and E. Herskovits, "A Bayesian method for the induction of
       probabilistic networks from data", Machine Learning 9, 309-347 (1992).
    .. [2] D. Heckerman, D. Geiger and D. M. Chickering, "Learning Bayesian networks:
       the combination of knowledge and statistical data", Machine Learning 20,
       197-243 (1995).

    Examples
    --------
    >>> import xarray as xr
    >>> from dpgm import BayesianNetwork
    >>> structure = BayesianNetwork.from_edges([("a", "b")])
    >>> counts = {("a",): xr.DataArray([3.0, 1.0], dims=["a"]),
    ...           ("b", "a"): xr.DataArray([[2.0, 0.0], [1.0, 1.0]], dims=["b", "a"])}
    >>> round(log_marginal_likelihood(structure, counts, prior="K2"), 6)
    -6.173786
    """
    if prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; expected one of {PRIORS}")
    return math.fsum(
        family_log_marginal_likelihood(counts, alpha)
        for _, _, counts, alpha in _families(
            structure, family_counts, prior, equivalent_sample_size, pseudo_counts_by_variable
        )
    )


def family_loglik(model: BayesianNetwork, family_counts: Mapping[tuple[str, ...], xr.DataArray]) -> float:
    """Complete-data log-likelihood ``sum n(x, u) log theta[x | u]`` (0 log 0 = 0)."""
    total = 0.0
    for family in model.families:
        counts = np.asarray(_ordered(family_counts[family], family), dtype=float)
        theta = _ordered(model.cpds[family[0]], family)
        positive = counts > 0
        with np.errstate(divide="ignore"):
            total += float((counts[positive] * np.log(theta[positive])).sum())
    return total


def _ordered(table: xr.DataArray, dims: tuple[str, ...]) -> np.ndarray:
    """The table's values with axes in ``dims`` order (no transpose when already so)."""
    return table.values if table.dims == dims else table.transpose(*dims).values


def n_free_parameters(model: BayesianNetwork) -> int:
    """Free parameters: ``sum (r - 1) q`` over the variables."""
    return int(sum((model.cardinality(v) - 1) * int(np.prod([model.cardinality(p) for p in model.parents(v)]))
                   for v in model.variables))

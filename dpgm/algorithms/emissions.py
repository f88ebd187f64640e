"""Emission families on the driver: the M step from the E step's statistics, and the unconstrained vectors
SQUAREM extrapolates in.

The M steps are the maximum-likelihood updates given the states' posteriors
(hmmlearn's with its priors off: ``covars_prior=0``, ``means_weight=0``): a
categorical table is its expected counts, row-normalised; a Gaussian family's means
and covariances are the posterior-weighted moments (the Gaussian mixtures' M step,
:func:`dpgm.algorithms.mixture.m_step`, the state posteriors as responsibilities,
``reg_covar`` added to the diagonal); a Poisson rate is the posterior-weighted mean
count. A state no step visits keeps its previous parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpgm.algorithms.mixture import MixtureParameters, _cholesky_matrices, _cholesky_vector, m_step
from dpgm.algorithms.squarem import group_log, group_softmax
from dpgm.models.emissions import CategoricalEmission, Emission, GaussianEmission, PoissonEmission

__all__ = ["constrained", "maximise", "sizes", "split", "unconstrained", "vector"]


def maximise(family: Emission, statistics: dict[str, np.ndarray], labels: Sequence[str], reg_covar: float = 0.0
             ) -> Emission:
    """The family's parameters maximising the expected complete-data log-likelihood."""
    if isinstance(family, CategoricalEmission):
        counts = statistics["counts"]
        totals = counts.sum(axis=1, keepdims=True)
        previous = np.asarray(family.table.values, dtype=float)
        return family.with_tables({"table": np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0),
                                                      previous)})
    if isinstance(family, GaussianEmission):
        current = MixtureParameters(np.ones(family.n_states), np.asarray(family.means.values, float),
                                    np.asarray(family.covariances.values, float))
        new = m_step(statistics, current, family.covariance_type, reg_covar, family.variables)
        return family.with_arrays(new.means, new.covariances, labels)
    if isinstance(family, PoissonEmission):
        weight, total = statistics["weight"], statistics["total"]
        previous = np.asarray(family.rates.values, dtype=float)
        rates = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), previous)
        return family.with_arrays(np.maximum(rates, 1e-300), labels)
    raise TypeError(f"unknown emission family {type(family).__name__}")


def vector(family: Emission) -> np.ndarray:
    """The family's parameters, flat."""
    return np.concatenate([np.asarray(t.values, dtype=float).ravel() for t in family.tables().values()])


def unconstrained(family: Emission) -> np.ndarray:
    """Log probabilities (categorical), means and log-Cholesky covariances (Gaussian), log rates (Poisson)."""
    if isinstance(family, CategoricalEmission):
        return group_log(family.table.values).ravel()
    if isinstance(family, GaussianEmission):
        covariances = np.asarray(family.covariances.values, dtype=float)
        rest = (_cholesky_vector(covariances) if family.covariance_type in ("full", "tied")
                else np.log(covariances).ravel())
        return np.concatenate([np.asarray(family.means.values, float).ravel(), rest])
    return np.log(np.asarray(family.rates.values, dtype=float)).ravel()


def constrained(family: Emission, values: np.ndarray, labels: Sequence[str]) -> Emission:
    """The family from :func:`unconstrained`'s vector (always valid parameters)."""
    if isinstance(family, CategoricalEmission):
        n, m = family.table.shape
        groups = np.repeat(np.arange(n), m)
        return family.with_tables({"table": group_softmax(values, groups, n).reshape(n, m)})
    if isinstance(family, GaussianEmission):
        n, p = family.means.shape
        means = values[:n * p].reshape(n, p)
        shape = family.covariances.shape
        covariances = (_cholesky_matrices(values[n * p:], shape) if family.covariance_type in ("full", "tied")
                       else np.exp(values[n * p:]).reshape(shape))
        if not (np.isfinite(means).all() and np.isfinite(covariances).all()):
            raise ValueError("extrapolated emission parameters are not finite")
        return family.with_arrays(means, covariances, labels)
    rates = np.exp(values).reshape(family.rates.shape)
    if not np.isfinite(rates).all():
        raise ValueError("extrapolated Poisson rates are not finite")
    return family.with_arrays(np.maximum(rates, 1e-300), labels)


def sizes(families: Sequence[Emission]) -> list[int]:
    """Each family's length in :func:`unconstrained`'s vector."""
    return [len(unconstrained(f)) for f in families]


def split(values: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """A concatenation of vectors back into its parts."""
    return np.split(np.asarray(values), np.cumsum(lengths)[:-1])

"""Emission families on the driver: the M step from the E step's statistics, and the unconstrained vectors
SQUAREM extrapolates in.

The M steps are the maximum-likelihood updates given the states' posteriors
(hmmlearn's with its priors off: ``covars_prior=0``, ``means_weight=0``): a
categorical table is its expected counts, row-normalised; a Gaussian family's means
and covariances are the posterior-weighted moments (the Gaussian mixtures' M step,
:func:`dpgm.algorithms.mixture.m_step`, the state posteriors as responsibilities,
``reg_covar`` added to the diagonal); a Gaussian mixture's weights, means and
covariances are those moments per mix, each step weighted by its state posterior
times its mix posterior within the state (:func:`maximise_mixture`); a Poisson rate
is the posterior-weighted mean count. A state no step visits keeps its previous
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpgm.algorithms.mixture import MixtureParameters, _cholesky_matrices, _cholesky_vector, m_step
from dpgm.algorithms.squarem import group_log, group_softmax
from dpgm.errors import DataError
from dpgm.models.covariances import check_covariances
from dpgm.models.emissions import (
    CategoricalEmission,
    Emission,
    GaussianEmission,
    GaussianMixtureEmission,
    PoissonEmission,
)

__all__ = ["constrained", "maximise", "maximise_mixture", "sizes", "split", "unconstrained", "vector"]


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
    if isinstance(family, GaussianMixtureEmission):
        return maximise_mixture(family, statistics, labels, reg_covar)
    if isinstance(family, PoissonEmission):
        weight, total = statistics["weight"], statistics["total"]
        previous = np.asarray(family.rates.values, dtype=float)
        rates = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), previous)
        return family.with_arrays(np.maximum(rates, 1e-300), labels)
    raise TypeError(f"unknown emission family {type(family).__name__}")


def maximise_mixture(family: GaussianMixtureEmission, statistics: dict[str, np.ndarray], labels: Sequence[str],
                     reg_covar: float = 0.0) -> GaussianMixtureEmission:
    """A Gaussian mixture family's M step from ``nk``, ``s1``, ``s2`` per (state, mix), flat, centred on the
    current means: weights ``nk / sum_k nk``, means ``mu + s1 / nk``, covariances ``s2 / nk - d d^T`` (``d = s1 /
    nk``; tied: pooled over the state's mixes), ``reg_covar`` added to the diagonal. The exact maximiser of the
    expected complete-data log-likelihood (hmmlearn's ``GMMHMM`` centres the covariances on the previous
    means instead, which reaches the same fixed points). A mix with no weight keeps its mean and covariance, a
    state with none all its parameters.

    Raises
    ------
    DataError
        A covariance that is not positive definite, naming the state, the mix and the variables.
    """
    n, m, p = family.n_states, family.n_mix, len(family.variables)
    nk = statistics["nk"].reshape(n, m)
    s1 = statistics["s1"].reshape(n, m, p)
    s2 = statistics["s2"].reshape(n, m, p) if family.covariance_type in ("diag", "spherical") else \
        statistics["s2"].reshape(n, m, p, p)
    weights = np.asarray(family.weights.values, dtype=float)
    means = np.asarray(family.means.values, dtype=float)
    previous = np.asarray(family.covariances.values, dtype=float)
    seen = nk > 0
    safe = np.where(seen, nk, 1.0)
    shift = np.where(seen[..., None], s1 / safe[..., None], 0.0)
    totals = nk.sum(axis=1)
    visited = totals > 0
    new_weights = np.where(visited[:, None], nk / np.where(visited, totals, 1.0)[:, None], weights)
    diagonal = np.arange(p)
    if family.covariance_type == "full":
        covariances = s2 / safe[..., None, None] - shift[..., :, None] * shift[..., None, :]
        covariances = (covariances + np.swapaxes(covariances, -1, -2)) / 2
        covariances[..., diagonal, diagonal] += reg_covar
        covariances = np.where(seen[..., None, None], covariances, previous)
    elif family.covariance_type == "tied":
        covariances = ((s2.sum(axis=1) - np.einsum("sk,ski,skj->sij", nk, shift, shift))
                       / np.where(visited, totals, 1.0)[:, None, None])
        covariances = (covariances + np.swapaxes(covariances, -1, -2)) / 2
        covariances[..., diagonal, diagonal] += reg_covar
        covariances = np.where(visited[:, None, None], covariances, previous)
    else:
        variances = s2 / safe[..., None] - shift * shift + reg_covar
        if family.covariance_type == "diag":
            covariances = np.where(seen[..., None], variances, previous)
        else:
            covariances = np.where(seen, variances.mean(axis=2), previous)
    for s in range(n):
        try:
            check_covariances(covariances[s], family.covariance_type, family.variables, reg_covar)
        except DataError as error:
            raise DataError(f"gmm emission of {list(family.variables)}, hidden state {labels[s]!r}: "
                            + str(error).replace("component ", "mix ").replace("components", "mixes")) from None
    return family.with_arrays(new_weights, means + shift, covariances, labels)


def vector(family: Emission) -> np.ndarray:
    """The family's parameters, flat."""
    return np.concatenate([np.asarray(t.values, dtype=float).ravel() for t in family.tables().values()])


def unconstrained(family: Emission) -> np.ndarray:
    """Log probabilities (categorical), means and log-Cholesky covariances (Gaussian), log weights, means and
    log-Cholesky covariances (Gaussian mixture), log rates (Poisson)."""
    if isinstance(family, CategoricalEmission):
        return group_log(family.table.values).ravel()
    if isinstance(family, GaussianMixtureEmission):
        covariances = np.asarray(family.covariances.values, dtype=float)
        rest = (_cholesky_vector(covariances) if family.covariance_type in ("full", "tied")
                else np.log(covariances).ravel())
        return np.concatenate([group_log(family.weights.values).ravel(),
                               np.asarray(family.means.values, float).ravel(), rest])
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
    if isinstance(family, GaussianMixtureEmission):
        return _constrained_mixture(family, values, labels)
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


def _constrained_mixture(family: GaussianMixtureEmission, values: np.ndarray, labels: Sequence[str]
                         ) -> GaussianMixtureEmission:
    n, m, p = family.n_states, family.n_mix, len(family.variables)
    weights = group_softmax(values[:n * m], np.repeat(np.arange(n), m), n).reshape(n, m)
    means = values[n * m:n * m + n * m * p].reshape(n, m, p)
    rest, shape = values[n * m + n * m * p:], family.covariances.shape
    covariances = (_cholesky_matrices(rest, shape) if family.covariance_type in ("full", "tied")
                   else np.exp(rest).reshape(shape))
    if not (np.isfinite(means).all() and np.isfinite(covariances).all()):
        raise ValueError("extrapolated emission parameters are not finite")
    return family.with_arrays(weights, means, covariances, labels)


def sizes(families: Sequence[Emission]) -> list[int]:
    """Each family's length in :func:`unconstrained`'s vector."""
    return [len(unconstrained(f)) for f in families]


def split(values: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """A concatenation of vectors back into its parts."""
    return np.split(np.asarray(values), np.cumsum(lengths)[:-1])

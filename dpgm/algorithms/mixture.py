"""Gaussian mixtures on the driver: the M step from E-step statistics, k-means++ starts from a row sample.

The M step follows scikit-learn's ``GaussianMixture`` (``nk`` plus ``10 eps``,
``reg_covar`` added to the diagonal of every covariance) so that from the same
starting parameters both produce the same iterates. The statistics arrive centred
on the means the E step used (``s1 = sum r (x - mu_old)``, ``s2 = sum r (x -
mu_old)(x - mu_old)^T``), so the new covariance ``s2 / nk - d d^T`` with ``d = s1 /
nk`` suffers no cancellation however far the data lie from zero.

References
----------
Arthur, D. and Vassilvitskii, S. (2007). k-means++: the advantages of careful
seeding. *Proc. 18th ACM-SIAM Symposium on Discrete Algorithms*, 1027-1035.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpgm.models.mixture import check_covariances

__all__ = ["MixtureParameters", "from_unconstrained", "initial_parameters", "kmeans_plus_plus", "m_step", "recentre",
           "unconstrained_vector"]

_EPS = 10 * np.finfo(float).eps  # scikit-learn's guard against empty components


@dataclass(frozen=True)
class MixtureParameters:
    """Weights ``(K,)``, means ``(K, p)`` and covariances in scikit-learn's shape for the covariance type."""

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray


def m_step(statistics: dict[str, Any], current: MixtureParameters, covariance_type: str, reg_covar: float,
           variables: Sequence[str]) -> MixtureParameters:
    """New parameters from one restart's E-step statistics (``nk``, ``s1``, ``s2`` centred on ``current.means``).

    Raises
    ------
    DataError
        A covariance that is not positive definite, naming the component and variables.
    """
    nk = statistics["nk"] + _EPS
    shift = statistics["s1"] / nk[:, None]
    means = current.means + shift
    weights = nk / nk.sum()
    s2 = statistics["s2"]
    p = means.shape[1]
    if covariance_type == "full":
        covariances = s2 / nk[:, None, None] - shift[:, :, None] * shift[:, None, :]
        covariances = (covariances + np.swapaxes(covariances, 1, 2)) / 2
        covariances[:, np.arange(p), np.arange(p)] += reg_covar
    elif covariance_type == "tied":
        covariances = (s2.sum(axis=0) - np.einsum("k,ki,kj->ij", nk, shift, shift)) / nk.sum()
        covariances = (covariances + covariances.T) / 2
        covariances[np.arange(p), np.arange(p)] += reg_covar
    else:
        variances = s2 / nk[:, None] - shift * shift + reg_covar
        covariances = variances if covariance_type == "diag" else variances.mean(axis=1)
    check_covariances(covariances, covariance_type, variables, reg_covar)
    return MixtureParameters(weights, means, covariances)


def _estimate_from_labels(x: np.ndarray, labels: np.ndarray, k: int, covariance_type: str,
                          reg_covar: float) -> MixtureParameters:
    """Parameters from a hard assignment of the sample (scikit-learn's start from k-means labels).

    A cluster with fewer than ``p + 1`` rows takes the sample's covariance (a
    covariance of so few points would be singular).
    """
    n, p = x.shape
    overall = np.atleast_2d(np.cov(x.T, bias=True)) if n > 1 else np.eye(p)
    nk = np.bincount(labels, minlength=k).astype(float) + _EPS
    means = np.stack([x[labels == c].mean(axis=0) if (labels == c).any() else x.mean(axis=0) for c in range(k)])
    full = np.empty((k, p, p))
    for c in range(k):
        rows = x[labels == c]
        full[c] = (rows - means[c]).T @ (rows - means[c]) / nk[c] if len(rows) > p else overall
    if covariance_type == "tied":
        covariances = np.einsum("k,kij->ij", nk, full) / nk.sum() + reg_covar * np.eye(p)
    elif covariance_type == "full":
        covariances = full + reg_covar * np.eye(p)
    else:
        variances = np.diagonal(full, axis1=1, axis2=2) + reg_covar
        covariances = variances if covariance_type == "diag" else variances.mean(axis=1)
    return MixtureParameters(nk / nk.sum(), means, covariances)


def kmeans_plus_plus(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` centres by greedy k-means++ seeding (``2 + log k`` candidates per step, as scikit-learn)."""
    n = len(x)
    trials = 2 + int(np.log(k))
    centres = np.empty((k, x.shape[1]))
    centres[0] = x[rng.integers(n)]
    closest = ((x - centres[0]) ** 2).sum(axis=1)
    for c in range(1, k):
        total = closest.sum()
        if total <= 0:  # fewer distinct rows than components: repeat a row
            centres[c] = x[rng.integers(n)]
            continue
        candidates = np.searchsorted(np.cumsum(closest), rng.random(trials) * total)
        candidates = np.minimum(candidates, n - 1)
        distances = np.minimum(closest, ((x[None, :, :] - x[candidates][:, None, :]) ** 2).sum(axis=2))
        best = int(np.argmin(distances.sum(axis=1)))
        centres[c] = x[candidates[best]]
        closest = distances[best]
    return centres


def _lloyd(x: np.ndarray, centres: np.ndarray, max_iter: int = 100) -> np.ndarray:
    labels = np.full(len(x), -1)
    for _ in range(max_iter):
        distances = (x * x).sum(axis=1)[:, None] - 2 * x @ centres.T + (centres * centres).sum(axis=1)
        new = np.argmin(distances, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(len(centres)):
            if (labels == c).any():
                centres[c] = x[labels == c].mean(axis=0)
    return labels


def initial_parameters(sample: np.ndarray, k: int, covariance_type: str, reg_covar: float,
                       rng: np.random.Generator, method: str = "k-means++") -> MixtureParameters:
    """A start from the row sample: k-means++ seeds refined by Lloyd's iterations (``"k-means++"``) or
    ``k`` random sample rows as centres (``"random"``), then weights, means and covariances of the clusters.

    Missing coordinates of the sample are filled with the sample's column means (for the start only).
    """
    x = np.array(sample, dtype=float)
    if np.isnan(x).any():
        centre = np.nan_to_num(np.nanmean(np.where(np.isnan(x).all(axis=0), 0.0, x), axis=0))
        x = np.where(np.isnan(x), centre, x)
    if method == "random":
        centres = x[rng.choice(len(x), size=k, replace=False)].copy()
    else:
        centres = kmeans_plus_plus(x, k, rng)
    labels = _lloyd(x, centres)
    return _estimate_from_labels(x, labels, k, covariance_type, reg_covar)


def parameters_from_init(init: dict[str, Any], k: int, p: int, covariance_type: str,
                         variables: Sequence[str]) -> MixtureParameters:
    """Explicit initial parameters: ``weights``, ``means`` and ``covariances`` or ``precisions``
    (scikit-learn's shapes for the covariance type).

    Raises
    ------
    ValueError
        A missing or unknown key, a wrong shape, weights that are not a distribution,
        a covariance that is not positive definite.
    """
    from dpgm.models.mixture import covariance_dims

    known = {"weights", "means", "covariances", "precisions"}
    unknown = sorted(set(init) - known)
    if unknown:
        raise ValueError(f"init has unknown keys {unknown}; expected 'weights', 'means' and 'covariances' or "
                         "'precisions'")
    if "weights" not in init or "means" not in init or ("covariances" in init) == ("precisions" in init):
        raise ValueError(f"init must give 'weights', 'means' and one of 'covariances' or 'precisions'; got "
                         f"{sorted(init)}")
    weights = np.asarray(getattr(init["weights"], "values", init["weights"]), dtype=float)
    means = np.asarray(getattr(init["means"], "values", init["means"]), dtype=float)
    key = "covariances" if "covariances" in init else "precisions"
    matrices = np.asarray(getattr(init[key], "values", init[key]), dtype=float)
    shape = {"full": (k, p, p), "tied": (p, p), "diag": (k, p), "spherical": (k,)}[covariance_type]
    for name, value, wanted in (("weights", weights, (k,)), ("means", means, (k, p)), (key, matrices, shape)):
        if value.shape != wanted:
            raise ValueError(f"init[{name!r}] must have shape {wanted} for {k} components, {p} variables and "
                             f"covariance_type={covariance_type!r} (dims {covariance_dims(covariance_type)}), "
                             f"got {value.shape}")
        if not np.isfinite(value).all():
            raise ValueError(f"init[{name!r}] must be finite")
    if (weights < 0).any() or abs(weights.sum() - 1) > 1e-8:
        raise ValueError(f"init['weights'] must be nonnegative and sum to 1, got {weights.tolist()!r}")
    check_covariances(matrices, covariance_type, variables, reg_covar=None)
    if key == "precisions":
        if covariance_type in ("diag", "spherical"):
            matrices = 1.0 / matrices
        else:
            matrices = np.linalg.inv(matrices)
            matrices = (matrices + np.swapaxes(matrices, -1, -2)) / 2
    return MixtureParameters(weights, means, matrices)


def recentre(statistics: dict[str, Any], centre: np.ndarray) -> dict[str, Any]:
    """E-step statistics centred on ``statistics["centre"]`` (``(K, p)`` means) moved to ``centre``.

    With ``y = x - c`` and ``d = c - c'``: ``sum r (x - c') = s1 + nk d`` and
    ``sum r (x - c')(x - c')^T = s2 + s1 d^T + d s1^T + nk d d^T`` (the diagonal of it
    for diagonal statistics). Statistics of blocks computed at different means are
    added (incremental EM) after moving them to one centre.
    """
    d = statistics["centre"] - centre
    nk, s1, s2 = statistics["nk"], statistics["s1"], statistics["s2"]
    if s2.ndim == 2:
        s2 = s2 + 2 * d * s1 + nk[:, None] * d * d
    else:
        outer = s1[:, :, None] * d[:, None, :]
        s2 = s2 + outer + np.swapaxes(outer, 1, 2) + nk[:, None, None] * d[:, :, None] * d[:, None, :]
    return {**statistics, "s1": s1 + nk[:, None] * d, "s2": s2, "centre": np.array(centre, dtype=float)}


def _cholesky_vector(matrices: np.ndarray) -> np.ndarray:
    """Cholesky factors of SPD matrices ``(..., p, p)``: log diagonal then strict lower triangle, flat."""
    factor = np.linalg.cholesky(matrices)
    p = factor.shape[-1]
    lower = np.tril_indices(p, -1)
    diagonal = np.log(np.diagonal(factor, axis1=-2, axis2=-1))
    return np.concatenate([diagonal.ravel(), factor[..., lower[0], lower[1]].ravel()])


def _cholesky_matrices(vector: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    p = shape[-1]
    batch = shape[:-2]
    n_diagonal = int(np.prod(batch, dtype=int)) * p
    factor = np.zeros(shape)
    lower = np.tril_indices(p, -1)
    factor[..., np.arange(p), np.arange(p)] = np.exp(vector[:n_diagonal]).reshape(*batch, p)
    factor[..., lower[0], lower[1]] = vector[n_diagonal:].reshape(*batch, len(lower[0]))
    return factor @ np.swapaxes(factor, -1, -2)


def unconstrained_vector(parameters: MixtureParameters, covariance_type: str) -> np.ndarray:
    """Log weights, means, and covariances as log variances or log-diagonal Cholesky factors, flat."""
    with np.errstate(divide="ignore"):
        log_weights = np.maximum(np.log(parameters.weights), -700.0)
    if covariance_type in ("full", "tied"):
        covariances = _cholesky_vector(parameters.covariances)
    else:
        covariances = np.log(parameters.covariances).ravel()
    return np.concatenate([log_weights, parameters.means.ravel(), covariances])


def from_unconstrained(vector: np.ndarray, like: MixtureParameters, covariance_type: str) -> MixtureParameters:
    """Parameters from :func:`unconstrained_vector` (weights by softmax: always a valid mixture)."""
    k, p = like.means.shape
    log_weights = vector[:k]
    weights = np.exp(log_weights - log_weights.max())
    means = vector[k:k + k * p].reshape(k, p)
    rest = vector[k + k * p:]
    if covariance_type in ("full", "tied"):
        covariances = _cholesky_matrices(rest, like.covariances.shape)
    else:
        covariances = np.exp(rest).reshape(like.covariances.shape)
    if not (np.isfinite(weights).all() and np.isfinite(means).all() and np.isfinite(covariances).all()):
        raise ValueError("extrapolated mixture parameters are not finite")
    return MixtureParameters(weights / weights.sum(), means, covariances)

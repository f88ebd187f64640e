"""Asymptotic standard errors from the Fisher information, where a model's is known in closed form.

A Gaussian graphical model's free parameters are the precision ``K``'s diagonal and its
entries on the graph's edges (``K_ab = K_ba`` one parameter). Per row, the information
of two of them is ``I_ef = 1/2 tr(S E_e S E_f)`` (``S = K^-1`` the model's covariance,
``E_e`` the symmetric unit matrix of parameter ``e``); the estimates' covariance is
``(n I)^-1``, and the covariance entries' follows by the delta method, ``dS = -S dK S``
(Lauritzen, *Graphical Models*, 1996, 5.2; Anderson, *An Introduction to Multivariate
Statistical Analysis*). On a complete graph this is the Wishart's ``(s_ij^2 + s_ii s_jj) /
n``. The mean's are ``sqrt(s_ii / n)``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_INFORMATION_PARAMETERS", "MAX_JOINT_ENTRIES", "exponential_family_errors", "gaussian_graphical_errors"]

# the information matrix is parameters x parameters: beyond this many, it is not formed
MAX_INFORMATION_PARAMETERS = 3000


def gaussian_graphical_errors(covariance: np.ndarray, adjacency: np.ndarray, n: float) -> tuple[np.ndarray, np.ndarray]:
    """Standard errors of a Gaussian graphical model's MLE: ``(mean (p,), covariance (p, p))``.

    Raises
    ------
    ValueError
        More than :data:`MAX_INFORMATION_PARAMETERS` free precision entries.
    """
    p = covariance.shape[0]
    upper = np.triu(np.asarray(adjacency, dtype=bool), 1)
    a = np.concatenate([np.arange(p), np.nonzero(upper)[0]])
    b = np.concatenate([np.arange(p), np.nonzero(upper)[1]])
    if len(a) > MAX_INFORMATION_PARAMETERS:
        raise ValueError(f"{len(a):,} free precision entries: the information matrix is not formed beyond "
                         f"{MAX_INFORMATION_PARAMETERS:,} (dpgm.bootstrap gives standard errors)")
    s = covariance
    c = np.where(a == b, 0.5, 1.0)
    # I_ef = 1/2 * 2 c_e c_f (s_ad s_bc + s_ac s_bd), e = (a, b), f = (c, d)
    information = np.outer(c, c) * (s[np.ix_(a, b)] * s[np.ix_(b, a)] + s[np.ix_(a, a)] * s[np.ix_(b, b)])
    estimates = np.linalg.inv(n * information)
    # d S_ij / d theta_e = -c_e (s_ia s_bj + s_ib s_aj), for every (i, j) and e
    jacobian = -c[None, None, :] * (s[:, a][:, None, :] * s[b, :].T[None, :, :]
                                     + s[:, b][:, None, :] * s[a, :].T[None, :, :])
    variance = np.einsum("ije,ef,ijf->ij", jacobian, estimates, jacobian)
    return np.sqrt(np.diag(s) / n), np.sqrt(np.maximum(variance, 0.0))


# cells x features of the enumerated joint beyond which a log-linear model's information is not formed
MAX_JOINT_ENTRIES = 50_000_000


def exponential_family_errors(features: np.ndarray, probabilities: np.ndarray, n: float) -> np.ndarray:
    """Standard errors of an exponential family's weights: ``sqrt(diag((n Cov_p(F))^-1))``.

    ``features`` is cells x weights (each cell's feature values), ``probabilities`` the model's
    cell probabilities. The information ``n Cov_p(F)`` is the negative Hessian of the
    multinomial log-likelihood; on a hierarchical log-linear model with treatment-coded
    features it gives statsmodels' Poisson GLM ``bse`` (Birch 1963: the Poisson and
    multinomial likelihoods share the MLE and the information of every parameter but the
    intercept). A weight the features cannot identify (its unit vector is not orthogonal to
    the information's null space) gets NaN.
    """
    mean = features.T @ probabilities
    covariance = (features * probabilities[:, None]).T @ features - np.outer(mean, mean)
    information = n * (covariance + covariance.T) / 2
    values, vectors = np.linalg.eigh(information)
    keep = values > values.max(initial=0.0) * 1e-11
    inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
    null = vectors[:, ~keep]
    identified = (null**2).sum(axis=1) < 1e-16 if null.size else np.ones(len(values), dtype=bool)
    return np.where(identified, np.sqrt(np.maximum(np.diag(inverse), 0.0)), np.nan)

"""Asymptotic standard errors from the Fisher information, where a model's is known in closed form.

A Gaussian graphical model's free parameters are the precision ``K``'s diagonal and its
entries on the graph's edges (``K_ab = K_ba`` one parameter). Per row, the information
of two of them is ``I_ef = 1/2 tr(S E_e S E_f)`` (``S = K^-1`` the model's covariance,
``E_e`` the symmetric unit matrix of parameter ``e``); the estimates' covariance is
``(n I)^-1``, and the covariance entries' follows by the delta method, ``dS = -S dK S``
(Lauritzen, *Graphical Models*, 1996, 5.2; Anderson, *An Introduction to Multivariate
Statistical Analysis*). On a complete graph this is the Wishart's ``(s_ij^2 + s_ii s_jj) /
n``. The mean's are ``sqrt(s_ii / n)``.

A discrete exponential family ``p(x) ∝ exp(sum_i theta_i f_i(x_{S_i}))`` (a log-linear
model, a Markov network's canonical terms) has the information ``n Cov_p(F)``, the
negative Hessian of the multinomial log-likelihood; on a hierarchical log-linear model
with treatment-coded features its inverse gives statsmodels' Poisson GLM ``bse`` (Birch
1963: the Poisson and multinomial likelihoods share the MLE and the information of every
parameter but the intercept). :func:`feature_moments` forms ``Cov_p(F)`` with the
junction tree, never the joint: ``E[f_a f_b]`` is read from a clique's marginal where the
two scopes lie in one clique, and otherwise as ``sum_s P(x_S = s) f_a(s) E[f_b | x_S = s]``,
one calibration per state ``s`` of one of the two scopes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse

from dpgm.potentials import Scope, reduce_to

__all__ = ["MAX_INFORMATION_PARAMETERS", "combination_errors", "feature_moments", "gaussian_graphical_errors",
           "inverse_information"]

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


def inverse_information(covariance: np.ndarray, n: float) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of the information ``n covariance`` on its range, and a basis of its null space.

    Eigenvalues below ``1e-11`` of the largest count as zero: the features do not identify
    the directions of their eigenvectors (the basis' columns).
    """
    information = n * (covariance + covariance.T) / 2
    values, vectors = np.linalg.eigh(information)
    keep = values > values.max(initial=0.0) * 1e-11
    return (vectors[:, keep] / values[keep]) @ vectors[:, keep].T, vectors[:, ~keep]


def combination_errors(inverse: np.ndarray, null: np.ndarray, combinations: np.ndarray) -> np.ndarray:
    """Standard errors of linear combinations ``L theta`` (rows of ``combinations``): ``sqrt(diag(L I^-1 L'))``,
    NaN for a combination the features cannot identify (not orthogonal to the null space)."""
    combinations = np.atleast_2d(combinations)
    variance = np.einsum("mk,kl,ml->m", combinations, inverse, combinations)
    leak = ((combinations @ null) ** 2).sum(axis=1) if null.size else np.zeros(len(combinations))
    identified = leak <= 1e-16 * (combinations**2).sum(axis=1)
    return np.where(identified, np.sqrt(np.maximum(variance, 0.0)), np.nan)


# clique cells x evidence rows held at once while conditioning (32 MB of float64)
_CONDITIONING_BUDGET = 1 << 22


def feature_moments(variables: Sequence[str], cardinalities: Mapping[str, int],
                    factors: Sequence[tuple[Scope, np.ndarray]], features: Mapping[Scope, np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of features under ``p(x) ∝ prod factors``, from the model's junction tree.

    Parameters
    ----------
    variables, cardinalities
        The model's variables and their numbers of states.
    factors
        ``(scope, nonnegative table)`` pairs, axes in scope order (potentials and structural zeros).
    features
        Scope -> ``(k_S, cells_S)`` matrix: the scope's ``k_S`` features at each of its cells (C order).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``E_p[F]`` and ``Cov_p(F)``, the features in ``features`` order, then row order within a scope.

    Notes
    -----
    Two scopes that lie in one clique of the tree take their pair table ``P(x_S, x_T)`` from
    that clique's marginal. For the other pairs one of the two scopes is *conditioned*: each
    of its states ``s`` (where a feature of it is nonzero and ``P(s) > 0``) is entered as
    evidence and the tree calibrated, giving ``E[F | x_S = s]`` for every feature at once.
    The conditioned scopes cover every such pair, and the free ones (largest tables first)
    form a set whose pairs all lie in cliques. Memory: the tree, the features and ``K^2``
    for ``K`` features, never the joint; time: one calibration per conditioned state.
    """
    from dpgm.inference.batched import BatchedTree
    from dpgm.inference.queries import clique_posteriors

    cards = {v: int(cardinalities[v]) for v in variables}
    scopes = [tuple(s) for s in features]
    matrices = {s: np.asarray(features[s], dtype=float).reshape(np.shape(features[s])[0], -1) for s in scopes}
    shapes = {s: tuple(cards[v] for v in s) for s in scopes}
    bounds = np.cumsum([0] + [matrices[s].shape[0] for s in scopes])
    block = {s: slice(int(a), int(b)) for s, a, b in zip(scopes, bounds[:-1], bounds[1:], strict=True)}
    held = [set(scope) for scope, _ in factors]
    extra = [(s, np.ones(shapes[s])) for s in scopes if s and not any(set(s) <= h for h in held)]
    tree = BatchedTree(variables, cards, [*factors, *extra])
    log_z, marginals = tree.expected_counts(np.zeros((1, 0), dtype=np.int64), [])
    if not np.isfinite(log_z):
        raise ValueError("every cell of the model has probability zero")
    cliques = list(tree.structure.cliques)
    holding: dict[str, set[int]] = {}
    for index, clique in enumerate(cliques):
        for v in clique:
            holding.setdefault(v, set()).add(index)
    inside = {s: sorted(set.intersection(*(holding[v] for v in s)) if s else range(len(cliques))) for s in scopes}
    home = {s: cliques[min(inside[s], key=lambda i: tree.structure.table_size(cliques[i]))] for s in scopes}
    probability = {s: reduce_to(marginals[home[s]], home[s], s).ravel() for s in scopes}
    mean = np.concatenate([matrices[s] @ probability[s] for s in scopes]) if scopes else np.zeros(0)
    second = np.zeros((len(mean), len(mean)))
    # the scopes sharing a clique with each scope; the free scopes pairwise do, the others are conditioned
    members: dict[int, list[Scope]] = {}
    for s in scopes:
        for index in inside[s]:
            members.setdefault(index, []).append(s)
    partners = {s: {t for index in inside[s] for t in members[index]} for s in scopes}
    free: list[Scope] = []
    for s in sorted(scopes, key=lambda s: -math.prod(shapes[s])):
        if all(t in partners[s] for t in free):
            free.append(s)
    conditioned = [s for s in scopes if s not in free]
    for position, s in enumerate(free):
        for t in free[position:]:
            clique = min((cliques[i] for i in inside[s] if set(t) <= set(cliques[i])), key=tree.structure.table_size)
            pair = _pair_table(marginals[clique], clique, s, t, cards)
            values = (pair.T @ matrices[s].T).T @ matrices[t].T
            second[block[s], block[t]] = values
            second[block[t], block[s]] = values.T
    if conditioned:
        features_of_cells = _clique_features(tree, home, matrices, block, len(mean), cards)
        for s in conditioned:
            rows = np.flatnonzero((matrices[s] != 0).any(axis=0) & (probability[s] > 0))
            values = np.zeros((matrices[s].shape[0], len(mean)))
            step = max(1, _CONDITIONING_BUDGET // max(1, tree.layout.n_cells))
            for start in range(0, len(rows), step):
                chunk = rows[start:start + step]
                codes = np.stack(np.unravel_index(chunk, shapes[s]), axis=1) if s else np.zeros((len(chunk), 0))
                _, tables = clique_posteriors(tree, codes.astype(np.int64), s)
                flat = np.concatenate([tables[c].reshape(len(chunk), -1) for c in cliques], axis=1)
                given = (features_of_cells @ flat.T).T  # E[F | x_S = s], rows x features
                values += (matrices[s][:, chunk] * probability[s][chunk]) @ given
            second[block[s], :] = values
            second[:, block[s]] = values.T
    return mean, second - np.outer(mean, mean)


def _pair_table(marginal: np.ndarray, clique: Scope, s: Scope, t: Scope, cards: Mapping[str, int]
                ) -> scipy.sparse.csr_matrix:
    """``P(x_S = a, x_T = b)`` as a sparse ``cells_S x cells_T`` matrix (zero where the shared variables differ),
    from the marginal of a clique holding both scopes."""
    union = s + tuple(v for v in t if v not in s)
    table = reduce_to(marginal, clique, union).ravel()
    coordinates = np.indices([cards[v] for v in union]).reshape(len(union), -1)

    def cells(scope: Scope) -> np.ndarray:
        if not scope:
            return np.zeros(coordinates.shape[1], dtype=np.int64)
        return np.ravel_multi_index([coordinates[union.index(v)] for v in scope], [cards[v] for v in scope])

    return scipy.sparse.csr_matrix((table, (cells(s), cells(t))),
                                   shape=(math.prod(cards[v] for v in s), math.prod(cards[v] for v in t)))


def _clique_features(tree, home: Mapping[Scope, Scope], matrices: Mapping[Scope, np.ndarray],
                     block: Mapping[Scope, slice], n_features: int, cards: Mapping[str, int]
                     ) -> scipy.sparse.csr_matrix:
    """Features x flat clique cells (the tree's layout): feature ``f`` of scope ``S`` at every cell of ``S``'s
    home clique, so that this matrix times flat clique marginals is ``E[F]``."""
    cliques = list(tree.structure.cliques)
    offset = tree.layout.clique_offset
    parts = []
    for scope, matrix in matrices.items():
        clique = home[scope]
        coordinates = np.indices([cards[v] for v in clique]).reshape(len(clique), -1)
        cell = (np.ravel_multi_index([coordinates[clique.index(v)] for v in scope], [cards[v] for v in scope])
                if scope else np.zeros(coordinates.shape[1], dtype=np.int64))
        spread = scipy.sparse.coo_matrix(matrix[:, cell])
        start = int(offset[cliques.index(clique)])
        parts.append((spread.row + block[scope].start, spread.col + start, spread.data))
    rows, columns, data = (np.concatenate(p) for p in zip(*parts, strict=True))
    return scipy.sparse.csr_matrix((data, (rows, columns)), shape=(n_features, tree.layout.n_cells))

"""Gaussian mixtures on chunks: the E step as one pass, a row sample for initialisation, per-row posteriors.

The E step of every restart runs in the same pass. For each chunk and restart the
kernel returns the responsibility-weighted counts ``nk``, sums ``s1`` and
cross-products ``s2`` of the rows (centred on the component means the pass used,
so data far from zero keep their digits) and the log-likelihood, by log-sum-exp
over components (no underflow however many dimensions). The partials are plain
dicts of arrays: chunks combine with ``+`` in the shared map-reduce.

A row with some NaN coordinates contributes through the marginal density of its
observed coordinates; its missing ones enter ``s1``/``s2`` through their
conditional moments given the observed ones and the component:
``E[x_m] = mu_m + S_mo S_oo^-1 (x_o - mu_o)`` and ``E[x_m x_m^T] = E[x_m] E[x_m]^T
+ S_mm - S_mo S_oo^-1 S_om`` (Ghahramani & Jordan 1994). Rows of one missingness
pattern are processed together. Rows with every coordinate missing carry no
information: they are counted (``empty``) and left out.

References
----------
Ghahramani, Z. and Jordan, M. I. (1994). Supervised learning from incomplete data
via an EM approach. *Advances in Neural Information Processing Systems* 6, 120-127.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from dpgm.errors import DataError
from dpgm.stats.engine import map_reduce
from dpgm.stats.rows import row_map

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["ComponentParameters", "RowSample", "add_filled_moments", "estep_pass", "log_responsibilities",
           "responsibility_map", "row_log_likelihood", "sample_pass"]

_LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class ComponentParameters:
    """One restart's parameters in the form the chunk kernels use.

    ``covariances`` are every component's full ``p x p`` matrix (for rows with missing
    coordinates); ``precision_cholesky`` is scikit-learn's ``precisions_cholesky_``
    (``(K, p, p)`` for full and tied, ``(K, p)`` reciprocal standard deviations for
    diag and spherical) and ``log_det`` the sum of the logs of its diagonal.
    """

    diagonal: bool
    log_weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    precision_cholesky: np.ndarray
    log_det: np.ndarray

    @classmethod
    def build(cls, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> ComponentParameters:
        """From weights ``(K,)``, means ``(K, p)`` and full covariances ``(K, p, p)`` (positive definite)."""
        k, p = means.shape
        diagonal = bool(np.all(covariances[:, ~np.eye(p, dtype=bool)] == 0))
        if diagonal:
            chol = 1.0 / np.sqrt(np.diagonal(covariances, axis1=1, axis2=2))
            log_det = np.log(chol).sum(axis=1)
        else:
            chol = np.empty_like(covariances)
            for c in range(k):
                lower = np.linalg.cholesky(covariances[c])
                chol[c] = solve_triangular(lower, np.eye(p), lower=True).T
            log_det = np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
        with np.errstate(divide="ignore"):
            log_weights = np.log(weights)
        return cls(diagonal, log_weights, np.asarray(means, dtype=float), covariances, chol, log_det)


def _complete_log_density(x: np.ndarray, params: ComponentParameters) -> np.ndarray:
    """``log N(x_r; mu_k, S_k)`` for complete rows, ``(rows, K)``."""
    n, p = x.shape
    k = params.means.shape[0]
    out = np.empty((n, k))
    for c in range(k):
        if params.diagonal:
            y = (x - params.means[c]) * params.precision_cholesky[c]
        else:
            y = (x - params.means[c]) @ params.precision_cholesky[c]
        out[:, c] = np.einsum("ij,ij->i", y, y)
    return -0.5 * (p * _LOG_2PI + out) + params.log_det


def _pattern_log_density(x: np.ndarray, observed: np.ndarray, params: ComponentParameters
                         ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Marginal densities of rows sharing one missingness pattern, and each component's regression.

    Returns ``log N(x_o; mu_o, S_oo)`` as ``(rows, K)`` and, per component, the
    centred filled rows ``E[x] - mu`` (``(rows, p)``), and the conditional covariance
    of the missing coordinates ``S_mm - S_mo S_oo^-1 S_om`` with their indices.
    """
    o = np.nonzero(observed)[0]
    m = np.nonzero(~observed)[0]
    n = x.shape[0]
    k = params.means.shape[0]
    xo = x[:, o]
    log_density = np.empty((n, k))
    filled = []
    for c in range(k):
        sigma, mu = params.covariances[c], params.means[c]
        d_o = xo - mu[o]
        lower = np.linalg.cholesky(sigma[np.ix_(o, o)])
        y = solve_triangular(lower, d_o.T, lower=True)
        log_density[:, c] = (-0.5 * (len(o) * _LOG_2PI + np.einsum("ij,ij->j", y, y))
                             - np.log(np.diag(lower)).sum())
        gain = cho_solve((lower, True), sigma[np.ix_(o, m)]).T  # S_mo S_oo^-1
        centred = np.empty((n, len(observed)))
        centred[:, o] = d_o
        centred[:, m] = d_o @ gain.T
        conditional = sigma[np.ix_(m, m)] - gain @ sigma[np.ix_(o, m)]
        filled.append((centred, (conditional + conditional.T) / 2, m))
    return log_density, filled


def _patterns(present: np.ndarray, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows (indices into the chunk) grouped by missingness pattern: ``[(observed mask, rows)]``."""
    if not len(rows):
        return []
    masks, inverse = np.unique(present[rows], axis=0, return_inverse=True)
    inverse = inverse.ravel()
    return [(masks[g], rows[inverse == g]) for g in range(len(masks))]


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(a - top).sum(axis=1, keepdims=True)) + top)[:, 0]


def _zero_statistics(k: int, p: int, diagonal_statistics: bool) -> dict[str, Any]:
    return {"loglik": 0.0, "nk": np.zeros(k), "s1": np.zeros((k, p)),
            "s2": np.zeros((k, p)) if diagonal_statistics else np.zeros((k, p, p))}


# rows per block of the complete-row kernel: a block's centred copies (one per component) stay in cache
_BLOCK_ROWS = 4096


def _complete_statistics(x: np.ndarray, w: np.ndarray, params: ComponentParameters, diagonal_statistics: bool,
                         stats: dict[str, Any]) -> None:
    """Add one block of complete rows to ``stats``: each row centred once per component, the copy serving the
    density (one triangular product with the precision's Cholesky factor) and the weighted sums."""
    n, p = x.shape
    k = params.means.shape[0]
    log_joint = np.empty((n, k))
    centred = np.empty((k, n, p))
    scaled = np.empty((n, p))
    for c in range(k):
        np.subtract(x, params.means[c], out=centred[c])
        if params.diagonal:
            np.multiply(centred[c], params.precision_cholesky[c], out=scaled)
        else:
            np.matmul(centred[c], params.precision_cholesky[c], out=scaled)
        np.multiply(scaled, scaled, out=scaled)
        scaled.sum(axis=1, out=log_joint[:, c])
    log_joint *= -0.5
    log_joint += params.log_det - 0.5 * p * _LOG_2PI + params.log_weights
    norm = _logsumexp(log_joint)
    stats["loglik"] += float(w @ norm)
    log_joint -= norm[:, None]
    resp = np.exp(log_joint, out=log_joint)
    resp *= w[:, None]
    stats["nk"] += resp.sum(axis=0)
    for c in range(k):
        r = resp[:, c]
        stats["s1"][c] += r @ centred[c]
        np.multiply(centred[c], r[:, None], out=scaled)
        if diagonal_statistics:
            stats["s2"][c] += np.einsum("ij,ij->j", scaled, centred[c])
        else:
            stats["s2"][c] += scaled.T @ centred[c]


def estep_chunk(values: np.ndarray, weights: np.ndarray, restarts: Sequence[tuple[ComponentParameters, bool]]
                ) -> dict[str, Any]:
    """The E-step statistics of one chunk (rows x variables) for every restart.

    ``restarts`` pairs each restart's parameters with whether it needs only the
    diagonal of the cross-products (diag and spherical covariances).
    """
    n, p = values.shape
    present = ~np.isnan(values)
    n_present = present.sum(axis=1)
    complete = n_present == p
    empty = n_present == 0
    partial = np.nonzero(~complete & ~empty)[0]
    counts = {"rows": float(weights.sum()), "incomplete": float(weights[~complete & ~empty].sum()),
              "empty": float(weights[empty].sum())}
    groups = _patterns(present, partial)
    xc, wc = values[complete], weights[complete]
    out = []
    for params, diagonal_statistics in restarts:
        k = params.means.shape[0]
        stats = _zero_statistics(k, p, diagonal_statistics)
        for start in range(0, len(xc), _BLOCK_ROWS):
            _complete_statistics(xc[start:start + _BLOCK_ROWS], wc[start:start + _BLOCK_ROWS], params,
                                 diagonal_statistics, stats)
        for observed, rows in groups:
            log_density, filled = _pattern_log_density(values[rows], observed, params)
            log_joint = log_density + params.log_weights
            norm = _logsumexp(log_joint)
            w = weights[rows]
            stats["loglik"] += float(w @ norm)
            resp = np.exp(log_joint - norm[:, None]) * w[:, None]
            stats["nk"] += resp.sum(axis=0)
            add_filled_moments(stats, resp, filled, diagonal_statistics)
        out.append(stats)
    return {"counts": counts, "restarts": out}


def add_filled_moments(stats: dict[str, Any], resp: np.ndarray, filled: list, diagonal_statistics: bool) -> None:
    """Add one missingness pattern's rows to each component's ``s1`` and ``s2``: ``resp (rows, K)`` their
    weights, ``filled`` (:func:`_pattern_log_density`'s) per component the rows centred with their missing
    coordinates filled by the conditional mean, the conditional covariance, and the missing coordinates
    (whose conditional covariance each row adds to ``s2``)."""
    for c, (centred, conditional, m) in enumerate(filled):
        r = resp[:, c]
        stats["s1"][c] += r @ centred
        if diagonal_statistics:
            stats["s2"][c] += r @ (centred * centred)
            stats["s2"][c][m] += r.sum() * np.diag(conditional)
        else:
            stats["s2"][c] += (centred * r[:, None]).T @ centred
            stats["s2"][c][np.ix_(m, m)] += r.sum() * conditional


def log_responsibilities(values: np.ndarray, params: ComponentParameters) -> np.ndarray:
    """``log P(component | observed coordinates of the row)``, ``(rows, K)``; an all-NaN row gets the weights."""
    log_joint = _log_joint(values, params)
    return log_joint - _logsumexp(log_joint)[:, None]


def row_log_likelihood(values: np.ndarray, params: ComponentParameters) -> np.ndarray:
    """``log p(observed coordinates of the row)``, ``(rows,)``: log-sum-exp over the components of each
    component's marginal density of the row's observed coordinates; 0 for an all-NaN row."""
    return _logsumexp(_log_joint(values, params))


def _log_joint(values: np.ndarray, params: ComponentParameters) -> np.ndarray:
    """``log w_k + log N(x_o; mu_k,o, S_k,oo)`` of each row's observed coordinates ``o``, ``(rows, K)``."""
    n, p = values.shape
    present = ~np.isnan(values)
    n_present = present.sum(axis=1)
    complete = n_present == p
    log_joint = np.tile(params.log_weights, (n, 1))
    if complete.any():
        log_joint[complete] += _complete_log_density(values[complete], params)
    for observed, rows in _patterns(present, np.nonzero(~complete & (n_present > 0))[0]):
        log_joint[rows] += _pattern_log_density(values[rows], observed, params)[0]
    return log_joint


def _chunk_values(index: int, columns: dict[str, np.ndarray], variables: Sequence[str], weight: str | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    values = np.column_stack([np.asarray(columns[v], dtype=np.float64) for v in variables])
    if np.isinf(values).any():
        bad = variables[int(np.argmax(np.isinf(values).any(axis=0)))]
        raise DataError("holds an infinite value (NaN marks a missing one)", variable=bad, chunk=index)
    if weight is None:
        return values, np.ones(len(values))
    weights = np.asarray(columns[weight], dtype=np.float64)
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise DataError("weights must be finite and nonnegative", variable=weight, chunk=index)
    return values, weights


def _estep_kernel(index: int, columns: dict[str, np.ndarray], shared: Any, variables: tuple[str, ...],
                  weight: str | None) -> dict[str, Any]:
    values, weights = _chunk_values(index, columns, variables, weight)
    return estep_chunk(values, weights, shared)


def estep_pass(source: DataSource, variables: Sequence[str], restarts: Sequence[tuple[ComponentParameters, bool]],
               *, name: str = "dpgm-estep", rows: tuple[int, int] | None = None) -> Any:
    """One pass over ``source`` computing :func:`estep_chunk`'s statistics of every restart (run on its client).

    Returns ``{"counts": {rows, incomplete, empty}, "restarts": [{loglik, nk, s1, s2}, ...]}``;
    ``rows``: only rows ``[start, stop)``, whole chunks (see :func:`dpgm.stats.expected.row_blocks`).
    """
    from dpgm.stats.expected import select_rows

    kernel = functools.partial(_estep_kernel, variables=tuple(variables), weight=source.weight)
    return source.compute(map_reduce(select_rows(source.columns(variables), rows), kernel, name=name,
                                     shared=list(restarts)))


# ---------------------------------------------------------------- a row sample for initialisation


@dataclass
class RowSample:
    """The ``size`` rows of largest key seen so far (a weighted reservoir: Efraimidis & Spirakis 2006).

    A row's key is ``log(u) / weight`` with ``u`` in (0, 1) a hash of the row's
    values and the seed, so the sample depends on the data and the seed only,
    never on the chunking or on which worker read what.
    """

    keys: np.ndarray
    rows: np.ndarray
    size: int

    def __add__(self, other: RowSample) -> RowSample:
        keys = np.concatenate([self.keys, other.keys])
        rows = np.concatenate([self.rows, other.rows])
        if len(keys) > self.size:
            keep = np.argpartition(-keys, self.size - 1)[: self.size]
            keys, rows = keys[keep], rows[keep]
        return RowSample(keys, rows, self.size)

    def ordered(self) -> np.ndarray:
        """The sampled rows, largest key first (a deterministic order)."""
        return self.rows[np.argsort(-self.keys, kind="stable")]


def _row_hash(values: np.ndarray, seed: int) -> np.ndarray:
    """A uniform number in (0, 1) per row from the bits of its values (splitmix64 rounds)."""
    bits = np.ascontiguousarray(np.where(np.isnan(values), np.nan, values)).view(np.uint64)
    h = np.full(len(values), np.uint64(seed % (1 << 64)), dtype=np.uint64)
    for j in range(bits.shape[1]):
        h = h ^ bits[:, j]
        h = h + np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = h ^ (h >> np.uint64(31))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _sample_kernel(index: int, columns: dict[str, np.ndarray], shared: Any, variables: tuple[str, ...],
                   weight: str | None, size: int, seed: int) -> dict[str, Any]:
    values, weights = _chunk_values(index, columns, variables, weight)
    present = ~np.isnan(values)
    n_present = present.sum(axis=1)
    empty = n_present == 0
    usable = ~empty & (weights > 0)
    with np.errstate(divide="ignore"):
        keys = np.log(_row_hash(values[usable], seed)) / weights[usable]
    sample = RowSample(np.empty(0), np.empty((0, values.shape[1])), size) + RowSample(keys, values[usable], size)
    return {"sample": sample,
            "counts": {"rows": float(weights.sum()), "empty": float(weights[empty].sum()),
                       "incomplete": float(weights[~empty & (n_present < values.shape[1])].sum())}}


def sample_pass(source: DataSource, variables: Sequence[str], size: int, seed: int) -> Any:
    """One pass over ``source`` drawing ``size`` rows (probability by weight, without replacement) and counting rows.

    Returns ``{"sample": RowSample, "counts": {rows, empty, incomplete}}``.
    """
    kernel = functools.partial(_sample_kernel, variables=tuple(variables), weight=source.weight, size=int(size),
                               seed=int(seed))
    return source.compute(map_reduce(source.columns(variables), kernel, name="dpgm-mixture-sample"))


# ---------------------------------------------------------------- per-row posteriors


def _responsibility_block(index: int, columns: dict[str, np.ndarray], params: ComponentParameters, *,
                          variables: tuple[str, ...]) -> np.ndarray:
    values, _ = _chunk_values(index, columns, variables, None)
    return np.exp(log_responsibilities(values, params))


def responsibility_map(data: Any, variables: Sequence[str], params: ComponentParameters) -> Any:
    """Lazy ``(row, component)`` posteriors of the components given each row's observed coordinates.

    One task per chunk (``dpgm-predict`` in the dashboard, see :func:`dpgm.stats.rows.row_map`);
    the parameters enter the graph once.
    """
    variables = tuple(variables)
    block = functools.partial(_responsibility_block, variables=variables)
    return row_map(data, variables, block, params.means.shape[0], shared=params)

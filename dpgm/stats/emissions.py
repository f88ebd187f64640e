"""What a hidden Markov model's emissions do on a worker: each step's log density per state, and the
statistics of the M step from the states' posteriors.

A chunk's steps arrive flattened, ``(steps, ...)``: every (sequence, time) cell of a
``(row, time)`` layout, or every row of the long layout. An emission *plan* is the
plain-array form of one emission family (built by :mod:`dpgm.models.emissions` for
the current parameters and shipped to the workers once per pass):

* :meth:`factors` ``((steps, S), (steps,))``: ``p(x_t | z_t = s)`` of the step's
  observed values as a factor times ``exp(shift)`` (the factors' largest is 1 for a
  continuous family, whose log densities may lie far from 0); 1 and 0 where they are
  all missing (summed out);
* :meth:`observed` ``(steps,)``: whether any of the plan's values is observed at the step;
* :meth:`statistics`: the weighted sufficient statistics given ``gamma (steps, S)``,
  each step's state posterior times its sequence's weight.

Categorical (codes, ``-1`` missing), Gaussian (one or several continuous variables,
NaN missing; a step with some coordinates missing contributes their marginal
density and, to the statistics, their conditional expectations, as the mixtures'
E step does: :mod:`dpgm.stats.mixture`), Gaussian mixtures per state (the same, with
each state's mixes as components: a step's weight on mix ``k`` of state ``s`` is its
state posterior times the mix's posterior given the state and the step's observed
coordinates) and Poisson (counts, each variable independent given the state, NaN
missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from scipy.special import gammaln

from dpgm.errors import DataError
from dpgm.stats.mixture import (
    ComponentParameters,
    _log_joint,
    _pattern_log_density,
    _patterns,
    add_filled_moments,
)

__all__ = ["CategoricalPlan", "GaussianPlan", "MixturePlan", "PoissonPlan"]


@numba.njit(nogil=True, cache=True)
def _category_counts(values, gamma, out):
    """``out[s, c] += sum of gamma[t, s]`` over the steps ``t`` whose code is ``c`` (missing: skipped)."""
    for t in range(values.shape[0]):
        c = values[t]
        if c >= 0:
            for s in range(gamma.shape[1]):
                out[s, c] += gamma[t, s]


@dataclass(frozen=True)
class CategoricalPlan:
    """One categorical variable: ``table (S, m)`` = ``p(x = c | z = s)``."""

    variable: str
    table: np.ndarray

    @property
    def variables(self) -> tuple[str, ...]:
        return (self.variable,)

    def values(self, columns: dict[str, np.ndarray], chunk: int) -> np.ndarray:
        """The chunk's codes, flattened and checked: ``-1`` (missing) or ``0..m-1``."""
        codes = np.asarray(columns[self.variable]).reshape(-1).astype(np.int64, copy=False)
        m = self.table.shape[1]
        if codes.size and (codes.min() < -1 or codes.max() >= m):
            bad = int(codes[(codes < -1) | (codes >= m)][0])
            raise DataError(f"code {bad!r} is out of range: expected -1 (missing) or 0..{m - 1}",
                            variable=self.variable, chunk=chunk)
        return codes

    def observed(self, values: np.ndarray) -> np.ndarray:
        return values >= 0

    def factors(self, values: np.ndarray) -> tuple[np.ndarray, None]:
        # a missing step (-1) reads the extra row of ones
        padded = np.concatenate([self.table.T, np.ones((1, self.table.shape[0]))])
        return padded[values], None

    def zero(self) -> dict[str, np.ndarray]:
        return {"counts": np.zeros_like(self.table)}

    def statistics(self, values: np.ndarray, gamma: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        _category_counts(values, np.ascontiguousarray(gamma), stats["counts"])


@dataclass(frozen=True)
class GaussianPlan:
    """Continuous ``variables`` jointly normal given the state: ``params`` (one component per state, weights 1)."""

    variables: tuple[str, ...]
    params: ComponentParameters
    diagonal_statistics: bool

    def values(self, columns: dict[str, np.ndarray], chunk: int) -> np.ndarray:
        return _continuous_values(self.variables, columns, chunk)

    def observed(self, values: np.ndarray) -> np.ndarray:
        return ~np.isnan(values).all(axis=1)

    def factors(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _shifted(_log_joint(values, self.params))

    def zero(self) -> dict[str, np.ndarray]:
        return _zero_moments(self.params, self.diagonal_statistics)

    def statistics(self, values: np.ndarray, gamma: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        """Sums of ``gamma``, of ``gamma (x - mu)`` and ``gamma (x - mu)(x - mu)^T`` (centred on the current means;
        missing coordinates filled by their conditional expectation, their conditional covariance added)."""
        _moments(values, gamma, self.params, self.diagonal_statistics, stats)


@dataclass(frozen=True)
class MixturePlan:
    """Continuous ``variables``, a mixture of ``n_mix`` Gaussians per state: ``params`` holds the ``S * n_mix``
    components state by state (component ``s * n_mix + k`` is mix ``k`` of state ``s``, its log weight the
    mix's log weight within the state)."""

    variables: tuple[str, ...]
    params: ComponentParameters
    n_mix: int
    diagonal_statistics: bool

    def values(self, columns: dict[str, np.ndarray], chunk: int) -> np.ndarray:
        return _continuous_values(self.variables, columns, chunk)

    def observed(self, values: np.ndarray) -> np.ndarray:
        return ~np.isnan(values).all(axis=1)

    def _log_joint(self, values: np.ndarray) -> np.ndarray:
        """``log w_sk + log N(x_o; mu_sk,o, S_sk,oo)``, ``(steps, S, n_mix)``."""
        return _log_joint(values, self.params).reshape(len(values), -1, self.n_mix)

    def factors(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _shifted(_logsumexp_last(self._log_joint(values)))

    def zero(self) -> dict[str, np.ndarray]:
        return _zero_moments(self.params, self.diagonal_statistics)

    def statistics(self, values: np.ndarray, gamma: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        """:class:`GaussianPlan`'s moments per mix, each step weighted by ``gamma[t, s] p(mix k | x_t, z_t = s)``
        (flat over ``(S, n_mix)``)."""
        log_joint = self._log_joint(values)
        with np.errstate(under="ignore"):
            within = np.exp(log_joint - _logsumexp_last(log_joint)[..., None])
        weights = (gamma[:, :, None] * within).reshape(len(values), -1)
        _moments(values, weights, self.params, self.diagonal_statistics, stats)


@dataclass(frozen=True)
class PoissonPlan:
    """Counts of ``variables``, independent Poisson given the state: ``rates (S, p)``."""

    variables: tuple[str, ...]
    rates: np.ndarray

    def values(self, columns: dict[str, np.ndarray], chunk: int) -> np.ndarray:
        out = np.stack([np.asarray(columns[v], dtype=np.float64).reshape(-1) for v in self.variables], axis=1)
        bad = ~np.isnan(out) & ((out < 0) | (out != np.round(out)) | np.isinf(out))
        if bad.any():
            v = self.variables[int(np.nonzero(bad.any(axis=0))[0][0])]
            raise DataError(f"holds {out[bad][0]!r}: Poisson emissions take nonnegative whole counts (NaN: missing)",
                            variable=v, chunk=chunk)
        return out

    def observed(self, values: np.ndarray) -> np.ndarray:
        return ~np.isnan(values).all(axis=1)

    def factors(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _shifted(self.log_prob(values))

    def log_prob(self, values: np.ndarray) -> np.ndarray:
        """``log p(x_t | z_t = s)`` ``(steps, S)`` of the observed counts (0 where all are missing)."""
        seen = ~np.isnan(values)
        x = np.where(seen, values, 0.0)
        with np.errstate(divide="ignore"):
            log_rates = np.log(self.rates)
        # sum over observed variables of x log(rate) - rate - log x!
        terms = x[:, None, :] * np.where(x[:, None, :] > 0, log_rates[None], 0.0) - self.rates[None]
        terms = np.where(seen[:, None, :], terms - gammaln(x + 1)[:, None, :], 0.0)
        return terms.sum(axis=2)

    def zero(self) -> dict[str, np.ndarray]:
        return {"weight": np.zeros_like(self.rates), "total": np.zeros_like(self.rates)}

    def statistics(self, values: np.ndarray, gamma: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        seen = ~np.isnan(values)
        x = np.where(seen, values, 0.0)
        stats["weight"] += gamma.T @ seen.astype(np.float64)
        stats["total"] += gamma.T @ x


Plan = CategoricalPlan | GaussianPlan | MixturePlan | PoissonPlan


def _continuous_values(variables: tuple[str, ...], columns: dict[str, np.ndarray], chunk: int) -> np.ndarray:
    """The chunk's steps of ``variables``, ``(steps, p)`` floats; an infinite value refused (NaN: missing)."""
    out = np.stack([np.asarray(columns[v], dtype=np.float64).reshape(-1) for v in variables], axis=1)
    if np.isinf(out).any():
        v = variables[int(np.nonzero(np.isinf(out).any(axis=0))[0][0])]
        raise DataError("holds an infinite value (NaN marks a missing one)", variable=v, chunk=chunk)
    return out


def _zero_moments(params: ComponentParameters, diagonal_statistics: bool) -> dict[str, np.ndarray]:
    k, p = params.means.shape
    return {"nk": np.zeros(k), "s1": np.zeros((k, p)),
            "s2": np.zeros((k, p)) if diagonal_statistics else np.zeros((k, p, p))}


def _moments(values: np.ndarray, weights: np.ndarray, params: ComponentParameters, diagonal_statistics: bool,
             stats: dict[str, np.ndarray]) -> None:
    """Add ``sum w``, ``sum w (x - mu)`` and ``sum w (x - mu)(x - mu)^T`` per component (``weights (steps, K)``,
    centred on the components' means; missing coordinates filled by their conditional expectation given the
    observed ones, their conditional covariance added; steps with nothing observed left out)."""
    present = ~np.isnan(values)
    complete = present.all(axis=1)
    means = params.means
    rows = np.nonzero(complete)[0]
    x = values[rows]
    for c in range(weights.shape[1]):
        r = weights[rows, c]
        centred = x - means[c]
        stats["nk"][c] += r.sum()
        stats["s1"][c] += r @ centred
        if diagonal_statistics:
            stats["s2"][c] += r @ (centred * centred)
        else:
            stats["s2"][c] += (centred * r[:, None]).T @ centred
    for observed, group in _patterns(present, np.nonzero(~complete & present.any(axis=1))[0]):
        _, filled = _pattern_log_density(values[group], observed, params)
        stats["nk"] += weights[group].sum(axis=0)
        add_filled_moments(stats, weights[group], filled, diagonal_statistics)


def _logsumexp_last(a: np.ndarray) -> np.ndarray:
    """``log sum exp`` over the last axis (all ``-inf``: ``-inf``)."""
    top = a.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", under="ignore"):
        return np.log(np.exp(a - top).sum(axis=-1)) + top[..., 0]


def _shifted(log_density: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``exp(log_density - shift)`` and ``shift``, each step's largest finite log density (0 if none)."""
    with np.errstate(invalid="ignore"):
        shift = np.max(log_density, axis=1)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    return np.exp(log_density - shift[:, None]), shift


def plan_values(plans: tuple[Any, ...], columns: dict[str, np.ndarray], chunk: int) -> list[np.ndarray]:
    """Every plan's flattened, checked values of the chunk."""
    return [plan.values(columns, chunk) for plan in plans]

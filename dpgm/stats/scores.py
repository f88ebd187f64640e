"""Each row's log-likelihood under a fitted model, as a chunked map (no reduction): the blocks of :func:`dpgm.score`.

Every block is a per-row function of one chunk (see :func:`dpgm.stats.rows.row_map`)
returning a ``(rows, 1)`` column of ``log p(observed values of the row)``; what is
not observed is summed out:

* discrete models (:func:`discrete_block`): the batched junction tree's log
  probability of the row's evidence (``-1`` and model variables absent from the data
  summed out), less the model's log normaliser (zero for a Bayesian network up to
  rounding, ``log Z`` for a Markov network or log-linear model);
* hidden Markov models (:func:`sequence_block`): the forward algorithm over the row's
  sequence (a step's missing values are summed out: their emission factor is 1);
* Gaussian models and mixtures (:func:`gaussian_block`): log-sum-exp over components
  of the density of the row's observed coordinates (their marginal); a Gaussian
  graphical model or linear-Gaussian network is one component;
* directed networks of tables and GLM nodes (:func:`network_block`): the sum of each
  node's term, ``log P(node | parents)``, under each state of a latent root, then
  log-sum-exp over those states. A node whose value is missing contributes nothing
  (its term sums to one over its values) as long as no node with an observed value
  has a missing parent; a row where one has is NaN (its parent cannot be summed out
  node by node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpgm.errors import DataError
from dpgm.stats.expected import code_matrix
from dpgm.stats.glm_predict import design_rows
from dpgm.stats.irls import Design
from dpgm.stats.mixture import _chunk_values, _logsumexp, row_log_likelihood
from dpgm.stats.sequences import chunk_emissions, emission_factors

__all__ = ["FamilyTables", "GLMTerm", "NetworkPlan", "TableTerm", "discrete_block", "gaussian_block", "network_block",
           "score_summary", "sequence_block", "together"]


@dataclass(frozen=True)
class FamilyTables:
    """A Bayesian network's log tables for rows that observe every variable: ``log P(row) = sum of one
    entry per family`` (no junction tree). ``tables[i]`` is family ``i``'s log table, flattened, indexed by
    ``codes[:, columns[i]] @ strides[i]``."""

    tables: tuple[np.ndarray, ...]
    columns: tuple[tuple[int, ...], ...]
    strides: tuple[np.ndarray, ...]

    def log_probability(self, codes: np.ndarray) -> np.ndarray:
        """``log P(row)`` of complete rows (``codes``: ``(rows, variables)``, no ``-1``)."""
        total = np.zeros(len(codes))
        for table, columns, strides in zip(self.tables, self.columns, self.strides, strict=True):
            total += table[codes[:, list(columns)].astype(np.int64) @ strides]
        return total


def discrete_block(index: int, columns: dict[str, np.ndarray], shared: tuple[Any, float, FamilyTables | None], *,
                   observed: tuple[str, ...], cardinalities: tuple[int, ...]) -> np.ndarray:
    """``log P(row's evidence) - log Z`` by the junction tree ``shared = (tree, log Z, families)``; impossible
    rows ``-inf``. With ``families`` (a Bayesian network, every variable in the data) complete rows are summed
    from the tables and only rows with a missing value go through the tree."""
    tree, log_z, families = shared
    codes = code_matrix(index, columns, observed, cardinalities)
    if families is None:
        log_evidence, _ = tree.posteriors(codes, observed, targets=[])
        return (log_evidence - log_z)[:, None]
    result = np.empty(len(codes))
    complete = (codes >= 0).all(axis=1)
    result[complete] = families.log_probability(codes[complete])
    if not complete.all():
        log_evidence, _ = tree.posteriors(codes[~complete], observed, targets=[])
        result[~complete] = log_evidence - log_z
    return result[:, None]


def sequence_block(index: int, columns: dict[str, np.ndarray], shared: tuple, *,
                   forward: Callable[..., np.ndarray]) -> np.ndarray:
    """Each sequence's log-likelihood, ``shared = (start, transition, emission plans)``: ``forward(emission,
    shift, ends, start, transition)`` is the forward algorithm (:func:`dpgm.inference.chain.sequence_logliks`), passed in
    by the caller: statistics sit below inference."""
    start, transition, plans = shared
    values, ends, shape = chunk_emissions(index, columns, plans)
    return forward(*emission_factors(plans, values, shape), ends, start, transition)[:, None]


def gaussian_block(index: int, columns: dict[str, np.ndarray], shared: Any, *,
                   variables: tuple[str, ...]) -> np.ndarray:
    """Log-sum-exp over the components of ``shared`` (:class:`~dpgm.stats.mixture.ComponentParameters`) of the
    density of each row's observed coordinates."""
    values, _ = _chunk_values(index, columns, variables, None)
    return row_log_likelihood(values, shared)[:, None]


@dataclass(frozen=True)
class TableTerm:
    """A tabular node: ``log P(variable | parents)`` with axes ``family`` (the latent root's, if a parent, sized
    by its states), in the data's codes."""

    family: tuple[str, ...]
    log_table: np.ndarray


@dataclass(frozen=True)
class GLMTerm:
    """A GLM node: one ``(design, coefficients, scale)`` per state of the latent root (one if not its child).

    ``response`` maps a categorical child's data code to its numeric response (bernoulli,
    poisson) or class (categorical) in the fit's order; None for a continuous child.
    """

    child: str
    by_state: tuple[tuple[Design, np.ndarray, float], ...]
    response: np.ndarray | None = None


@dataclass(frozen=True)
class NetworkPlan:
    """A directed network's nodes as terms of each row's log-likelihood, and its latent root (or None)."""

    latent: str | None
    log_prior: np.ndarray
    tables: tuple[TableTerm, ...]
    glms: tuple[GLMTerm, ...]

    @property
    def columns(self) -> list[str]:
        """The data columns the terms read."""
        names = [v for t in self.tables for v in t.family if v != self.latent]
        names += [v for g in self.glms for v in (g.child, *(p for p, _ in g.by_state[0][0].parents))]
        return list(dict.fromkeys(names))

    def parents(self) -> dict[str, list[str]]:
        """Each node's observed parents."""
        out = {t.family[0]: [p for p in t.family[1:] if p != self.latent] for t in self.tables}
        return out | {g.child: [p for p, _ in g.by_state[0][0].parents] for g in self.glms}


def _present(values: np.ndarray) -> np.ndarray:
    return values >= 0 if values.dtype.kind in "iu" else ~np.isnan(values)


def network_block(index: int, columns: dict[str, np.ndarray], plan: NetworkPlan) -> np.ndarray:
    """Each row's log-likelihood under a directed network of tables and GLM nodes (see the module docstring)."""
    n = len(next(iter(columns.values())))
    present = {}
    for v in plan.columns:
        values = np.asarray(columns[v])
        if values.dtype.kind == "f" and np.isinf(values).any():
            raise DataError("holds an infinite value (NaN marks a missing one)", variable=v, chunk=index)
        present[v] = _present(values)
    undefined = np.zeros(n, bool)
    for node, parents in plan.parents().items():
        for p in parents:
            undefined |= present[node] & ~present[p]
    k = len(plan.log_prior)
    logp = np.tile(plan.log_prior, (n, 1))
    for term in plan.tables:
        observed = [v for v in term.family if v != plan.latent]
        shape = term.log_table.shape
        codes = code_matrix(index, columns, observed, [shape[term.family.index(v)] for v in observed])
        codes = np.maximum(codes, 0).astype(np.intp)
        for z in range(k):
            index_ = [codes[:, observed.index(v)] if v != plan.latent else np.full(n, z, np.intp)
                      for v in term.family]
            values = term.log_table[tuple(index_)]
            logp[:, z] += np.where(present[term.family[0]], values, 0.0)
    for term in plan.glms:
        design = term.by_state[0][0]
        y = np.asarray(columns[term.child])
        if term.response is not None:
            codes = code_matrix(index, columns, [term.child], [len(term.response)])[:, 0]
            y = term.response[np.maximum(codes, 0)]
        else:
            y = np.where(np.isnan(y), 0.0, y.astype(np.float64))
            problem = design.glm.response_problem(y)
            if problem:
                raise DataError(problem, variable=term.child, chunk=index)
        x, _ = design_rows(columns, design)
        for z, (d, beta, scale) in enumerate(term.by_state * (k if len(term.by_state) == 1 else 1)):
            eta = d.glm.linear_predictor(x, beta, d.n_classes)
            logp[:, z] += np.where(present[term.child], d.glm.row_loglik(y, eta, scale), 0.0)
    out = _logsumexp(logp)
    out[undefined] = np.nan
    return out[:, None]


def score_summary(values: Any, weights: Any | None) -> Any:
    """Lazy ``[total, rows]`` of per-row scores: ``sum w * score`` over rows of positive weight, and ``sum w``
    (each row weight 1 without ``weights``)."""
    import dask.array as da

    if weights is None:
        return da.stack([values.sum(), da.asarray(float(values.shape[0]))])
    weights = da.asarray(weights).astype(np.float64).rechunk(values.chunks)
    return da.stack([da.where(weights > 0, values * weights, 0.0).sum(), weights.sum()])


def together(*lazy: Any) -> Any:
    """One lazy object computing every one of ``lazy`` (their shared tasks run once): one pass."""
    import dask

    return dask.delayed(tuple(lazy), traverse=True)

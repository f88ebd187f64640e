"""Standard errors of EM fits: the observed information, by finite differences in one pass.

An EM fit maximises the observed-data log-likelihood ``l(theta) = sum_i w_i log p(x_i;
theta)``, latent variables and missing values summed out. Its estimates' asymptotic
covariance is the inverse of the observed information ``J = -d^2 l`` at the estimate
(Efron & Hinkley 1978; Louis 1982 computes the same matrix from complete-data
quantities), restricted to the moves the parameters' constraints allow:

* a probability table (a CPT, an HMM's start, transition and emission rows, a mixture's
  weights) moves within its simplex: each entry against its distribution's largest
  entry (the reference); an entry at zero stays there (a boundary estimate; its standard
  error is 0, as a complete-data CPT entry's);
* a symmetric matrix (a covariance, dims ``d`` and ``d_``) moves ``(i, j)`` and ``(j, i)``
  together;
* every other entry (means, coefficients, scales, weights) moves alone;
* a Markov network's potentials (not identifiable as they stand: a potential can be
  scaled, a term two scopes share can sit in either) move along the canonical form's
  treatment-coded terms ``lambda`` (:func:`potential_observed_errors`).

These moves are the columns of ``Z``; with ``theta = theta_hat + Z phi``, the
covariance of ``theta`` is ``Z (Z^T J Z)^-1 Z^T`` whatever the basis. ``Z^T J Z`` is
the central second difference of ``l`` along every pair of moves. A move's step is
``1e-4`` times its spread in one row, ``sqrt(n / J_jj)`` (where the rounding and the
truncation errors of the differences balance), ``J_jj`` measured first at ``1e-4``
times the entries' own scale; a probability's step stays below half the smaller of
the two entries it moves. Each of the two passes over the data (the diagonal, then
every pair: ``2 D^2 + 1`` log-likelihoods for ``D`` moves) scores each chunk's rows
under every perturbed model with the kind's per-row block
(:mod:`dpgm.api.score_kinds`) in one task and returns the weighted sums,
tree-reduced. A direction the data do not identify (``Z^T J Z`` singular along it)
gives NaN to every entry it moves.

The cost grows as ``D^2`` log-likelihoods per row: the moves are capped at
:data:`MAX_MOVES` (larger models: :func:`dpgm.bootstrap`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

from dpgm.stats.source import DataSource

__all__ = ["MAX_MOVES", "STEP", "Moves", "information", "observed_errors", "parameter_moves", "potential_observed_errors"]

MAX_MOVES = 40
STEP = 1e-4

# per model kind: the probability tables and the dim each sums to one over (``table:X``: X)
_SIMPLEX = {
    "HiddenMarkovModel": lambda model: {"start": model.hidden, "transition": model.hidden + "_next",
                                        **({"emission": model.variable} if model.is_categorical else
                                           {f"emission{i}:table": f.variables[0] for i, f in enumerate(model.emissions)
                                            if f.family == "categorical"}),
                                        **{f"emission{i}:weights": f"mix@{i}" for i, f in enumerate(model.emissions)
                                           if f.family == "gmm"}},
    "GaussianMixture": lambda model: {"weights": "component"},
}


@dataclasses.dataclass(frozen=True)
class Moves:
    """The free moves of a model's parameters.

    Attributes
    ----------
    names
        The parameters (as :func:`dpgm.models.parameters.parameter_tables` names them), in order.
    shapes
        Each one's shape; the flat vector ``theta`` is their entries in order.
    theta
        The estimate, flat.
    directions
        ``(entries, moves)``: each move's change of ``theta`` per unit step.
    steps
        Each move's finite-difference step.
    fixed
        ``(entries,)``: entries that do not move (a probability at zero, a weight at -inf).
    limits
        Each move's largest step (half the smaller probability it moves; infinite otherwise).
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    theta: np.ndarray
    directions: np.ndarray
    steps: np.ndarray
    fixed: np.ndarray
    limits: np.ndarray

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """A flat vector back into the parameters' shapes."""
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            size = int(np.prod(shape, dtype=int))
            out[name] = flat[start:start + size].reshape(shape)
            start += size
        return out


def _simplex_dims(model: Any, tables: dict[str, xr.DataArray]) -> dict[str, str]:
    dims = {name: name[len("table:"):] for name, table in tables.items()
            if name.startswith("table:") and name[len("table:"):] in table.dims}
    special = _SIMPLEX.get(type(model).__name__)
    return dims | (special(model) if special else {})


def _check_moves(count: int) -> None:
    """Refuse more than :data:`MAX_MOVES` free parameters (a ``ValueError`` naming the bootstrap)."""
    if count > MAX_MOVES:
        raise ValueError(f"{count} free parameters: the observed information of an EM fit is formed by "
                         f"finite differences for at most {MAX_MOVES} (dpgm.bootstrap gives standard errors for "
                         "any size)")


def parameter_moves(model: Any) -> Moves:
    """The free moves of ``model``'s estimated parameters (see the module's description).

    Raises
    ------
    ValueError
        More than :data:`MAX_MOVES` moves.
    """
    from dpgm.models.parameters import parameter_tables

    tables = parameter_tables(model)
    simplex = _simplex_dims(model, tables)
    names = tuple(tables)
    values = [np.asarray(tables[n].values, dtype=float) for n in names]
    offsets = np.concatenate([[0], np.cumsum([v.size for v in values])]).astype(int)
    theta = np.concatenate([v.ravel() for v in values]) if values else np.zeros(0)
    columns, steps, limits = [], [], []
    fixed = ~np.isfinite(theta)

    def move(entries: dict[int, float], scale: float, limit: float = np.inf) -> None:
        column = np.zeros(len(theta))
        for index, sign in entries.items():
            column[index] = sign
        columns.append(column)
        steps.append(STEP * scale)
        limits.append(limit)

    for name, value, start in zip(names, values, offsets[:-1], strict=True):
        table = tables[name]
        index = np.arange(value.size).reshape(value.shape) + start
        dims = list(table.dims)
        if name in simplex:
            axis = dims.index(simplex[name])
            for flat in np.moveaxis(index, axis, -1).reshape(-1, value.shape[axis]):
                p = theta[flat]
                reference = int(np.argmax(p))
                for k in range(len(flat)):
                    if p[k] <= 0:
                        fixed[flat[k]] = True
                    elif k != reference:
                        move({flat[k]: 1.0, flat[reference]: -1.0}, min(p[k], p[reference]), min(p[k], p[reference]) / 2)
            continue
        pair = next(((a, a + "_") for a in dims if a + "_" in dims), None)
        if pair is not None:
            a, b = dims.index(pair[0]), dims.index(pair[1])
            grid = np.moveaxis(index, (a, b), (-2, -1))
            for outer in np.ndindex(grid.shape[:-2]):
                square = grid[outer]
                for i in range(square.shape[0]):
                    for j in range(i, square.shape[1]):
                        scale = np.sqrt(abs(theta[square[i, i]] * theta[square[j, j]]))
                        move({square[i, j]: 1.0, square[j, i]: 1.0}, scale or 1.0)
            continue
        typical = float(np.mean(np.abs(value[np.isfinite(value)]))) if np.isfinite(value).any() else 1.0
        for k in index.ravel():
            if not fixed[k]:
                move({int(k): 1.0}, max(abs(theta[k]), typical, 1e-12) if typical > 0 else 1.0)
    _check_moves(len(columns))
    directions = np.stack(columns, axis=1) if columns else np.zeros((len(theta), 0))
    return Moves(names, tuple(v.shape for v in values), theta, directions, np.asarray(steps), fixed,
                 np.asarray(limits))


def _points(steps: np.ndarray, diagonal: bool = False) -> np.ndarray:
    """``(points, moves)``: the estimate, ``+/- h_j`` along every move, ``(+/- h_j, +/- h_k)`` along every pair
    (``diagonal``: not the pairs)."""
    d = len(steps)
    points = [np.zeros(d)]
    for j in range(d):
        for sign in (1, -1):
            point = np.zeros(d)
            point[j] = sign * steps[j]
            points.append(point)
    for j in range(0 if diagonal else d):
        for k in range(j + 1, d):
            for a, b in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                point = np.zeros(d)
                point[j], point[k] = a * steps[j], b * steps[k]
                points.append(point)
    return np.array(points)


def _hessian(steps: np.ndarray, values: np.ndarray, diagonal: bool = False) -> np.ndarray:
    """``Z^T (d^2 l) Z`` from the log-likelihoods at :func:`_points` (central differences); ``diagonal``: its
    diagonal only."""
    d = len(steps)
    h = steps
    base = values[0]
    hessian = np.zeros((d, d))
    for j in range(d):
        plus, minus = values[1 + 2 * j], values[2 + 2 * j]
        hessian[j, j] = (plus - 2 * base + minus) / h[j] ** 2
    if diagonal:
        return np.diag(hessian)
    at = 1 + 2 * d
    for j in range(d):
        for k in range(j + 1, d):
            pp, pm, mp, mm = values[at:at + 4]
            hessian[j, k] = hessian[k, j] = (pp - pm - mp + mm) / (4 * h[j] * h[k])
            at += 4
    return hessian


def _loglik_kernel(index: int, columns: dict[str, np.ndarray], shared: Any) -> np.ndarray:
    """One chunk's weighted log-likelihood under every model (``shared = (block, [each model's shared])``), then
    its rows' total weight."""
    from dpgm.data.schema import WEIGHT

    block, models = shared
    weight = columns.get(WEIGHT)
    totals = np.empty(len(models) + 1)
    for m, one in enumerate(models):
        values = block(index, columns, one)[:, 0]
        totals[m] = np.nansum(values if weight is None else values * weight)
    totals[-1] = len(next(iter(columns.values()))) if weight is None else np.sum(weight)
    return totals


def _running(source: DataSource) -> DataSource:
    """``source``, or the same on the default scheduler if its client has been closed since the fit."""
    client = source.client
    if client is not None and getattr(client, "status", "running") != "running":
        return source.with_client(None)
    return source


def _logliks(score: Any, models: list[Any], source: DataSource) -> tuple[np.ndarray, float]:
    """The data's log-likelihood under every model (one pass), and its rows' total weight."""
    from dpgm.stats.engine import map_reduce

    parts = [score.parts(model, source.data) for model in models]
    total = map_reduce(source.columns(parts[0].names), _loglik_kernel, name="dpgm-information",
                       shared=(parts[0].block, [p.shared for p in parts]))
    values = np.asarray(source.compute(total), dtype=float)
    return values[:-1], float(values[-1])


def information(score: Any, perturb: Callable[[np.ndarray], Any], steps: np.ndarray, limits: np.ndarray,
                source: DataSource) -> np.ndarray:
    """The observed information ``-Z^T (d^2 l) Z`` along ``d`` moves, in two passes over ``source``.

    ``perturb(point)`` is the model moved by ``point`` (``(d,)``, zero: the estimate);
    ``steps`` are the moves' first finite-difference steps and ``limits`` their largest.
    The first pass measures each move's curvature at its first step; the second takes every
    pair at the step ``1e-4`` of the move's spread in one row, ``sqrt(n / curvature)``, where
    the rounding and the truncation errors of the differences balance.
    """
    source = _running(source)
    values, n = _logliks(score, [perturb(p) for p in _points(steps, diagonal=True)], source)
    curvature = -_hessian(steps, values, diagonal=True)
    spread = np.sqrt(n / np.where(curvature > 0, curvature, np.nan))
    steps = np.minimum(np.where(np.isfinite(spread), STEP * spread, steps), limits)
    values, _ = _logliks(score, [perturb(p) for p in _points(steps)], source)
    matrix = -_hessian(steps, values)
    return (matrix + matrix.T) / 2


def _inverse(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of an information matrix on its range, and a basis of the directions it does not identify
    (eigenvalues below ``1e-9`` of the largest)."""
    eigenvalues, vectors = np.linalg.eigh(matrix)
    keep = eigenvalues > max(eigenvalues.max(initial=0.0), 0.0) * 1e-9
    return (vectors[:, keep] / eigenvalues[keep]) @ vectors[:, keep].T, vectors[:, ~keep]


def _errors(inverse: np.ndarray, null: np.ndarray, combinations: np.ndarray) -> np.ndarray:
    """Standard errors of the combinations ``L phi`` of the moves (rows of ``combinations``), NaN for one that
    involves a move the information does not identify (a null direction loads on it)."""
    variance = np.einsum("tj,jk,tk->t", combinations, inverse, combinations)
    errors = np.sqrt(np.maximum(variance, 0.0))
    unidentified = (null**2).sum(axis=1) > 1e-12
    errors[(np.abs(combinations[:, unidentified]) > 0).any(axis=1)] = np.nan
    return errors


def observed_errors(score: Any, model: Any, source: DataSource) -> dict[str, xr.DataArray]:
    """The standard errors of an EM fit's parameters from its observed information (two passes over ``source``).

    ``score`` is the kind's score function (:mod:`dpgm.api.score_kinds`, whose ``parts``
    give the per-row block). Returns ``{name: standard errors}`` shaped and labelled as
    :func:`dpgm.models.parameters.parameter_tables`. A Markov network's are its potentials'
    in canonical form (:func:`potential_observed_errors`).

    Raises
    ------
    ValueError
        More than :data:`MAX_MOVES` free parameters.
    """
    from dpgm.models.markov import MarkovNetwork
    from dpgm.models.parameters import parameter_tables, with_parameters

    if isinstance(model, MarkovNetwork):
        return potential_observed_errors(score, model, source)
    moves = parameter_moves(model)

    def perturb(point: np.ndarray) -> Any:
        return with_parameters(model, moves.split(moves.theta + moves.directions @ point)) if point.any() else model

    inverse, null = _inverse(information(score, perturb, moves.steps, moves.limits, source))
    errors = _errors(inverse, null, moves.directions)
    errors[moves.fixed & ~np.isfinite(moves.theta)] = np.nan
    tables = parameter_tables(model)
    return {name: tables[name].copy(data=value) for name, value in moves.split(errors).items()}


def potential_observed_errors(score: Any, model: Any, source: DataSource) -> dict[str, xr.DataArray]:
    """A Markov network's potentials' standard errors from its observed information, in canonical form.

    The free parameters are the canonical form's treatment-coded terms ``lambda``
    (:func:`dpgm.api.markov.treatment_features`: ``log phi_S = F_S^T lambda_S``); the moves
    add ``F_S^T delta`` to the log potentials, and a potential's error follows by the delta
    method, ``se(phi) = phi se(F_S^T lambda_S)`` (:func:`dpgm.api.markov.potential_errors`
    does the same from the complete-data information). ``model`` must be in canonical form.

    Raises
    ------
    ValueError
        A potential has a zero entry, or more than :data:`MAX_MOVES` free parameters.
    """
    from dpgm.api.markov import positive_potentials, treatment_features
    from dpgm.models.parameters import parameter_tables

    positive_potentials(model)
    features = treatment_features(model)
    sizes = [len(matrix) for matrix in features.values()]
    _check_moves(sum(sizes))
    logs = {scope: np.log(model.potentials[scope].values) for scope in model.scopes}
    blocks = dict(zip(features, np.split(np.arange(sum(sizes)), np.cumsum(sizes)[:-1]), strict=True))

    def perturb(point: np.ndarray) -> Any:
        if not point.any():
            return model
        return model.with_log_potentials(
            {scope: logs[scope] + (features[scope].T @ point[blocks[scope]]).reshape(logs[scope].shape)
             if scope in features else logs[scope] for scope in model.scopes})

    d = sum(sizes)
    inverse, null = _inverse(information(score, perturb, np.full(d, STEP), np.full(d, np.inf), source))
    names = {(name[len("table:"):] if name.startswith("table:") else name): name for name in parameter_tables(model)}
    errors = {}
    for scope, matrix in features.items():
        block = blocks[scope]
        table = model.potentials[scope]
        log_errors = _errors(inverse[np.ix_(block, block)], null[block], matrix.T).reshape(table.shape)
        errors[names[",".join(scope)]] = table.copy(data=table.values * log_errors)
    return errors

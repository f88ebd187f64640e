"""Hidden Markov models' passes over (``row``, ``time``) sequences: the E step, per-sequence scores, decoding.

Each sequence is a row; each observed variable a (``row``, ``time``) array (codes,
``-1`` missing, for a categorical one; floats, NaN missing, for a continuous one).
A sequence ends at its last step with an observed value (later steps are padding).
A chunk's task computes every step's emission densities per state, the product of
its families' (:mod:`dpgm.stats.emissions`), and runs the forward-backward
recursion on them (passed in by the caller, from :mod:`dpgm.inference.chain`:
statistics sit below inference); the families then add their statistics from the
steps' posteriors. Several restarts share the pass (the chunk's values are read and
checked once).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.data.io import _check_weights
from dpgm.data.schema import WEIGHT
from dpgm.errors import DataError
from dpgm.stats.engine import map_reduce
from dpgm.stats.expected import select_rows
from dpgm.stats.mixture import RowSample, _row_hash

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["chunk_emissions", "emission_factors", "path_block", "posterior_block", "sequence_estep", "step_sample"]


def _shape(index: int, columns: dict[str, np.ndarray], variables: Sequence[str]) -> tuple[int, int]:
    shapes = {v: np.shape(columns[v]) for v in variables}
    first = shapes[variables[0]]
    for v, shape in shapes.items():
        if len(shape) != 2 or shape != first:
            raise DataError(f"must be a (row, time) array shaped like {variables[0]!r}'s {first}, is {shape}",
                            variable=v, chunk=index)
    return first


def chunk_emissions(index: int, columns: dict[str, np.ndarray], plans: Sequence[Any]
                    ) -> tuple[list[np.ndarray], np.ndarray, tuple[int, int]]:
    """The chunk's values per plan (flattened steps, checked), each sequence's end ``(B,)`` and ``(B, T)``."""
    variables = [v for plan in plans for v in plan.variables]
    rows, length = _shape(index, columns, variables)
    values = [plan.values(columns, index) for plan in plans]
    observed = np.zeros(rows * length, dtype=bool)
    for plan, value in zip(plans, values, strict=True):
        observed |= plan.observed(value)
    observed = observed.reshape(rows, length)
    last = length - np.argmax(observed[:, ::-1], axis=1)
    ends = np.where(observed.any(axis=1), last, 0)
    return values, ends, (rows, length)


def emission_factors(plans: Sequence[Any], values: Sequence[np.ndarray], shape: tuple[int, int]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``(B, T, S)`` factors and ``(B, T)`` shifts of every step's emission density per state: the product over
    the families (:meth:`factors` of :mod:`dpgm.stats.emissions`' plans)."""
    product, total = None, np.zeros(shape[0] * shape[1])
    for plan, value in zip(plans, values, strict=True):
        factors, shift = plan.factors(value)
        product = factors if product is None else product * factors
        if shift is not None:
            total += shift
    return product.reshape(*shape, -1), total.reshape(shape)


# steps per block of the E-step kernel: the block's emission factors and posteriors (steps x states) stay small
_BLOCK_STEPS = 1 << 16


def _estep_kernel(index: int, columns: dict[str, np.ndarray], shared: tuple) -> list:
    """One chunk's E step for every restart, by blocks of whole sequences (about :data:`_BLOCK_STEPS` steps):
    the temporaries grow with the block, not the chunk."""
    from dpgm.stats.engine import add_partials

    restarts, forward_backward = shared
    weights = columns.get(WEIGHT)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        _check_weights(weights, index)
    variables = [v for plan in restarts[0][2] for v in plan.variables]
    rows, length = _shape(index, columns, variables)
    step = max(1, _BLOCK_STEPS // max(length, 1))
    total = None
    for first in range(0, max(rows, 1), step):
        part = {v: np.asarray(columns[v])[first:first + step] for v in variables}
        block = _estep_block(index, part, restarts, forward_backward,
                             None if weights is None else weights[first:first + step])
        total = block if total is None else add_partials(total, block)
    return total


def _estep_block(index: int, columns: dict[str, np.ndarray], restarts: Sequence[Any], forward_backward: Any,
                 weights: np.ndarray | None) -> list:
    values, ends, shape = chunk_emissions(index, columns, restarts[0][2])
    out = []
    for start, transition, plans in restarts:
        factors, shift = emission_factors(plans, values, shape)
        loglik, counts, gamma = forward_backward(factors, shift, ends, start, transition, weights)
        steps = gamma.reshape(-1, gamma.shape[2])
        emissions = []
        for plan, value in zip(plans, values, strict=True):
            stats = plan.zero()
            plan.statistics(value, steps, stats)
            emissions.append(stats)
        out.append((loglik, {"start": counts["start"], "transition": counts["transition"], "emissions": emissions}))
    return out


def sequence_estep(source: DataSource, restarts: Sequence[tuple[np.ndarray, np.ndarray, Sequence[Any]]],
                   forward_backward: Callable[..., tuple[float, dict, np.ndarray]], *,
                   rows: tuple[int, int] | None = None) -> list[tuple[float, dict]]:
    """One pass of forward-backward over every sequence, for several restarts.

    ``restarts``: each restart's ``(start, transition, emission plans)``;
    ``forward_backward(emission, shift, ends, start, transition, weights) -> (loglik, {start,
    transition}, gamma)`` (:func:`dpgm.inference.chain.forward_backward`). Returns per restart
    ``(loglik, {"start", "transition", "emissions": [each family's statistics]})``, summed over
    the rows (``rows``: only ``[start, stop)``, whole chunks).
    """
    variables = [v for plan in restarts[0][2] for v in plan.variables]
    arrays = select_rows(source.columns(variables), rows)
    return source.compute(map_reduce(arrays, _estep_kernel, name="dpgm-estep",
                                     shared=(list(restarts), forward_backward)))


# ---------------------------------------------------------------- a sample of steps (starts of continuous families)


def _sample_kernel(index: int, columns: dict[str, np.ndarray], shared: Any, variables: tuple[str, ...],
                   size: int, seed: int) -> RowSample:
    if np.ndim(columns[variables[0]]) == 2:  # sequences as rows (the long layout's columns are 1-D)
        _shape(index, columns, variables)
    values = np.stack([np.asarray(columns[v], dtype=np.float64).reshape(-1) for v in variables], axis=1)
    usable = ~np.isnan(values).any(axis=1)
    weights = columns.get(WEIGHT)
    steps = np.ones(len(values)) if weights is None else np.repeat(np.asarray(weights, float), len(values)
                                                                     // max(len(weights), 1))
    usable &= steps > 0
    with np.errstate(divide="ignore"):
        keys = np.log(_row_hash(values[usable], seed)) / steps[usable]
    return RowSample(np.empty(0), np.empty((0, len(variables))), size) + RowSample(keys, values[usable], size)


def step_sample(source: DataSource, variables: Sequence[str], size: int, seed: int) -> np.ndarray:
    """``size`` steps (every variable observed) drawn by a hash of their values and ``seed`` (a weighted
    reservoir: whatever the chunking), as ``(steps, variables)``, in a deterministic order."""
    kernel = functools.partial(_sample_kernel, variables=tuple(variables), size=int(size), seed=int(seed))
    sample = source.compute(map_reduce(source.columns(list(variables)), kernel, name="dpgm-hmm-sample"))
    return sample.ordered()


# ---------------------------------------------------------------- per-step maps: posteriors and Viterbi paths


def posterior_block(index: int, columns: dict[str, np.ndarray], shared: tuple, *,
                    forward_backward: Callable[..., tuple[float, dict, np.ndarray]]) -> np.ndarray:
    """Every step's state posteriors, ``(B, T * S)`` (0 on padding; ``shared = (start, transition, plans)``)."""
    start, transition, plans = shared
    values, ends, shape = chunk_emissions(index, columns, plans)
    _, _, gamma = forward_backward(*emission_factors(plans, values, shape), ends, start, transition)
    return gamma.reshape(shape[0], -1)


def path_block(index: int, columns: dict[str, np.ndarray], shared: tuple, *,
               viterbi: Callable[..., tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Every sequence's most probable state path, ``(B, T)`` codes (``-1`` on padding)."""
    start, transition, plans = shared
    values, ends, shape = chunk_emissions(index, columns, plans)
    paths, _ = viterbi(*emission_factors(plans, values, shape), ends, start, transition)
    return paths.astype(np.int16 if start.shape[0] > 127 else np.int8)

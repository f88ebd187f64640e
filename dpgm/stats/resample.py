"""Poisson bootstrap weights: each row's weight in each replicate from a hash of its position.

Replicate ``b`` of the Poisson bootstrap (Hanley & MacGibbon 2006; Chamandy et al.,
"Estimating uncertainty for massive data streams", Google 2012) weighs row ``i`` by a
Poisson(1) draw ``w[i, b]``: the replicate's fit is the plain fit of the data weighted
by ``w[:, b]`` (times the data's own weight). Like the folds (:mod:`dpgm.stats.folds`),
the draws depend only on the row's position, ``b`` and ``random_state``, so a worker
computes its chunk's weights from the chunk's first row, whatever the chunking and
the number of workers.

The draw is the inverse Poisson(1) distribution function of a uniform ``u``: the
number of values of ``F(k) = P(X <= k)`` at most ``u``. The uniform is the top 53 bits
of the ``b + 1``-th output of SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) seeded
with the row's own hash ``mix(position + (random_state + 1) * 0x9E3779B97F4A7C15)``:
``mix(seed + (b + 1) * 0x9E3779B97F4A7C15)``.

Examples
--------
>>> import numpy as np
>>> from dpgm.stats.resample import poisson_weights
>>> poisson_weights(np.arange(8), replicate=0, random_state=0).tolist()
[1, 1, 1, 2, 1, 3, 1, 1]
>>> np.array_equal(poisson_weights(np.arange(4, 8), 0, 0), poisson_weights(np.arange(8), 0, 0)[4:])
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

__all__ = ["POISSON_CDF", "check_replicates", "poisson_weights", "replicate_count_chunk", "replicate_weights"]

from dpgm.stats.folds import GOLDEN, check_seed, row_seeds, splitmix

# P(X <= k) of Poisson(1) for k = 0 .. 20; P(X > 20) < 2**-53, below the uniform's resolution
POISSON_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(21)])
# the same comparisons on the uniform's 53-bit integer m (u = m / 2**53): F(k) <= u  <=>  ceil(F(k) 2**53) <= m
_THRESHOLDS = np.ceil(POISSON_CDF * 2.0**53).astype(np.int64)


def check_replicates(replicates: Any, random_state: Any) -> tuple[int, int]:
    """``(replicates, random_state)`` checked: at least 2 replicates, a seed from 0 to 2**63 - 1."""
    from dpgm.errors import ConfigError, ConfigTypeError

    if isinstance(replicates, bool) or not isinstance(replicates, (int, np.integer)):
        raise ConfigTypeError(f"replicates must be an integer, got {replicates!r}")
    if not 2 <= replicates <= 100_000:
        raise ConfigError(f"replicates must be between 2 and 100000, got {replicates!r}")
    return int(replicates), check_seed(random_state)


def poisson_weights(positions: np.ndarray, replicate: int, random_state: int = 0) -> np.ndarray:
    """Replicate ``replicate``'s Poisson(1) weight (``uint8``) of the rows at ``positions``."""
    with np.errstate(over="ignore"):
        z = splitmix(row_seeds(positions, random_state) + np.uint64(replicate + 1) * GOLDEN)
    uniform = (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return np.searchsorted(POISSON_CDF, uniform, side="right").astype(np.uint8)


def _block(block_info: dict | None = None, *, replicate: int, random_state: int) -> np.ndarray:
    start, stop = block_info[None]["array-location"][0]
    return poisson_weights(np.arange(start, stop), replicate, random_state)


def replicate_weights(n_rows: int, chunks: Sequence[int] | None, replicate: int, random_state: int = 0) -> Any:
    """Every row's weight in ``replicate``: a Dask array chunked as ``chunks`` (computed per chunk on the
    workers), or NumPy (None)."""
    if chunks is None:
        return poisson_weights(np.arange(n_rows), replicate, random_state)
    import dask.array as da

    return da.map_blocks(_block, chunks=(tuple(chunks),), dtype=np.uint8, replicate=replicate,
                         random_state=random_state,
                         name=f"poisson-weight-{replicate}-{random_state}-{n_rows}-{hash(tuple(chunks)) & 0xFFFFFFFF:x}")


# ---------------------------------------------------------------- every replicate's counts in one kernel


@numba.njit(nogil=True, cache=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# replicates per block: a block's slice of a table cell is one 64-byte cache line of int32 counts
LANES = 16
ROW_BLOCK = 2048


@numba.njit(nogil=True, cache=True)
def _replicate_count_rows(codes, cardinalities, scope_columns, scope_starts, table_offsets, positions, random_state,
                          base, weighted, cdf, out, rows):
    """Add every row's Poisson weights, replicate by replicate, to its cell of every table.

    ``out`` is (replicate blocks, cells, :data:`LANES`). Rows go by blocks of :data:`ROW_BLOCK`:
    each row's cell in every table is computed once per block, then for each block of
    :data:`LANES` replicates each row's weights are hashed and added to one cache line per
    table, so a replicate block's tables stay in cache while the row block streams through.
    ``rows`` (replicates,) receives the weights' totals.
    """
    blocks, _, lanes = out.shape
    replicates = rows.shape[0]
    n_tables = scope_starts.shape[0] - 1
    n = codes.shape[1]
    golden = np.uint64(0x9E3779B97F4A7C15)
    salt = np.uint64(random_state + 1) * golden
    steps = np.empty(replicates, dtype=np.uint64)
    for b in range(replicates):
        steps[b] = np.uint64(b + 1) * golden
    cells = np.empty((ROW_BLOCK, max(n_tables, 1)), dtype=np.int64)
    seeds = np.empty(ROW_BLOCK, dtype=np.uint64)
    weights = np.zeros(lanes, dtype=out.dtype)
    for start in range(0, n, ROW_BLOCK):
        stop = min(n, start + ROW_BLOCK)
        for r in range(start, stop):
            seeds[r - start] = _mix(np.uint64(positions[r]) + salt)
            for t in range(n_tables):
                cell = 0
                for p in range(scope_starts[t], scope_starts[t + 1]):
                    j = scope_columns[p]
                    c = codes[j, r]
                    cell = cell * (cardinalities[j] + 1) + (cardinalities[j] if c < 0 else c)
                cells[r - start, t] = table_offsets[t] + cell
        for block in range(blocks):
            first = block * lanes
            width = min(lanes, replicates - first)
            weights[width:] = 0  # the last block's unused lanes
            table = out[block]
            for r in range(start, stop):
                scale = base[r] if weighted else 1.0
                seed = seeds[r - start]
                for b in range(width):
                    m = np.int64(_mix(seed + steps[first + b]) >> np.uint64(11))
                    # branch-free for the first six values (P(X > 5) = 6e-4), then a loop
                    k = ((m >= cdf[0]) + (m >= cdf[1]) + (m >= cdf[2]) + (m >= cdf[3]) + (m >= cdf[4])
                         + (m >= cdf[5]))
                    if k == 6:
                        while k < cdf.shape[0] and cdf[k] <= m:
                            k += 1
                    if weighted:
                        weights[b] = k * scale
                    else:
                        weights[b] = k
                for b in range(width):
                    rows[first + b] += weights[b]
                for t in range(n_tables):
                    target = table[cells[r - start, t]]
                    for b in range(lanes):
                        target[b] += weights[b]


def replicate_count_chunk(codes: list[np.ndarray], positions: np.ndarray, plan: Any, replicates: int,
                          random_state: int, base: np.ndarray | None = None, chunk: int = 0) -> dict[str, np.ndarray]:
    """Every replicate's flat extended tables of one chunk (:mod:`dpgm.stats.kernels`' layout), in one kernel.

    Returns ``{"tables": (cells, replicates), "rows": (replicates,)}``: replicate ``b``'s
    column equals :func:`dpgm.stats.kernels.count_chunk` of the chunk weighted by
    ``poisson_weights(positions, b, random_state) * base``.
    """
    from dpgm.stats.kernels import _check_codes, _stack

    _check_codes(codes, plan, chunk)
    matrix = _stack(codes) if len(codes) else np.zeros((0, len(positions)), dtype=np.int8)
    offsets = plan.offsets
    columns = np.array([j for scope in plan.scopes for j in scope], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum([len(s) for s in plan.scopes])]).astype(np.int64)
    weighted = base is not None
    # whole Poisson weights add up exactly in int32 (8 per vector instruction) while a chunk's total stays below
    # 2**31 (at most 20 per row); frequency weights need float64
    dtype = np.int32 if not weighted and len(positions) * len(POISSON_CDF) < 2**31 else np.float64
    blocks = -(-replicates // LANES)
    out = np.zeros((blocks, int(offsets[-1]), LANES), dtype=dtype)
    rows = np.zeros(replicates, dtype=np.float64)
    _replicate_count_rows(matrix, np.asarray(plan.cardinalities, dtype=np.int64), columns, starts, offsets,
                          np.asarray(positions, dtype=np.int64), random_state,
                          np.asarray(base if weighted else np.zeros(1), dtype=np.float64), weighted, _THRESHOLDS,
                          out, rows)
    tables = out.transpose(1, 0, 2).reshape(int(offsets[-1]), blocks * LANES)[:, :replicates]
    return {"tables": tables.astype(np.float64), "rows": rows}

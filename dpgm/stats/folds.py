"""Cross-validation folds: each row's fold from a hash of its position and a seed.

A row's fold depends only on its position in the dataset (``0 .. n_rows - 1``), the
number of folds and ``random_state``: the same rows fall into the same fold however
the store is chunked and however many workers read it, and a worker computes its
chunk's folds from the chunk's first row without reading anything.

The hash is SplitMix64's finaliser (Steele, Lea & Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014) of ``position + (random_state + 1) *
0x9E3779B97F4A7C15``; a row's fold is the hash's top 53 bits, scaled to ``[0, folds)``.

Examples
--------
>>> import numpy as np
>>> from dpgm.stats.folds import fold_of
>>> fold_of(np.arange(8), 3, random_state=0).tolist()
[2, 1, 1, 0, 1, 1, 2, 1]
>>> np.array_equal(fold_of(np.arange(4, 8), 3, random_state=0), fold_of(np.arange(8), 3, random_state=0)[4:])
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["GOLDEN", "check_folds", "check_seed", "fold_codes", "fold_of", "held_out", "is_lazy", "row_seeds", "splitmix"]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def check_folds(folds: Any, random_state: Any) -> tuple[int, int]:
    """``(folds, random_state)`` checked: at least 2 folds, a nonnegative integer seed."""
    from dpgm.errors import ConfigError, ConfigTypeError

    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)):
        raise ConfigTypeError(f"folds must be an integer, got {folds!r}")
    if not 2 <= folds <= 1000:
        raise ConfigError(f"folds must be between 2 and 1000, got {folds!r}")
    return int(folds), check_seed(random_state)


def check_seed(random_state: Any) -> int:
    """A row hash's seed checked: an integer from 0 to 2**63 - 1 (ConfigError / ConfigTypeError)."""
    from dpgm.errors import ConfigError, ConfigTypeError

    if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)):
        raise ConfigTypeError(f"random_state must be an integer, got {random_state!r}")
    if not 0 <= random_state < 2**63:
        raise ConfigError(f"random_state must be between 0 and 2**63 - 1, got {random_state!r}")
    return int(random_state)


def splitmix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of ``uint64`` values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def row_seeds(positions: np.ndarray, random_state: int) -> np.ndarray:
    """Each row's hash: ``splitmix(position + (random_state + 1) * 0x9E3779B97F4A7C15)``."""
    with np.errstate(over="ignore"):
        return splitmix(np.asarray(positions, dtype=np.uint64) + np.uint64(random_state + 1) * GOLDEN)


def fold_of(positions: np.ndarray, folds: int, random_state: int = 0) -> np.ndarray:
    """The fold (``int16``, ``0 .. folds - 1``) of the rows at ``positions``."""
    z = row_seeds(positions, random_state)
    uniform = (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return np.minimum((uniform * folds).astype(np.int16), folds - 1)


def _block(block_info: dict | None = None, *, folds: int, random_state: int) -> np.ndarray:
    start, stop = block_info[None]["array-location"][0]
    return fold_of(np.arange(start, stop), folds, random_state)


def fold_codes(n_rows: int, chunks: Sequence[int] | None, folds: int, random_state: int = 0) -> Any:
    """Every row's fold: a Dask array chunked as ``chunks`` (computed per chunk on the workers), or NumPy (None)."""
    if chunks is None:
        return fold_of(np.arange(n_rows), folds, random_state)
    import dask.array as da

    return da.map_blocks(_block, chunks=(tuple(chunks),), dtype=np.int16, folds=folds, random_state=random_state,
                         name=f"fold-of-row-{folds}-{random_state}-{n_rows}-{hash(tuple(chunks)) & 0xFFFFFFFF:x}")


def is_lazy(value: Any) -> bool:
    """``value`` is a Dask collection (a pass computes it), not a value."""
    import dask

    return dask.is_dask_collection(value)


def held_out(values: Any, codes: Any, fold: int, weights: Any = None) -> tuple[Any, Any]:
    """``(sum of weight * value, sum of weight)`` over the rows of ``fold`` (lazy if the inputs are).

    Rows of other folds, and rows of weight 0, contribute nothing even where their value is
    ``-inf`` (a row impossible under the model) or NaN.
    """
    if isinstance(codes, np.ndarray):
        where = np.where
    else:
        import dask.array as da

        where = da.where
    mask = codes == fold
    if weights is None:
        return where(mask, values, 0.0).sum(), mask.sum()
    mask = mask & (weights != 0)
    return where(mask, values * weights, 0.0).sum(), where(mask, weights, 0.0).sum()

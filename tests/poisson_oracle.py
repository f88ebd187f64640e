"""The Poisson bootstrap's weights recomputed without dpgm (the oracle of the bootstrap tests).

Row ``i``'s Poisson(1) weight in ``replicate``: the inverse distribution function (SciPy's
``poisson.ppf``) at ``(m + 1/2) / 2**16``, ``m`` the 16 bits at bit ``16 * (replicate % 4)`` of the
``replicate // 4 + 1``-th SplitMix64 output (Steele, Lea & Flood 2014, on Python integers mod
2**64) of the generator seeded with the row's hash ``mix(i + (random_state + 1) * golden)``.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def oracle_weights(positions, replicate: int, random_state: int) -> np.ndarray:
    """The weights (int64) of the rows at ``positions`` in ``replicate``."""
    word, quarter = divmod(replicate, 4)
    uniforms = []
    for i in np.asarray(positions).tolist():
        seed = _mix((i + (random_state + 1) * _GOLDEN) & _MASK)
        m = (_mix((seed + (word + 1) * _GOLDEN) & _MASK) >> (16 * quarter)) & 0xFFFF
        uniforms.append((m + 0.5) / 2.0**16)
    return scipy.stats.poisson.ppf(np.array(uniforms), 1.0).astype(np.int64)

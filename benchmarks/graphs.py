"""Sparse Gaussian graphical models for the benchmarks: one generator, used by every script."""

from __future__ import annotations

import numpy as np


def ring_with_chords(p: int, seed: int = 2) -> tuple[list[tuple[int, int]], np.ndarray]:
    """A ring of ``p`` variables plus ``p`` distinct random chords, and a positive definite precision
    with exactly that pattern. Edges are ``(i, j)`` pairs with ``i < j``, in sorted order."""
    rng = np.random.default_rng(seed)
    pairs = {(i, i + 1) if i + 1 < p else (0, p - 1) for i in range(p)}
    while len(pairs) < 2 * p:
        a, b = sorted(rng.choice(p, 2, replace=False))
        pairs.add((int(a), int(b)))
    precision = np.eye(p) * 2.0
    for a, b in pairs:
        precision[a, b] = precision[b, a] = rng.uniform(-0.4, 0.4)
    precision += np.eye(p) * max(0.0, 0.1 - np.linalg.eigvalsh(precision).min())
    return sorted(pairs), precision

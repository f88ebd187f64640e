"""Backward-compatible location of :class:`~dpgm.inference.batched.BatchedTree`."""

from __future__ import annotations

from dpgm.inference.batched import BatchedTree, ImpossibleEvidenceError

__all__ = ["BatchedTree", "ImpossibleEvidenceError"]

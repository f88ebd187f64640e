"""Backward-compatible location of the exact queries and :class:`JunctionTree`."""

from __future__ import annotations

from dpgm.inference.junction_tree import JunctionTree
from dpgm.inference.queries import log_partition, map_assignment, marginal, marginals

__all__ = ["JunctionTree", "log_partition", "map_assignment", "marginal", "marginals"]

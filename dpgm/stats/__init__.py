"""Sufficient statistics as map-reduce over the chunks of a dataset."""

from dpgm.stats.counts import Counts, counts, maximal_scopes
from dpgm.stats.engine import add_partials, map_reduce

__all__ = ["Counts", "add_partials", "counts", "map_reduce", "maximal_scopes"]

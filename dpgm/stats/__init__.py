"""Sufficient statistics as map-reduce over the chunks of a dataset."""

from dpgm.stats.counts import Counts, counts, maximal_scopes
from dpgm.stats.engine import add_partials, map_reduce
from dpgm.stats.moments import Moments, moments

__all__ = ["Counts", "Moments", "add_partials", "counts", "map_reduce", "maximal_scopes", "moments"]

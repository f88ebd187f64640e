"""Sufficient statistics as map-reduce over the chunks of a dataset.

The passes live in their modules (:func:`dpgm.stats.counts.counts`,
:func:`dpgm.stats.moments.moments`, also ``dpgm.counts`` and ``dpgm.moments``);
the package exports no function named like a module, so ``dpgm.stats.counts`` is
always the module.
"""

from dpgm.stats.counts import Counts, maximal_scopes
from dpgm.stats.engine import add_partials, map_reduce
from dpgm.stats.moments import Moments

__all__ = ["Counts", "Moments", "add_partials", "map_reduce", "maximal_scopes"]

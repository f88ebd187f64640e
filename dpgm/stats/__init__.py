"""Sufficient statistics as map-reduce over the chunks of a dataset.

The passes live in their modules (:func:`dpgm.stats.counts.counts`,
:func:`dpgm.stats.moments.moments`, also ``dpgm.counts`` and ``dpgm.moments``);
the package exports no function named like a module, so ``dpgm.stats.counts`` is
always the module. The E step of hidden Markov chains in the long layout, whose
sequences cross chunks, is :func:`long_expected_stats` (two passes, after the data's
:func:`sequence_layout`; :mod:`dpgm.stats.long_sequences`).
"""

from dpgm.stats.counts import Counts, maximal_scopes
from dpgm.stats.engine import add_partials, map_reduce
from dpgm.stats.long_sequences import (
    SequenceLayout,
    long_expected_stats,
    long_row_map,
    sequence_layout,
)
from dpgm.stats.moments import Moments

__all__ = ["Counts", "Moments", "SequenceLayout", "add_partials", "long_expected_stats", "long_row_map", "map_reduce",
           "maximal_scopes", "sequence_layout"]

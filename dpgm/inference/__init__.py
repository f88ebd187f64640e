"""Exact inference on junction trees: triangulation, calibration, batched evidence, MAP.

Public names:

* :class:`JunctionTree` — a model compiled once; labelled queries and the batched
  entry points EM calls (``expected_counts``, ``expected_family_counts``,
  ``posteriors``, ``map_batch``, ``with_model``);
* :func:`marginals`, :func:`marginal`, :func:`log_partition`, :func:`map_assignment`;
* :class:`ImpossibleEvidenceError` — evidence of probability zero;
* :func:`interaction_graph`, :func:`eliminate`, :func:`build_tree` — the graph steps;
* :data:`FORWARD_BACKWARD`, :data:`VITERBI` — hidden Markov chains cut by chunk
  boundaries (:mod:`dpgm.inference.segments`, :mod:`dpgm.inference.segment_paths`),
  handed to the long-layout passes of :mod:`dpgm.stats.long_sequences`.
"""

from dpgm.inference.batched import BatchedTree, ImpossibleEvidenceError
from dpgm.inference.junction_tree import JunctionTree
from dpgm.inference.queries import log_partition, map_assignment, marginal, marginals
from dpgm.inference.segment_paths import VITERBI
from dpgm.inference.segments import FORWARD_BACKWARD
from dpgm.inference.triangulation import TreeStructure, build_tree, eliminate, interaction_graph

__all__ = [
    "FORWARD_BACKWARD",
    "VITERBI",
    "BatchedTree",
    "ImpossibleEvidenceError",
    "JunctionTree",
    "TreeStructure",
    "build_tree",
    "eliminate",
    "interaction_graph",
    "log_partition",
    "map_assignment",
    "marginal",
    "marginals",
]

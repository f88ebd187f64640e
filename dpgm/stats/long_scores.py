"""Each sequence's log-likelihood in the long layout, sequences crossing chunks: the E step's passes.

Scoring runs the passes of :func:`dpgm.stats.long_sequences.long_expected_stats`:
the layout (one pass over the id column, bringing every sequence's id to the driver:
8 bytes per sequence), pass 1 (``dpgm-segments``, the boundary operators) and the
driver's scan now, then pass 2 as a lazy array, one task per chunk (``dpgm-score``):
each chunk runs the forward filter over its pieces from its incoming forward message
and returns the log-likelihood of every sequence that *ends* in it. A sequence that
crosses chunks is scored by the chunk of its last row, from the filtered distribution
and log-likelihood the scan carried to it; a chunk inside one long sequence returns
nothing. The result has one value per sequence, in row order.

Memory: a worker holds one chunk's columns and ``O(rows S)`` floats; the driver the
ids and ``O(C S^2)`` for ``C`` chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgm.data.columns import zarr_columns
from dpgm.stats.long_sequences import (
    LogEmission,
    SequenceLayout,
    _checked,
    _chunk_inputs,
    _Plan,
    _prepare,
)

if TYPE_CHECKING:
    import dask.array as da

    from dpgm.stats.source import DataSource

__all__ = ["long_sequence_scores"]


def _score_block(chunk: int, columns: dict[str, np.ndarray], plan: _Plan) -> np.ndarray:
    """Pass 2 of scoring: the log-likelihoods of the chunk's sequences that end in it, ``(sequences, 1)``."""
    return plan.segments.per_sequence(*_chunk_inputs(chunk, columns, plan, 0))


def long_sequence_scores(
    source: DataSource,
    variables: Sequence[str],
    sequence: str,
    parameters: tuple[np.ndarray, np.ndarray, Any],
    log_emission: LogEmission,
    *,
    segments: Any,
    layout: SequenceLayout | None = None,
    prefix: str = "dpgm-score",
) -> tuple[da.Array, np.ndarray]:
    """Every sequence's log-likelihood, lazily, for one parameter set, and the sequences' ids.

    Parameters
    ----------
    source
        The data: one row per step, ``sequence`` the id of each row's sequence.
    variables
        The emission variables ``log_emission`` reads.
    sequence
        The sequence-id variable.
    parameters
        ``(start (S,), transition (S, S), emission)``.
    log_emission
        ``log_emission(chunk, columns, emission) -> (rows, S)`` (module level, to pickle).
    segments
        The math: :data:`dpgm.inference.segments.FORWARD_BACKWARD` (its ``per_sequence``).
    layout
        The data's :func:`~dpgm.stats.long_sequences.sequence_layout` with its ``ids``
        (computed here if not given or without them: one pass over the id column).
    prefix
        Readable prefix of pass 2's task keys.

    Returns
    -------
    (dask.array.Array, ndarray)
        ``(n_sequences,)`` log-likelihoods (``-inf``: impossible) in row order, one task per
        chunk; the ``(n_sequences,)`` int64 ids in the same order.

    Raises
    ------
    DataError
        Bad sequence ids or non-contiguous sequences, a ``weight`` variable, a layout of other data.
    """
    from dpgm.stats.long_sequences import sequence_layout
    from dpgm.stats.rows import row_map

    if layout is None or layout.ids is None:
        layout = sequence_layout(source, sequence, ids=True)
    _, plan = _prepare(source, variables, sequence, [parameters], log_emission, None, segments, layout, None)
    names = _checked(source, variables, sequence)
    data = source.data
    if zarr_columns(data, names) is None:
        data = data[names].chunk({"row": tuple(int(c) for c in np.diff(layout.starts))})
    ending = layout.pieces - layout.continues_out
    values = row_map(data, names, _score_block, 1, shared=plan, prefix=prefix, lengths=list(ending))
    return values[:, 0], layout.ids

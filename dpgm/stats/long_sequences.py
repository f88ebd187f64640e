"""The E step of hidden Markov chains in the long layout: sequences that cross chunks, two passes.

The long layout holds one row per step and a sequence-id variable (name given by
the caller, e.g. ``"sequence"``): the rows of a sequence are contiguous and in
time order, and a sequence may span any number of chunks, up to one sequence
over all of them. The ids are non-negative integers: integer codes (a
categorical variable: each label a sequence) or integral floats (as
:func:`dpgm.convert` stores an integer column of many values); a missing id
(``-1``, NaN), a negative or fractional one is a :class:`~dpgm.DataError`.
Frequency weights are per row, and a row is one step here: a dataset with a
``weight`` variable is refused.

Passes
------
* :func:`sequence_layout`, once per dataset (one pass over the id column): checks
  the ids and that every sequence's rows are contiguous, also across chunks
  (a sequence that reappears after another one started is a ``DataError``
  naming the variable, the id and the chunk), and records each chunk's first
  and last id and number of pieces. When the ids increase along the rows (as
  sorted data has them) the check needs a few numbers per chunk; otherwise a
  second pass over the ids brings every chunk's run ids (8 bytes per sequence)
  to the driver once.
* :func:`long_expected_stats`, one E step = **two passes**, whatever the length
  of the sequences: pass 1 (``dpgm-segments``) reduces the pieces of sequences
  that touch a chunk boundary to their segment operators
  (:func:`dpgm.inference.segments.boundary_operators`); the driver combines them
  (:func:`~dpgm.inference.segments.combine_boundaries`) into each chunk's incoming
  messages; pass 2 (``dpgm-estep``) runs each chunk's forward-backward with its
  messages and the caller's emission statistics, summed in the engine's tree
  (:func:`dpgm.stats.engine.map_reduce`). Several parameter sets (EM restarts)
  share both passes.
* :func:`long_row_map`: pass 1 now, and pass 2 as a lazy per-row array
  (:func:`dpgm.stats.rows.row_map`), for decoding: each row's posterior state
  distribution ``(row, S)``, or its state on the most probable path ``(row, 1)``
  (Viterbi: the same scan in the ``(max, +)`` semiring,
  :mod:`dpgm.inference.segment_paths`).

The math is handed in by the caller (``segments=``), since statistics sit below
inference in the layers: :data:`dpgm.inference.FORWARD_BACKWARD` for the E step and
the posteriors, :data:`dpgm.inference.VITERBI` for the paths (:class:`SegmentMath`).

Memory: a worker holds one chunk's columns and ``O(rows S)`` floats per
parameter set (never the sequence length or N); the driver ``O(C S^2)`` per
parameter set for ``C`` chunks (pass 1's operators, the messages).

The emission family is the caller's, so this module serves every family: two
module-level functions (they pickle by reference to the workers) with one
*emission object* per parameter set (its emission parameters):

* ``log_emission(chunk, columns, emission) -> (rows, S)``: ``log p(x_t | z_t = s)``
  of the chunk's rows, 0 for a step with nothing observed;
* ``accumulate(chunk, columns, gamma, emission) -> statistics``: the chunk's
  expected emission statistics from the posteriors ``gamma (rows, S)``, a
  monoid under ``+`` (arrays, dicts, tuples: :func:`~dpgm.stats.engine.add_partials`).

``columns`` is the chunk's ``{variable: 1-D array}`` (the emission variables
and the sequence ids); ``chunk`` its number, for errors.

Examples
--------
Categorical emissions from a table ``(S, symbols)``:

.. code-block:: python

    def log_emission(chunk, columns, table):
        codes = columns["letter"]
        out = np.log(table[:, np.maximum(codes, 0)].T)
        out[codes < 0] = 0.0
        return out

    def accumulate(chunk, columns, gamma, table):
        codes = columns["letter"]
        seen = codes >= 0
        counts = np.zeros(table.shape)
        for s in range(table.shape[0]):
            counts[s] = np.bincount(codes[seen], gamma[seen, s], minlength=table.shape[1])
        return counts

    layout = sequence_layout(source, "sequence")          # once per dataset
    [(loglik, counts)] = long_expected_stats(source, ["letter"], "sequence", [(start, transition, table)],
                                             log_emission, accumulate, segments=FORWARD_BACKWARD,
                                             layout=layout)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpgm.data.columns import ZarrColumns, zarr_columns
from dpgm.errors import DataError
from dpgm.stats.engine import IN_MEMORY_CHUNK_ROWS, _is_lazy, map_reduce, row_chunks

if TYPE_CHECKING:
    import dask.array as da

    from dpgm.stats.source import DataSource

__all__ = ["Accumulate", "LogEmission", "SegmentMath", "SequenceLayout", "long_expected_stats", "long_row_map",
           "sequence_ids", "sequence_layout"]

LogEmission = Callable[[int, dict[str, np.ndarray], Any], np.ndarray]
"""``log_emission(chunk, columns, emission) -> (rows, S)`` log emission probabilities (0: nothing observed)."""
Accumulate = Callable[[int, dict[str, np.ndarray], np.ndarray, Any], Any]
"""``accumulate(chunk, columns, gamma, emission) -> statistics`` (additive over chunks)."""


class SegmentMath(Protocol):
    """The steps of a split chain computation, handed in by the caller (statistics sit below inference):
    :data:`dpgm.inference.segments.FORWARD_BACKWARD`, :data:`dpgm.inference.segment_paths.VITERBI`."""

    dtype: np.dtype

    def run_starts(self, ids: np.ndarray) -> np.ndarray: ...

    def boundary_operators(self, log_emission: np.ndarray, runs: Any, start: np.ndarray, transition: np.ndarray, *,
                           continues_in: bool, continues_out: bool) -> Any: ...

    def combine_boundaries(self, boundaries: Sequence[Any], links: Any) -> list: ...

    def chunk_statistics(self, log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray,
                         transition: np.ndarray, messages: Any) -> tuple: ...

    def outputs(self, n_states: int) -> int: ...

    def per_row(self, log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                messages: Any) -> np.ndarray: ...


class PerChunk:
    """A partial of a pass whose result is per chunk, not a sum: ``{chunk: value}``, combined by union."""

    def __init__(self, items: dict[int, Any]):
        self.items = items

    def __add__(self, other: PerChunk) -> PerChunk:
        return PerChunk({**self.items, **other.items})

    def ordered(self) -> list[Any]:
        """The values in chunk order."""
        return [self.items[c] for c in sorted(self.items)]


@dataclass(frozen=True)
class SequenceLayout:
    """Where the sequences of a long-layout dataset start and end, chunk by chunk (:func:`sequence_layout`).

    Attributes
    ----------
    variable
        The sequence-id variable.
    starts
        Row offset of every chunk, and the number of rows.
    first, last
        ``(C,)`` int64: the sequence id of each chunk's first and last row.
    pieces
        ``(C,)``: the number of runs of one id in each chunk.
    n_sequences
        Number of sequences.
    offset
        Number of the first chunk in the dataset (a layout of some rows, :meth:`select`).
    ids
        ``(n_sequences,)`` int64: every sequence's id in row order, if asked for (``sequence_layout(..., ids=True)``).
    """

    variable: str
    starts: tuple[int, ...]
    first: np.ndarray
    last: np.ndarray
    pieces: np.ndarray
    n_sequences: int
    offset: int = 0
    ids: np.ndarray | None = None

    @property
    def continues_in(self) -> np.ndarray:
        """``(C,)`` bool: the chunk's first row continues the sequence of the previous chunk's last row."""
        return np.concatenate([[False], self.first[1:] == self.last[:-1]])

    @property
    def continues_out(self) -> np.ndarray:
        """``(C,)`` bool: the chunk's last row's sequence continues in the next chunk."""
        return np.concatenate([self.first[1:] == self.last[:-1], [False]])

    @property
    def single(self) -> np.ndarray:
        """``(C,)`` bool: the chunk is one piece of one sequence."""
        return self.pieces == 1

    @property
    def n_chunks(self) -> int:
        """Number of chunks."""
        return len(self.first)

    def select(self, rows: tuple[int, int] | None) -> SequenceLayout:
        """The layout of rows ``[start, stop)`` (whole chunks that cut no sequence).

        Raises
        ------
        DataError
            If the rows begin or end inside a sequence.
        """
        if rows is None:
            return self
        a, b = self.starts.index(rows[0]), self.starts.index(rows[1])
        for chunk, cut, end in [(a, a < self.n_chunks and self.continues_in[a], "begin"),
                                (b - 1, b > 0 and self.continues_out[b - 1], "end")]:
            if cut:
                raise DataError(f"rows {rows[0]}-{rows[1]} {end} inside sequence {int(self.first[chunk])}: a block "
                                "of rows for an E step must hold whole sequences", variable=self.variable,
                                chunk=self.offset + chunk)
        inner = replace(self, first=self.first[a:b], last=self.last[a:b], pieces=self.pieces[a:b], offset=self.offset + a,
                        ids=None)
        sequences = int(inner.pieces.sum() - inner.continues_in.sum())
        return replace(inner, starts=self.starts[a:b + 1], n_sequences=sequences)


def sequence_ids(chunk: int, column: np.ndarray, variable: str) -> np.ndarray:
    """A chunk's sequence ids as int64, checked.

    Raises
    ------
    DataError
        A missing id (NaN, code ``-1``), a negative or fractional one, or a dtype that
        is not numeric; naming the row of the chunk, the variable and the chunk.
    """
    column = np.asarray(column)
    if column.ndim != 1:
        raise DataError(f"the long layout needs sequence ids over ('row',), got {column.ndim} dimensions",
                        variable=variable, chunk=chunk)
    if column.dtype.kind == "f":
        bad = ~np.isfinite(column) | (column < 0) | (column != np.floor(column))
    elif column.dtype.kind in "iu":
        bad = column < 0
    else:
        raise DataError(f"sequence ids must be integers, got dtype {column.dtype}", variable=variable, chunk=chunk)
    if bad.any():
        row = int(np.argmax(bad))
        value = float(column[row]) if column.dtype.kind == "f" else int(column[row])
        what = "missing" if value == -1 or np.isnan(value) else "not a non-negative integer"
        raise DataError(f"sequence id {value!r} at row {row} of the chunk is {what}: every step needs the id "
                        f"of its sequence ({int(bad.sum())} such rows in the chunk)", variable=variable, chunk=chunk)
    return column.astype(np.int64, copy=False)


def _run_starts(ids: np.ndarray) -> np.ndarray:
    """The row where each run of equal ``ids`` starts, and ``len(ids)``."""
    return np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1, [len(ids)]]).astype(np.int64)


def _layout_kernel(chunk: int, columns: dict[str, np.ndarray], shared: tuple) -> PerChunk:
    variable, offset, all_runs = shared
    ids = sequence_ids(offset + chunk, columns[variable], variable)
    runs = _run_starts(ids)
    run_ids = ids[runs[:-1]]
    order = np.argsort(run_ids, kind="stable")
    repeated = np.flatnonzero(run_ids[order][1:] == run_ids[order][:-1])
    if len(repeated):
        again = int(min(order[repeated + 1]))
        raise DataError(f"sequence {int(run_ids[again])} reappears at row {int(runs[again])} of the chunk after "
                        "another sequence started: the rows of a sequence must be contiguous (sort the rows by "
                        "sequence, then time)", variable=variable, chunk=offset + chunk)
    increasing = bool((np.diff(run_ids) > 0).all())
    return PerChunk({chunk: (len(ids), int(ids[0]), int(ids[-1]), len(run_ids), increasing,
                             (run_ids, runs[:-1]) if all_runs or not increasing else None)})


def _check_contiguous(variable: str, first: np.ndarray, last: np.ndarray,
                      chunk_runs: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """Every id's runs, across chunks (a chunk's first run joins the previous chunk's last): each id once.

    ``chunk_runs``: each chunk's run ids and the rows where they start."""
    joins = [c > 0 and first[c] == last[c - 1] for c in range(len(chunk_runs))]
    ids = np.concatenate([ids[int(j):] for (ids, _), j in zip(chunk_runs, joins, strict=True)])
    rows = np.concatenate([rows[int(j):] for (_, rows), j in zip(chunk_runs, joins, strict=True)])
    chunks = np.concatenate([np.full(len(ids) - int(j), c) for c, ((ids, _), j) in enumerate(zip(chunk_runs, joins,
                                                                                                 strict=True))])
    order = np.argsort(ids, kind="stable")  # equal ids: in row order
    repeated = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if len(repeated):
        again = order[repeated + 1][np.argmin(order[repeated + 1])]  # the earliest reappearance
        seen = chunks[order[repeated][np.argmin(order[repeated + 1])]]
        raise DataError(f"sequence {int(ids[again])} reappears at row {int(rows[again])} of the chunk after another "
                        f"sequence started (it was seen in chunk {int(seen)}): the rows of a sequence must be "
                        "contiguous (sort the rows by sequence, then time)", variable=variable,
                        chunk=int(chunks[again]))


def _checked(source: DataSource, variables: Sequence[str], sequence: str) -> list[str]:
    """The columns a pass reads (``variables`` and ``sequence``), after the checks of the long layout."""
    data = source.data
    if source.schema is None:
        raise DataError("the long layout needs a dataset of rows, got a table of counts")
    known = set(map(str, data.data_vars))
    missing = [v for v in [sequence, *variables] if v not in known]
    if missing:
        raise DataError(f"variables {missing} are not in the dataset; known: {sorted(known)}")
    if data[sequence].dims != ("row",):
        raise DataError(f"the long layout needs sequence ids over ('row',), got dims {data[sequence].dims!r}",
                        variable=sequence)
    if source.weight is not None:
        raise DataError("frequency weights are not supported in the long layout (a row is one step of a "
                        "sequence, not a repeated observation): remove the variable", variable=source.weight)
    return list(dict.fromkeys([*variables, sequence]))


def _columns(source: DataSource, names: Sequence[str]) -> tuple[Any, tuple[int, ...]]:
    """The columns every pass of one E step maps over, chunked the same way each time, and the chunk starts.

    Columns read straight from the store keep its chunks; other arrays are dask arrays with the
    dataset's row chunks (in-memory ones: chunks of :data:`~dpgm.stats.engine.IN_MEMORY_CHUNK_ROWS`).
    """
    import dask.array as da

    columns = source.columns(names, weight=False)
    if isinstance(columns, ZarrColumns):
        return columns, tuple(columns.starts)
    n = len(next(iter(columns.values())))
    if n == 0:
        raise DataError("the dataset has no rows")
    chunks = tuple(c for c in row_chunks({k: v for k, v in columns.items() if _is_lazy(v)}) if c > 0)
    if not chunks:
        chunks = (IN_MEMORY_CHUNK_ROWS,) * (n // IN_MEMORY_CHUNK_ROWS) + ((n % IN_MEMORY_CHUNK_ROWS,)
                                                                          if n % IN_MEMORY_CHUNK_ROWS else ())
    arrays = {k: da.asarray(v).rechunk({0: chunks} | {i: -1 for i in range(1, np.ndim(v))})
              for k, v in columns.items()}
    return arrays, tuple(int(x) for x in np.concatenate([[0], np.cumsum(chunks)]))


def _rows(columns: Any, starts: tuple[int, ...], rows: tuple[int, int] | None) -> Any:
    from dpgm.stats.expected import select_rows

    if rows is not None and (rows[0] not in starts or rows[1] not in starts):
        raise ValueError(f"rows {rows!r} are not whole chunks (chunk starts {starts[:5]}...)")
    return select_rows(columns, rows)


def sequence_layout(source: DataSource, sequence: str, *, ids: bool = False) -> SequenceLayout:
    """Check the sequence ids of a long-layout dataset and record where its sequences cross chunks.

    One pass over the id column (two if the ids do not increase along the rows and ``ids`` is
    False). With ``ids``, every sequence's id reaches the driver (8 bytes per sequence).

    Parameters
    ----------
    source
        The data (one row per step).
    sequence
        The sequence-id variable.

    Raises
    ------
    DataError
        A bad id (:func:`sequence_ids`); a sequence whose rows are not contiguous, naming
        the id and the chunk where it reappears; a ``weight`` variable.
    """
    _checked(source, [], sequence)
    columns, starts = _columns(source, [sequence])

    def run(all_runs: bool) -> list:
        lazy = map_reduce(columns, _layout_kernel, name="dpgm-sequences", shared=(sequence, 0, all_runs))
        return source.compute(lazy).ordered()

    infos = run(ids)
    first = np.array([i[1] for i in infos], dtype=np.int64)
    last = np.array([i[2] for i in infos], dtype=np.int64)
    pieces = np.array([i[3] for i in infos], dtype=np.int64)
    if not (all(i[4] for i in infos) and (last[:-1] <= first[1:]).all()):
        if any(i[5] is None for i in infos):
            infos = run(True)
        _check_contiguous(sequence, first, last, [i[5] for i in infos])
    layout = SequenceLayout(sequence, starts, first, last, pieces, 0)
    found = (np.concatenate([i[5][0][int(j):] for i, j in zip(infos, layout.continues_in, strict=True)])
             if ids else None)
    return replace(layout, n_sequences=int(pieces.sum() - layout.continues_in.sum()), ids=found)


@dataclass(frozen=True)
class _Plan:
    """What every chunk task of one E step's passes needs (one shared key of the graph)."""

    segments: SegmentMath
    sequence: str
    layout: SequenceLayout
    parameters: tuple[tuple[np.ndarray, np.ndarray, Any], ...]
    log_emission: LogEmission
    accumulate: Accumulate | None = None
    messages: tuple[tuple[Any, ...], ...] = ()  # [parameter set][chunk], after pass 1

    @property
    def offset(self) -> int:
        """Number of the first chunk in the dataset."""
        return self.layout.offset


def _slice(columns: dict[str, np.ndarray], a: int, b: int) -> dict[str, np.ndarray]:
    return {k: v[a:b] for k, v in columns.items()}


def _log_emission(plan: _Plan, chunk: int, columns: dict[str, np.ndarray], emission: Any, n_states: int
                  ) -> np.ndarray:
    values = np.asarray(plan.log_emission(plan.offset + chunk, columns, emission), dtype=np.float64)
    rows = len(columns[plan.sequence])
    if values.shape != (rows, n_states):
        raise ValueError(f"log_emission returned shape {values.shape}, expected (rows, states) = {(rows, n_states)}")
    return values


def _boundary_kernel(chunk: int, columns: dict[str, np.ndarray], plan: _Plan) -> PerChunk:
    """Pass 1: the chunk's boundary operators, from the log emissions of the pieces that touch its edges only."""
    ids = sequence_ids(plan.offset + chunk, columns[plan.sequence], plan.sequence)
    runs = plan.segments.run_starts(ids)
    n = len(ids)
    into, out = bool(plan.layout.continues_in[chunk]), bool(plan.layout.continues_out[chunk])
    if len(runs) == 2 or not (into or out):
        edges, pieces = columns, [0, n]
    elif into and out:  # the first piece and the last, as a chunk of two pieces
        head, tail = int(runs[1]), int(runs[-2])
        edges = {k: np.concatenate([v[:head], v[tail:]]) for k, v in columns.items()}
        pieces = [0, head, head + n - tail]
    elif into:
        edges, pieces = _slice(columns, 0, int(runs[1])), [0, int(runs[1])]
    else:
        edges, pieces = _slice(columns, int(runs[-2]), n), [0, n - int(runs[-2])]
    boundaries = []
    for start, transition, emission in plan.parameters:
        if into or out:
            log_emission = _log_emission(plan, chunk, edges, emission, len(start))
            boundaries.append(plan.segments.boundary_operators(log_emission, pieces, start, transition,
                                                               continues_in=into, continues_out=out))
        else:
            boundaries.append(None)
    return PerChunk({chunk: (int(ids[0]), int(ids[-1]), len(runs) - 1, boundaries)})


def _chunk_inputs(chunk: int, columns: dict[str, np.ndarray], plan: _Plan, p: int) -> tuple:
    """The arguments of pass 2's math for parameter set ``p``."""
    start, transition, emission = plan.parameters[p]
    runs = plan.segments.run_starts(sequence_ids(plan.offset + chunk, columns[plan.sequence], plan.sequence))
    log_emission = _log_emission(plan, chunk, columns, emission, len(start))
    return log_emission, runs, start, transition, plan.messages[p][chunk]


def _estep_kernel(chunk: int, columns: dict[str, np.ndarray], plan: _Plan) -> list:
    """Pass 2: each parameter set's ``(loglik, statistics)`` of the chunk."""
    results = []
    for p, (_, _, emission) in enumerate(plan.parameters):
        loglik, gamma, start_counts, transition_counts = plan.segments.chunk_statistics(
            *_chunk_inputs(chunk, columns, plan, p))
        statistics: dict[str, Any] = {"start": start_counts, "transition": transition_counts}
        if plan.accumulate is not None:  # an impossible sequence (NaN posteriors) contributes nothing
            statistics["emission"] = plan.accumulate(plan.offset + chunk, columns, np.nan_to_num(gamma, copy=False),
                                                     emission)
        results.append((loglik, statistics))
    return results


def _row_block(chunk: int, columns: dict[str, np.ndarray], plan: _Plan) -> np.ndarray:
    """Pass 2 of a per-row map: the chunk's rows."""
    return plan.segments.per_row(*_chunk_inputs(chunk, columns, plan, 0))


def _parameters(parameters: Sequence[tuple[Any, Any, Any]]) -> tuple[tuple[np.ndarray, np.ndarray, Any], ...]:
    checked = []
    for start, transition, emission in parameters:
        start, transition = np.asarray(start, dtype=np.float64), np.asarray(transition, dtype=np.float64)
        n = len(start)
        if start.shape != (n,) or transition.shape != (n, n):
            raise ValueError(f"start must be (S,) and transition (S, S), got {start.shape} and {transition.shape}")
        checked.append((start, transition, emission))
    if not checked:
        raise ValueError("no parameter set given")
    return tuple(checked)


def _messages(source: DataSource, columns: Any, plan: _Plan) -> _Plan:
    """Pass 1 and the driver's scan: the plan with every chunk's incoming messages."""
    infos = source.compute(map_reduce(columns, _boundary_kernel, name="dpgm-segments", shared=plan)).ordered()
    layout = plan.layout
    found = (np.array([i[0] for i in infos]), np.array([i[1] for i in infos]), np.array([i[2] for i in infos]))
    if not all(np.array_equal(a, b) for a, b in zip(found, (layout.first, layout.last, layout.pieces), strict=True)):
        raise DataError("the sequence layout does not describe this data (its chunks' first and last ids "
                        "differ): compute it with sequence_layout on the same data", variable=plan.sequence)
    messages = tuple(tuple(plan.segments.combine_boundaries([i[3][p] for i in infos], layout))
                     for p in range(len(plan.parameters)))
    return replace(plan, messages=messages)


def _prepare(source: DataSource, variables: Sequence[str], sequence: str, parameters: Sequence[tuple],
             log_emission: LogEmission, accumulate: Accumulate | None, segments: SegmentMath,
             layout: SequenceLayout | None, rows: tuple[int, int] | None) -> tuple[Any, _Plan]:
    """The checks, the columns and the plan of one E step (or per-row map), its pass 1 and the driver's scan run."""
    names = _checked(source, variables, sequence)
    parameters = _parameters(parameters)
    columns, starts = _columns(source, names)
    if layout is None:
        layout = sequence_layout(source, sequence)
    if layout.variable != sequence or tuple(layout.starts) != tuple(starts) or layout.offset != 0:
        raise DataError("the sequence layout was computed on other data or chunks: compute it with "
                        "sequence_layout(source, sequence)", variable=sequence)
    plan = _Plan(segments, sequence, layout.select(rows), parameters, log_emission, accumulate)
    columns = _rows(columns, starts, rows)
    return columns, _messages(source, columns, plan)


def long_expected_stats(
    source: DataSource,
    variables: Sequence[str],
    sequence: str,
    parameters: Sequence[tuple[np.ndarray, np.ndarray, Any]],
    log_emission: LogEmission,
    accumulate: Accumulate | None = None,
    *,
    segments: SegmentMath,
    layout: SequenceLayout | None = None,
    rows: tuple[int, int] | None = None,
) -> list[tuple[float, dict[str, Any]]]:
    """One E step of Baum-Welch on long-layout data: two passes, for several parameter sets.

    Parameters
    ----------
    source
        The data: one row per step, ``sequence`` the id of each row's sequence.
    variables
        The emission variables ``log_emission`` and ``accumulate`` read.
    sequence
        The sequence-id variable.
    parameters
        One ``(start (S,), transition (S, S), emission)`` per parameter set (restart);
        ``emission`` is the caller's emission object handed to ``log_emission`` and ``accumulate``.
    log_emission
        ``log_emission(chunk, columns, emission) -> (rows, S)`` (module level, to pickle).
    accumulate
        ``accumulate(chunk, columns, gamma, emission) -> statistics`` (module level), or None.
    segments
        The math: :data:`dpgm.inference.segments.FORWARD_BACKWARD`.
    layout
        The data's :func:`sequence_layout` (computed here if not given: one more pass; compute
        it once per fit).
    rows
        Only rows ``[start, stop)``: whole chunks holding whole sequences.

    Returns
    -------
    list of (float, dict)
        Per parameter set: the log-likelihood (the sum of every sequence's; ``-inf`` if one is
        impossible) and ``{"start": (S,), "transition": (S, S) (from, to), "emission": the
        summed statistics of accumulate}`` (no ``"emission"`` without ``accumulate``).

    Raises
    ------
    DataError
        Bad sequence ids or non-contiguous sequences (:func:`sequence_layout`), a
        ``weight`` variable, a layout of other data, ``rows`` that cut a sequence.
    """
    columns, plan = _prepare(source, variables, sequence, parameters, log_emission, accumulate, segments, layout,
                             rows)
    return source.compute(map_reduce(columns, _estep_kernel, name="dpgm-estep", shared=plan))


def long_row_map(
    source: DataSource,
    variables: Sequence[str],
    sequence: str,
    parameters: tuple[np.ndarray, np.ndarray, Any],
    log_emission: LogEmission,
    *,
    segments: SegmentMath,
    layout: SequenceLayout | None = None,
) -> da.Array:
    """A per-row quantity of long-layout sequences, lazily, for one parameter set: for decoding.

    With :data:`~dpgm.inference.segments.FORWARD_BACKWARD`, each row's posterior state
    distribution ``p(z_t | x of its sequence)``, ``(row, S)`` floats (NaN for an impossible
    sequence); with :data:`~dpgm.inference.segment_paths.VITERBI`, each row's state on its
    sequence's most probable path, ``(row, 1)`` int64.

    Runs pass 1 and the driver's scan now; the returned dask array is pass 2, one task per
    chunk (:func:`dpgm.stats.rows.row_map`, keys ``dpgm-predict``), to compute or write back.
    The other parameters are those of :func:`long_expected_stats`, with one parameter set.
    """
    from dpgm.stats.rows import row_map

    columns, plan = _prepare(source, variables, sequence, [parameters], log_emission, None, segments, layout, None)
    names = _checked(source, variables, sequence)
    data = source.data
    if zarr_columns(data, names) is None:
        data = data[names].chunk({"row": tuple(int(c) for c in np.diff(plan.layout.starts))})
    return row_map(data, names, _row_block, segments.outputs(len(plan.parameters[0][0])), shared=plan,
                   dtype=segments.dtype, prefix="dpgm-predict")

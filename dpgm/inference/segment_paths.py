"""Viterbi decoding of hidden Markov chains cut anywhere by chunk boundaries (the long layout).

The max-product twin of :mod:`dpgm.inference.segments`: the same scan over the chunk
boundaries in the ``(max, +)`` semiring. A piece of a sequence that continues
the previous chunk reduces to its operator ``log M[i, j]``, the best log-probability
of its steps ending in state ``j`` given state ``i`` before it (``O(S^3)`` per
step); a piece that starts in the chunk and continues in the next reduces to its
Viterbi scores ``delta`` at the chunk's last row. Each is kept shifted (rows, or
the vector, with maximum 0, the shifts added up separately), so that the scores of
10^8 steps keep their precision.

Three steps, like the sum-product ones:

1. :func:`path_boundary_operators` (pass 1, per chunk);
2. :func:`combine_path_boundaries` (driver): forward, each chunk's incoming scores
   ``delta`` of the step before its first row; backward, the state of the best path
   at each chunk boundary (the backtrack across chunks needs only the operators:
   ``argmax_i delta_in[i] + log M[i, j]``);
3. :func:`viterbi_segments` (pass 2, per chunk): Viterbi over the chunk's pieces,
   a piece that crosses a boundary entering from and ending in the states the driver
   chose, and the backtrack inside the chunk. Fixing both ends keeps the path one
   best path where several are equally good.

Ties between paths of equal probability are broken towards the lowest state, as
:func:`numpy.argmax` and hmmlearn's ``decode`` do; a boundary state is chosen from
the operators, so at exact ties the path may differ from a whole-sequence Viterbi
(both are best paths, of equal probability). A sequence of probability 0 gets states ``-1``.

References
----------
Särkkä, S. and García-Fernández, Á. F. (2021). Temporal parallelization of
Bayesian smoothers. *IEEE Transactions on Automatic Control* 66(1), 299-306.

Viterbi, A. J. (1967). Error bounds for convolutional codes and an asymptotically
optimum decoding algorithm. *IEEE Transactions on Information Theory* 13(2), 260-269.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from dpgm.inference._segment_kernels import state_size
from dpgm.inference.segments import ChunkLinks, run_starts

__all__ = ["VITERBI", "PathBoundary", "PathMessages", "Scores", "Viterbi", "combine_path_boundaries",
           "path_boundary_operators", "split_viterbi", "viterbi_segments"]


@dataclass(frozen=True)
class Scores:
    """Viterbi scores ``values + shift`` (``values`` with maximum 0): a vector ``(S,)`` or, row by row, an
    operator ``(S, S)`` with ``shift (S,)``."""

    values: np.ndarray
    shift: np.ndarray | float


@dataclass(frozen=True)
class PathBoundary:
    """What one chunk tells the driver: the first piece's operator (if it continues the previous chunk) and
    the last piece's scores at the last row (if it starts in the chunk and continues in the next)."""

    head: Scores | None
    tail: Scores | None


@dataclass(frozen=True)
class PathMessages:
    """A chunk's incoming messages for decoding.

    Attributes
    ----------
    forward
        Scores of the step before the chunk's first row, or ``None`` (the first row starts a sequence).
    before
        The best path's state at the step before the chunk's first row (-1: the sequence is
        impossible), or ``None`` (the first row starts a sequence).
    head_end
        The best path's state at the last row of the first piece when that piece continues the
        previous chunk and ends in this one (-1: the sequence is impossible), else ``None``.
    tail_end
        The best path's state at the chunk's last row when its sequence continues (-1: the
        sequence is impossible), else ``None``.
    """

    forward: Scores | None
    before: int | None
    head_end: int | None
    tail_end: int | None


def _log(array: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.ascontiguousarray(array, dtype=np.float64))


@numba.njit(nogil=True, cache=True)
def _max_operator(log_emission, a, b, log_transition, values, shift, size):
    n = len(size)
    product = np.empty((n, n))
    for i in range(n):
        shift[i] = 0.0
        for j in range(n):
            values[i, j] = log_transition[i, j]
    for t in range(a, b):
        if t > a:
            for i in range(n):
                for j in range(n):
                    best = -np.inf
                    for k in range(n):
                        best = max(best, values[i, k] + log_transition[k, j])
                    product[i, j] = best
            values[:, :] = product
        for i in range(n):
            top = -np.inf
            for j in range(n):
                values[i, j] += log_emission[t, j]
                top = max(top, values[i, j])
            if top == -np.inf:
                shift[i] = -np.inf
                values[i, :] = 0.0
            elif shift[i] > -np.inf:
                for j in range(n):
                    values[i, j] -= top
                shift[i] += top


@numba.njit(nogil=True, cache=True)
def _max_filter(log_emission, a, b, log_start, log_transition, delta, size):
    n = len(size)
    previous = np.empty(n)
    shift = 0.0
    for t in range(a, b):
        top = -np.inf
        for j in range(n):
            if t == a:
                value = log_start[j]
            else:
                value = -np.inf
                for i in range(n):
                    value = max(value, previous[i] + log_transition[i, j])
            delta[j] = value + log_emission[t, j]
            top = max(top, delta[j])
        if top == -np.inf:
            delta[:] = 0.0
            return -np.inf
        for j in range(n):
            delta[j] -= top
            previous[j] = delta[j]
        shift += top
    return shift


def path_boundary_operators(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                            *, continues_in: bool, continues_out: bool) -> PathBoundary:
    """Pass 1 for one chunk (arguments as :func:`dpgm.inference.segments.boundary_operators`)."""
    log_emission = np.ascontiguousarray(log_emission, dtype=np.float64)
    log_start, log_transition = _log(start), _log(transition)
    runs = np.asarray(runs, dtype=np.int64)
    n = len(log_start)
    head = tail = None
    if continues_in:
        values, shift = np.empty((n, n)), np.empty(n)
        _max_operator(log_emission, int(runs[0]), int(runs[1]), log_transition, values, shift, state_size(n))
        head = Scores(values, shift)
    if continues_out and not (continues_in and len(runs) == 2):
        delta = np.empty(n)
        tail = Scores(delta, float(_max_filter(log_emission, int(runs[-2]), int(runs[-1]), log_start,
                                               log_transition, delta, state_size(n))))
    return PathBoundary(head, tail)


def _through(scores: Scores, operator: Scores) -> tuple[Scores, np.ndarray]:
    """The scores after a piece, and for each end state the best state before the piece."""
    total = scores.values[:, None] + operator.shift[:, None] + operator.values  # (before, after)
    best = total.argmax(axis=0)
    after = total[best, np.arange(total.shape[1])]
    top = after.max()
    if top == -np.inf or scores.shift == -np.inf:
        return Scores(np.zeros_like(after), -np.inf), best
    return Scores(after - top, scores.shift + top), best


def combine_path_boundaries(boundaries: Sequence[PathBoundary], links: ChunkLinks) -> list[PathMessages]:
    """The driver's scan for decoding: each chunk's incoming scores and the best path's boundary states.

    ``links`` as for :func:`dpgm.inference.segments.combine_boundaries`; ``O(C S^2)``.
    """
    n_chunks = len(boundaries)
    forward: list[Scores | None] = [None] * n_chunks
    carried: Scores | None = None
    for c, boundary in enumerate(boundaries):
        if links.continues_in[c]:
            forward[c] = carried
        if links.continues_out[c]:
            carried = _through(carried, boundary.head)[0] if links.continues_in[c] and links.single[c] \
                else boundary.tail
    head_end: list[int | None] = [None] * n_chunks
    tail_end: list[int | None] = [None] * n_chunks
    for c in range(n_chunks - 1, -1, -1):
        if not links.continues_in[c]:
            continue
        after, before = _through(forward[c], boundaries[c].head)
        if links.single[c] and links.continues_out[c]:
            end = tail_end[c]
        else:
            end = head_end[c] = int(after.values.argmax()) if after.shift > -np.inf else -1
        tail_end[c - 1] = int(before[end]) if end >= 0 else -1
    return [PathMessages(f, None if f is None else tail_end[c - 1], h, t)
            for c, (f, h, t) in enumerate(zip(forward, head_end, tail_end, strict=True))]


@numba.njit(nogil=True, cache=True)
def _viterbi(log_emission, runs, log_start, log_transition, continues_in, delta_in, shift_in, head_end,
             continues_out, tail_end, path, size):
    n_rows, n = log_emission.shape[0], len(size)
    n_runs = runs.shape[0] - 1
    back = np.empty((n_rows, n), dtype=np.int32)
    delta = np.empty(n)
    previous = np.empty(n)
    total = 0.0
    for r in range(n_runs):
        a, b = runs[r], runs[r + 1]
        head_in = continues_in and r == 0
        shift = shift_in if head_in else 0.0
        for j in range(n):
            previous[j] = delta_in[j] if head_in else 0.0
        for t in range(a, b):
            top = -np.inf
            for j in range(n):
                if t == a and not head_in:
                    value, arg = log_start[j], 0
                else:
                    value, arg = -np.inf, 0
                    for i in range(n):
                        candidate = previous[i] + log_transition[i, j]
                        if candidate > value:
                            value, arg = candidate, i
                delta[j] = value + log_emission[t, j]
                back[t, j] = arg
                top = max(top, delta[j])
            if top == -np.inf:
                shift = -np.inf
                break
            for j in range(n):
                previous[j] = delta[j] - top
            shift += top
        closes = not (r == n_runs - 1 and continues_out)
        if closes:
            total += shift
        if shift == -np.inf or (head_in and closes and head_end < 0) or (not closes and tail_end < 0):
            path[a:b] = -1
            continue
        if not closes:
            state = tail_end
        elif head_in:
            state = head_end
        else:
            state = 0
            for j in range(1, n):
                if previous[j] > previous[state]:
                    state = j
        for t in range(b - 1, a - 1, -1):
            path[t] = state
            state = back[t, state]
    return total


def viterbi_segments(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                     messages: PathMessages) -> tuple[float, np.ndarray]:
    """Pass 2 for one chunk: the best path's state at each row (``-1``: impossible sequence), and the summed
    best log-probabilities of the sequences that end in the chunk."""
    log_emission = np.ascontiguousarray(log_emission, dtype=np.float64)
    n = log_emission.shape[1]
    forward, before = messages.forward, messages.before
    # the path enters the chunk from the state the driver chose (of several equally good ones, the one its
    # choice of the previous chunk's last state assumed): the scores of the other states are -inf
    delta_in = np.full(n, -np.inf)
    if forward is not None and before is not None and before >= 0:
        delta_in[before] = forward.values[before]
    path = np.empty(log_emission.shape[0], dtype=np.int64)
    total = _viterbi(log_emission, np.asarray(runs, dtype=np.int64), _log(start), _log(transition),
                     forward is not None, delta_in, 0.0 if forward is None else float(forward.shift),
                     -1 if messages.head_end is None else messages.head_end, messages.tail_end is not None,
                     -1 if messages.tail_end is None else messages.tail_end, path, state_size(n))
    return float(total), path


def split_viterbi(log_emission: np.ndarray, ids: np.ndarray, start: np.ndarray, transition: np.ndarray,
                  chunk_starts: Sequence[int]) -> tuple[float, np.ndarray]:
    """The three steps in memory over rows cut at ``chunk_starts``: the summed best log-probabilities and the
    path (as :func:`dpgm.inference.segments.split_forward_backward`)."""
    edges = [int(x) for x in chunk_starts]
    pieces = [(slice(a, b), run_starts(ids[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
    links = ChunkLinks.from_ids([ids[s.start] for s, _ in pieces], [ids[s.stop - 1] for s, _ in pieces],
                                [len(r) == 2 for _, r in pieces])
    boundaries = [path_boundary_operators(log_emission[s], r, start, transition,
                                          continues_in=bool(links.continues_in[c]),
                                          continues_out=bool(links.continues_out[c]))
                  for c, (s, r) in enumerate(pieces)]
    parts = [viterbi_segments(log_emission[s], r, start, transition, m)
             for (s, r), m in zip(pieces, combine_path_boundaries(boundaries, links), strict=True)]
    return sum(p[0] for p in parts), np.concatenate([p[1] for p in parts])


class Viterbi:
    """The split Viterbi as one object for :mod:`dpgm.stats.long_sequences` (as
    :class:`dpgm.inference.segments.ForwardBackward`): ``per_row`` gives each row's state, one int64 column."""

    dtype = np.dtype(np.int64)
    run_starts = staticmethod(run_starts)
    boundary_operators = staticmethod(path_boundary_operators)
    combine_boundaries = staticmethod(combine_path_boundaries)
    chunk_statistics = staticmethod(viterbi_segments)

    @staticmethod
    def outputs(n_states: int) -> int:
        """Columns of :meth:`per_row`: one."""
        return 1

    @staticmethod
    def per_row(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                messages: PathMessages) -> np.ndarray:
        """Each row's state on its sequence's best path, ``(rows, 1)``."""
        return viterbi_segments(log_emission, runs, start, transition, messages)[1][:, None]


VITERBI = Viterbi()
"""The max-product steps for :mod:`dpgm.stats.long_sequences`."""

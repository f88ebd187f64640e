"""Forward-backward for hidden Markov chains cut anywhere by chunk boundaries (the long layout).

In the long layout a dataset holds one row per step; a sequence is a run of
contiguous rows sharing a sequence id, and may span any number of chunks. This
module is the math of the split E step; it never sees Dask or storage (the passes
are :mod:`dpgm.stats.long_sequences`). It takes per-step log emission
probabilities ``log_emission (rows, S)`` (``log p(x_t | z_t = s)``, 0 for a missing
step), so it serves every emission family.

The math
--------
With ``E_t = diag(exp(log_emission_t))`` and the transition matrix ``T`` (from, to),
the likelihood of a sequence is ``pi' E_1 T E_2 ... T E_n 1`` and the backward
message obeys ``beta_{t-1} = T E_t beta_t``. The piece of a sequence inside one
chunk that continues a piece of an earlier chunk therefore acts on both messages
through one matrix, its *segment operator* ``M = (T E_a) (T E_{a+1}) ... (T E_{b-1})``:
``alpha_{b-1} ∝ alpha_{a-1} M`` (forward) and ``beta_{a-1} = M beta_{b-1}``
(backward). These products are the elements of the associative scan of
Särkkä & García-Fernández (2021): the operator of a run of chunks is the product
of theirs, so the messages at every chunk boundary follow from the chunks'
operators alone. The piece that starts its sequence inside a chunk reduces to a
vector, ``pi' E_a T E_{a+1} ... T E_{b-1}`` (the scan's first element, whose
operator ignores its input).

Every quantity is kept scaled, so that 10^8 steps never underflow:

* an operator (:class:`Operator`) is stored row by row: row ``i`` is the filtered
  distribution at the piece's last step given the state ``i`` before the piece
  (it sums to 1), times ``exp(log_scale[i])``, the piece's likelihood given that
  state. Each row is a scaled forward filter started in state ``i``; the product
  costs ``O(S^3)`` per step;
* a forward message (:class:`ForwardMessage`) is a filtered distribution with the
  log-likelihood of the steps so far; a backward message is a log vector;
* each step's emissions are scaled by their maximum, which is added to the log
  scale.

Three steps, in the order the passes run them:

1. :func:`boundary_operators` (pass 1, per chunk): the operator of the chunk's
   first piece if it continues a sequence from the previous chunk, and the
   forward message at the chunk's last row of its last piece if that one starts
   in the chunk and continues in the next chunk. A piece that starts and ends
   inside the chunk needs nothing from outside.
2. :func:`combine_boundaries` (driver): a sequential fold over the chunks,
   forward then backward, ``O(S^2)`` per chunk: each chunk's incoming forward
   message (the filtered distribution of the step before its first row, and the
   log-likelihood so far) and its incoming backward message (``beta`` of its last
   row, from the steps after the chunk).
3. :func:`forward_backward_segments` (pass 2, per chunk): scaled forward-backward
   over the chunk's pieces with the boundary messages: per-step posteriors
   ``gamma``, expected transition counts (a transition that crosses into the
   chunk is counted by this chunk: once), start counts (only at a sequence's true
   first step) and the log-likelihood of every sequence that *ends* in the chunk
   (so the chunks' totals add up to the sum of the sequences' log-likelihoods).

Within a chunk the scaled recursion is Rabiner's (1989), with the boundary
``beta`` normalised so that ``sum_s alpha_t(s) beta_t(s) = 1`` at every step.
Memory: ``O(rows S)`` per chunk, ``O(S^2)`` per chunk on the driver.

A sequence made impossible by the parameters (a step of probability 0) gets
log-likelihood ``-inf``, ``NaN`` posteriors and no counts.

References
----------
Särkkä, S. and García-Fernández, Á. F. (2021). Temporal parallelization of
Bayesian smoothers. *IEEE Transactions on Automatic Control* 66(1), 299-306.

Rabiner, L. R. (1989). A tutorial on hidden Markov models and selected
applications in speech recognition. *Proc. IEEE* 77, 257-286.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpgm.inference._segment_kernels import (
    forward_filter,
    operator_rows,
    piece_logliks,
    scaled_emissions,
    smooth_pieces,
    state_size,
)

__all__ = ["FORWARD_BACKWARD", "Boundary", "ChunkLinks", "ForwardBackward", "ForwardMessage", "Messages", "Operator",
           "boundary_operators", "combine_boundaries", "forward_backward_segments", "run_starts",
           "sequence_log_likelihoods", "split_forward_backward"]


@dataclass(frozen=True)
class Operator:
    """A piece's segment operator ``M = diag(exp(log_scale)) @ matrix`` (rows of ``matrix`` sum to 1).

    Attributes
    ----------
    matrix
        ``(S, S)``: row ``i`` is the distribution of the piece's last state given state ``i`` before it.
    log_scale
        ``(S,)``: the piece's log-likelihood given state ``i`` before it (``-inf``: impossible).
    """

    matrix: np.ndarray
    log_scale: np.ndarray


@dataclass(frozen=True)
class ForwardMessage:
    """A filtered distribution ``(S,)`` (sums to 1) and the log-likelihood of the steps that led to it."""

    distribution: np.ndarray
    log_likelihood: float


@dataclass(frozen=True)
class Boundary:
    """What one chunk tells the driver (:func:`boundary_operators`).

    Attributes
    ----------
    head
        The operator of the chunk's first piece, if it continues the previous chunk's last sequence.
    tail
        The forward message at the chunk's last row, if its last piece starts in the chunk and
        continues in the next one.
    """

    head: Operator | None
    tail: ForwardMessage | None


@dataclass(frozen=True)
class ChunkLinks:
    """How the chunks' pieces join: one entry per chunk.

    Attributes
    ----------
    continues_in
        ``(C,)`` bool: the chunk's first row continues the sequence of the previous chunk's last row.
    continues_out
        ``(C,)`` bool: the chunk's last row's sequence continues in the next chunk.
    single
        ``(C,)`` bool: the whole chunk is one piece (one sequence id).
    """

    continues_in: np.ndarray
    continues_out: np.ndarray
    single: np.ndarray

    @classmethod
    def from_ids(cls, first: np.ndarray, last: np.ndarray, single: np.ndarray) -> ChunkLinks:
        """The links of chunks whose first and last sequence ids are ``first`` and ``last``."""
        first, last = np.asarray(first), np.asarray(last)
        joins = first[1:] == last[:-1]
        return cls(np.concatenate([[False], joins]), np.concatenate([joins, [False]]),
                   np.asarray(single, dtype=bool))

    def __len__(self) -> int:
        return len(self.single)


@dataclass(frozen=True)
class Messages:
    """A chunk's incoming messages (:func:`combine_boundaries`).

    Attributes
    ----------
    forward
        The filtered distribution of the step before the chunk's first row, with the
        log-likelihood of its sequence so far; ``None`` if the first row starts a sequence.
    log_backward
        ``(S,)`` log ``beta`` of the chunk's last row (the steps after the chunk given its
        last state); ``None`` if the last row ends its sequence.
    """

    forward: ForwardMessage | None
    log_backward: np.ndarray | None


def run_starts(ids: np.ndarray) -> np.ndarray:
    """The row where each run of equal ``ids`` starts, and ``len(ids)``: ``(runs + 1,)`` int64."""
    ids = np.asarray(ids)
    changes = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    return np.concatenate([[0], changes, [len(ids)]]).astype(np.int64)


def _floats(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]


def boundary_operators(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                       *, continues_in: bool, continues_out: bool) -> Boundary:
    """Pass 1 for one chunk: the operators its neighbours need (see the module's description).

    Parameters
    ----------
    log_emission
        ``(rows, S)`` ``log p(x_t | z_t = s)`` of the chunk's rows (0 for a missing step).
    runs
        Where each piece starts, and the number of rows (:func:`run_starts` of the sequence ids).
    start, transition
        ``(S,)`` and ``(S, S)`` (from, to) probabilities.
    continues_in, continues_out
        Whether the chunk's first piece continues the previous chunk, its last piece the next chunk.

    Returns
    -------
    Boundary
        ``head``: the first piece's operator, if ``continues_in``; ``tail``: the forward message
        at the last row, if ``continues_out`` and the last piece starts in the chunk.
    """
    start, transition = _floats(start, transition)
    e, shift = scaled_emissions(log_emission)
    runs = np.asarray(runs, dtype=np.int64)
    n = transition.shape[0]
    head = tail = None
    if continues_in:
        matrix, log_scale = np.empty((n, n)), np.empty(n)
        operator_rows(e, shift, int(runs[0]), int(runs[1]), transition, matrix, log_scale, state_size(n))
        head = Operator(matrix, log_scale)
    if continues_out and not (continues_in and len(runs) == 2):
        alpha = np.empty(n)
        log = forward_filter(e, shift, int(runs[-2]), int(runs[-1]), start, transition, alpha, state_size(n))
        tail = ForwardMessage(alpha, float(log))
    return Boundary(head, tail)


def _forward_through(message: ForwardMessage, operator: Operator) -> ForwardMessage:
    """The message after a piece: ``alpha M``, rescaled."""
    with np.errstate(divide="ignore"):
        weights = np.log(message.distribution) + operator.log_scale
    top = weights.max()
    if message.log_likelihood == -np.inf or top == -np.inf:
        return ForwardMessage(np.full(len(weights), 1.0 / len(weights)), -np.inf)
    unnormalised = np.exp(weights - top) @ operator.matrix
    total = unnormalised.sum()
    return ForwardMessage(unnormalised / total, message.log_likelihood + top + float(np.log(total)))


def _backward_through(operator: Operator, log_backward: np.ndarray) -> np.ndarray:
    """The log backward message before a piece: ``log(M beta)``."""
    top = log_backward.max()
    if top == -np.inf:
        return np.full(len(log_backward), -np.inf)
    with np.errstate(divide="ignore"):
        return operator.log_scale + np.log(operator.matrix @ np.exp(log_backward - top)) + top


def combine_boundaries(boundaries: Sequence[Boundary], links: ChunkLinks) -> list[Messages]:
    """The driver's scan: each chunk's incoming messages from every chunk's :class:`Boundary`.

    A sequential fold over the chunks, forward (filtered distributions) then backward
    (log ``beta``), ``O(C S^2)`` time and ``O(C S)`` memory for ``C`` chunks.

    Parameters
    ----------
    boundaries
        One per chunk, in row order (:func:`boundary_operators`).
    links
        How the chunks' pieces join: a :class:`ChunkLinks`, or anything with its three
        arrays (``continues_in``, ``continues_out``, ``single``).

    Returns
    -------
    list of Messages
        One per chunk.
    """
    n_chunks = len(boundaries)
    forward: list[ForwardMessage | None] = [None] * n_chunks
    carried: ForwardMessage | None = None
    for c, boundary in enumerate(boundaries):
        if links.continues_in[c]:
            forward[c] = carried
        if links.continues_out[c]:
            if links.continues_in[c] and links.single[c]:
                carried = _forward_through(carried, boundary.head)
            else:
                carried = boundary.tail
    backward: list[np.ndarray | None] = [None] * n_chunks
    log_beta = None
    for c in range(n_chunks - 1, -1, -1):
        if links.continues_out[c]:
            backward[c] = log_beta
        if links.continues_in[c]:
            after = backward[c] if links.single[c] and links.continues_out[c] else None
            head = boundaries[c].head
            log_beta = _backward_through(head, np.zeros(len(head.log_scale)) if after is None else after)
    return [Messages(f, b) for f, b in zip(forward, backward, strict=True)]


def forward_backward_segments(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray,
                              transition: np.ndarray, messages: Messages
                              ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Pass 2 for one chunk: posteriors and expected counts of its rows, given its incoming messages.

    Parameters
    ----------
    log_emission
        ``(rows, S)`` ``log p(x_t | z_t = s)`` (0 for a missing step).
    runs
        Where each piece starts, and the number of rows (:func:`run_starts`).
    start, transition
        ``(S,)`` and ``(S, S)`` (from, to) probabilities.
    messages
        The chunk's incoming messages (:func:`combine_boundaries`); ``Messages(None, None)``
        for a chunk whose sequences all start and end inside it.

    Returns
    -------
    (float, ndarray, ndarray, ndarray)
        The summed log-likelihood of the sequences that end in the chunk; ``gamma (rows, S)``;
        the expected start counts ``(S,)`` (sequences that start in the chunk); the expected
        transition counts ``(S, S)`` (from, to) of every transition into a row of the chunk.
    """
    start, transition = _floats(start, transition)
    e, shift = scaled_emissions(log_emission)
    n_rows, n = e.shape
    forward, log_backward = messages.forward, messages.log_backward
    alpha_in = np.full(n, 1.0 / n) if forward is None else _floats(forward.distribution)[0]
    log_in = 0.0 if forward is None else float(forward.log_likelihood)
    log_beta = np.zeros(n) if log_backward is None else _floats(log_backward)[0]
    gamma = np.empty((n_rows, n))
    start_counts, transition_counts = np.zeros(n), np.zeros((n, n))
    loglik = smooth_pieces(e, shift, np.asarray(runs, dtype=np.int64), start, transition, forward is not None,
                     alpha_in, log_in, log_backward is not None, log_beta, gamma, start_counts, transition_counts,
                     state_size(n))
    return float(loglik), gamma, start_counts, transition_counts * transition


def sequence_log_likelihoods(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                             messages: Messages) -> np.ndarray:
    """Pass 2 of scoring, for one chunk: the log-likelihood of every sequence that ends in it.

    The forward filter alone, over the chunk's pieces but the last one if it continues in the
    next chunk (that sequence is scored by the chunk where it ends); the first piece continues
    from the incoming forward message, so a sequence crossing chunks gets the log-likelihood
    of all its steps. The arguments are those of :func:`forward_backward_segments`.

    Returns
    -------
    ndarray
        ``(sequences ending in the chunk,)`` in row order (``-inf``: impossible); they add up to
        the log-likelihood :func:`forward_backward_segments` returns.
    """
    start, transition = _floats(start, transition)
    e, shift = scaled_emissions(log_emission)
    n = e.shape[1]
    runs = np.asarray(runs, dtype=np.int64)
    forward = messages.forward
    alpha_in = np.full(n, 1.0 / n) if forward is None else _floats(forward.distribution)[0]
    out = np.empty(len(runs) - 1 - int(messages.log_backward is not None))
    piece_logliks(e, shift, runs, start, transition, forward is not None, alpha_in,
                  0.0 if forward is None else float(forward.log_likelihood), out, state_size(n))
    return out


def split_forward_backward(log_emission: np.ndarray, ids: np.ndarray, start: np.ndarray, transition: np.ndarray,
                           chunk_starts: Sequence[int]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """The three steps in memory over rows cut at ``chunk_starts`` (the split E step without a cluster).

    Parameters
    ----------
    log_emission
        ``(rows, S)`` of every row.
    ids
        ``(rows,)`` sequence ids (each sequence's rows contiguous, in time order).
    start, transition
        ``(S,)`` and ``(S, S)``.
    chunk_starts
        Row offsets of the chunks, from 0 to ``rows``.

    Returns
    -------
    (float, ndarray, ndarray, ndarray)
        Total log-likelihood, ``gamma (rows, S)``, start counts, transition counts.
    """
    edges = [int(x) for x in chunk_starts]
    pieces = [(slice(a, b), run_starts(ids[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
    links = ChunkLinks.from_ids([ids[s.start] for s, _ in pieces], [ids[s.stop - 1] for s, _ in pieces],
                                [len(r) == 2 for _, r in pieces])
    boundaries = [boundary_operators(log_emission[s], r, start, transition, continues_in=bool(links.continues_in[c]),
                                     continues_out=bool(links.continues_out[c]))
                  for c, (s, r) in enumerate(pieces)]
    messages = combine_boundaries(boundaries, links)
    loglik, gammas, start_counts, transition_counts = 0.0, [], 0.0, 0.0
    for (s, r), message in zip(pieces, messages, strict=True):
        part = forward_backward_segments(log_emission[s], r, start, transition, message)
        loglik += part[0]
        gammas.append(part[1])
        start_counts = start_counts + part[2]
        transition_counts = transition_counts + part[3]
    return loglik, np.concatenate(gammas), start_counts, transition_counts


class ForwardBackward:
    """The split forward-backward as one object: what the long-layout passes
    (:mod:`dpgm.stats.long_sequences`) are handed by their caller, since statistics sit below
    inference. An instance holds nothing and pickles by reference to its class.

    ``boundary_operators`` (pass 1), ``combine_boundaries`` (driver), ``chunk_statistics``
    (pass 2: log-likelihood, ``gamma``, start and transition counts), ``per_row`` (pass 2
    of a per-row map: ``gamma``, ``outputs(S) = S`` columns of ``dtype``) and ``per_sequence``
    (pass 2 of scoring: :func:`sequence_log_likelihoods`, one column).
    """

    dtype = np.dtype(np.float64)
    run_starts = staticmethod(run_starts)
    boundary_operators = staticmethod(boundary_operators)
    combine_boundaries = staticmethod(combine_boundaries)
    chunk_statistics = staticmethod(forward_backward_segments)

    @staticmethod
    def outputs(n_states: int) -> int:
        """Columns of :meth:`per_row`."""
        return n_states

    @staticmethod
    def per_row(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                messages: Messages) -> np.ndarray:
        """Each row's posterior state distribution ``(rows, S)``."""
        return forward_backward_segments(log_emission, runs, start, transition, messages)[1]

    @staticmethod
    def per_sequence(log_emission: np.ndarray, runs: np.ndarray, start: np.ndarray, transition: np.ndarray,
                     messages: Messages) -> np.ndarray:
        """The log-likelihood of each sequence that ends in the chunk, ``(sequences, 1)``."""
        return sequence_log_likelihoods(log_emission, runs, start, transition, messages)[:, None]


FORWARD_BACKWARD = ForwardBackward()
"""The sum-product steps for :mod:`dpgm.stats.long_sequences`."""

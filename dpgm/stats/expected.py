"""Expected counts for EM: one pass, each chunk running batched inference for its rows.

The E-step protocol, honoured by every E step of dpgm (Bayesian networks, Markov
networks and log-linear models, hidden Markov models, Gaussian mixtures): an
E-step object's ``expected_counts(codes, variables, weights)`` (or the pass over
all chunks) returns ``(loglik, statistics)``: ``loglik`` a float, the weighted
log-likelihood of its rows; ``statistics`` a dict of expected sufficient
statistics, additive over rows (partials of chunks are added leaf by leaf, see
:func:`dpgm.stats.engine.add_partials`). A pass over several parameter sets
(restarts) returns one such pair per set.

The chunk kernel gathers the chunk's observed columns into an int code matrix
(``-1`` = missing), and asks each restart's compiled junction tree for the
weighted sum of its rows' posterior tables and their log-likelihood. The
junction trees travel once per pass, as one shared key of the graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpgm.data.columns import ZarrColumns
from dpgm.data.io import _check_weights
from dpgm.data.schema import WEIGHT
from dpgm.stats.engine import map_reduce

if TYPE_CHECKING:
    from dpgm.stats.source import DataSource

__all__ = ["ExpectedStatistics", "code_matrix", "expected_counts", "row_blocks", "select_rows"]


class ExpectedStatistics(Protocol):
    """What an E-step object offers a chunk kernel (the protocol stated above)."""

    def expected_counts(self, codes: np.ndarray, variables: Sequence[str],
                        weights: np.ndarray | None = None) -> tuple[float, dict[str, Any]]:
        """``(loglik, statistics)`` of the rows ``codes`` (``-1`` = missing), weighted."""
        ...


def select_rows(arrays: Any, rows: tuple[int, int] | None) -> Any:
    """The columns of rows ``[start, stop)`` (whole chunks: chunk tasks stay chunk tasks)."""
    if rows is None:
        return arrays
    start, stop = rows
    if isinstance(arrays, ZarrColumns):
        first, last = arrays.starts.index(start), arrays.starts.index(stop)
        return dataclasses.replace(arrays, starts=arrays.starts[first:last + 1])
    return {k: a[start:stop] for k, a in arrays.items()}


def _row_starts(arrays: Any, n_blocks: int) -> tuple[int, ...]:
    """Chunk boundaries along ``row`` (in-memory arrays: ``n_blocks`` equal slices)."""
    if isinstance(arrays, ZarrColumns):
        return tuple(arrays.starts)
    from dpgm.stats.engine import row_chunks

    chunks = row_chunks(arrays)
    if not chunks:
        n = len(next(iter(arrays.values())))
        return tuple(sorted({round(b * n / n_blocks) for b in range(n_blocks + 1)}))
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(chunks)]))


def row_blocks(source: DataSource, variables: Sequence[str], n_blocks: int) -> list[tuple[int, int]]:
    """At most ``n_blocks`` consecutive row ranges of whole chunks of ``source`` (about equal numbers of chunks)."""
    starts = _row_starts(source.columns(variables), n_blocks)
    n_chunks = len(starts) - 1
    edges = sorted({round(b * n_chunks / min(n_blocks, n_chunks)) for b in range(min(n_blocks, n_chunks) + 1)})
    return [(starts[a], starts[b]) for a, b in zip(edges, edges[1:], strict=False)]


def _estep_kernel(index: int, columns: dict[str, np.ndarray], shared: tuple) -> list:
    trees, variables, cardinalities = shared
    weights = columns.get(WEIGHT)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        _check_weights(weights, index)
    codes = code_matrix(index, columns, variables, cardinalities)
    return [tree.expected_counts(codes, variables, weights) for tree in trees]


def code_matrix(index: int, columns: dict[str, np.ndarray], variables: Sequence[str],
                cardinalities: Sequence[int]) -> np.ndarray:
    """The chunk's codes of ``variables`` as ``(rows, variables)`` int16 (``-1`` = missing).

    Raises
    ------
    DataError
        A code out of range, naming the variable, the row and the chunk.
    """
    n = len(next(iter(columns.values())))
    codes = np.empty((n, len(variables)), dtype=np.int16)
    for j, v in enumerate(variables):
        column = columns[v]
        if column.size and (column.min() < -1 or column.max() >= cardinalities[j]):
            from dpgm.stats.kernels import CountPlan, _raise_bad_code

            bad = (column < -1) | (column >= cardinalities[j])
            row = int(np.argmax(bad))
            _raise_bad_code(CountPlan(tuple(variables), tuple(cardinalities), ()), j, row, int(column[row]), index)
        codes[:, j] = column
    return codes


def expected_counts(
    source: DataSource,
    trees: Sequence[Any],
    variables: Sequence[str],
    *,
    name: str = "dpgm-estep",
    rows: tuple[int, int] | None = None,
) -> list[tuple[float, dict]]:
    """One pass: each tree's ``(loglik, expected clique counts)`` summed over all rows.

    Parameters
    ----------
    source
        The fit's data source (observed variables; ``-1`` = missing); the pass runs on its client.
    trees
        Compiled junction trees, one per restart, each with
        ``expected_counts(codes, variables, weights) -> (loglik, {scope: table})``.
    variables
        The observed variables (columns of the code matrix).
    name
        Task-key prefix in the dashboard.
    rows
        Only rows ``[start, stop)`` (whole chunks, see :func:`row_blocks`); all by default.
    """
    schema = source.schema
    variables = list(variables)
    schema.check_scopes([tuple(variables)])
    arrays = select_rows(source.columns(variables), rows)
    shared = (list(trees), variables, [schema[v].cardinality for v in variables])
    return source.compute(map_reduce(arrays, _estep_kernel, name=name, shared=shared))

"""Contingency counts of many scopes in one pass over a dataset."""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.data.io import _check_table, _check_weights
from dpgm.data.schema import WEIGHT
from dpgm.errors import DataError
from dpgm.potentials import labelled_table, reduce_to
from dpgm.stats.engine import map_reduce
from dpgm.stats.kernels import CountPlan, count_chunk

if TYPE_CHECKING:
    from distributed import Client

    from dpgm.stats.source import DataSource

__all__ = ["Counts", "ReplicateCounts", "check_table_sizes", "count_arrays", "counts", "maximal_scopes",
           "replicate_count_arrays"]


class Counts(dict):
    """Contingency tables by scope: ``dict[tuple[str, ...], xarray.DataArray]``.

    Each table's attributes hold ``n_missing`` (rows, or total weight for weighted
    data, left out of that table because a variable of its scope was missing) and
    ``n_rows`` (all rows, or the total weight).

    Attributes
    ----------
    n_rows
        Rows in the data (total weight when weighted).
    n_missing
        Scope -> rows left out of its table for a missing value.
    """

    n_rows: float
    n_missing: dict[tuple[str, ...], float]

    def summary(self) -> str:
        """One line per table: scope, cells, counted and missing rows."""
        lines = [f"{'scope':40s} {'cells':>8s} {'counted':>14s} {'missing':>12s}"]
        for scope, table in self.items():
            counted = float(table.sum())
            lines.append(
                f"{','.join(scope):40.40s} {table.size:8d} {counted:14,.0f} {self.n_missing[scope]:12,.0f}"
            )
        return "\n".join(lines)


def maximal_scopes(scopes: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Scopes not contained in another one (first occurrence kept, order preserved)."""
    unique: list[tuple[str, ...]] = []
    for scope in scopes:
        if not any(set(scope) == set(u) for u in unique):
            unique.append(scope)
    return [s for s in unique if not any(set(s) < set(o) for o in unique)]


MERGE_MAX_VARIABLES = 8
MERGE_MAX_SCOPES = 2000
MERGE_MAX_CELLS = 4096


def merge_scopes(
    scopes: Sequence[tuple[str, ...]],
    extended_cardinality: Mapping[str, int],
    *,
    max_variables: int = MERGE_MAX_VARIABLES,
    max_cells: int = MERGE_MAX_CELLS,
) -> list[tuple[str, ...]]:
    """Small scopes merged into the tables actually counted, fewer increments per row.

    A chunk's counting cost is about one table increment per row and counted
    table, whatever the table's size while it fits in L1 cache (building the
    index is a vectorized loop per variable, much cheaper). Two scopes whose union
    has at most 8 variables and 4096 extended cells (32 KB of int64 counts) are
    counted as that union (greedily, those sharing most variables first); their
    tables are marginals of it. On a chain of 19 neighbour pairs of 2-4 states
    this counts 5 windows instead (about 2x faster per chunk than 10 triples).
    ``max_variables=1`` merges nothing. Pairs wait in a heap, so the greedy
    choice costs O(n^2 log n) for n scopes (above 2,000 scopes nothing is merged).
    """
    alive: dict[int, tuple[str, ...]] = dict(enumerate(scopes))
    if len(alive) > MERGE_MAX_SCOPES:
        return list(scopes)
    heap: list = []

    def consider(a: int, b: int) -> None:
        union = tuple(dict.fromkeys(alive[a] + alive[b]))
        if len(union) > max_variables:
            return
        cells = math.prod(extended_cardinality[v] for v in union)
        if cells <= max_cells:
            # most shared variables first, then the smaller union, then the earlier pair
            heapq.heappush(heap, (len(union) - len(alive[a]) - len(alive[b]), cells, a, b, union))

    for b in range(len(alive)):
        for a in range(b):
            consider(a, b)
    next_id = len(alive)
    while heap:
        _, _, a, b, union = heapq.heappop(heap)
        if a not in alive or b not in alive:
            continue
        del alive[a], alive[b]
        alive[next_id] = union
        for other in list(alive)[:-1]:
            consider(other, next_id)
        next_id += 1
    return list(alive.values())


# The most cells the counting pass holds for all its tables together (one copy per chunk task in
# flight): 2**28 int64 cells are 2 GiB. Larger scopes are refused before any pass.
MAX_COUNTED_CELLS = 1 << 28


def check_table_sizes(scopes: Sequence[Sequence[str]], cardinality: Mapping[str, int],
                      max_cells: int = MAX_COUNTED_CELLS) -> None:
    """Refuse scopes whose counted tables cannot be allocated, in O(scopes) time and before any pass.

    A scope is counted over *extended* states (a 'missing' slot per variable):
    ``prod(k + 1)`` cells, computed with Python integers (no overflow).

    Raises
    ------
    TableTooLarge
        (a ``ValueError``) A scope, or all scopes together, over ``max_cells``,
        naming the largest scope and its cell count.
    """
    from dpgm.errors import TableTooLarge

    sizes = {tuple(s): math.prod(cardinality[v] + 1 for v in s) for s in scopes}
    if not sizes:
        return
    largest = max(sizes, key=sizes.__getitem__)
    total = sum(sizes[s] for s in maximal_scopes(list(sizes)))
    if sizes[largest] > max_cells or total > max_cells:
        which = (f"scope {largest!r} ({len(largest)} variables) needs a table of {sizes[largest]:,} cells"
                 if sizes[largest] > max_cells else
                 f"the {len(sizes)} scopes need {total:,} cells together (the largest, {largest!r}, {sizes[largest]:,})")
        raise TableTooLarge(
            f"{which} ({_bytes(8 * max(total, sizes[largest]))} of counts, a 'missing' state per variable "
            f"included); at most {max_cells:,} cells can be counted in one pass: count smaller scopes"
        )


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _count_kernel(index: int, columns: dict[str, np.ndarray], plan: CountPlan) -> dict[str, Any]:
    weights = columns.get(WEIGHT)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        _check_weights(weights, index)
    matrix = getattr(columns, "matrix", None)
    if matrix is not None and columns.matrix_variables[: len(plan.variables)] == plan.variables:
        codes = matrix[: len(plan.variables)]  # decoded in place: no copy
    else:
        codes = [columns[v] for v in plan.variables]
    tables = count_chunk(codes, plan, weights, chunk=index)
    n = float(weights.sum()) if weights is not None else len(next(iter(columns.values())))
    return {"tables": tables, "rows": np.asarray(n)}


def counts(
    data: xr.Dataset | xr.DataArray,
    scopes: Iterable[Sequence[str]],
    *,
    client: Client | None = None,
    progress: bool | None = None,
) -> Counts:
    """Contingency tables of every scope, in one pass over the data.

    Parameters
    ----------
    data
        A dataset (Zarr-backed and lazy, or in memory) or a labelled contingency
        table (``xarray.DataArray`` of counts; no Dask involved).
    scopes
        Tuples of categorical variable names. Only maximal scopes are counted
        (small ones merged, see :func:`merge_scopes`); the tables of their
        subsets are marginals on the driver.
    client
        Dask client to run the pass on (default: the active client, else threads).
    progress
        Show a progress bar of the pass. None (default): a bar where stderr is a terminal or in Jupyter, nothing in a script.

    Returns
    -------
    Counts
        Scope -> ``xarray.DataArray`` (dims = the scope's variables in the order
        given, coords = state labels), int64 counts, or float64 when the data carry
        a ``weight`` variable. Rows missing a variable of a scope are not counted in
        that scope's table; how many were left out is ``result.n_missing[scope]``.

    Raises
    ------
    DataError
        An unknown or continuous variable in a scope, bad metadata, or a code out
        of range / a bad weight (naming the variable and the chunk).

    Examples
    --------
    >>> import pandas as pd
    >>> import dpgm
    >>> ds = dpgm.from_pandas(pd.DataFrame({"a": ["x", "y", "x"], "b": ["u", "v", None]}))
    >>> tables = dpgm.counts(ds, [("a", "b")])
    >>> tables[("a", "b")].values.tolist(), tables.n_missing[("a", "b")]
    ([[1, 0], [0, 1]], 1)
    """
    from dpgm.stats.source import DataSource

    return count_arrays(DataSource.of(data, client=client, progress=progress), scopes, labelled=True)


def count_arrays(source: DataSource, scopes: Iterable[Sequence[str]], *, labelled: bool = False) -> Counts:
    """:func:`counts` of a fit's data source, with plain NumPy tables (axes in scope order) unless ``labelled``:
    the fitting methods read arrays, and labelling many small tables costs more than counting them."""
    scopes = list(scopes)
    try:
        key = ("counts", tuple(s if isinstance(s, str) else tuple(s) for s in scopes), labelled)
        hash(key)
    except TypeError:  # a scope that is no sequence of names: refused below, with the check's message
        return _count_arrays(source, scopes, labelled)
    return source.memo(key, lambda: _count_arrays(source, scopes, labelled))


def _count_plan(source: DataSource, scopes: list) -> tuple[list, tuple, CountPlan]:
    """The checked scopes, the maximal ones to count and their plan."""
    schema = source.schema
    scopes = schema.check_scopes(scopes)
    check_table_sizes(scopes, {v: schema[v].cardinality for s in scopes for v in s})
    maximal = merge_scopes(maximal_scopes(scopes), {v: schema[v].cardinality + 1 for v in dict.fromkeys(v for s in scopes for v in s)})
    variables = tuple(dict.fromkeys(v for s in maximal for v in s))
    plan = CountPlan(
        variables=variables,
        cardinalities=tuple(schema[v].cardinality for v in variables),
        scopes=tuple(tuple(variables.index(v) for v in s) for s in maximal),
    )
    return scopes, maximal, plan


def _count_arrays(source: DataSource, scopes: list, labelled: bool) -> Counts:
    if source.is_table:
        return _counts_from_table(source.data, scopes, labelled)
    scopes, maximal, plan = _count_plan(source, scopes)
    if source.resampling is not None:
        total = _replicate_totals(source, scopes, plan)
    else:
        total = _totals(source, plan)
    offsets = plan.offsets
    extended = {
        scope: total["tables"][offsets[t] : offsets[t + 1]].reshape(plan.extended_shape(t))
        for t, scope in enumerate(maximal)
    }
    return _assemble(scopes, extended, source.schema.states, total["rows"].item(), labelled)


def _totals(source: DataSource, plan: CountPlan) -> dict[str, np.ndarray]:
    """The flat extended tables of ``plan`` and the rows (their weight), in one pass."""
    variables = plan.variables
    # the count kernel keeps no reference to a chunk's columns: reads reuse scratch buffers
    arrays = source.columns(variables, reuse=True)
    if not arrays:
        arrays = {"_rows": np.zeros(source.schema.n_rows, dtype=np.int8)}
    return source.compute(map_reduce(arrays, functools.partial(_kernel_adapter, plan=plan), name="dpgm-counts"))


def _replicate_totals(source: DataSource, scopes: list, plan: CountPlan) -> dict[str, np.ndarray]:
    """A bootstrap replicate's :func:`_totals`, sliced from every replicate's, counted in one kernel per chunk
    (:func:`dpgm.stats.resample.replicate_count_chunk`) for all the replicates run side by side; replicate -1:
    the data's own tables, counted by the same kernel."""
    resampling = source.resampling
    key = ("replicate counts", plan, resampling.replicates, resampling.random_state)
    every = source.memo_across(key, lambda: _all_replicates(source, plan))
    b = resampling.replicate
    return {"tables": every["tables"][:, b], "rows": every["rows"][b]}


class ReplicateCounts(dict):
    """Every bootstrap replicate's tables by scope: ``dict[tuple[str, ...], numpy.ndarray]``, each shaped
    ``(replicates, *scope)`` (float64).

    Attributes
    ----------
    n_rows
        Each replicate's rows (its total weight), shaped ``(replicates,)``.
    n_missing
        Scope -> each replicate's weight left out of its table for a missing value.
    """

    n_rows: np.ndarray
    n_missing: dict[tuple[str, ...], np.ndarray]


def replicate_count_arrays(source: DataSource, scopes: Iterable[Sequence[str]]) -> ReplicateCounts:
    """Every replicate's tables of ``scopes`` at once, for the replicate ``source`` of a Poisson bootstrap
    (``source.resampling`` set): the (cells x replicates) tables of one kernel per chunk, shared with any
    replicate's :func:`count_arrays` of the same scopes, as one array per scope with the replicates first."""
    resampling = source.resampling
    if resampling is None:
        raise ValueError("replicate_count_arrays needs a replicate's source (source.resampling)")
    scopes, maximal, plan = _count_plan(source, list(scopes))
    key = ("replicate counts", plan, resampling.replicates, resampling.random_state)
    every = source.memo_across(key, lambda: _all_replicates(source, plan))
    offsets, states, replicates = plan.offsets, source.schema.states, resampling.replicates
    tail = "\0replicate"  # the replicates' axis, last in the kernel's tables
    extended = {scope: every["tables"][offsets[t]: offsets[t + 1], :replicates].reshape(*plan.extended_shape(t),
                                                                                       replicates)
                for t, scope in enumerate(maximal)}
    result = ReplicateCounts()
    result.n_rows = np.asarray(every["rows"][:replicates], dtype=np.float64)
    result.n_missing = {}
    for scope in scopes:
        source_scope = next(s for s in extended if set(scope) <= set(s))
        table = reduce_to(extended[source_scope], (*source_scope, tail), (*scope, tail))
        table = np.ascontiguousarray(np.moveaxis(table[tuple(slice(0, len(states[v])) for v in scope)], -1, 0))
        result[scope] = table
        result.n_missing[scope] = result.n_rows - table.reshape(replicates, -1).sum(axis=1)
    return result


def _all_replicates(source: DataSource, plan: CountPlan) -> dict[str, np.ndarray]:
    """Every replicate's tables (cells x replicates) and rows, and last the data's own (weighted by their
    ``weight`` alone), one kernel per chunk: chunks read directly from the store where the data are its
    untouched columns, else through the dataset's arrays."""
    from dpgm.data.columns import zarr_columns

    resampling = source.resampling
    data = resampling.data
    needed = [*plan.variables, *([WEIGHT] if WEIGHT in data.data_vars else [])]
    arrays = zarr_columns(resampling.stored, needed, reuse=True) if resampling.stored is not None else None
    starts = None
    if arrays is not None:
        starts = arrays.starts
    else:
        arrays = {v: data.variables[v].data for v in needed}
        chunks = data.chunks.get("row") if data.chunks else None
        if chunks:
            starts = tuple(int(x) for x in np.concatenate([[0], np.cumsum(chunks)]))
        else:  # in memory: slices of the engine's choosing, each told its rows' positions
            arrays["_position"] = np.arange(int(data.sizes["row"]), dtype=np.int64)
    # whole Poisson weights (at most 8 a row) add up exactly in int32 while 8 times all the rows stay below 2**31
    integer = WEIGHT not in data.data_vars and 8 * int(data.sizes["row"]) < 2**31
    kernel = functools.partial(_replicate_kernel, plan=plan, replicates=resampling.replicates,
                               random_state=resampling.random_state, starts=starts, integer=integer)
    total = source.compute(map_reduce(arrays, kernel, name="dpgm-replicate-counts"))
    return {"tables": np.asarray(total["tables"], dtype=np.float64), "rows": total["rows"]}


def _replicate_kernel(index: int, columns: Any, shared: Any, plan: CountPlan, replicates: int,
                      random_state: int, starts: tuple[int, ...] | None, integer: bool = False) -> dict[str, np.ndarray]:
    from dpgm.stats.resample import replicate_count_chunk

    weights = columns.get(WEIGHT) if hasattr(columns, "get") else None
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        _check_weights(weights, index)
    matrix = getattr(columns, "matrix", None)
    if matrix is not None and columns.matrix_variables[: len(plan.variables)] == plan.variables:
        codes = matrix[: len(plan.variables)]  # decoded in place: no copy
    else:
        codes = [np.asarray(columns[v]) for v in plan.variables]
    if starts is None:
        positions = np.asarray(columns["_position"])
    else:
        positions = np.arange(starts[index], starts[index + 1], dtype=np.int64)
    return replicate_count_chunk(codes, positions, plan, replicates, random_state, weights, chunk=index, own=True,
                                 integer=integer, sparse=True)


def _kernel_adapter(index: int, columns: dict[str, np.ndarray], shared: Any, plan: CountPlan):
    return _count_kernel(index, columns, plan)


def _assemble(
    scopes: list[tuple[str, ...]],
    extended: Mapping[tuple[str, ...], np.ndarray],
    states: Mapping[str, Sequence[str]],
    n_rows: float,
    labelled: bool = True,
) -> Counts:
    """Each scope's table from a maximal superset's extended table (labelled, or a plain array)."""
    result = Counts()
    result.n_rows = n_rows
    result.n_missing = {}
    for scope in scopes:
        source = next(s for s in extended if set(scope) <= set(s))
        table = extended[source]
        # drop the 'missing' state of the scope's own variables
        table = reduce_to(table, source, scope)[tuple(slice(0, len(states[v])) for v in scope)]
        counted = table.sum()
        missing = (n_rows - counted).item()
        table = np.ascontiguousarray(table)
        result[scope] = (labelled_table(table, scope, states, attrs={"n_missing": missing, "n_rows": n_rows})
                         if labelled else table)
        result.n_missing[scope] = missing
    return result


def _counts_from_table(table: xr.DataArray, scopes: Iterable[Sequence[str]], labelled: bool = True) -> Counts:
    _check_table(table)
    values = np.asarray(table.values)
    if values.dtype.kind not in "iuf":
        raise DataError(f"table counts must be numeric, got dtype {values.dtype}")
    if values.dtype.kind == "f":
        _check_weights(values.ravel(), 0)
    elif (values < 0).any():
        raise DataError("table counts must be nonnegative")
    dims = [str(d) for d in table.dims]
    states = {d: [str(s) for s in table.coords[d].values] for d in dims}
    checked = []
    for scope in scopes:
        if isinstance(scope, str) or not isinstance(scope, Sequence):
            raise TypeError(f"a scope must be a tuple of variable names, got {scope!r}")
        scope = tuple(scope)
        unknown = [v for v in scope if v not in dims]
        if unknown:
            raise DataError(f"scope {scope!r} names variables not in the table: {unknown}; known: {sorted(dims)}")
        if len(set(scope)) != len(scope):
            raise DataError(f"scope {scope!r} repeats a variable")
        checked.append(scope)
    # a table has no missing values: pad each axis with an empty 'missing' state
    extended = np.pad(values, [(0, 1)] * values.ndim)
    total = values.sum()
    return _assemble(checked, {tuple(dims): extended}, states, total.item(), labelled)

"""dpgm.counts against an independent pandas groupby count of the same rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from data_helpers import pandas_counts, random_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.stats.kernels import CountPlan, count_chunk


def _scopes(names, draw_ints):
    return [tuple(names[i] for i in idx) for idx in draw_ints]


@st.composite
def problems(draw):
    n_vars = draw(st.integers(1, 5))
    cards = {f"v{i}": draw(st.integers(1, 5)) for i in range(n_vars)}
    names = list(cards)
    scopes = draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=min(3, n_vars), unique=True).map(tuple),
            min_size=1,
            max_size=5,
        )
    )
    n_rows = draw(st.integers(0, 300))
    missing = draw(st.sampled_from([0.0, 0.1, 0.4]))
    weighted = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return cards, scopes, n_rows, missing, weighted, seed


def _check(tables, frame, scopes):
    for scope in scopes:
        expected, missing = pandas_counts(frame, scope)
        table = tables[scope]
        assert table.dims == scope
        for v in scope:
            assert list(table.coords[v].values) == list(frame[v].cat.categories)
        if "weight" in frame:  # sums of two-decimal weights in different orders
            np.testing.assert_allclose(table.values, expected, rtol=1e-12, atol=1e-9)
            assert tables.n_missing[scope] == pytest.approx(missing, rel=1e-12, abs=1e-9)
        else:
            np.testing.assert_array_equal(table.values, expected)  # counts are exact
            assert tables.n_missing[scope] == missing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_in_memory_counts_equal_pandas(problem):
    cards, scopes, n_rows, missing, weighted, seed = problem
    frame = random_frame(np.random.default_rng(seed), n_rows, cards, missing, weighted)
    ds = dpgm.from_pandas(frame)
    _check(dpgm.counts(ds, scopes), frame, scopes)


@pytest.mark.parametrize("chunk_rows", [10_000, 143, 100])  # one chunk, 7 chunks with a ragged last, 10
@pytest.mark.parametrize("weighted", [False, True])
def test_zarr_counts_equal_pandas_for_any_chunking(tmp_path, chunk_rows, weighted):
    rng = np.random.default_rng(7)
    cards = {"a": 2, "b": 3, "c": 4, "d": 5}
    frame = random_frame(rng, 1000, cards, missing=0.15, weighted=weighted)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=chunk_rows)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    assert len(ds.a.chunks[0]) == -(-1000 // chunk_rows)
    scopes = [("a", "b"), ("b",), ("d", "c", "a"), ("c",), ("a",), ("b", "d")]
    _check(dpgm.counts(ds, scopes), frame, scopes)


def test_counts_on_two_process_cluster_equal_in_memory(tmp_path, client):
    rng = np.random.default_rng(3)
    frame = random_frame(rng, 5000, {"a": 3, "b": 2, "c": 4}, missing=0.1, weighted=False)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=700)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    scopes = [("a", "b", "c"), ("c", "a"), ("b",)]
    on_cluster = dpgm.counts(ds, scopes, client=client)
    _check(on_cluster, frame, scopes)
    import dask

    with dask.config.set(scheduler="sync"):
        synchronous = dpgm.counts(ds, scopes)
    for scope in scopes:
        np.testing.assert_array_equal(on_cluster[scope].values, synchronous[scope].values)


def test_one_pass_for_all_scopes(tmp_path):
    """Every scope comes from one compute: count the graph's chunk tasks."""
    rng = np.random.default_rng(0)
    frame = random_frame(rng, 900, {"a": 2, "b": 3, "c": 2}, missing=0.0, weighted=False)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=100)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    from dask.callbacks import Callback

    computes = []

    class Count(Callback):
        def _start(self, dsk):
            computes.append(sum(1 for k in dsk if isinstance(k, tuple) and str(k[0]).startswith("dpgm-counts-map")))

    with Count():
        dpgm.counts(ds, [("a", "b"), ("b", "c"), ("a",), ("c",)])
    assert computes == [9]  # one compute, one counting task per chunk


def test_subset_tables_are_marginals_with_their_own_missing_rows():
    frame = random_frame(np.random.default_rng(11), 2000, {"a": 3, "b": 3}, missing=0.3, weighted=False)
    tables = dpgm.counts(dpgm.from_pandas(frame), [("a", "b"), ("a",)])
    # 'a' alone counts the rows where b is missing too: more than the (a, b) margin
    assert tables[("a",)].sum() > tables[("a", "b")].sum()
    _check(tables, frame, [("a", "b"), ("a",)])


def test_table_input_gives_same_counts_without_dask():
    frame = random_frame(np.random.default_rng(5), 400, {"a": 2, "b": 3, "c": 2}, missing=0.0, weighted=False)
    full = dpgm.counts(dpgm.from_pandas(frame), [("a", "b", "c")])[("a", "b", "c")]
    scopes = [("c", "a"), ("b",), ("a", "b", "c")]
    from_table = dpgm.counts(full, scopes)
    from_rows = dpgm.counts(dpgm.from_pandas(frame), scopes)
    for scope in scopes:
        np.testing.assert_array_equal(from_table[scope].values, from_rows[scope].values)
        assert from_table.n_missing[scope] == 0
    rows = dpgm.from_table(full)
    again = dpgm.counts(rows, [("a", "b", "c")])[("a", "b", "c")]
    np.testing.assert_array_equal(again.values, full.values.astype(float))
    xr.testing.assert_equal(again.astype(np.int64), full)


def _extended_counts(columns, plan: CountPlan, weights=None) -> np.ndarray:
    """Oracle: each table of the plan counted with ``np.add.at`` on its coordinates (a missing code is the
    extra last state), flattened in C order and concatenated."""
    parts = []
    for scope in plan.scopes:
        cards = [plan.cardinalities[j] for j in scope]
        table = np.zeros([c + 1 for c in cards])
        coordinates = tuple(np.where(columns[j] < 0, c, columns[j]).astype(np.int64) for j, c in zip(scope, cards,
                                                                                                     strict=True))
        np.add.at(table, coordinates, 1.0 if weights is None else weights)
        parts.append(table.ravel())
    return np.concatenate(parts)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_kernel_equals_counts_by_np_add_at(dtype):
    rng = np.random.default_rng(1)
    cards = (2, 3, 5, 4)
    columns = [rng.integers(-1, c, 10_001).astype(dtype) for c in cards]
    plan = CountPlan(("a", "b", "c", "d"), cards, ((0,), (1, 2), (0, 1, 3), (3, 2, 1, 0)))
    np.testing.assert_array_equal(count_chunk(columns, plan), _extended_counts(columns, plan))
    weights = rng.random(10_001)
    np.testing.assert_allclose(count_chunk(columns, plan, weights), _extended_counts(columns, plan, weights), rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_kernel_on_a_matrix_across_blocks_equals_counts_by_np_add_at(weighted):
    """Rows beyond one block (BLOCK_ROWS), a ragged last block, the chunk as one 2-D matrix."""
    from dpgm.stats.kernels import BLOCK_ROWS

    rng = np.random.default_rng(4)
    cards = (3, 2, 4, 2, 3, 4, 2)
    n = 2 * BLOCK_ROWS + 777
    matrix = np.stack([rng.integers(-1, c, n) for c in cards]).astype(np.int8)
    plan = CountPlan(tuple("abcdefg"), cards, ((0, 1, 2, 3, 4, 5, 6), (6, 0), (2,)))
    weights = rng.random(n) if weighted else None
    expected = _extended_counts(list(matrix), plan, weights)
    np.testing.assert_allclose(count_chunk(matrix, plan, weights), expected, rtol=1e-12)
    np.testing.assert_allclose(count_chunk(list(matrix), plan, weights), expected, rtol=1e-12)


@pytest.mark.parametrize("bad", [-2, 2])
def test_kernel_names_the_row_of_an_invalid_code_in_a_later_block(bad):
    from dpgm.errors import DataError
    from dpgm.stats.kernels import BLOCK_ROWS

    columns = [np.zeros(3 * BLOCK_ROWS, np.int8), np.ones(3 * BLOCK_ROWS, np.int8)]
    row = BLOCK_ROWS + 12_345 % BLOCK_ROWS
    columns[1][row] = bad
    plan = CountPlan(("a", "b"), (2, 2), ((0, 1),))
    with pytest.raises(DataError, match=rf"variable 'b', chunk 4: code {bad} at row {row}"):
        count_chunk(columns, plan, chunk=4)


def test_task_keys_carry_readable_prefixes_on_the_cluster(tmp_path, client):
    """What the dashboard's task stream shows: dpgm-counts-map / dpgm-counts-combine tasks."""
    from distributed import get_task_stream

    frame = random_frame(np.random.default_rng(2), 2000, {"a": 2, "b": 3}, missing=0.0, weighted=False)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=200)
    with get_task_stream(client) as stream:
        dpgm.counts(dpgm.open_dataset(tmp_path / "d.zarr"), [("a", "b")], client=client)
    from dask.utils import key_split

    prefixes = {key_split(task["key"]) for task in stream.data}
    assert {"dpgm-counts-map", "dpgm-counts-combine"} <= prefixes
    maps = [t for t in stream.data if key_split(t["key"]) == "dpgm-counts-map"]
    assert len(maps) == 10


def test_merged_chain_scopes_equal_pandas_crosstabs_with_missing_values(tmp_path):
    """A chain of pairs is counted as merged windows; every pair and single equals pandas."""
    from dpgm.stats.counts import MERGE_MAX_CELLS, MERGE_MAX_VARIABLES, merge_scopes

    rng = np.random.default_rng(11)
    n, names = 5_000, [f"x{i}" for i in range(7)]
    frame = pd.DataFrame({v: rng.integers(0, 2 + i % 3, n) for i, v in enumerate(names)}).astype(float)
    for v in names:
        frame.loc[rng.random(n) < 0.1, v] = np.nan
    cat = frame.astype("Int64").astype("category")
    ds = dpgm.from_pandas(cat)
    dpgm.write_dataset(ds, tmp_path / "c.zarr", chunk_rows=1_234)
    pairs = [(names[i], names[i + 1]) for i in range(6)]
    scopes = pairs + [(v,) for v in names]
    merged = merge_scopes(pairs, {v: 4 for v in names})
    assert len(merged) < len(pairs)
    assert all(len(s) <= MERGE_MAX_VARIABLES and 4 ** len(s) <= MERGE_MAX_CELLS for s in merged)
    assert all(any(set(p) <= set(m) for m in merged) for p in pairs)
    tables = dpgm.counts(dpgm.open_dataset(tmp_path / "c.zarr"), scopes)
    for a, b in pairs:
        expected = pd.crosstab(cat[a], cat[b]).to_numpy()
        np.testing.assert_array_equal(tables[(a, b)].values, expected)
        assert tables.n_missing[(a, b)] == int((cat[a].isna() | cat[b].isna()).sum())
    for v in names:
        np.testing.assert_array_equal(tables[(v,)].values, cat[v].value_counts(sort=False).sort_index().to_numpy())

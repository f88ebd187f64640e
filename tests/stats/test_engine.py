"""The in-process map-reduce: threaded slices add up to the NumPy answer on the whole arrays."""

from __future__ import annotations

import numpy as np
import pytest

from dpgm.stats.engine import MIN_THREAD_ROWS, map_reduce


def _kernel(index, columns, shared):
    codes = columns["x"]
    return {"counts": np.bincount(codes, minlength=shared), "rows": np.asarray(len(codes)),
            "weighted": np.asarray(float(columns["w"] @ codes)), "first": np.asarray(index == 0)}


@pytest.mark.parametrize("n", [0, 1, MIN_THREAD_ROWS - 1, 2 * MIN_THREAD_ROWS + 17, 5 * MIN_THREAD_ROWS])
def test_threaded_slices_add_up_to_the_whole(n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 7, n)
    w = rng.random(n)
    total = map_reduce({"x": x, "w": w}, _kernel, name="t", shared=7, chunk_rows=3 * MIN_THREAD_ROWS)
    np.testing.assert_array_equal(total["counts"], np.bincount(x, minlength=7))  # exact
    assert int(total["rows"]) == n
    # float sums of the same products, grouped by slice: equal up to rounding
    np.testing.assert_allclose(float(total["weighted"]), float(w @ x), rtol=1e-12)
    assert int(total["first"]) == 1  # exactly one slice is numbered 0


def test_the_same_total_on_every_run():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, 4 * MIN_THREAD_ROWS)
    w = rng.random(x.size)
    runs = [map_reduce({"x": x, "w": w}, _kernel, name="t", shared=5)["weighted"] for _ in range(5)]
    assert len({float(r) for r in runs}) == 1  # slices added in order, not as threads finish


def test_chunk_tasks_of_a_short_pass_run_on_every_worker(tmp_path, client):
    """Reading tasks share one parameter key; they must still spread over the workers."""
    import pandas as pd
    from distributed import get_task_stream

    import dpgm

    frame = pd.DataFrame({"a": pd.Categorical(np.arange(4000) % 3), "b": pd.Categorical(np.arange(4000) % 2)})
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=2000)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    workers = set()
    for _ in range(3):  # each pass is placed anew; every one must use both workers
        with get_task_stream(client) as stream:
            tables = dpgm.counts(ds, [("a", "b")], client=client)
        placed = {t["worker"] for t in stream.data if "dpgm-counts-map" in str(t["key"])}
        assert len(placed) == 2, placed
        workers |= placed
        expected = pd.crosstab(frame["a"], frame["b"]).values
        np.testing.assert_array_equal(tables[("a", "b")].values, expected)
    assert workers == set(client.scheduler_info()["workers"])

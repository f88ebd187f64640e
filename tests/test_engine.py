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

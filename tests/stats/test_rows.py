"""The per-row map builder (``dpgm.stats.rows.row_map``) against NumPy on the pandas frame.

Oracle: the same per-row arithmetic done by NumPy on the frame's columns, so the
values must agree exactly (the same float64 operations on the same numbers);
the chunk number each row's task saw is ``row // chunk_rows``.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

import dpgm
from dpgm.cluster import pass_name
from dpgm.stats.rows import row_map

NAMES = ("x", "y", "c")
CHUNK_ROWS = 300


def _frame(n: int = 1000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(5.0, 2.0, size=n),
                         "c": rng.integers(0, 5, size=n)})


def _weighted_block(index: int, columns: dict[str, np.ndarray], weights: np.ndarray, *,
                    names: tuple[str, ...]) -> np.ndarray:
    """Each row's weighted sum of its columns, and the chunk number the task was given."""
    total = sum(w * np.asarray(columns[v], dtype=np.float64) for v, w in zip(names, weights, strict=True))
    return np.column_stack([total, np.full(len(total), float(index))])


def _oracle(frame: pd.DataFrame, weights: np.ndarray, chunk_rows: int) -> np.ndarray:
    values = frame[list(NAMES)].to_numpy(dtype=np.float64)
    total = sum(w * values[:, j] for j, w in enumerate(weights))
    return np.column_stack([total, np.arange(len(frame)) // chunk_rows])


def _map(data, weights):
    return row_map(data, NAMES, functools.partial(_weighted_block, names=NAMES), 2, shared=weights)


def _tasks(array) -> tuple[list, list]:
    """The chunk tasks' keys and the keys of the shared object in the array's graph."""
    graph = dict(array.__dask_graph__())
    chunk = [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("dpgm-predict-")]
    shared = [k for k in graph if isinstance(k, str) and k.startswith("dpgm-predict-shared-")]
    return chunk, shared


def test_from_the_store_equals_numpy(tmp_path, client):
    frame = _frame()
    path = tmp_path / "rows.zarr"
    dpgm.write_dataset(dpgm.from_pandas(frame), path, chunk_rows=CHUNK_ROWS)  # 4 chunks, the last of 100 rows
    data = dpgm.open_dataset(path)
    assert np.array_equal(data["c"].values, frame["c"].to_numpy())  # integer labels sort numerically: codes = values
    weights = np.array([2.0, -0.5, 3.0])
    array = _map(data, weights)
    chunk, shared = _tasks(array)
    assert len(chunk) == 4 and len(shared) == 1
    assert pass_name(array) == "dpgm-predict"  # what the progress display and the dashboard show
    dependencies = array.__dask_graph__().get_all_dependencies()
    assert all(dependencies[k] == set(shared) for k in chunk)  # each task reads its chunk itself
    assert array.chunks == ((300, 300, 300, 100), (2,))
    result = client.compute(array).result()
    np.testing.assert_array_equal(result, _oracle(frame, weights, CHUNK_ROWS))


def test_in_memory_equals_numpy(client):
    frame = _frame(n=1100, seed=1)
    data = dpgm.from_pandas(frame).chunk({"row": 250})
    weights = np.array([0.25, 1.0, -4.0])
    array = _map(data, weights)
    chunk, shared = _tasks(array)
    assert len(chunk) == 5 and len(shared) == 1
    assert pass_name(array) == "dpgm-predict"
    result = client.compute(array).result()
    np.testing.assert_array_equal(result, _oracle(frame, weights, 250))
    whole = _map(dpgm.from_pandas(frame), weights)  # NumPy-backed: one chunk
    assert len(_tasks(whole)[0]) == 1
    np.testing.assert_array_equal(whole.compute(scheduler="sync"), _oracle(frame, weights, len(frame)))


def test_keys_differ_when_data_or_shared_differ(tmp_path):
    frame = _frame(n=600)
    weights = np.array([1.0, 2.0, 3.0])
    data = dpgm.from_pandas(frame).chunk({"row": 200})
    assert _map(data, weights).name == _map(data, weights).name  # deterministic
    assert _map(data, weights).name != _map(data, weights + 1).name
    other = dpgm.from_pandas(frame.assign(x=frame["x"] + 1)).chunk({"row": 200})
    assert _map(data, weights).name != _map(other, weights).name
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "a.zarr", chunk_rows=200)
    dpgm.write_dataset(dpgm.from_pandas(frame.assign(x=frame["x"] + 1)), tmp_path / "b.zarr", chunk_rows=200)
    a, b = dpgm.open_dataset(tmp_path / "a.zarr"), dpgm.open_dataset(tmp_path / "b.zarr")
    assert _map(a, weights).name != _map(b, weights).name
    np.testing.assert_array_equal(_map(b, weights).compute(scheduler="sync"),
                                  _oracle(frame.assign(x=frame["x"] + 1), weights, 200))


def test_no_columns_is_refused():
    with pytest.raises(ValueError, match="at least one column"):
        row_map(dpgm.from_pandas(_frame(n=10)), [], functools.partial(_weighted_block, names=()), 2)


def test_a_quantity_reading_no_column_is_the_same_on_every_row(tmp_path):
    """No observed variable: each row's posterior is the marginal (a root's fitted table = the relative
    frequencies, pandas); a GLM with no parent predicts its intercept (gaussian: the mean, NumPy)."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"a": rng.choice(["no", "yes"], 700, p=[0.3, 0.7]),
                          "b": rng.choice(["lo", "hi"], 700), "y": rng.normal(3.0, 1.0, 700)})
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=CHUNK_ROWS)
    data = dpgm.open_dataset(tmp_path / "d.zarr")
    network = dpgm.fit(dpgm.BayesianNetwork.from_edges([("a", "b")]), data).model
    only_a = data[["a"]]
    posterior = dpgm.predict_proba(network, only_a, "a")
    assert posterior.data.chunks[0] == (300, 300, 100)
    frequencies = frame["a"].value_counts(normalize=True).sort_index().to_numpy()  # labels sort: no, yes
    np.testing.assert_allclose(posterior.values, np.tile(frequencies, (700, 1)), rtol=1e-12)
    glm = dpgm.fit(dpgm.GLMConditional("y", []), data).model
    predicted = dpgm.predict(glm, data)
    assert predicted.data.chunks[0] == (300, 300, 100)
    np.testing.assert_allclose(predicted.values, np.full(700, frame["y"].mean()), rtol=1e-12)

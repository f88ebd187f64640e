"""The dataset format: round trips, the Zarr fill-value trap, and every bad-input error."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from data_helpers import random_frame

import dpgm
from dpgm import DataError


def _frame(n=500, seed=0):
    rng = np.random.default_rng(seed)
    frame = random_frame(rng, n, {"a": 3, "b": 2}, missing=0.1, weighted=False)
    frame["x"] = rng.normal(size=n)
    frame.loc[frame.index[::17], "x"] = np.nan
    return frame


def test_pandas_zarr_pandas_round_trip(tmp_path):
    frame = _frame()
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=64)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    assert ds.a.dtype == np.int8 and ds.x.dtype == np.float64
    assert list(ds.data_vars) == ["a", "b", "x"]
    back = dpgm.to_pandas(ds.load())
    pd.testing.assert_frame_equal(back, frame)


def test_object_bool_and_integer_columns_become_sorted_categoricals():
    frame = pd.DataFrame({"s": ["b", "a", None, "b"], "t": [True, False, True, True], "i": [3, 1, 3, 2]})
    ds = dpgm.from_pandas(frame)
    assert ds.s.attrs["states"] == ["a", "b"] and ds.s.values.tolist() == [1, 0, -1, 1]
    assert ds.t.attrs["states"] == ["False", "True"] and ds.t.values.tolist() == [1, 0, 1, 1]
    assert ds.i.attrs["states"] == ["1", "2", "3"] and ds.i.values.tolist() == [2, 0, 2, 1]
    assert ds.s.attrs["flag_meanings"] == "a b" and ds.s.attrs["flag_values"] == [0, 1]


def test_csv_and_parquet_streaming_conversion(tmp_path):
    frame = _frame(1003, seed=4)
    plain = frame.astype({"a": object, "b": object})
    plain.to_csv(tmp_path / "in.csv", index=False)
    plain.to_parquet(tmp_path / "in.parquet")
    for name in ["in.csv", "in.parquet"]:
        ds = dpgm.convert(tmp_path / name, tmp_path / f"{name}.zarr", chunk_rows=100)
        assert ds.a.chunks[0] == (100,) * 10 + (3,)
        back = dpgm.to_pandas(ds.load())
        for column in ["a", "b"]:
            expected = frame[column].astype(object).where(frame[column].notna(), None)
            got = back[column].astype(object).where(back[column].notna(), None)
            assert got.tolist() == expected.tolist()
        np.testing.assert_array_equal(back["x"].to_numpy(), frame["x"].to_numpy())


def test_csv_non_number_in_continuous_column_names_column_and_chunk(tmp_path):
    rows = ["x,y"] + [f"{i}.5,a" for i in range(30)] + ["oops,b"]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"variable 'x', chunk 3"):
        dpgm.convert(tmp_path / "in.csv", tmp_path / "out.zarr", chunk_rows=10)


def test_table_rows_table_round_trip():
    rng = np.random.default_rng(2)
    table = xr.DataArray(
        rng.integers(0, 9, (2, 3, 4)),
        dims=["a", "b", "c"],
        coords={"a": ["x", "y"], "b": ["p", "q", "r"], "c": ["0", "1", "2", "3"]},
    )
    rows = dpgm.from_table(table)
    assert rows.sizes["row"] == 24
    back = dpgm.counts(rows, [("a", "b", "c")])[("a", "b", "c")]
    xr.testing.assert_equal(back.astype(np.int64).drop_attrs(), table)


def test_unwritten_chunks_read_as_missing_not_state_zero(tmp_path):
    """The Zarr fill-value trap: a chunk that was never written (Zarr skips chunks that are all
    fill value, so a complete store can have them) reads as missing, never as state 0."""
    from dpgm.data.integrity import mark_complete

    template = xr.Dataset({"a": ("row", da.zeros(300, dtype=np.int8, chunks=100))})
    template.a.attrs.update({"states": ["x", "y"]})
    dpgm.write_dataset(template, tmp_path / "p.zarr", chunk_rows=100, compute=False)
    zarr.open_group(tmp_path / "p.zarr", mode="r+")["a"][:100] = np.ones(100, dtype=np.int8)
    with pytest.raises(dpgm.DataError, match="p.zarr"):  # unfinished: refused
        dpgm.open_dataset(tmp_path / "p.zarr")
    mark_complete(tmp_path / "p.zarr")
    ds = dpgm.open_dataset(tmp_path / "p.zarr")
    assert ds.a.dtype == np.int8
    tables = dpgm.counts(ds, [("a",)])
    assert tables[("a",)].values.tolist() == [0, 100]
    assert tables.n_missing[("a",)] == 200


def _bad_store(tmp_path, codes, chunk_rows=100, states=("x", "y", "z")):
    ds = xr.Dataset({"v": ("row", codes), "w": ("row", np.zeros(len(codes), dtype=np.int8))})
    ds.v.attrs["states"] = list(states)
    ds.w.attrs["states"] = ["only"]
    dpgm.write_dataset(ds, tmp_path / "bad.zarr", chunk_rows=chunk_rows)
    return dpgm.open_dataset(tmp_path / "bad.zarr")


@pytest.mark.parametrize("bad_value", [3, -2])
def test_out_of_range_code_names_variable_chunk_and_value(tmp_path, bad_value):
    codes = np.zeros(1000, dtype=np.int8)
    codes[537] = bad_value
    ds = _bad_store(tmp_path, codes)
    with pytest.raises(DataError, match=rf"variable 'v', chunk 5: code {bad_value} at row 37"):
        dpgm.counts(ds, [("v", "w")])


def test_out_of_range_code_on_cluster_keeps_the_error(tmp_path, client):
    codes = np.zeros(1000, dtype=np.int8)
    codes[901] = 7
    ds = _bad_store(tmp_path, codes)
    with pytest.raises(DataError, match=r"variable 'v', chunk 9: code 7"):
        dpgm.counts(ds, [("v",)], client=client)


def test_bad_metadata_errors():
    ok = {"states": ["a", "b"]}
    cases = [
        (xr.Dataset({"v": ("row", np.zeros(3, np.int8))}), r"'v'.*no state labels"),
        (xr.Dataset({"v": ("row", np.zeros(3, np.float32), ok)}), r"'v'.*state labels but dtype float32"),
        (xr.Dataset({"v": ("row", np.zeros(3, np.int64), ok)}), r"'v'.*dtype int64"),
        (xr.Dataset({"v": ("row", np.array(["a", "b", "a"]), ok)}), r"'v'.*dtype <U1"),
        (xr.Dataset({"v": ("col", np.zeros(3, np.int8), ok)}), r"no 'row' dimension"),
        (xr.Dataset({"v": (("time", "row"), np.zeros((2, 3), np.int8), ok)}), r"'v'.*'row' as its first"),
        (
            xr.Dataset({"v": (("row", "time"), da.zeros((4, 6), np.int8, chunks=(2, 3)), ok)}),
            r"'v'.*chunked along 'time'",
        ),
        (
            xr.Dataset({"v": ("row", np.zeros(3, np.int8), {"flag_values": [1, 2], "flag_meanings": "a b"})}),
            r"'v'.*flag_values",
        ),
    ]
    for ds, pattern in cases:
        with pytest.raises(DataError, match=pattern):
            dpgm.counts(ds, [])


def test_unknown_and_continuous_variables_in_scope():
    ds = dpgm.from_pandas(_frame(50))
    with pytest.raises(DataError, match=r"not in the dataset: \['nope'\]; known: \['a', 'b', 'x'\]"):
        dpgm.counts(ds, [("a", "nope")])
    with pytest.raises(DataError, match=r"continuous variables \['x'\]"):
        dpgm.counts(ds, [("a", "x")])
    with pytest.raises(TypeError, match="tuple of variable names"):
        dpgm.counts(ds, ["ab"])


def test_bad_weights_name_the_chunk(tmp_path):
    frame = random_frame(np.random.default_rng(1), 300, {"a": 2}, missing=0.0, weighted=True)
    frame.loc[250, "weight"] = -1.0
    with pytest.raises(DataError, match=r"variable 'weight'.*row 250"):
        dpgm.from_pandas(frame)
    weights = frame.weight.abs().to_numpy().copy()
    weights[250] = np.nan
    ds = dpgm.from_pandas(frame.drop(columns="weight")).assign(weight=("row", weights))
    dpgm.write_dataset(ds, tmp_path / "w.zarr", chunk_rows=100)
    with pytest.raises(DataError, match=r"variable 'weight', chunk 2: .*row 50"):
        dpgm.counts(dpgm.open_dataset(tmp_path / "w.zarr"), [("a",)])


def test_open_missing_store_and_refuse_overwrite(tmp_path):
    with pytest.raises(FileNotFoundError, match="no dataset"):
        dpgm.open_dataset(tmp_path / "nothing.zarr")
    ds = dpgm.from_pandas(_frame(10))
    dpgm.write_dataset(ds, tmp_path / "d.zarr")
    with pytest.raises(FileExistsError):
        dpgm.write_dataset(ds, tmp_path / "d.zarr")


def test_table_with_bad_counts_is_refused():
    table = xr.DataArray([1.0, np.nan], dims=["a"], coords={"a": ["x", "y"]})
    with pytest.raises(DataError, match="weight"):
        dpgm.counts(table, [("a",)])
    with pytest.raises(DataError, match="no state labels"):
        dpgm.counts(xr.DataArray([1, 2], dims=["a"]), [("a",)])


def test_fsspec_memory_store_round_trip():
    """An fsspec URL goes through the same code as a path (memory:// stands in for s3://)."""
    frame = _frame(300, seed=9)
    dpgm.write_dataset(dpgm.from_pandas(frame), "memory://dpgm-test/d.zarr", chunk_rows=64, mode="w")
    ds = dpgm.open_dataset("memory://dpgm-test/d.zarr")
    assert ds.a.chunks[0][0] == 64
    from data_helpers import pandas_counts

    expected, missing = pandas_counts(frame, ("a", "b"))
    import dask

    with dask.config.set(scheduler="sync"):
        tables = dpgm.counts(ds, [("a", "b")])
    np.testing.assert_array_equal(tables[("a", "b")].values, expected)
    assert tables.n_missing[("a", "b")] == missing

"""Chunk reads that bypass Zarr's codec pipeline equal Zarr's own reads (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

import dpgm
from dpgm.data.columns import ZarrColumns, _open_arrays, zarr_columns


def _store(path, dtype, compressors, chunk_rows=7, n=40, unwritten=()):
    rng = np.random.default_rng(3)
    values = rng.integers(-1, 5, n).astype(dtype)
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    array = root.create_array("x", shape=(n,), chunks=(chunk_rows,), dtype=dtype, fill_value=-1,
                              compressors=compressors, dimension_names=["row"])
    array.attrs.update({"states": [f"s{i}" for i in range(5)]})
    array[:] = values
    for k in unwritten:
        (path / "x" / "c" / str(k)).unlink()
        values[k * chunk_rows : (k + 1) * chunk_rows] = -1
    root.attrs.update({"dpgm_schema_version": 1, "variables": ["x"]})
    return values


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
@pytest.mark.parametrize(
    "compressors", [None, [ZstdCodec(level=3)], [BloscCodec(cname="lz4", shuffle="bitshuffle")],
                    [BloscCodec(cname="zstd", shuffle="shuffle")]], ids=["raw", "zstd", "blosc-lz4", "blosc-zstd"]
)
@pytest.mark.parametrize("chunk_rows", [None, 14, 10])
def test_direct_reads_equal_zarr_reads(tmp_path, dtype, compressors, chunk_rows):
    values = _store(tmp_path / "d.zarr", dtype, compressors or (), unwritten=(2,))
    ds = dpgm.open_dataset(tmp_path / "d.zarr", chunk_rows=chunk_rows)
    columns = zarr_columns(ds, ["x"])
    assert isinstance(columns, ZarrColumns)
    _, direct = _open_arrays(columns.store, columns.variables)
    assert direct[0] is not None and direct[0].codec == ("raw" if compressors is None else compressors[0].__class__.__name__[:-5].lower())
    got = np.concatenate([columns.read(i)["x"] for i in range(columns.n_chunks)])
    through_zarr = np.concatenate([columns.read(i, direct=False)["x"] for i in range(columns.n_chunks)])
    np.testing.assert_array_equal(through_zarr, values)
    np.testing.assert_array_equal(got, values)
    assert got.dtype == dtype


def test_dpgm_writes_bitshuffled_lz4_and_counts_match_pandas(tmp_path):
    rng = np.random.default_rng(0)
    n = 10_000
    frame = {f"v{i}": rng.integers(0, 3, n) for i in range(3)}
    ds = dpgm.from_pandas(__import__("pandas").DataFrame(frame).astype("category"))
    dpgm.write_dataset(ds, tmp_path / "w.zarr", chunk_rows=999)
    codecs = zarr.open_array(str(tmp_path / "w.zarr" / "v0")).metadata.codecs
    assert isinstance(codecs[1], BloscCodec) and codecs[1].shuffle.value == "bitshuffle"
    opened = dpgm.open_dataset(tmp_path / "w.zarr")
    table = dpgm.counts(opened, [("v0", "v2")])[("v0", "v2")]
    expected = __import__("pandas").crosstab(frame["v0"], frame["v2"]).to_numpy()
    np.testing.assert_array_equal(table.values, expected)
    xr.testing.assert_equal(opened.compute(), ds)


@pytest.mark.parametrize("chunk_rows", [None, 14, 10])  # one Zarr chunk per task, two, and not aligned
def test_reused_scratch_reads_equal_fresh_reads(tmp_path, chunk_rows):
    """reuse=True: int8 columns land as rows of one scratch matrix; other dtypes and
    unaligned slices are read as before; every value equals Zarr's own read."""
    rng = np.random.default_rng(5)
    n = 40
    root = zarr.open_group(str(tmp_path / "m.zarr"), mode="w", zarr_format=3)
    values = {}
    for name, dtype in [("a", np.int8), ("b", np.int16), ("c", np.int8)]:
        values[name] = rng.integers(-1, 3, n).astype(dtype)
        array = root.create_array(name, shape=(n,), chunks=(7,), dtype=dtype, fill_value=-1,
                                  compressors=[BloscCodec(cname="lz4", shuffle="bitshuffle")],
                                  dimension_names=["row"])
        array.attrs.update({"states": ["s0", "s1", "s2"]})
        array[:] = values[name]
    root.attrs.update({"dpgm_schema_version": 1, "variables": ["a", "b", "c"]})
    ds = dpgm.open_dataset(tmp_path / "m.zarr", chunk_rows=chunk_rows)
    fresh = zarr_columns(ds, ["a", "b", "c"])
    reused = zarr_columns(ds, ["a", "b", "c"], reuse=True)
    for i in range(reused.n_chunks):
        start, stop = reused.starts[i], reused.starts[i + 1]
        got = reused.read(i)
        assert list(got) == ["a", "b", "c"]
        for name in values:
            np.testing.assert_array_equal(got[name], values[name][start:stop])
            np.testing.assert_array_equal(fresh.read(i)[name], values[name][start:stop])
        if chunk_rows == 10:  # not aligned with the Zarr chunks of 7 rows: read through Zarr
            assert got.matrix is None
        else:
            assert got.matrix_variables == ("a", "c") and got.matrix.flags.c_contiguous
            np.testing.assert_array_equal(got.matrix, np.stack([values["a"], values["c"]])[:, start:stop])
    table = dpgm.counts(ds, [("a", "b", "c")])[("a", "b", "c")]
    expected = np.zeros((3, 3, 3), np.int64)
    keep = (values["a"] >= 0) & (values["b"] >= 0) & (values["c"] >= 0)
    np.add.at(expected, (values["a"][keep], values["b"][keep], values["c"][keep]), 1)
    np.testing.assert_array_equal(table.values, expected)


def test_a_rewritten_store_is_read_anew_by_the_workers(tmp_path, client):
    """Workers keep opened arrays between passes; a store written again in place must not be
    read through the old metadata (other dtype, chunking and states here)."""
    import pandas as pd

    path = tmp_path / "d.zarr"
    rng = np.random.default_rng(5)
    first = pd.DataFrame({"a": pd.Categorical(rng.integers(0, 3, 900)), "b": pd.Categorical(rng.integers(0, 2, 900))})
    dpgm.write_dataset(dpgm.from_pandas(first), path, chunk_rows=300)
    tables = dpgm.counts(dpgm.open_dataset(path), [("a", "b")], client=client)
    np.testing.assert_array_equal(tables[("a", "b")].values, pd.crosstab(first["a"], first["b"]).values)
    again = dpgm.counts(dpgm.open_dataset(path), [("a", "b")], client=client)  # cached arrays, same store
    np.testing.assert_array_equal(again[("a", "b")].values, tables[("a", "b")].values)
    second = pd.DataFrame({"a": pd.Categorical(rng.integers(0, 200, 1000), categories=range(200)),  # int16 codes
                           "b": pd.Categorical(rng.integers(0, 4, 1000), categories=range(4))})
    dpgm.write_dataset(dpgm.from_pandas(second), path, chunk_rows=250, mode="w")
    ds = dpgm.open_dataset(path)
    assert ds["a"].dtype == np.int16
    tables = dpgm.counts(ds, [("a", "b")], client=client)
    expected = pd.crosstab(second["a"], second["b"], dropna=False).values
    np.testing.assert_array_equal(tables[("a", "b")].values, expected)

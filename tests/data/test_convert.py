"""dpgm.convert on the cluster: directories, globs, row groups and CSV byte ranges vs pandas reading the same files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import dpgm
from dpgm.data.convert import default_chunk_rows


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue", "amber"], n).astype(object)
    colour[rng.random(n) < 0.05] = None
    return pd.DataFrame({
        "colour": colour,
        "size": rng.integers(1, 6, n).astype(str),  # integers: categorical
        "height": np.round(rng.normal(170, 10, n), 3),  # non-integers: continuous
    })


def _decoded(ds) -> pd.DataFrame:
    frame = dpgm.to_pandas(ds.load())
    return frame.assign(**{c: frame[c].astype(object).where(frame[c].notna(), None)
                           for c in ("colour", "size")})


def _expected(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(colour=frame["colour"].astype(object).where(frame["colour"].notna(), None),
                        size=frame["size"].astype(object)).reset_index(drop=True)


def _chunk_rows(store) -> int:
    return zarr.open_array(str(store / "colour"), mode="r").chunks[0]


def _labels_in_order_of_appearance(series: pd.Series) -> list[str]:
    return [str(v) for v in pd.unique(series.dropna())]


def test_partitioned_parquet_folder_on_the_cluster(tmp_path, client):
    parts = [_frame(10_000, seed) for seed in range(4)]
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, part in enumerate(parts):  # several row groups per file: one task each
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), folder / f"part-{i}.parquet",
                       row_group_size=2500)
    ds = dpgm.convert(folder, tmp_path / "out.zarr", client=client)
    whole = pd.concat(parts, ignore_index=True)
    got = _decoded(ds)
    pd.testing.assert_frame_equal(got[["colour", "size"]], _expected(whole)[["colour", "size"]])
    np.testing.assert_array_equal(got["height"].to_numpy(), whole["height"].to_numpy())
    assert ds.colour.attrs["states"] == sorted(_labels_in_order_of_appearance(whole["colour"]))
    assert ds.colour.dtype == np.int8 and ds.height.dtype == np.float64
    # 40,000 rows: four chunks by default, two for each worker
    assert _chunk_rows(tmp_path / "out.zarr") == default_chunk_rows(40_000) == 10_000


def test_csv_glob_cut_into_byte_ranges_equals_whole_files(tmp_path, client):
    parts = [_frame(2500, 10 + seed) for seed in range(3)]
    for i, part in enumerate(parts):
        part.to_csv(tmp_path / f"day-{i}.csv", index=False)
    (tmp_path / "notes.txt").write_text("not data")
    cut = dpgm.convert(str(tmp_path / "day-*.csv"), tmp_path / "cut.zarr", blocksize=4096, chunk_rows=1000,
                       client=client)
    whole = dpgm.convert(str(tmp_path / "day-*.csv"), tmp_path / "whole.zarr", blocksize=None, chunk_rows=1000)
    expected = _expected(pd.concat(parts, ignore_index=True))
    for ds in (cut, whole):
        got = _decoded(ds)
        pd.testing.assert_frame_equal(got[["colour", "size"]], expected[["colour", "size"]])
        np.testing.assert_allclose(got["height"].to_numpy(), expected["height"].to_numpy(), rtol=1e-15)
        assert ds.sizes["row"] == 7500
    assert _chunk_rows(tmp_path / "cut.zarr") == _chunk_rows(tmp_path / "whole.zarr") == 1000
    assert cut.colour.attrs["states"] == whole.colour.attrs["states"]


def test_compressed_csv_is_one_block_and_weights_stay_floats(tmp_path):
    frame = _frame(500, 3).assign(weight=np.arange(500) + 0.5)
    frame.to_csv(tmp_path / "in.csv.gz", index=False)
    ds = dpgm.convert(tmp_path / "in.csv.gz", tmp_path / "out.zarr", blocksize=100)
    np.testing.assert_array_equal(ds["weight"].values, frame["weight"].to_numpy())
    assert _decoded(ds)["colour"].tolist() == _expected(frame)["colour"].tolist()


def test_files_with_different_columns_are_refused_by_name(tmp_path):
    _frame(10, 1).to_csv(tmp_path / "a.csv", index=False)
    _frame(10, 2).drop(columns="size").to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(dpgm.DataError, match=r"b\.csv.*columns"):
        dpgm.convert(tmp_path, tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_empty_glob_and_mixed_formats_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no .csv or .parquet files"):
        dpgm.convert(str(tmp_path / "nothing-*.csv"), tmp_path / "out.zarr")
    _frame(10, 1).to_csv(tmp_path / "a.csv", index=False)
    _frame(10, 1).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="mixes CSV and Parquet"):
        dpgm.convert(tmp_path, tmp_path / "out.zarr")


def test_a_label_first_seen_in_a_late_block_keeps_its_place_in_appearance_order(tmp_path):
    first = pd.DataFrame({"v": ["b", "a"] * 50})
    second = pd.DataFrame({"v": ["c", "a"] * 50})
    first.to_csv(tmp_path / "p1.csv", index=False)
    second.to_csv(tmp_path / "p2.csv", index=False)
    ds = dpgm.convert(tmp_path, tmp_path / "out.zarr", label_order="appearance")
    assert ds.v.attrs["states"] == ["b", "a", "c"]
    assert ds.v.values.tolist() == [0, 1] * 50 + [2, 1] * 50
    ds = dpgm.convert(tmp_path, tmp_path / "sorted.zarr")  # the default: sorted
    assert ds.v.attrs["states"] == ["a", "b", "c"]
    assert ds.v.values.tolist() == [1, 0] * 50 + [2, 0] * 50


@pytest.mark.parametrize("chunk_rows", [300, 700, 1000, 2600, 10_000])
def test_chunks_aligned_or_not_with_the_row_groups(tmp_path, chunk_rows):
    """Blocks of 1000 rows: chunks inside one block, exactly on its edges, across several, larger than all
    (stored as one chunk of the 4000 rows: a chunk is never longer than the data)."""
    frame = _frame(4000, 21)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "in.parquet", row_group_size=1000)
    ds = dpgm.convert(tmp_path / "in.parquet", tmp_path / "out.zarr", chunk_rows=chunk_rows)
    assert _chunk_rows(tmp_path / "out.zarr") == min(chunk_rows, 4000)
    pd.testing.assert_frame_equal(_decoded(ds)[["colour", "size"]], _expected(frame)[["colour", "size"]])
    np.testing.assert_array_equal(ds["height"].values, frame["height"].to_numpy())


def test_storage_options_for_a_remote_input_leave_a_local_output_alone(tmp_path):
    """``dpgm convert s3://bucket/parts/ big.zarr --storage-options '{"anon": true}'``: the options are the
    input's; the local store is written without them (Zarr refuses options for a local path)."""
    parts = tmp_path / "parts"
    parts.mkdir()
    frame = pd.DataFrame({"smoker": ["yes", "no", "no"] * 40, "age": np.arange(120) % 7})
    frame.iloc[:60].to_parquet(parts / "a.parquet")
    frame.iloc[60:].to_parquet(parts / "b.parquet")
    ds = dpgm.convert(str(parts), tmp_path / "big.zarr", storage_options={"anon": True})
    back = dpgm.to_pandas(ds)
    assert back.smoker.astype(str).tolist() == frame.smoker.tolist()
    assert back.age.astype(int).tolist() == frame.age.tolist()

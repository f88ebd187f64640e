"""Every chunk accounted for: the chunk manifest and schema record a writer leaves when it marks a
store complete, the readers that check them, and ``dpgm verify``.

Real Zarr stores on disk, real ``dpgm`` subprocesses (``python -m dpgm.cli``), the session's
LocalCluster for the distributed writers. Oracles: the files on disk (``os.walk``), CRC-32C of
their bytes computed here (``google_crc32c``), and pandas' counts of the same data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import google_crc32c
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cli_runs import cli_environment, error_line, s3_server
from data_helpers import pandas_counts, random_frame

import dpgm
from dpgm.errors import DataError

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

DPGM = [sys.executable, "-m", "dpgm.cli"]


def run(*args, check=True):
    environment = cli_environment()
    result = subprocess.run([*DPGM, *map(str, args)], capture_output=True, text=True, env=environment, timeout=240)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}: {result.stderr}")
    return result


def group_attrs(path) -> dict:
    return json.loads((Path(path) / "zarr.json").read_text())["attributes"]


N_ROWS, CHUNK_ROWS = 2000, 200


def mixed_frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    """Two categorical columns with missing values and two continuous ones from two clusters."""
    rng = np.random.default_rng(seed)
    frame = random_frame(rng, n, {"a": 3, "b": 2}, missing=0.05, weighted=False)
    centre = rng.integers(0, 2, n)
    frame["x"] = rng.normal(0, 1, n) + 6 * centre
    frame["y"] = rng.normal(0, 1, n) - 4 * centre
    return frame


def mixed_store(path: Path, frame: pd.DataFrame | None = None) -> Path:
    dpgm.write_dataset(dpgm.from_pandas(mixed_frame() if frame is None else frame), path, chunk_rows=CHUNK_ROWS)
    return path


def spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"spec{abs(hash(text))}.yaml"
    path.write_text(text)
    return path


BN_SPEC = "model: bayesian_network\nedges: [[a, b]]\n"
GMM_SPEC = "model: gaussian_mixture\nn_components: 2\nvariables: [x, y]\nrandom_state: 0\nmax_iter: 20\n"


def verify_json(path, *extra) -> tuple[int, dict]:
    result = run("verify", path, "--json", "--workers", "1", *extra, check=False)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


# ---------------------------------------------------------------- 1. a chunk file that is gone


def test_a_deleted_categorical_chunk_is_refused_by_info_counts_fit_and_verify(tmp_path):
    store = mixed_store(tmp_path / "d.zarr")
    gone = store / "a" / "c" / "3"
    gone.unlink()
    for args in (("info", store), ("counts", store, "--scope", "a,b", "--workers", "1"),
                 ("fit", spec(tmp_path, BN_SPEC), store, "--out", tmp_path / "m.zarr", "--workers", "1")):
        line = error_line(run(*args, check=False), 65)
        assert "'a'" in line and "chunk 3" in line and str(gone) in line and "missing" in line, (args, line)
    assert not (tmp_path / "m.zarr").exists()
    code, report = verify_json(store)
    assert code == 65 and report["ok"] is False
    assert report["variables"]["a"]["missing"] == [{"chunk": [3], "file": str(gone)}]
    assert report["variables"]["a"]["checked"] == N_ROWS // CHUNK_ROWS
    assert all(not report["variables"][v]["missing"] and not report["variables"][v]["damaged"] for v in "bxy")


def test_a_deleted_float_chunk_is_refused_by_info_fit_and_verify(tmp_path):
    store = mixed_store(tmp_path / "d.zarr")
    gone = store / "x" / "c" / "7"
    gone.unlink()
    for args in (("info", store),
                 ("fit", spec(tmp_path, GMM_SPEC), store, "--out", tmp_path / "m.zarr", "--workers", "1")):
        line = error_line(run(*args, check=False), 65)
        assert "'x'" in line and "chunk 7" in line and str(gone) in line, (args, line)
    code, report = verify_json(store)
    assert code == 65 and report["variables"]["x"]["missing"] == [{"chunk": [7], "file": str(gone)}]


@pytest.mark.filterwarnings("ignore:The specified chunks separate the stored chunks")
def test_a_deleted_chunk_is_found_on_every_read_path(tmp_path, client):
    """dpgm's direct reader, Zarr's reader (Dask chunks not aligned with Zarr's), xarray's own arrays
    (a sliced dataset, ``.values``, ``to_pandas``), and a LocalCluster of processes."""
    store = mixed_store(tmp_path / "d.zarr")
    (store / "b" / "c" / "4").unlink()
    reads = {
        "direct": lambda: dpgm.counts(dpgm.open_dataset(store), [("a", "b")]),
        "zarr": lambda: dpgm.counts(dpgm.open_dataset(store, chunk_rows=300), [("a", "b")]),
        "sliced": lambda: dpgm.counts(dpgm.open_dataset(store).isel(row=slice(0, 1500)), [("a", "b")]),
        "values": lambda: dpgm.open_dataset(store).b.values,
        "to_pandas": lambda: dpgm.to_pandas(dpgm.open_dataset(store)),
        "cluster": lambda: dpgm.counts(dpgm.open_dataset(store), [("a", "b")], client=client),
        "sliced on the cluster": lambda: dpgm.counts(dpgm.open_dataset(store).isel(row=slice(0, 1500)),
                                                     [("a", "b")], client=client),
    }
    for name, read in reads.items():
        with pytest.raises(DataError, match="missing") as info:
            read()
        assert info.value.variable == "b" and info.value.chunk == 4, name
        assert str(store / "b" / "c" / "4") in str(info.value), name
    # the columns whose chunks are all there read as before
    counts = dpgm.counts(dpgm.open_dataset(store), [("a",)])[("a",)].values
    expected, _ = pandas_counts(mixed_frame(), ("a",))
    np.testing.assert_array_equal(counts, expected)


def test_chunks_a_writer_left_empty_read_as_missing_and_verify(tmp_path):
    """Zarr writes no file for a chunk that is all fill value: the manifest records it as empty, so it
    reads as missing values (pandas' counts agree) and ``verify`` passes; a file that appears there
    later is not what the writer wrote."""
    frame = mixed_frame()
    frame.loc[400:599, "a"] = None  # chunk 2 of 'a' all missing
    frame.loc[1000:1199, "x"] = np.nan  # chunk 5 of 'x' all NaN
    store = mixed_store(tmp_path / "d.zarr", frame)
    assert not (store / "a" / "c" / "2").exists() and not (store / "x" / "c" / "5").exists()
    tables = dpgm.counts(dpgm.open_dataset(store), [("a", "b")])
    expected, missing = pandas_counts(frame, ("a", "b"))
    np.testing.assert_array_equal(tables[("a", "b")].values, expected)
    assert tables.n_missing[("a", "b")] == missing
    np.testing.assert_array_equal(dpgm.open_dataset(store).x.values, frame.x.to_numpy())
    code, report = verify_json(store)
    assert code == 0 and report["ok"] is True
    shutil.copy(store / "a" / "c" / "3", store / "a" / "c" / "2")  # a valid chunk, but not the writer's
    with pytest.raises(DataError, match="empty") as info:
        dpgm.counts(dpgm.open_dataset(store), [("a",)])
    assert info.value.variable == "a" and info.value.chunk == 2
    code, report = verify_json(store)
    assert code == 65 and [d["chunk"] for d in report["variables"]["a"]["damaged"]] == [[2]]


# ---------------------------------------------------------------- 2. chunk bytes


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x04
    path.write_bytes(bytes(data))


def test_flipped_bytes_and_a_swapped_chunk_are_named_damaged(tmp_path):
    store = mixed_store(tmp_path / "d.zarr")
    _flip(store / "a" / "c" / "5", 17)
    _flip(store / "y" / "c" / "0", -1)  # the stored checksum itself
    shutil.copy(store / "b" / "c" / "1", store / "b" / "c" / "6")  # a chunk with a valid CRC, in the wrong place
    code, report = verify_json(store)
    assert code == 65 and report["ok"] is False
    damaged = {v: [(d["chunk"], d["file"]) for d in report["variables"][v]["damaged"]] for v in "abxy"}
    assert damaged == {"a": [([5], str(store / "a" / "c" / "5"))], "b": [([6], str(store / "b" / "c" / "6"))],
                       "x": [], "y": [([0], str(store / "y" / "c" / "0"))]}
    assert all(report["variables"][v]["missing"] == [] for v in "abxy")
    # the reader refuses the swapped chunk too (its CRC is valid, but not the one recorded)
    with pytest.raises(DataError, match="recorded") as info:
        dpgm.counts(dpgm.open_dataset(store), [("b",)])
    assert info.value.variable == "b" and info.value.chunk == 6
    text = run("verify", store, "--workers", "1", check=False)
    line = error_line(text, 65)
    assert "3 damaged" in line and "0 missing" in line and str(store) in line


def test_an_intact_store_verifies_and_its_counts_equal_pandas(tmp_path):
    frame = mixed_frame(seed=3)
    store = mixed_store(tmp_path / "d.zarr", frame)
    code, report = verify_json(store, "--workers", "2")
    assert code == 0 and report["ok"] is True and report["verifiable"] is True
    on_disk = {v: len(os.listdir(store / v / "c")) for v in "abxy"}
    assert {v: report["variables"][v]["checked"] for v in "abxy"} == {v: N_ROWS // CHUNK_ROWS for v in "abxy"}
    assert on_disk == {v: N_ROWS // CHUNK_ROWS for v in "abxy"}
    out = run("verify", store, "--workers", "1").stdout
    assert "verified" in out and "40 chunks" in out
    result = json.loads(run("counts", store, "--scope", "a,b", "--scope", "b", "--json", "--workers", "1").stdout)
    for scope in (("a", "b"), ("b",)):
        expected, missing = pandas_counts(frame, scope)
        assert result["tables"][",".join(scope)]["counts"] == expected.tolist()
        assert result["tables"][",".join(scope)]["n_missing"] == missing
    info = run("info", store).stdout
    assert "unverifiable" not in info and "40 chunk files present" in info


def test_verify_runs_one_task_per_row_block_and_reduces_in_a_tree(tmp_path, client):
    from distributed import get_task_stream

    frame = mixed_frame(n=3200, seed=5)
    store = mixed_store(tmp_path / "d.zarr", frame)  # 16 row blocks of 4 variables
    (store / "a" / "c" / "11").unlink()
    with get_task_stream(client) as stream:
        report = dpgm.verify(store, client=client)
    assert not report.ok and report.variables["a"]["missing"] == [{"chunk": [11], "file": str(store / "a/c/11")}]
    assert report.variables["x"] == {"chunks": 16, "checked": 16, "missing": [], "damaged": [], "metadata": []}
    keys = [str(task["key"]) for task in stream.data]
    blocks = [k for k in keys if "dpgm-verify-block" in k]
    merges = [k for k in keys if "dpgm-verify-merge" in k]
    assert len(blocks) == 16 and 1 <= len(merges) < 16, keys


# ---------------------------------------------------------------- 3. metadata


def _edit_array_metadata(store: Path, variable: str, edit) -> None:
    path = store / variable / "zarr.json"
    metadata = json.loads(path.read_text())
    edit(metadata)
    path.write_text(json.dumps(metadata, indent=2))


def _relabel(metadata: dict) -> None:
    attributes = metadata["attributes"]
    attributes["states"] = [s if s != "s1" else "s9" for s in attributes["states"]]
    attributes["flag_meanings"] = attributes["flag_meanings"].replace("s1", "s9")


EDITS = {
    "state labels": _relabel,
    "dtype": lambda m: m.update(data_type="int16"),
    "fill value": lambda m: m.update(fill_value=0),
    "chunk shape": lambda m: m["chunk_grid"]["configuration"].update(chunk_shape=[100]),
    "codecs": lambda m: m.update(codecs=m["codecs"][:-1]),
    "chunk key encoding": lambda m: m["chunk_key_encoding"]["configuration"].update(separator="."),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_a_metadata_change_after_the_marker_is_refused_naming_variable_and_what(tmp_path, what):
    store = mixed_store(tmp_path / "d.zarr")
    _edit_array_metadata(store, "a", EDITS[what])
    with pytest.raises(DataError) as info:
        dpgm.open_dataset(store)
    assert info.value.variable == "a" and what in str(info.value), str(info.value)


def test_a_changed_state_label_is_refused_by_every_reader(tmp_path):
    store = mixed_store(tmp_path / "d.zarr")
    _edit_array_metadata(store, "a", _relabel)
    for args in (("info", store), ("counts", store, "--scope", "a", "--workers", "1"),
                 ("fit", spec(tmp_path, BN_SPEC), store, "--out", tmp_path / "m.zarr", "--workers", "1")):
        line = error_line(run(*args, check=False), 65)
        assert "'a'" in line and "state labels" in line, (args, line)
    code, report = verify_json(store)
    assert code == 65 and any("state labels" in p for p in report["variables"]["a"]["metadata"])


def test_an_edited_manifest_or_schema_record_is_refused(tmp_path):
    store = mixed_store(tmp_path / "d.zarr")
    original = (store / "zarr.json").read_text()
    document = json.loads(original)
    document["attributes"]["dpgm_manifest"]["arrays"]["a"]["empty"] = [3]
    (store / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(DataError, match="manifest"):
        dpgm.open_dataset(store)
    document = json.loads(original)
    document["attributes"]["dpgm_schema"]["variables"]["b"]["dtype"] = "int16"
    (store / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(DataError, match="schema"):
        dpgm.open_dataset(store)


def test_verify_of_a_relative_path_on_workers_started_elsewhere(tmp_path, client, monkeypatch):
    """``dpgm verify asia.zarr`` against a cluster whose workers run in another folder: every chunk found
    (the pass reads the store by its absolute path), as many as the files on disk."""
    monkeypatch.chdir(tmp_path)
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 4_000, "asia.zarr", chunk_rows=1_000)
    assert client.run(os.getcwd) and all(cwd != str(tmp_path) for cwd in client.run(os.getcwd).values())
    report = dpgm.verify("asia.zarr", client=client)
    assert report.ok, report.lines()
    assert {v: r["checked"] for v, r in report.variables.items()} == {
        v: len(os.listdir(tmp_path / "asia.zarr" / v / "c")) for v in report.variables}


def test_a_dataset_opened_by_dpgm_and_written_by_xarray_reads_as_unverifiable(tmp_path):
    """The records describe their store's files: an opened dataset does not carry them to another store."""
    store = mixed_store(tmp_path / "d.zarr")
    ds = dpgm.open_dataset(store)
    assert "dpgm_manifest" not in ds.attrs and "dpgm_schema" not in ds.attrs
    ds.to_zarr(tmp_path / "copy.zarr", zarr_format=3, consolidated=False)
    copy = dpgm.open_dataset(tmp_path / "copy.zarr")
    np.testing.assert_array_equal(copy.a.values, ds.a.values)
    assert not dpgm.verify(tmp_path / "copy.zarr").verifiable


def test_stores_without_a_manifest_read_as_before_and_info_says_unverifiable(tmp_path):
    frame = mixed_frame()
    ds = dpgm.from_pandas(frame)
    ds.attrs = {}
    ds.to_zarr(tmp_path / "x.zarr", zarr_format=3, consolidated=False,
               encoding={v: {"_FillValue": None, "chunks": (CHUNK_ROWS,), **({"fill_value": -1} if v in "ab" else {})}
                         for v in ds.data_vars})
    (tmp_path / "x.zarr" / "a" / "c" / "3").unlink()  # today's behaviour: read as missing values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tables = dpgm.counts(dpgm.open_dataset(tmp_path / "x.zarr"), [("a",)])
    lost = frame.copy()
    lost.loc[600:799, "a"] = None
    expected, missing = pandas_counts(lost, ("a",))
    np.testing.assert_array_equal(tables[("a",)].values, expected)
    assert tables.n_missing[("a",)] == missing
    info = run("info", tmp_path / "x.zarr")
    assert info.returncode == 0 and "unverifiable" in info.stdout
    assert json.loads(run("info", tmp_path / "x.zarr", "--json").stdout)["verifiable"] is False
    code, report = verify_json(tmp_path / "x.zarr")
    assert code == 65 and report["verifiable"] is False


# ---------------------------------------------------------------- 4. every writer


def _chunk_files(store: Path) -> dict[str, dict[str, int]]:
    """Oracle: every chunk file under the store (array -> key -> CRC-32C stored in its last 4 bytes,
    checked against the bytes before them)."""
    found: dict[str, dict[str, int]] = {}
    for root, _, files in os.walk(store):
        for name in files:
            if name == "zarr.json":
                continue
            path = Path(root) / name
            relative = path.relative_to(store).parts
            array, key = relative[0], "/".join(relative[1:])  # every array sits at the top of the group
            data = path.read_bytes()
            assert google_crc32c.value(data[:-4]) == int.from_bytes(data[-4:], "little"), path
            found.setdefault(array, {})[key] = int.from_bytes(data[-4:], "little")
    return found


def _arrays(store: Path) -> set[str]:
    return {p.parent.relative_to(store).as_posix() for p in store.rglob("zarr.json") if p.parent != store}


def _write_dataset(tmp_path, client):
    return mixed_store(tmp_path / "w.zarr")


def _write_dataset_lazily(tmp_path, client):
    path = tmp_path / "w.zarr"
    dpgm.compute(dpgm.write_dataset(dpgm.from_pandas(mixed_frame()).chunk({"row": 400}), path,
                                    chunk_rows=CHUNK_ROWS, compute=False), client=client)
    return path


def _convert(tmp_path, client):
    frame = mixed_frame()
    frame.loc[0:299, "x"] = np.nan  # chunk 0 of 'x' all missing: Zarr writes no file for it
    frame.to_csv(tmp_path / "in.csv", index=False)
    return Path(dpgm.convert(tmp_path / "in.csv", tmp_path / "c.zarr", chunk_rows=300, blocksize=None,
                             client=client).encoding["dpgm_store"].path)


def _convert_parquet_blocks(tmp_path, client):
    frame = mixed_frame()
    frame.to_parquet(tmp_path / "in.parquet", row_group_size=450)  # blocks share chunks: edge writes
    dpgm.convert(tmp_path / "in.parquet", tmp_path / "c.zarr", chunk_rows=200, client=client)
    return tmp_path / "c.zarr"


def _generate(tmp_path, client):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, tmp_path / "g.zarr", chunk_rows=700,
                                 missing=0.3, seed=2, client=client)
    return tmp_path / "g.zarr"


def _add_variables(tmp_path, client):
    path = mixed_store(tmp_path / "w.zarr")
    extra = xr.Dataset({"c": ("row", (np.arange(N_ROWS) % 3).astype(np.int8)), "z": ("row", np.ones(N_ROWS))})
    extra.c.attrs["states"] = ["p", "q", "r"]
    dpgm.data.add_variables(extra.chunk({"row": CHUNK_ROWS}), path)
    dpgm.data.add_variables(extra[["c"]], path, overwrite=True)  # replaced: no stale entries
    return path


def _predict_write(tmp_path, client):
    truth = dpgm.load_network("asia")
    dpgm.sample_bayesian_network(truth, 1000, tmp_path / "d.zarr", seed=0, chunk_rows=300)
    truth.save(tmp_path / "m.zarr")
    run("predict", tmp_path / "m.zarr", tmp_path / "d.zarr", "--variable", "tub", "--workers", "1")
    run("predict", tmp_path / "m.zarr", tmp_path / "d.zarr", "--variable", "tub", "--workers", "1")
    return tmp_path / "d.zarr"


def _model_save(tmp_path, client):
    dpgm.load_network("asia").save(tmp_path / "m.zarr")
    return tmp_path / "m.zarr"


WRITERS = [_write_dataset, _write_dataset_lazily, _convert, _convert_parquet_blocks, _generate, _add_variables,
           _predict_write, _model_save]


@pytest.mark.parametrize("writer", WRITERS, ids=[w.__name__.strip("_") for w in WRITERS])
def test_the_manifest_covers_exactly_the_chunk_files_on_disk(tmp_path, client, writer):
    from dpgm.data.manifest import recorded_chunks

    store = writer(tmp_path, client)
    attributes = group_attrs(store)
    assert attributes["dpgm_complete"] is True
    recorded = recorded_chunks(store)  # array -> key -> CRC-32C recorded (None: recorded empty)
    assert set(recorded) == _arrays(store)
    on_disk = _chunk_files(store)
    assert {a: {k: c for k, c in keys.items() if c is not None} for a, keys in recorded.items()} == \
        {a: on_disk.get(a, {}) for a in recorded}
    for array, keys in recorded.items():  # every chunk of the grid is recorded, present or empty
        metadata = json.loads((store / array / "zarr.json").read_text())
        grid = [-(-n // c) for n, c in zip(metadata["shape"], metadata["chunk_grid"]["configuration"]["chunk_shape"],
                                           strict=True)]
        assert len(keys) == int(np.prod(grid)), array
    assert dpgm.verify(store).ok
    code, _ = verify_json(store)
    assert code == 0


def test_predict_write_keeps_the_store_verifiable_and_its_new_chunks_checked(tmp_path):
    store = _predict_write(tmp_path, None)
    ds = dpgm.open_dataset(store)
    assert "tub_proba" in ds and ds.tub_proba.shape == (1000, 2)
    recorded = group_attrs(store)["dpgm_schema"]["variables"]
    assert set(recorded) == set(ds.data_vars) and recorded["tub_proba"]["shape"] == [1000, 2]
    (store / "tub_proba" / "c" / "2" / "0").unlink()
    with pytest.raises(DataError, match="missing") as info:
        _ = dpgm.open_dataset(store).tub_proba.values
    assert info.value.variable == "tub_proba" and info.value.chunk == 2
    code, report = verify_json(store)
    assert code == 65 and report["variables"]["tub_proba"]["missing"] == [
        {"chunk": [2, 0], "file": str(store / "tub_proba" / "c" / "2" / "0")}]

@pytest.fixture(scope="module")
def s3():
    """An S3-compatible server (moto) on loopback, with a bucket."""
    with s3_server("dpgm-data") as options:
        yield options


def test_a_lost_object_on_s3_is_refused_on_the_cluster_and_by_verify(s3, client):
    """An incomplete ``aws s3 sync``: one chunk object of a dataset on an object store is gone."""
    import fsspec

    frame = mixed_frame()
    url = "s3://dpgm-data/mixed.zarr"
    dpgm.write_dataset(dpgm.from_pandas(frame), url, chunk_rows=CHUNK_ROWS, storage_options=s3)
    assert dpgm.verify(url, client=client, storage_options=s3).ok
    tables = dpgm.counts(dpgm.open_dataset(url, storage_options=s3), [("a", "b")], client=client)
    np.testing.assert_array_equal(tables[("a", "b")].values, pandas_counts(frame, ("a", "b"))[0])
    fsspec.filesystem("s3", **s3).rm("dpgm-data/mixed.zarr/a/c/8")
    with pytest.raises(DataError, match="missing") as info:
        dpgm.counts(dpgm.open_dataset(url, storage_options=s3), [("a", "b")], client=client)
    assert info.value.variable == "a" and info.value.chunk == 8 and f"{url}/a/c/8" in str(info.value)
    report = dpgm.verify(url, client=client, storage_options=s3)
    assert not report.ok and report.variables["a"]["missing"] == [{"chunk": [8], "file": f"{url}/a/c/8"}]


# ---------------------------------------------------------------- 5. hostile metadata, byte by byte


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["a", "x"])
def test_no_single_byte_change_of_a_variables_metadata_changes_what_is_read(tmp_path, variable):
    """Every byte of the variable's ``zarr.json`` replaced in turn: the store either opens and reads the
    very same values and labels, or is refused with a DataError."""
    store = mixed_store(tmp_path / "d.zarr")
    reference = dpgm.open_dataset(store).load()
    path = store / variable / "zarr.json"
    original = path.read_bytes()
    opened = refused = 0
    for offset in range(len(original)):
        # a neighbouring byte, a digit, a blank (which leaves the document's content as it was where it
        # replaces layout whitespace)
        for replacement in {original[offset] ^ 0x01, ord("9") if original[offset] != ord("9") else ord("8"),
                            ord(" ")} - {original[offset]}:
            data = bytearray(original)
            data[offset] = replacement
            path.write_bytes(bytes(data))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ds = dpgm.open_dataset(store)
                    values = ds[variable].values
            except DataError:
                refused += 1
                continue
            opened += 1
            assert ds[variable].attrs == reference[variable].attrs, (offset, chr(replacement))
            assert ds[variable].dtype == reference[variable].dtype, (offset, chr(replacement))
            np.testing.assert_array_equal(values, reference[variable].values, err_msg=f"{offset} {chr(replacement)}")
    path.write_bytes(original)
    assert refused > 1000, (refused, opened)


def test_the_documented_data_integrity_example_runs_as_written():
    page = (Path(__file__).resolve().parents[2] / "docs" / "integrity.md").read_text()
    section = page.split("## Data integrity", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python")[1:]]
    block = next(b for b in blocks if "dpgm.verify(path)" in b)
    exec(compile("\n".join(line[2:] for line in block.splitlines()), "docs/integrity.md", "exec"), {})

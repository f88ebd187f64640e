"""No silent wrong answers: incomplete stores refused, checksummed chunks, lost variables
noticed, latent variables that are observed refused, checkpoints tied to their data and spec.

Every case runs on real Zarr stores on disk; CLI cases run the installed ``dpgm`` command
in a subprocess and assert the exit code and that the one error line names the culprit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from cli_runs import cli_environment, error_line
from zarr.codecs import Crc32cCodec

import dpgm
from dpgm.data import add_variables
from dpgm.errors import DataError

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

DPGM = [str(Path(sys.executable).with_name("dpgm"))]


def run(*args, check=True):
    environment = cli_environment()
    result = subprocess.run([*DPGM, *map(str, args)], capture_output=True, text=True, env=environment,
                            timeout=240)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}: {result.stderr}")
    return result


def attrs(path) -> dict:
    return json.loads((Path(path) / "zarr.json").read_text())["attributes"]


def small_dataset(n: int = 300, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.choice(["x", "y", "z"], n), "b": rng.choice(["u", "v"], n)})
    return dpgm.from_pandas(frame)


def incomplete_store(path: Path) -> Path:
    """Metadata and the first of three chunks, as a writer killed after its first chunk leaves them."""
    template = xr.Dataset({"a": ("row", da.zeros(300, dtype=np.int8, chunks=100))})
    template.a.attrs.update({"states": ["x", "y"]})
    dpgm.write_dataset(template, path, chunk_rows=100, compute=False)
    zarr.open_group(str(path), mode="r+")["a"][:100] = np.ones(100, dtype=np.int8)
    return path


# ---------------------------------------------------------------- 1. incomplete stores


def test_write_dataset_marks_the_store_complete_after_its_chunks(tmp_path):
    dpgm.write_dataset(small_dataset(), tmp_path / "d.zarr", chunk_rows=100)
    assert attrs(tmp_path / "d.zarr")["dpgm_complete"] is True
    delayed = dpgm.write_dataset(small_dataset().chunk({"row": 100}), tmp_path / "lazy.zarr", chunk_rows=100,
                                 compute=False)
    assert attrs(tmp_path / "lazy.zarr")["dpgm_complete"] is False  # metadata only so far
    delayed.compute()
    assert attrs(tmp_path / "lazy.zarr")["dpgm_complete"] is True
    xr.testing.assert_equal(dpgm.open_dataset(tmp_path / "lazy.zarr").compute(), small_dataset())


def test_incomplete_store_is_refused_naming_it(tmp_path):
    path = incomplete_store(tmp_path / "part.zarr")
    with pytest.raises(DataError, match="incomplete") as info:
        dpgm.open_dataset(path)
    assert str(path) in str(info.value)


def test_cli_readers_refuse_an_incomplete_store_with_exit_65(tmp_path):
    path = incomplete_store(tmp_path / "part.zarr")
    (tmp_path / "spec.yaml").write_text("model: bayesian_network\nedges: []\nvariables: [a]\n")
    for args in [("info", path), ("counts", path, "--scope", "a", "--workers", "1"),
                 ("fit", tmp_path / "spec.yaml", path, "--out", tmp_path / "m.zarr", "--workers", "1")]:
        line = error_line(run(*args, check=False), 65)
        assert str(path) in line and "incomplete" in line, (args, line)
    assert not (tmp_path / "m.zarr").exists()


def test_generate_that_fails_midway_leaves_a_refused_store(tmp_path, monkeypatch):
    from dpgm.data import sample

    write_chunk = sample._write_chunk

    def dies_at_chunk_3(sampler, path, storage_options, chunk, *args):
        if chunk == 3:
            raise MemoryError("killed")
        return write_chunk(sampler, path, storage_options, chunk, *args)

    monkeypatch.setattr(sample, "_write_chunk", dies_at_chunk_3)
    with pytest.raises(MemoryError):
        dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "g.zarr", chunk_rows=100)
    with pytest.raises(DataError, match="incomplete"):
        dpgm.open_dataset(tmp_path / "g.zarr")
    monkeypatch.setattr(sample, "_write_chunk", write_chunk)
    ds = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "g.zarr", chunk_rows=100,
                                      mode="w")
    assert attrs(tmp_path / "g.zarr")["dpgm_complete"] is True and ds.sizes["row"] == 1000


def test_cli_generate_marks_complete(tmp_path):
    run("generate", "asia", tmp_path / "g.zarr", "--rows", "500", "--chunk-rows", "100", "--workers", "1")
    assert attrs(tmp_path / "g.zarr")["dpgm_complete"] is True


def test_cli_convert_refuses_bad_input_before_writing_anything(tmp_path):
    """A bad value in the fourth chunk is found by the discovery pass: no store is created."""
    values = [f"{i}.5" for i in range(40)]
    values[35] = "oops"
    pd.DataFrame({"a": ["x", "y"] * 20, "c": values}).to_csv(tmp_path / "in.csv", index=False)
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "out.zarr", "--chunk-rows", "10",
                          "--continuous", "c", check=False), 65)
    assert "'c'" in line and "chunk 3" in line and "row 35" in line
    assert not (tmp_path / "out.zarr").exists()
    values[35] = "35.5"
    pd.DataFrame({"a": ["x", "y"] * 20, "c": values}).to_csv(tmp_path / "in.csv", index=False)
    run("convert", tmp_path / "in.csv", tmp_path / "out.zarr", "--chunk-rows", "10", "--overwrite")
    assert attrs(tmp_path / "out.zarr")["dpgm_complete"] is True
    assert "40 rows" in run("info", tmp_path / "out.zarr").stdout


def test_model_save_marks_complete_and_load_refuses_an_unfinished_save(tmp_path):
    model = dpgm.load_network("asia")
    model.save(tmp_path / "m.zarr")
    assert attrs(tmp_path / "m.zarr")["dpgm_complete"] is True
    assert dpgm.load(tmp_path / "m.zarr").variables == model.variables
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="r+")
    group.attrs["dpgm_complete"] = False  # what a save killed before its last table leaves
    with pytest.raises(DataError, match="incomplete") as info:
        dpgm.load(tmp_path / "m.zarr")
    assert str(tmp_path / "m.zarr") in str(info.value)
    dpgm.sample_bayesian_network(model, 200, tmp_path / "d.zarr", seed=0)
    line = error_line(run("predict", tmp_path / "m.zarr", tmp_path / "d.zarr", "--variable", "tub",
                          "--workers", "1", check=False), 65)
    assert str(tmp_path / "m.zarr") in line and "incomplete" in line


def test_added_variables_are_listed_only_once_written(tmp_path):
    """``predict --write`` / ``add_variables``: an interrupted write is not part of the dataset."""
    dpgm.write_dataset(small_dataset().chunk({"row": 100}), tmp_path / "d.zarr", chunk_rows=100)
    extra = xr.Dataset({"c": ("row", da.from_array(np.arange(300) % 2, chunks=100).astype(np.int8))})
    extra.c.attrs["states"] = ["p", "q"]
    delayed = add_variables(extra, tmp_path / "d.zarr", compute=False)
    assert attrs(tmp_path / "d.zarr")["variables"] == ["a", "b"]
    with pytest.warns(dpgm.DpgmWarning, match="'c'"):
        assert list(dpgm.open_dataset(tmp_path / "d.zarr").data_vars) == ["a", "b"]
    delayed.compute()
    assert attrs(tmp_path / "d.zarr")["variables"] == ["a", "b", "c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = dpgm.open_dataset(tmp_path / "d.zarr")
    assert ds.c.values.tolist() == (np.arange(300) % 2).tolist()


def test_a_write_of_added_variables_that_never_finished_is_replaced_by_the_next(tmp_path):
    dpgm.write_dataset(small_dataset(), tmp_path / "d.zarr", chunk_rows=100)
    extra = xr.Dataset({"c": ("row", np.full(300, 1, dtype=np.int8))})
    extra.c.attrs["states"] = ["p", "q"]
    add_variables(extra.chunk({"row": 100}), tmp_path / "d.zarr", compute=False)  # never computed
    with pytest.warns(dpgm.DpgmWarning, match="unfinished write"):
        add_variables(extra, tmp_path / "d.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dpgm.open_dataset(tmp_path / "d.zarr").c.values.tolist() == [1] * 300


def test_cli_predict_write_is_listed_after_its_chunks(tmp_path):
    truth = dpgm.load_network("asia")
    dpgm.sample_bayesian_network(truth, 300, tmp_path / "d.zarr", seed=0, chunk_rows=100)
    truth.save(tmp_path / "m.zarr")
    run("predict", tmp_path / "m.zarr", tmp_path / "d.zarr", "--variable", "tub", "--workers", "1")
    listed = attrs(tmp_path / "d.zarr")["variables"]
    assert listed[-1] == "tub_proba" and attrs(tmp_path / "d.zarr")["dpgm_complete"] is True
    assert isinstance(zarr.open_array(str(tmp_path / "d.zarr" / "tub_proba")).metadata.codecs[-1], Crc32cCodec)


def test_store_without_marker_from_other_writers_is_read(tmp_path):
    """Policy for stores dpgm did not mark (earlier dpgm versions, xarray or zarr directly): read
    as before; only a store dpgm marked unfinished is refused."""
    small_dataset().to_zarr(tmp_path / "x.zarr", zarr_format=3, consolidated=False,
                            encoding={v: {"_FillValue": None} for v in ("a", "b")})
    assert "dpgm_complete" not in attrs(tmp_path / "x.zarr")
    assert dpgm.open_dataset(tmp_path / "x.zarr").sizes["row"] == 300
    assert "no completion marker" in run("info", tmp_path / "x.zarr").stdout
    dpgm.write_dataset(small_dataset(), tmp_path / "d.zarr")
    assert "no completion marker" not in run("info", tmp_path / "d.zarr").stdout


# ---------------------------------------------------------------- 2. checksums


def _codecs(path) -> list:
    return list(zarr.open_array(str(path)).metadata.codecs)


def test_every_array_dpgm_writes_ends_with_crc32c(tmp_path):
    dpgm.write_dataset(small_dataset(), tmp_path / "w.zarr", chunk_rows=100)
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 300, tmp_path / "g.zarr", chunk_rows=100)
    pd.DataFrame({"a": ["x", "y", "z"] * 10, "w": np.arange(30) + 0.5}).to_csv(tmp_path / "in.csv", index=False)
    dpgm.convert(tmp_path / "in.csv", tmp_path / "c.zarr", chunk_rows=7)
    dpgm.load_network("asia").save(tmp_path / "m.zarr")
    arrays = [tmp_path / "w.zarr" / "a", tmp_path / "g.zarr" / "smoke", tmp_path / "c.zarr" / "a",
              tmp_path / "c.zarr" / "w", tmp_path / "m.zarr" / "table.0"]
    for array in arrays:
        assert isinstance(_codecs(array)[-1], Crc32cCodec), array


def _corrupt(path: Path, offset: int = 20) -> None:
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("offset", [0, 20, -2], ids=["header", "payload", "checksum"])
def test_a_flipped_byte_is_a_data_error_naming_variable_chunk_and_file(tmp_path, offset):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "d.zarr", chunk_rows=100, seed=1)
    chunk_file = tmp_path / "d.zarr" / "lung" / "c" / "6"
    _corrupt(chunk_file, offset)
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    with pytest.raises(DataError) as info:
        dpgm.counts(ds, [("smoke", "lung")])
    assert info.value.variable == "lung" and info.value.chunk == 6
    assert str(chunk_file) in str(info.value) and "checksum" in str(info.value)
    assert dpgm.counts(ds, [("smoke",)])[("smoke",)].sum() == 1000  # other columns are intact


@pytest.mark.filterwarnings("ignore:The specified chunks separate the stored chunks")
def test_a_flipped_byte_is_found_through_zarr_reads_too(tmp_path):
    """Dask chunks not aligned with the Zarr chunks are read through Zarr's codec pipeline."""
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "d.zarr", chunk_rows=100, seed=1)
    _corrupt(tmp_path / "d.zarr" / "lung" / "c" / "6")
    ds = dpgm.open_dataset(tmp_path / "d.zarr", chunk_rows=150)
    with pytest.raises(DataError, match="checksum") as info:
        dpgm.counts(ds, [("smoke", "lung")])
    assert info.value.variable == "lung" and info.value.chunk == 4  # rows 600-750 hold Zarr chunk 6


def test_cli_counts_on_a_corrupted_chunk_exits_65_on_a_cluster(tmp_path):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "d.zarr", chunk_rows=100, seed=1)
    chunk_file = tmp_path / "d.zarr" / "either" / "c" / "9"
    _corrupt(chunk_file)
    line = error_line(run("counts", tmp_path / "d.zarr", "--scope", "either", "--workers", "2", check=False), 65)
    assert "'either'" in line and "chunk 9" in line and str(chunk_file) in line


def test_corrupted_chunk_on_a_cluster_names_it(tmp_path, client):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, tmp_path / "d.zarr", chunk_rows=100, seed=1)
    _corrupt(tmp_path / "d.zarr" / "tub" / "c" / "2")
    with pytest.raises(DataError) as info:
        dpgm.counts(dpgm.open_dataset(tmp_path / "d.zarr"), [("tub", "either")], client=client)
    assert info.value.variable == "tub" and info.value.chunk == 2


def test_corrupted_model_table_is_a_data_error(tmp_path):
    dpgm.load_network("asia").save(tmp_path / "m.zarr")
    _corrupt(next(p for p in (tmp_path / "m.zarr" / "table.3").rglob("*") if p.is_file() and p.name != "zarr.json"))
    with pytest.raises(DataError, match="checksum") as info:
        dpgm.load(tmp_path / "m.zarr")
    assert str(tmp_path / "m.zarr") in str(info.value)


# ---------------------------------------------------------------- 3. a variable's metadata lost


def test_a_variable_whose_metadata_is_gone_is_refused(tmp_path):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 300, tmp_path / "d.zarr", chunk_rows=100)
    (tmp_path / "d.zarr" / "xray" / "zarr.json").unlink()
    with pytest.raises(DataError) as info:
        dpgm.open_dataset(tmp_path / "d.zarr")
    assert info.value.variable == "xray" and str(tmp_path / "d.zarr") in str(info.value)
    line = error_line(run("info", tmp_path / "d.zarr", check=False), 65)
    assert "'xray'" in line and str(tmp_path / "d.zarr") in line


def test_a_variable_whose_metadata_is_truncated_is_refused(tmp_path):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 300, tmp_path / "d.zarr", chunk_rows=100)
    metadata = tmp_path / "d.zarr" / "xray" / "zarr.json"
    metadata.write_text(metadata.read_text()[:40])
    line = error_line(run("info", tmp_path / "d.zarr", check=False), 65)
    assert str(tmp_path / "d.zarr") in line


# ---------------------------------------------------------------- 4. latent variables in the data


def test_spec_latent_variable_present_in_the_data_is_refused(tmp_path):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 300, tmp_path / "d.zarr", seed=0)
    (tmp_path / "spec.yaml").write_text("model: bayesian_network\nedges: [[tub, either], [lung, either]]\n"
                                        "latent: {tub: ['yes', 'no']}\nmax_iter: 3\n")
    line = error_line(run("fit", tmp_path / "spec.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr",
                          "--workers", "1", check=False), 78)
    assert "'tub'" in line and "latent" in line
    assert not (tmp_path / "m.zarr").exists()
    (tmp_path / "lca.yaml").write_text("model: latent_class\nn_classes: 2\nvariable: smoke\nobserved: [tub, lung]\n")
    line = error_line(run("fit", tmp_path / "lca.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr",
                          "--workers", "1", check=False), 78)
    assert "'smoke'" in line


def test_build_model_refuses_an_observed_latent_variable():
    from dpgm.spec import SpecError, build_model

    spec = {"model": "bayesian_network", "edges": [["H", "a"]], "latent": {"H": ["0", "1"]}}
    model, method, _ = build_model(spec, {"a": ("x", "y")})
    assert method == "em" and model.states["H"] == ("0", "1")
    with pytest.raises(SpecError, match="'H'"):
        build_model(spec, {"a": ("x", "y"), "H": ("0", "1")})


# ---------------------------------------------------------------- 5. checkpoints tied to data and spec


LCA = "model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub]\nrandom_state: 0\ntol: 0.0\n"


def _checkpointed_fit(tmp_path) -> tuple[Path, Path]:
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, tmp_path / "d.zarr", seed=0, chunk_rows=500)
    (tmp_path / "lca.yaml").write_text(LCA + "max_iter: 3\n")
    result = run("fit", tmp_path / "lca.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr", "--workers", "1",
                 "--checkpoint", tmp_path / "ckpt", check=False)
    assert result.returncode == 3, result.stderr
    return tmp_path / "d.zarr", tmp_path / "ckpt"


def test_resume_against_other_data_or_spec_is_refused(tmp_path):
    data, checkpoint = _checkpointed_fit(tmp_path)
    resume = ("--out", tmp_path / "r.zarr", "--workers", "1", "--checkpoint", checkpoint, "--resume")
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, tmp_path / "other.zarr", seed=0, chunk_rows=500)
    line = error_line(run("fit", tmp_path / "lca.yaml", tmp_path / "other.zarr", *resume, check=False), 78)
    assert str(checkpoint) in line and "other.zarr" in line
    shutil.copytree(data, tmp_path / "rechunked.zarr")  # same rows elsewhere: the path differs
    line = error_line(run("fit", tmp_path / "lca.yaml", tmp_path / "rechunked.zarr", *resume, check=False), 78)
    assert "rechunked.zarr" in line
    (tmp_path / "lca3.yaml").write_text(LCA.replace("n_classes: 2", "n_classes: 3") + "max_iter: 3\n")
    line = error_line(run("fit", tmp_path / "lca3.yaml", data, *resume, check=False), 78)
    assert str(checkpoint) in line and "n_classes" in line
    assert not (tmp_path / "r.zarr").exists()
    (tmp_path / "more.yaml").write_text(LCA + "max_iter: 5\n")  # a longer run of the same fit: allowed
    result = run("fit", tmp_path / "more.yaml", data, *resume, check=False)
    assert result.returncode == 3, result.stderr
    assert len(json.loads((checkpoint / (checkpoint / "LATEST").read_text().splitlines()[0] / "state.json").read_text())
               ["histories"][0]) == 5


def test_fingerprint_names_rows_chunks_and_schema(tmp_path):
    from dpgm.data.integrity import dataset_fingerprint

    dpgm.write_dataset(small_dataset(), tmp_path / "d.zarr", chunk_rows=100)
    fingerprint = dataset_fingerprint(dpgm.open_dataset(tmp_path / "d.zarr"))
    assert fingerprint["path"] == str((tmp_path / "d.zarr").resolve())
    assert fingerprint["n_rows"] == 300 and fingerprint["chunks"] == [100, 100, 100]
    assert fingerprint["schema"]["a"] == {"dtype": "int8", "states": ["x", "y", "z"]}
    other = dataset_fingerprint(dpgm.open_dataset(tmp_path / "d.zarr", chunk_rows=200))
    assert other["chunks"] == [200, 100]


def test_cli_generate_killed_midway_leaves_a_refused_store(tmp_path):
    """SIGKILL to ``dpgm generate`` (and its workers) once some chunks are on disk, as a time limit would."""
    import signal
    import time

    store = tmp_path / "g.zarr"
    environment = cli_environment()
    job = subprocess.Popen([*DPGM, "generate", "alarm", str(store), "--rows", "1e7", "--chunk-rows", "1e4",
                            "--workers", "1"], env=environment, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list((store / "HR" / "c").glob("*"))) < 2:
            time.sleep(0.02)
        assert job.poll() is None, "generate finished before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert attrs(store)["dpgm_complete"] is False
    line = error_line(run("info", store, check=False), 65)
    assert str(store) in line and "incomplete" in line

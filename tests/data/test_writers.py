"""One writer per output, --overwrite that never destroys the good store first, and the inputs of the
data writers classified before anything is written.

Every test runs real ``dpgm`` processes on real stores, on the session's cluster (``cli_runs``) but for
racing writers (each one's own cluster start keeps the first writing while the second claims), a writer
killed with its workers and the workers started in another folder. The oracles are
NumPy/pandas: a store written by two racing commands must hold exactly the rows of the same store
generated alone (or pandas' read of the CSV), an old store kept by a failed overwrite must equal what
was read from it before.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import DPGM, cli_environment, error_line, run_dpgm, s3_server

import dpgm

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

HOST = socket.gethostname()


def environment(*, own_cluster: bool = False) -> dict[str, str]:
    env = cli_environment(own_cluster=own_cluster)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run(*args, cwd=None, timeout: float = 240, own_cluster: bool = False) -> subprocess.CompletedProcess:
    return run_dpgm(*args, cwd=cwd, timeout=timeout, env=environment(own_cluster=own_cluster))


def start(*args, own_cluster: bool = False) -> subprocess.Popen:
    """A ``dpgm`` process in its own session (so a kill reaches its local cluster's workers too)."""
    return subprocess.Popen([*DPGM, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=environment(own_cluster=own_cluster), start_new_session=True)


def race(*commands: tuple) -> list[subprocess.CompletedProcess]:
    """Start the commands together, each with its own one-worker cluster, and wait for all of them. On the
    session's cluster the first could finish before the second claims the output: no race left to test."""
    jobs = [start(*c, "--workers", "1", own_cluster=True) for c in commands]
    results = []
    for job in jobs:
        stdout, stderr = job.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr))
    return results, [job.pid for job in jobs]


def winner_and_loser(results, pids, out: Path) -> int:
    """Exactly one exit 0; the other exits 73 naming the output, the winner's pid and host."""
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 73], [(r.returncode, r.stderr) for r in results]
    won = next(i for i, r in enumerate(results) if r.returncode == 0)
    line = error_line(results[1 - won], 73)
    assert str(out) in line and f"pid {pids[won]}" in line and HOST in line, line
    return pids[won]


def codes(path) -> dict[str, np.ndarray]:
    ds = dpgm.open_dataset(path)
    return {str(v): ds[v].values for v in ds.data_vars}


def assert_same_store(path, reference) -> None:
    """Every variable's codes equal, and (the oracle) pandas' counts of every column equal."""
    got, want = codes(path), codes(reference)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    frame, expected = dpgm.to_pandas(dpgm.open_dataset(path)), dpgm.to_pandas(dpgm.open_dataset(reference))
    for name in expected:
        pd.testing.assert_series_equal(frame[name].value_counts(dropna=False).sort_index(),
                                       expected[name].value_counts(dropna=False).sort_index())


def siblings(path: Path) -> list[str]:
    """What a writer leaves beside its output: locks and stores written beside."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + ".dpgm-"))


def lock_path(path) -> str:
    from dpgm.data.claim import lock_path as where

    return where(path)


def claim(path, **kwargs):
    from dpgm.data.claim import claim as held

    return held(path, **kwargs)


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(path: Path, pid: int, host: str = HOST) -> Path:
    lock = Path(lock_path(path))
    lock.write_text(json.dumps({"dpgm_writer": 1, "host": host, "pid": pid, "started": time.time() - 60,
                                "token": uuid.uuid4().hex, "command": "dpgm generate"}))
    return lock


def asia_csv(path: Path, n_rows: int, seed: int) -> pd.DataFrame:
    frame = dpgm.to_pandas(dpgm.sample_bayesian_network(dpgm.load_network("asia"), n_rows, None, seed=seed))
    frame.astype(str).to_csv(path, index=False)
    return pd.read_csv(path, dtype=str)


def assert_store_equals_csv(path, frame: pd.DataFrame) -> None:
    """The store's decoded labels equal pandas' read of the CSV, column by column."""
    decoded = dpgm.to_pandas(dpgm.open_dataset(path))
    assert list(decoded.columns) == list(frame.columns)
    for name in frame:
        assert decoded[name].astype(str).tolist() == frame[name].tolist(), name


# ---------------------------------------------------------------------------- two writers, one output


def test_two_generates_to_one_new_store(tmp_path):
    out = tmp_path / "g.zarr"
    args = ("generate", "asia", out, "--rows", "200000", "--chunk-rows", "20000", "--seed", "5")
    results, pids = race(args, args)
    winner_and_loser(results, pids, out)
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 200_000, tmp_path / "alone.zarr", seed=5,
                                 chunk_rows=20_000)
    assert_same_store(out, tmp_path / "alone.zarr")
    assert siblings(out) == []


def test_two_converts_to_one_new_store(tmp_path):
    frame = asia_csv(tmp_path / "in.csv", 200_000, seed=2)
    out = tmp_path / "c.zarr"
    args = ("convert", tmp_path / "in.csv", out, "--chunk-rows", "20000")
    results, pids = race(args, args)
    winner_and_loser(results, pids, out)
    assert_store_equals_csv(out, frame)
    assert siblings(out) == []


def test_two_fits_to_one_out(tmp_path):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 20_000, tmp_path / "d.zarr", seed=1, chunk_rows=5000)
    (tmp_path / "spec.yaml").write_text("model: bayesian_network\nnetwork: asia\n")
    out = tmp_path / "m.zarr"
    args = ("fit", tmp_path / "spec.yaml", tmp_path / "d.zarr", "--out", out)
    results, pids = race(args, args)
    winner_and_loser(results, pids, out)
    # oracle: the maximum-likelihood table of dysp given (bronc, either) is pandas' normalized counts
    frame = dpgm.to_pandas(dpgm.open_dataset(tmp_path / "d.zarr"))
    counts = frame.groupby(["bronc", "either", "dysp"], observed=False).size().unstack("dysp")
    expected = counts.div(counts.sum(axis=1), axis=0)
    cpd = dpgm.load(out).cpds["dysp"]
    for (bronc, either), row in expected.iterrows():
        for dysp, value in row.items():
            got = float(cpd.sel(dysp=dysp, bronc=bronc, either=either))
            assert got == pytest.approx(value, rel=1e-12), (bronc, either, dysp)
    assert siblings(out) == []


def test_a_held_output_is_refused_with_73_naming_the_writer(tmp_path):
    """While this process holds the claim, every command writing that output exits 73 naming it."""
    frame = asia_csv(tmp_path / "in.csv", 500, seed=0)
    dpgm.convert(tmp_path / "in.csv", tmp_path / "d.zarr")
    (tmp_path / "spec.yaml").write_text("model: bayesian_network\nnetwork: asia\n")
    out = tmp_path / "held.zarr"
    with claim(out):
        for args in [("generate", "asia", out, "--rows", "100"),
                     ("convert", tmp_path / "in.csv", out),
                     ("fit", tmp_path / "spec.yaml", tmp_path / "d.zarr", "--out", out)]:
            line = error_line(run(*args), 73)
            assert str(out) in line and f"pid {os.getpid()}" in line and HOST in line, (args, line)
            assert not out.exists()
        failures: list[Exception] = []  # another thread of this process is another writer
        thread = threading.Thread(target=_claim_in_thread, args=(out, failures))
        thread.start()
        thread.join()
        assert len(failures) == 1 and f"pid {os.getpid()}" in str(failures[0]), failures
    assert not Path(lock_path(out)).exists()
    assert run("generate", "asia", out, "--rows", "100").returncode == 0
    assert_store_equals_csv(tmp_path / "d.zarr", frame)


def _claim_in_thread(out, failures) -> None:
    from dpgm.data.claim import OutputBusy

    try:
        with claim(out):
            pass
    except OutputBusy as error:
        failures.append(error)


def test_claims_are_exclusive_across_processes(tmp_path):
    """Eight processes, each ready and waiting for one signal, claim one output at once: exactly one gets it
    while it holds it for 2 s, the others are told who."""
    script = ("import os, sys, time\nfrom dpgm.data.claim import claim, OutputBusy\n"
              "print('ready', flush=True)\n"
              "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.001)\n"
              "try:\n    with claim(sys.argv[1]):\n        print('won', flush=True)\n        time.sleep(2)\n"
              "except OutputBusy as error:\n    print('busy', error, flush=True)\n")
    go = tmp_path / "go"
    jobs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "x.zarr"), str(go)],
                             stdout=subprocess.PIPE, text=True, env=environment(own_cluster=True)) for _ in range(8)]
    for job in jobs:
        assert job.stdout.readline() == "ready\n"
    go.touch()
    outputs = [job.communicate(timeout=60)[0] for job in jobs]
    winners = [job.pid for job, o in zip(jobs, outputs, strict=True) if o.startswith("won")]
    assert len(winners) == 1, outputs
    busy = [o for o in outputs if o.startswith("busy")]
    assert len(busy) == 7 and all(f"pid {winners[0]}" in o for o in busy), outputs
    assert not Path(lock_path(tmp_path / "x.zarr")).exists()


# ---------------------------------------------------------------------------- overwrite beside, swap


def test_convert_overwrite_with_a_bad_csv_keeps_the_good_store(tmp_path):
    frame = asia_csv(tmp_path / "good.csv", 3000, seed=4)
    out = tmp_path / "d.zarr"
    assert run("convert", tmp_path / "good.csv", out, "--chunk-rows", "500").returncode == 0
    bad = frame.copy()
    bad["smoke"] = np.arange(len(bad)).astype(str)
    bad.loc[2500, "smoke"] = "oops"  # numbers but for one token: the parser's rule refuses it
    bad.to_csv(tmp_path / "bad.csv", index=False)
    line = error_line(run("convert", tmp_path / "bad.csv", out, "--overwrite"), 65)
    assert "'smoke'" in line
    assert_store_equals_csv(out, frame)
    assert siblings(out) == []


def test_python_overwrite_that_fails_midway_keeps_the_old_store(tmp_path, monkeypatch):
    import dask

    from dpgm.data import convert as module

    frame = asia_csv(tmp_path / "old.csv", 2000, seed=1)
    out = tmp_path / "d.zarr"
    dpgm.convert(tmp_path / "old.csv", out, chunk_rows=250)
    new = asia_csv(tmp_path / "new.csv", 2000, seed=2)
    encode = module._encode_and_write

    def dies_on_the_last_block(block, *args):
        if block.start > 0:
            raise OSError(28, "No space left on device")
        return encode(block, *args)

    monkeypatch.setattr(module, "_encode_and_write", dies_on_the_last_block)
    with dask.config.set(scheduler="sync"), pytest.raises(OSError, match="No space"):
        dpgm.convert(tmp_path / "new.csv", out, chunk_rows=250, blocksize=30_000, mode="w")
    assert_store_equals_csv(out, frame)
    assert siblings(out) == []
    monkeypatch.setattr(module, "_encode_and_write", encode)
    with dask.config.set(scheduler="sync"):
        dpgm.convert(tmp_path / "new.csv", out, chunk_rows=250, blocksize=30_000, mode="w")
    assert_store_equals_csv(out, new)
    assert siblings(out) == []


def test_write_dataset_mode_w_replaces_only_when_complete(tmp_path):
    first = dpgm.from_pandas(pd.DataFrame({"a": ["x", "y"] * 50}))
    second = dpgm.from_pandas(pd.DataFrame({"a": ["p", "q", "r", "s"] * 50, "b": [1.5] * 200}))
    dpgm.write_dataset(first, tmp_path / "d.zarr", chunk_rows=10)
    with pytest.raises(FileExistsError):
        dpgm.write_dataset(second, tmp_path / "d.zarr")
    dpgm.write_dataset(second, tmp_path / "d.zarr", chunk_rows=10, mode="w")
    ds = dpgm.open_dataset(tmp_path / "d.zarr")
    assert ds.a.attrs["states"] == ["p", "q", "r", "s"] and ds.sizes["row"] == 200
    np.testing.assert_array_equal(ds.b.values, np.full(200, 1.5))
    assert siblings(tmp_path / "d.zarr") == []


@pytest.mark.slow
def test_generate_overwrite_killed_midway_keeps_the_old_store_then_the_stale_lock(tmp_path):
    out = tmp_path / "g.zarr"
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 5000, out, seed=1, chunk_rows=1000)
    before = codes(out)
    job = start("generate", "asia", out, "--rows", "4e6", "--chunk-rows", "1e5", "--seed", "2", "--overwrite",
                "--workers", "1", own_cluster=True)  # killed with its workers: none of them writes after
    pending = tmp_path / f"g.zarr.dpgm-new-{job.pid}"
    deadline = time.time() + 180
    while time.time() < deadline and not list(pending.glob("asia/c/*")):
        assert job.poll() is None, job.communicate()
        time.sleep(0.1)
    assert list(pending.glob("asia/c/*")), "the new store was never started"
    os.killpg(job.pid, signal.SIGKILL)
    job.communicate()
    after = codes(out)  # opens: complete, the old store
    assert list(after) == list(before)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
    assert Path(lock_path(out)).exists()

    line = error_line(run("generate", "asia", out, "--rows", "3000"), 73)
    assert str(out) in line and f"pid {job.pid}" in line and "no longer running" in line and "--overwrite" in line
    done = run("generate", "asia", out, "--rows", "3000", "--chunk-rows", "1000", "--seed", "3", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert f"pid {job.pid}" in done.stderr  # the stale lock taken over is reported
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, tmp_path / "alone.zarr", seed=3, chunk_rows=1000)
    assert_same_store(out, tmp_path / "alone.zarr")
    assert siblings(out) == []  # the dead writer's unfinished store went with its lock


def test_stale_lock_of_a_dead_pid(tmp_path):
    """Without an output the stale lock is taken over (with a note); over an existing one only with
    --overwrite; a lock of another host is never judged stale."""
    out = tmp_path / "g.zarr"
    pid = dead_pid()
    write_lock(out, pid)
    done = run("generate", "asia", out, "--rows", "300")
    assert done.returncode == 0, done.stderr
    assert f"pid {pid}" in done.stderr and "no longer running" in done.stderr
    assert not Path(lock_path(out)).exists()

    write_lock(out, pid)
    line = error_line(run("generate", "asia", out, "--rows", "300"), 73)
    assert str(out) in line and f"pid {pid}" in line and "no longer running" in line and "--overwrite" in line
    assert run("generate", "asia", out, "--rows", "300", "--overwrite").returncode == 0

    lock = write_lock(out, 12345, host="elsewhere.example")
    line = error_line(run("generate", "asia", out, "--rows", "300", "--overwrite"), 73)
    assert "pid 12345" in line and "elsewhere.example" in line and str(lock) in line
    assert dpgm.open_dataset(out).sizes["row"] == 300


# ---------------------------------------------------------------------------- inputs classified


@pytest.mark.parametrize(("header", "column", "hint"), [
    ("row,a", "row", "--rename row=row_id"),
    ("a/b,a", "a/b", "--rename a/b=a_b"),
    ("..,a", "..", "--rename ..="),
    ("a,a", "a", "twice"),
])
def test_column_names_that_cannot_be_variables_are_refused(tmp_path, header, column, hint):
    (tmp_path / "in.csv").write_text(header + "\n1,x\n2,y\n3,x\n")
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "o.zarr"), 65)
    assert f"column {column!r}" in line and hint in line, line
    assert not (tmp_path / "o.zarr").exists() and siblings(tmp_path / "o.zarr") == []


def test_weight_column_clash_is_refused_and_rename_fixes_it(tmp_path):
    (tmp_path / "in.csv").write_text("weight,a,w,row\n1,x,3,7\n2,y,4,8\n")
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "o.zarr", "--weight", "w"), 65)
    assert "column 'weight'" in line and "--rename weight=" in line, line
    done = run("convert", tmp_path / "in.csv", tmp_path / "o.zarr", "--weight", "w", "--rename", "weight=weight_in",
               "--rename", "row=row_id")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(tmp_path / "in.csv")
    ds = dpgm.open_dataset(tmp_path / "o.zarr")
    assert sorted(ds.data_vars) == ["a", "row_id", "weight", "weight_in"]
    np.testing.assert_array_equal(ds.weight.values, frame.w.to_numpy(dtype=float))
    assert [ds.row_id.attrs["states"][c] for c in ds.row_id.values] == frame.row.astype(str).tolist()
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "p.zarr", "--rename", "nothere=x"), 65)
    assert "'nothere'" in line


def test_from_pandas_refuses_the_same_names():
    for frame, column in [(pd.DataFrame({"row": [1, 2], "a": ["x", "y"]}), "row"),
                          (pd.DataFrame({"..": [1, 2]}), ".."),
                          (pd.DataFrame({"a/b": ["x", "y"]}), "a/b")]:
        with pytest.raises(dpgm.DataError, match=f"column {column!r}"):
            dpgm.from_pandas(frame)
    with pytest.raises(dpgm.DataError, match="column 'weight'"):
        dpgm.from_pandas(pd.DataFrame({"weight": [1.0, 2.0], "w": [1.0, 1.0]}), weight="w")


# ---------------------------------------------------------------------------- relative paths, remote workers


@pytest.mark.slow
def test_relative_paths_reach_workers_running_in_another_folder(tmp_path, monkeypatch):
    from dask_processes import dask_processes

    here, there = tmp_path / "here", tmp_path / "workers"
    here.mkdir()
    there.mkdir()
    frame = asia_csv(here / "asia.csv", 4000, seed=6)
    (here / "spec.yaml").write_text("model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub]\n"
                                    "random_state: 0\nmax_iter: 5\ntol: 0.0\n")
    monkeypatch.chdir(there)  # the workers start here
    with dask_processes(there, 1) as scheduler_file:
        monkeypatch.chdir(tmp_path)
        connect = ("--scheduler-file", scheduler_file)
        away = {"cwd": here, "own_cluster": True}  # the workers of the scheduler file, not the session's
        done = run("convert", "asia.csv", "asia.zarr", "--chunk-rows", "1000", *connect, **away)
        assert done.returncode == 0, done.stderr
        done = run("generate", "asia", "gen.zarr", "--rows", "2000", "--chunk-rows", "500", *connect, **away)
        assert done.returncode == 0, done.stderr
        done = run("counts", "asia.zarr", "--scope", "smoke,lung", "--json", *connect, **away)
        assert done.returncode == 0, done.stderr
        table = json.loads(done.stdout)["tables"]["smoke,lung"]
        expected = pd.crosstab(frame.smoke, frame.lung)
        for i, smoke in enumerate(table["states"]["smoke"]):
            for j, lung in enumerate(table["states"]["lung"]):
                assert table["counts"][i][j] == expected.loc[smoke, lung]
        done = run("fit", "spec.yaml", "asia.zarr", "--out", "m.zarr", *connect, **away)
        assert done.returncode in (0, 3), done.stderr
        done = run("predict", "m.zarr", "asia.zarr", "--variable", "class", *connect, **away)
        assert done.returncode == 0, done.stderr
    posterior = dpgm.open_dataset(here / "asia.zarr")["class_proba"].values
    np.testing.assert_allclose(posterior.sum(axis=1), 1.0, rtol=1e-12)
    assert not list(there.glob("*.zarr")) and dpgm.open_dataset(here / "gen.zarr").sizes["row"] == 2000


# ---------------------------------------------------------------------------- object stores (moto S3)

@pytest.fixture(scope="module")
def s3():
    """An S3-compatible server (moto) on loopback, with a bucket."""
    with s3_server("dpgm-writers") as options:
        yield options


def test_s3_output_is_claimed_exclusively(s3, tmp_path):
    import fsspec

    url = f"s3://dpgm-writers/{uuid.uuid4().hex}/g.zarr"
    options = ("--storage-options", json.dumps(s3))
    with claim(url, storage_options=s3):
        line = error_line(run("generate", "asia", url, "--rows", "300", *options), 73)
        assert url in line and f"pid {os.getpid()}" in line and HOST in line, line
        fs = fsspec.filesystem("s3", **s3)
        fs.invalidate_cache()
        assert not fs.exists(url)
    args = ("generate", "asia", url, "--rows", "3000", "--chunk-rows", "500", "--seed", "4", *options)
    results, pids = race(args, args)
    codes_ = sorted(r.returncode for r in results)
    assert codes_ == [0, 73], [(r.returncode, r.stderr) for r in results]
    won = next(i for i, r in enumerate(results) if r.returncode == 0)
    assert f"pid {pids[won]}" in error_line(results[1 - won], 73)
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, tmp_path / "alone.zarr", seed=4, chunk_rows=500)
    got = dpgm.open_dataset(url, storage_options=s3)
    for name, values in codes(tmp_path / "alone.zarr").items():
        np.testing.assert_array_equal(got[name].values, values, err_msg=name)
    fs.invalidate_cache()
    assert not fs.exists(lock_path(url))


def test_s3_overwrite_keeps_the_old_store_readable_until_the_new_one_is_complete(s3, monkeypatch):
    """The order of operations on an object store: the new store is written and marked complete beside the
    old one; only then is the old one marked incomplete and overwritten, its root metadata last."""
    import dask
    import fsspec

    from dpgm.data import sample

    url = f"s3://dpgm-writers/{uuid.uuid4().hex}/g.zarr"
    network = dpgm.load_network("asia")
    with dask.config.set(scheduler="sync"):
        old = dpgm.sample_bayesian_network(network, 2000, url, seed=1, chunk_rows=500, storage_options=s3)
    before = {v: old[v].values for v in old.data_vars}

    def reread() -> dict[str, np.ndarray]:
        ds = dpgm.open_dataset(url, storage_options=s3)
        return {v: ds[v].values for v in ds.data_vars}

    write_chunk = sample._write_chunk

    def dies_at_chunk_2(sampler, path, storage_options, chunk, *args):
        if chunk == 2:
            raise OSError(5, "Input/output error")
        return write_chunk(sampler, path, storage_options, chunk, *args)

    monkeypatch.setattr(sample, "_write_chunk", dies_at_chunk_2)
    with dask.config.set(scheduler="sync"), pytest.raises(OSError, match="Input/output"):
        dpgm.sample_bayesian_network(network, 3000, url, seed=2, chunk_rows=500, mode="w", storage_options=s3)
    for name, values in reread().items():
        np.testing.assert_array_equal(values, before[name])
    monkeypatch.setattr(sample, "_write_chunk", write_chunk)

    fs = fsspec.filesystem("s3", **s3)  # the instance the writer gets too (fsspec caches them)
    copy = fs.copy
    calls = []

    def dies_while_copying(path1, path2, *args, **kwargs):
        calls.append(path1)
        if len(calls) == 2:  # the chunks are copied, the root metadata is not
            raise OSError(5, "Input/output error")
        return copy(path1, path2, *args, **kwargs)

    monkeypatch.setattr(fs, "copy", dies_while_copying)
    with (dask.config.set(scheduler="sync"), pytest.raises(OSError, match="Input/output"),
          pytest.warns(dpgm.DpgmWarning, match="marked incomplete .* the complete new store is at")):
        dpgm.sample_bayesian_network(network, 3000, url, seed=2, chunk_rows=500, mode="w", storage_options=s3)
    with pytest.raises(dpgm.DataError, match="incomplete"):  # never a mix of the two stores
        dpgm.open_dataset(url, storage_options=s3)
    assert dpgm.open_dataset(f"{url}.dpgm-new-{os.getpid()}", storage_options=s3).sizes["row"] == 3000
    monkeypatch.setattr(fs, "copy", copy)
    with dask.config.set(scheduler="sync"):
        dpgm.sample_bayesian_network(network, 3000, url, seed=2, chunk_rows=500, mode="w", storage_options=s3)
        alone = dpgm.sample_bayesian_network(network, 3000, None, seed=2, chunk_rows=500)
    after = reread()
    for name in alone.data_vars:
        np.testing.assert_array_equal(after[name], alone[name].values, err_msg=name)
    left = fs.ls(url.rsplit("/", 1)[0].removeprefix("s3://"), refresh=True)
    assert [p for p in left if ".dpgm-" in p.rsplit("/", 1)[-1]] == []


def test_docs_one_writer_per_output_runs_as_written(tmp_path):
    """The section's Python block as a script in an empty folder: the replacement is swapped in whole, nothing
    is left beside it, the claim names this host, the column 'row' is refused."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrity.md").read_text()
    section = text[text.index("## One writer per output"):]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    (tmp_path / "script.py").write_text("\n".join(blocks))
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=environment(own_cluster=True), timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"on host {HOST!r}" in done.stdout and "column 'row'" in done.stdout and "--rename" not in done.stdout
    frame = dpgm.to_pandas(dpgm.open_dataset(tmp_path / "answers.zarr"))
    assert frame.smoker.astype(str).tolist() == ["no", "no", "yes"] * 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.zarr", "script.py"]

"""Hostile and unlucky inputs: every failure is one line naming the culprit, a documented exit code,
and no half-written output left behind or accepted.

CLI cases run the real ``.venv/bin/dpgm`` in subprocesses. They run concurrently in one pool
(``cli_results``) so the suite stays fast, and those that reach a cluster (a disk that fills up, a
corrupted chunk) send their work to the session's cluster (``cli_runs``); each case is still its own
test. Cases about the connection itself (``--workers``, a scheduler that does not answer) and the
signal and scheduler-kill tests run without it. The same refusals from Python are in
``tests/api/test_refusals.py``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cli_runs import SHARED, cli_environment, error_line

import dpgm
from dpgm.errors import ConfigTypeError, TableTooLarge

DPGM = str(Path(sys.executable).with_name("dpgm"))
ASIA_SPEC = "model: bayesian_network\nnetwork: asia\n"
LCA = "model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub]\nrandom_state: 0\n"


def environment(*, own_cluster: bool = False) -> dict[str, str]:
    return cli_environment(own_cluster=own_cluster)


def run(*args, timeout: float = 180, own_cluster: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([DPGM, *map(str, args)], capture_output=True, text=True,
                          env=environment(own_cluster=own_cluster), timeout=timeout)


def leftovers(folder: Path) -> list[Path]:
    """Temporary names of outputs written atomically, which must never survive a command."""
    return [p for p in folder.rglob("*") if ".partial-" in p.name or p.name.startswith(".dpgm-probe-")]


def _mount_tmpfs(folder: Path, size: str = "1m") -> str | None:
    """Mount a small tmpfs at ``folder``; the reason if not permitted (the test is then skipped, visibly)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    return None if result.returncode == 0 else f"cannot mount a tmpfs: {result.stderr.strip() or 'not permitted'}"


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb", buffering=0) as file, contextlib.suppress(OSError):
        while True:
            file.write(b"\0" * 4096)


# ---------------------------------------------------------------- the data every CLI case uses


@dataclass
class World:
    root: Path
    full: str | None = None  # reason the full-disk cases are skipped, or None
    readonly: str | None = None
    mounts: list[Path] = field(default_factory=list)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    w = World(root)
    truth = dpgm.load_network("asia")
    dpgm.sample_bayesian_network(truth, 2000, root / "asia.zarr", seed=0, chunk_rows=500)
    wide = pd.DataFrame({f"v{i:02d}": np.where(np.arange(10) % 2, "a", "b") for i in range(37)})
    dpgm.write_dataset(dpgm.from_pandas(wide), root / "wide.zarr", chunk_rows=10)
    shutil.copytree(root / "asia.zarr", root / "incomplete.zarr")
    import zarr

    zarr.open_group(str(root / "incomplete.zarr"), mode="r+").attrs["dpgm_complete"] = False
    shutil.copytree(root / "asia.zarr", root / "corrupted.zarr")
    chunk = next(p for p in sorted((root / "corrupted.zarr" / "xray").rglob("*")) if p.is_file()
                 and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    (root / "ok.csv").write_text("a,b\nx,1\ny,2\n")
    (root / "empty.csv").write_text("")
    (root / "ragged.csv").write_text("a,b\nx,1,3\ny\n")
    (root / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    specs = {
        "lca": LCA + "max_iter: 3\n",
        "unknown_key": LCA + "max_iters: 5\n",
        "max_iter_ten": LCA + "max_iter: ten\n",
        "max_iter_zero": LCA + "max_iter: 0\n",
        "n_init_zero": LCA + "n_init: 0\n",
        "negative_tol": LCA + "tol: -1.0e-3\n",
        "unknown_network": "model: bayesian_network\nnetwork: nonet\n",
        "unknown_kind": "model: forest\n",
        "unparseable": "model: [unclosed\n",
        "mle_max_iter": ASIA_SPEC + "max_iter: 5\n",
        "asia": ASIA_SPEC,
    }
    for name, text in specs.items():
        (root / f"{name}.yaml").write_text(text)
    (root / "o").mkdir()
    (root / "exists.zarr").mkdir()
    (root / "exists.json").write_text("{}")
    (root / "a_file").write_text("not a folder")
    (root / "earlier").mkdir()
    (root / "earlier" / "LATEST").write_text("iteration-000003")
    try:
        w.full = _mount_tmpfs(root / "full")
        if w.full is None:
            w.mounts.append(root / "full")
            _fill(root / "full")
        w.readonly = _mount_tmpfs(root / "ro")
        if w.readonly is None:
            w.mounts.append(root / "ro")
            subprocess.run(["mount", "-o", "remount,ro", str(root / "ro")], check=True)
        yield w
    finally:  # also when setting up failed: never leave a mount behind
        for mount in w.mounts:
            subprocess.run(["umount", "-l", str(mount)], check=False)


# ---------------------------------------------------------------- CLI cases, run concurrently


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    culprit: str  # must appear in the error line ({w}: the world's folder)
    absent: tuple[str, ...] = ()  # outputs that must not exist afterwards
    needs: str | None = None  # "full" / "readonly": a mount the case needs
    category: str = ""
    own_cluster: bool = False  # the case is about the connection: not on the session's cluster


def _fit(spec: str, out: str = "{w}/o/m.zarr", *extra: str, data: str = "{w}/asia.zarr") -> tuple[str, ...]:
    return ("fit", f"{{w}}/{spec}.yaml", data, "--out", out, *extra)


CASES = [
    # specifications (78), all refused before any pass and any cluster
    Case("spec-unknown-key", _fit("unknown_key"), 78, "max_iters", ("{w}/o/m.zarr",), category="spec"),
    Case("spec-max-iter-ten", _fit("max_iter_ten"), 78, "max_iter", category="spec"),
    Case("spec-max-iter-zero", _fit("max_iter_zero"), 78, "max_iter", category="spec"),
    Case("spec-n-init-zero", _fit("n_init_zero"), 78, "n_init", category="spec"),
    Case("spec-negative-tol", _fit("negative_tol"), 78, "tol", category="spec"),
    Case("spec-unknown-network", _fit("unknown_network"), 78, "nonet", category="spec"),
    Case("spec-unknown-kind", _fit("unknown_kind"), 78, "forest", category="spec"),
    Case("spec-unparseable", _fit("unparseable"), 78, "unparseable.yaml", category="spec"),
    Case("spec-binary", _fit("binary"), 78, "binary.yaml", category="spec"),
    Case("spec-option-of-another-method", _fit("mle_max_iter"), 78, "max_iter", category="spec"),
    Case("spec-unknown-method-override", (*_fit("asia"), "--method", "magic"), 78, "magic", category="spec"),
    Case("spec-missing", _fit("nothere"), 66, "nothere.yaml", category="spec"),
    # command-line usage (2)
    Case("usage-rows-not-whole", ("generate", "asia", "{w}/o/g.zarr", "--rows", "2.7"), 2, "--rows",
         ("{w}/o/g.zarr",), category="usage"),
    Case("usage-scheduler-not-a-port", ("counts", "{w}/asia.zarr", "--scope", "smoke", "--scheduler",
                                        "host:notaport"), 2, "--scheduler", category="usage"),
    Case("usage-workers-zero", ("generate", "asia", "{w}/o/g.zarr", "--rows", "10", "--workers", "0"), 2,
         "--workers", category="usage", own_cluster=True),
    Case("usage-resume-without-checkpoint", (*_fit("lca"), "--resume"), 2, "--checkpoint", category="usage"),
    Case("usage-plot-format", (*_fit("lca"), "--plot", "{w}/o/plot.txt"), 2, "--plot", category="usage"),
    # sizes refused in O(model) time (78 / 2)
    Case("size-counts-37-variables", ("counts", "{w}/wide.zarr", "--scope", ",".join(f"v{i:02d}" for i in range(37))),
         78, "37 variables", category="size"),
    Case("size-generate-1e20-rows", ("generate", "asia", "{w}/o/g.zarr", "--rows", "1e20"), 2, "--rows",
         ("{w}/o/g.zarr",), category="size"),
    Case("size-generate-too-many-chunks", ("generate", "asia", "{w}/o/g.zarr", "--rows", "1e13", "--chunk-rows",
                                           "1000"), 78, "chunks", ("{w}/o/g.zarr",), category="size"),
    # inputs: bad data (65), missing input (66)
    Case("input-counts-on-a-csv", ("counts", "{w}/ok.csv", "--scope", "a"), 65, "ok.csv", category="input"),
    Case("input-convert-empty-csv", ("convert", "{w}/empty.csv", "{w}/o/e.zarr"), 65, "empty.csv",
         ("{w}/o/e.zarr",), category="input"),
    Case("input-convert-ragged-csv", ("convert", "{w}/ragged.csv", "{w}/o/r.zarr"), 65, "ragged.csv",
         ("{w}/o/r.zarr",), category="input"),
    Case("input-incomplete-store", _fit("lca", data="{w}/incomplete.zarr"), 65, "incomplete.zarr",
         ("{w}/o/m.zarr",), category="input"),
    Case("input-dataset-given-as-model", ("predict", "{w}/asia.zarr", "{w}/asia.zarr", "--variable", "smoke"), 65,
         "asia.zarr", category="input"),
    Case("input-missing-store", ("info", "{w}/nothere.zarr"), 66, "nothere.zarr", category="input"),
    # outputs checked before any work (73)
    Case("output-exists", _fit("lca", "{w}/exists.zarr"), 73, "--overwrite", category="output"),
    Case("output-report-folder-missing", _fit("lca", "{w}/o/m.zarr", "--report", "{w}/nowhere/r.json"), 73,
         "nowhere", ("{w}/o/m.zarr",), category="output"),
    Case("output-checkpoint-is-a-file", _fit("lca", "{w}/o/m.zarr", "--checkpoint", "{w}/a_file"), 73,
         "--checkpoint", ("{w}/o/m.zarr",), category="output"),
    Case("output-parent-is-a-file", _fit("lca", "{w}/a_file/m.zarr"), 73, "a_file", category="output"),
    Case("output-is-the-input", _fit("lca", "{w}/asia.zarr", "--overwrite"), 73, "input", category="output"),
    Case("output-counts-json-exists", ("counts", "{w}/asia.zarr", "--scope", "smoke", "--out", "{w}/exists.json"),
         73, "exists.json", category="output"),
    Case("output-earlier-checkpoint", _fit("lca", "{w}/o/m.zarr", "--checkpoint", "{w}/earlier"), 73, "--resume",
         ("{w}/o/m.zarr",), category="output"),
    Case("output-read-only-fit", _fit("lca", "{w}/ro/m.zarr"), 73, "Read-only", ("{w}/ro/m.zarr",),
         needs="readonly", category="read-only"),
    Case("output-read-only-counts", ("counts", "{w}/asia.zarr", "--scope", "smoke", "--out", "{w}/ro/c.json"), 73,
         "ro/c.json", needs="readonly", category="read-only"),
    # scheduler (69)
    Case("scheduler-not-answering", ("counts", "{w}/asia.zarr", "--scope", "smoke", "--scheduler",
                                     "tcp://127.0.0.1:9", "--connect-timeout", "1"), 69, "127.0.0.1:9",
         category="scheduler", own_cluster=True),
    # on the session's cluster: a disk that fills up (74), a corrupted chunk (65)
    Case("full-disk-fit", _fit("lca", "{w}/full/m.zarr"), 74, "No space left", ("{w}/full/m.zarr",), needs="full",
         category="full-disk"),
    Case("full-disk-counts", ("counts", "{w}/asia.zarr", "--scope", "smoke,lung", "--out", "{w}/full/c.json"), 74,
         "No space left", ("{w}/full/c.json",), needs="full", category="full-disk"),
    Case("full-disk-generate", ("generate", "asia", "{w}/full/g.zarr", "--rows", "1e5"), 74, "No space left",
         ("{w}/full/g.zarr",), needs="full", category="full-disk"),
    Case("corrupted-chunk-fit", _fit("lca", "{w}/o/c.zarr", data="{w}/corrupted.zarr"), 65, "xray",
         ("{w}/o/c.zarr",), category="input"),
]


@pytest.fixture(scope="module")
def cli_results(world, client):
    """Every case of CASES run once, concurrently (two at a time per core), on the session's cluster
    unless the case says otherwise."""
    def one(case: Case):
        if case.needs and getattr(world, case.needs):
            return None
        try:
            return run(*(a.format(w=world.root) for a in case.args), timeout=120, own_cluster=case.own_cluster)
        except subprocess.TimeoutExpired as error:
            return error  # reported by the case's own test

    with pytest.MonkeyPatch.context() as patch:  # what the shared_cluster fixture does, for the whole module
        patch.setenv(SHARED, client.scheduler.address)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
            futures = {case.id: pool.submit(one, case) for case in CASES}
            return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli_refuses_cleanly(case, world, cli_results):
    if case.needs and getattr(world, case.needs):
        pytest.skip(getattr(world, case.needs))
    result = cli_results[case.id]
    assert isinstance(result, subprocess.CompletedProcess), result
    line = error_line(result, case.code)
    assert case.culprit.format(w=world.root) in line, line
    for path in case.absent:
        assert not Path(path.format(w=world.root)).exists(), (path, line)
    assert not leftovers(world.root), leftovers(world.root)
    assert (world.root / "exists.zarr").is_dir() and not any((world.root / "exists.zarr").iterdir())
    assert (world.root / "exists.json").read_text() == "{}"


@pytest.mark.usefixtures("shared_cluster")
def test_cli_internal_error_shows_the_traceback_only_with_verbose(world, tmp_path):
    """An unexpected exception is exit 70 with one line; -v adds the traceback (a model store whose
    attributes are not what dpgm writes provokes one in the loader)."""
    import zarr

    store = tmp_path / "odd.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.attrs.update({"dpgm_model": "BayesianNetwork", "dpgm_model_version": 1, "dpgm_tables": 5,
                        "dpgm_complete": True})
    quiet = run("predict", store, world.root / "asia.zarr", "--variable", "smoke")
    if quiet.returncode == 65:
        pytest.skip("this store is refused as bad data by the loader (no internal error to show)")
    line = error_line(quiet, 70)
    assert "internal error" in line and "-v" in line
    loud = run("-v", "predict", store, world.root / "asia.zarr", "--variable", "smoke")
    assert loud.returncode == 70 and "Traceback" in loud.stderr


# ---------------------------------------------------------------- the CLI's classification, in-process


def _classify(error: BaseException, checkpoint: str | None = None, **meta) -> tuple[int, str]:
    from dpgm.cli import cli, failures

    ctx = click.Context(cli)
    ctx.meta.update({f"dpgm.{k}": v for k, v in meta.items()})
    with ctx:
        try:
            with failures.errors(checkpoint):
                raise error
        except click.ClickException as failure:
            return failure.exit_code, failure.format_message()
    raise AssertionError("not mapped")


def _lost_comm():
    from distributed.comm import CommClosedError

    return CommClosedError("in <TCP (closed)>: Stream is closed")


def _cancelled():
    from distributed.client import FutureCancelledError

    return FutureCancelledError("dpgm-em-abc", reason="scheduler-connection-lost", msg=None)


def _unreachable():
    from dpgm.cluster import SchedulerUnreachable

    return SchedulerUnreachable("lost the connection to the Dask scheduler at tcp://10.0.0.1:8786")


def _parser_error():
    return pd.errors.ParserError("Expected 2 fields in line 3, saw 3")


def _tree():
    from dpgm.inference.triangulation import TreeTooLarge

    return TreeTooLarge("a clique of 2**40 cells")


def _mismatch():
    from dpgm.io.checkpoint import CheckpointMismatch

    return CheckpointMismatch("the checkpoint 'ck' was written for other data")


OUT = "/jobs/out/m.zarr"
MAPPING = [
    # (id, error factory, checkpoint, meta, code, words the message must hold)
    ("disk-full", lambda: OSError(errno.ENOSPC, "No space left on device", OUT + "/c/0"), None, {}, 74,
     ["No space left", OUT]),
    ("read-only-fs", lambda: OSError(errno.EROFS, "Read-only file system", OUT), None, {}, 74, ["Read-only", OUT]),
    ("quota", lambda: OSError(errno.EDQUOT, "Disk quota exceeded", OUT), None, {}, 74, ["quota", OUT]),
    ("no-permission-output", lambda: PermissionError(errno.EACCES, "Permission denied", OUT), None,
     {"outputs": [Path(OUT)]}, 73, ["cannot create", OUT]),
    ("not-a-directory-output", lambda: NotADirectoryError(errno.ENOTDIR, "Not a directory", OUT + "/zarr.json"),
     None, {"outputs": [Path(OUT)]}, 73, ["Not a directory", OUT]),
    ("no-permission-input", lambda: PermissionError(errno.EACCES, "Permission denied", "/data/in.zarr"), None,
     {"outputs": [Path(OUT)]}, 66, ["cannot read", "/data/in.zarr"]),
    ("missing-input", lambda: FileNotFoundError("no dataset at '/data/in.zarr'"), None, {}, 66, ["/data/in.zarr"]),
    ("exists", lambda: FileExistsError(errno.EEXIST, "File exists", OUT), None, {}, 73, ["--overwrite", OUT]),
    ("memory", lambda: MemoryError(), None, {}, 70, ["out of memory"]),
    ("comm-closed-mid-fit", _lost_comm, "/ck", {"address": "tcp://10.0.0.1:8786"}, 69,
     ["tcp://10.0.0.1:8786 went away", "--resume"]),
    ("future-cancelled-mid-fit", _cancelled, "/ck", {"address": "tcp://10.0.0.1:8786"}, 69,
     ["went away", "--resume"]),
    ("scheduler-lost", _unreachable, None, {"address": "tcp://10.0.0.1:8786"}, 69, ["went away"]),
    ("scheduler-never-reached", _unreachable, None, {}, 69, ["tcp://10.0.0.1:8786"]),
    ("csv-parser", _parser_error, None, {"inputs": ["/data/x.csv"]}, 65, ["cannot parse", "/data/x.csv"]),
    ("tree-too-large", _tree, None, {}, 78, ["2**40"]),
    ("checkpoint-mismatch", _mismatch, None, {}, 78, ["'ck'"]),
    ("table-too-large", lambda: TableTooLarge("scope ('a', 'b') needs 10 cells"), None, {}, 78, ["('a', 'b')"]),
    ("config", lambda: ConfigTypeError("max_iter must be an integer, got 'ten'"), None, {}, 78, ["max_iter"]),
    ("data", lambda: dpgm.DataError("code 7 out of range", variable="xray", chunk=3), None, {}, 65,
     ["'xray'", "chunk 3"]),
    ("unexpected", lambda: KeyError("dims"), None, {}, 70, ["internal error", "KeyError", "-v"]),
    ("interrupted-no-checkpoint", lambda: KeyboardInterrupt(), None, {}, 130, ["SIGINT"]),
]


@pytest.mark.parametrize("name, factory, checkpoint, meta, code, words", MAPPING, ids=[m[0] for m in MAPPING])
def test_every_failure_is_classified(name, factory, checkpoint, meta, code, words):
    got, message = _classify(factory(), checkpoint, **meta)
    assert got == code, message
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_interrupt_with_a_checkpoint_is_75_naming_its_iteration(tmp_path):
    from dpgm.cli.failures import Terminated

    (tmp_path / "LATEST").write_text("iteration-000004")
    code, message = _classify(Terminated(signal.SIGTERM), str(tmp_path))
    assert code == 75 and "SIGTERM" in message and "iteration 4" in message and "--resume" in message
    code, message = _classify(Terminated(signal.SIGTERM), None)
    assert code == 143


# ---------------------------------------------------------------- signals to a running fit


def _start_fit(tmp_path: Path, *extra) -> subprocess.Popen:
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, tmp_path / "d.zarr", seed=0, chunk_rows=500)
    (tmp_path / "long.yaml").write_text(LCA + "tol: 0.0\nmax_iter: 100000\n")
    return subprocess.Popen([DPGM, "fit", str(tmp_path / "long.yaml"), str(tmp_path / "d.zarr"), "--out",
                             str(tmp_path / "m.zarr"), "--workers", "1", *map(str, extra)],
                            env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, job: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert job.poll() is None, job.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def _latest(checkpoint: Path) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int((checkpoint / "LATEST").read_text().splitlines()[0].rsplit("-", 1)[-1])
    return 0


@pytest.mark.slow
def test_sigterm_mid_fit_exits_75_and_the_checkpoint_resumes(tmp_path):
    checkpoint = tmp_path / "ck"
    job = _start_fit(tmp_path, "--checkpoint", checkpoint)
    _wait_for(lambda: _latest(checkpoint) >= 2, job)
    job.send_signal(signal.SIGTERM)
    stdout, stderr = job.communicate(timeout=60)
    line = error_line(subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr), 75)
    done = _latest(checkpoint)
    assert "SIGTERM" in line and str(checkpoint) in line and f"iteration {done}" in line and "--resume" in line
    assert not (tmp_path / "m.zarr").exists() and not leftovers(tmp_path)
    (tmp_path / "more.yaml").write_text(LCA + f"tol: 0.0\nmax_iter: {done + 2}\n")
    resumed = run("fit", tmp_path / "more.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr", "--workers",
                  "1", "--checkpoint", checkpoint, "--resume", "--report", tmp_path / "r.json")
    assert resumed.returncode == 3, resumed.stderr
    assert len(json.loads((tmp_path / "r.json").read_text())["history"]) == done + 2
    assert dpgm.load(tmp_path / "m.zarr").variables


@pytest.mark.slow
def test_sigint_mid_fit_without_checkpoint_exits_130_and_writes_nothing(tmp_path):
    job = _start_fit(tmp_path, "--report", tmp_path / "r.json")
    _wait_for(lambda: "dpgm: iteration 2 " in (job.stderr.readline() or ""), job)
    job.send_signal(signal.SIGINT)
    stdout, stderr = job.communicate(timeout=60)
    line = error_line(subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr), 130)
    assert "SIGINT" in line
    assert not (tmp_path / "m.zarr").exists() and not (tmp_path / "r.json").exists() and not leftovers(tmp_path)


# ---------------------------------------------------------------- a real cluster whose scheduler dies


@contextlib.contextmanager
def dask_cluster(folder: Path):
    """``dask scheduler`` and one ``dask worker`` on loopback (port 0), found through a scheduler file."""
    folder.mkdir(parents=True, exist_ok=True)
    dask_cli = str(Path(sys.executable).with_name("dask"))
    scheduler_file = folder / "scheduler.json"
    processes = [subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(scheduler_file)], env=environment(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        processes.append(subprocess.Popen([dask_cli, "worker", "--scheduler-file", str(scheduler_file),
                                           "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                           "--host", "127.0.0.1"], env=environment(),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield scheduler_file, processes[0]
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.slow
def test_scheduler_killed_mid_fit_exits_69_and_resumes_on_a_new_cluster(tmp_path):
    if shutil.which("dask", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no dask command in the virtualenv")
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, tmp_path / "d.zarr", seed=0, chunk_rows=500)
    (tmp_path / "long.yaml").write_text(LCA + "tol: 0.0\nmax_iter: 100000\n")
    checkpoint = tmp_path / "ck"
    with dask_cluster(tmp_path / "first") as (scheduler_file, scheduler):
        job = subprocess.Popen([DPGM, "fit", str(tmp_path / "long.yaml"), str(tmp_path / "d.zarr"), "--out",
                                str(tmp_path / "m.zarr"), "--scheduler-file", str(scheduler_file),
                                "--checkpoint", str(checkpoint)],
                               env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: _latest(checkpoint) >= 2, job, timeout=120)
        scheduler.kill()
        stdout, stderr = job.communicate(timeout=120)
    line = error_line(subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr), 69)
    assert "went away" in line and "--resume" in line and str(checkpoint) in line
    assert not (tmp_path / "m.zarr").exists() and not leftovers(tmp_path)
    total = _latest(checkpoint) + 2
    (tmp_path / "more.yaml").write_text(LCA + f"tol: 0.0\nmax_iter: {total}\n")
    with dask_cluster(tmp_path / "second") as (scheduler_file, _):
        resumed = run("fit", tmp_path / "more.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr",
                      "--scheduler-file", scheduler_file, "--checkpoint", checkpoint,
                      "--resume")
        assert resumed.returncode == 3, resumed.stderr
        undisturbed = run("fit", tmp_path / "more.yaml", tmp_path / "d.zarr", "--out", tmp_path / "u.zarr",
                          "--scheduler-file", scheduler_file)
        assert undisturbed.returncode == 3, undisturbed.stderr
    a, b = dpgm.load(tmp_path / "m.zarr"), dpgm.load(tmp_path / "u.zarr")
    for v in a.variables:
        xr.testing.assert_identical(a.cpds[v], b.cpds[v])

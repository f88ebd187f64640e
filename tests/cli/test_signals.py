"""SIGTERM and SIGINT end every ``dpgm`` command within 5 s: the right exit code, one line, no process left.

Each case is a real ``dpgm`` process in a session of its own (``start_new_session``), sent a signal at
a moment of its run: before the embedded cluster is up, during a pass, while an output is written.
What is checked, against the operating system and the store itself rather than what dpgm says:

* the process exits within 5 s of the signal with 143 (SIGTERM) or 130 (SIGINT), or 75 when a fit's
  ``--checkpoint`` holds an iteration (the one ``LATEST`` names);
* stderr holds one line, ``Error: interrupted by ...``, and no traceback;
* within those 5 s no process of its session is left (``/proc``): no worker, nanny or resource tracker;
* every output is absent, or refused by ``dpgm.open_dataset`` as incomplete (``DataError``), or, if
  complete, named by the line as written before the signal; never a complete store after "no output
  was written", and no stray chunk files beside it.

Moments are drawn from a seeded generator; a process that finished before its signal is a miss
(counted; each test needs most of its trials to hit).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpgm

pytestmark = pytest.mark.serial  # the 5 s limit is wall-clock time: run with no other test beside them

LIMIT = 5.0  # seconds from the signal to an empty session
CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return env


# ---------------------------------------------------------------- processes, as the kernel sees them


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[3])


def session(sid: int) -> list[str]:
    """The live (not zombie) processes of session ``sid``: their command lines."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[1] == sid and stat[0] != "Z":
            with contextlib.suppress(OSError):
                alive.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
    return alive


def handling_signals(pid: int) -> bool:
    """Whether the process catches SIGTERM and SIGINT (dpgm's handlers are installed)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return all(caught & (1 << (s - 1)) for s in (signal.SIGTERM, signal.SIGINT))


@dataclass
class Outcome:
    code: int | None
    seconds: float  # signal to exit
    emptied: float  # signal to an empty session
    left: list[str]
    stdout: str
    stderr: str
    hit: bool  # the signal reached a running command


class Job:
    """``dpgm ARGS`` in a new session, its output in files (no pipe to fill)."""

    def __init__(self, folder: Path, *args, name: str = "job"):
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "dpgm.cli", *map(str, args)], stdout=out,
                                            stderr=err, env=environment(), start_new_session=True)
        self.began = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_until(self, predicate, timeout: float = 120.0) -> bool:
        """Wait until ``predicate()``; False if the process ended first."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.process.poll() is not None:
                return False
            assert time.monotonic() < deadline, f"timed out; stderr: {self.stderr()}"
            time.sleep(0.01)
        return True

    def interrupt(self, signum: int, group: bool = False) -> Outcome:
        """Send ``signum`` (to the process, or its whole group as a terminal's Ctrl-C) and watch it end."""
        hit = self.process.poll() is None
        sent = time.monotonic()
        if hit:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signum) if group else self.process.send_signal(signum)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"still running 60 s after {signal.Signals(signum).name}: {self.stderr()}") from None
        ended = time.monotonic()
        while (left := session(self.pid)) and time.monotonic() < ended + 10:
            time.sleep(0.02)
        emptied = time.monotonic()
        for _ in left:  # never leave one behind, whatever the assertions say
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        return Outcome(self.process.returncode, ended - sent, emptied - sent, left, self.out.read_text(),
                       self.stderr(), hit)


def check_interrupted(outcome: Outcome, signum: int, *, quiet: bool = True, checkpoint: Path | None = None) -> str:
    """The checks every interrupted command passes; its one error line."""
    assert outcome.seconds <= LIMIT, f"exited {outcome.seconds:.1f} s after the signal: {outcome.stderr}"
    assert not outcome.left, f"left running: {outcome.left}"
    assert outcome.emptied <= LIMIT, f"session empty {outcome.emptied:.1f} s after the signal"
    assert "Traceback" not in outcome.stderr and "Exception ignored" not in outcome.stderr, outcome.stderr
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("Error: interrupted by "), outcome.stderr
    if quiet:
        assert len(lines) == 1, outcome.stderr
    else:  # lines before it: the dashboard's link, timestamped log lines, warnings about the input
        for line in lines[:-1]:
            assert line.startswith(("dashboard: ", "warning: ")) or " dpgm: " in line, outcome.stderr
    line = lines[-1]
    assert signal.Signals(signum).name in line
    latest = checkpoint / "LATEST" if checkpoint is not None else None
    if outcome.code == 75:
        assert latest is not None and latest.exists(), line
        done = int(latest.read_text().split("\n", 1)[0].strip().rsplit("-", 1)[-1])  # line 2: its digest
        assert f"iteration {done}" in line and "--resume" in line, line
    else:
        assert outcome.code == CODES[signum], (outcome.code, outcome.stderr)
        assert "after writing" in line or latest is None or not latest.exists(), line
    return line


def check_store(path: Path, line: str) -> str:
    """A store is absent, refused as incomplete, or complete and named by the line as written."""
    if not path.exists():
        assert not any(path.parent.glob(f"*{path.name}*")), sorted(p.name for p in path.parent.iterdir())
        return "absent"
    try:
        dpgm.open_dataset(path)
    except dpgm.DataError as error:
        assert "incomplete" in str(error)
        return "incomplete"
    assert "no output was written" not in line and f"after writing '{path}'" in line, line
    return "complete"


def draw(seed: int, n: int, low: float, high: float) -> list[float]:
    generator = random.Random(seed)
    return [generator.uniform(low, high) for _ in range(n)]


def running_time(folder: Path, *args) -> float:
    """Seconds an uninterrupted run of the command lasts after its handlers are installed (this machine's
    speed: the random moments are drawn within it, so the signals land while the command runs)."""
    job = Job(folder, *args, name="uninterrupted")
    assert job.wait_until(lambda: handling_signals(job.pid))
    start = time.monotonic()
    assert job.process.wait(timeout=600) == 0, job.stderr()
    return time.monotonic() - start


# ---------------------------------------------------------------- data


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """Rows for every command and model kind: asia's 8 variables, 4 continuous ones (a 3-component
    mixture x0..x2 and w ~ x0), a Bernoulli y ~ x0; 10^6 rows in 20 chunks; sequences for an HMM; a CSV."""
    folder = tmp_path_factory.mktemp("signals")
    rows = 1_000_000
    asia = dpgm.load_network("asia")
    sample = dpgm.sample_bayesian_network(asia, rows, None, seed=1)
    rng = np.random.default_rng(2)
    component = rng.integers(0, 3, rows)
    means = np.array([[0.0, 0.0, 0.0], [5.0, 0.0, -3.0], [0.0, 6.0, 3.0]])
    x = means[component] + rng.normal(size=(rows, 3))
    frame = pd.DataFrame({v: pd.Categorical.from_codes(sample[v].values, asia.states[v]) for v in asia.variables})
    frame = frame.assign(x0=x[:, 0], x1=x[:, 1], x2=x[:, 2], w=2.0 * x[:, 0] + rng.normal(size=rows),
                         y=pd.Categorical.from_codes((rng.random(rows) < 1 / (1 + np.exp(-x[:, 0]))).astype(int),
                                                     ["no", "yes"]))
    dpgm.write_dataset(dpgm.from_pandas(frame), folder / "rows.zarr", chunk_rows=50_000)
    frame[list(asia.variables)].to_csv(folder / "rows.csv", index=False)
    sequences = np.random.default_rng(3).integers(0, 4, size=(20_000, 50)).astype(np.int8)
    import xarray as xr

    dpgm.write_dataset(xr.Dataset({"obs": (("row", "time"), sequences, {"states": list("abcd")})}),
                       folder / "seq.zarr", chunk_rows=1000)
    dpgm.fit(dpgm.BayesianNetwork.from_edges(asia.edges), dpgm.open_dataset(folder / "rows.zarr")
             ).model.save(folder / "asia-model.zarr")
    return {"rows": folder / "rows.zarr", "csv": folder / "rows.csv", "seq": folder / "seq.zarr",
            "model": folder / "asia-model.zarr"}


ASIA_EDGES = [list(e) for e in dpgm.load_network("asia").edges]
ENDLESS = {"tol": 0.0, "max_iter": 100_000}
SPECS = {  # every model kind of a specification; the EM ones run until stopped
    "bayesian_network": {"model": "bayesian_network", "edges": ASIA_EDGES},
    "bayesian_network_em": {"model": "bayesian_network", "edges": ASIA_EDGES, "drop": ["either"],
                            "latent": {"either": ["yes", "no"]}, "random_state": 0, **ENDLESS},
    "latent_class": {"model": "latent_class", "n_classes": 2, "observed": ["xray", "dysp", "tub"],
                     "random_state": 0, **ENDLESS},
    "markov_network": {"model": "markov_network", "cliques": [["smoke", "lung"], ["lung", "either"],
                                                               ["either", "bronc"], ["bronc", "smoke"]],
                       "method": "ipf", **ENDLESS},
    "log_linear": {"model": "log_linear", "margins": [["smoke", "lung"], ["lung", "either"], ["either", "bronc"]],
                   **ENDLESS},
    "hmm": {"model": "hmm", "n_states": 3, "symbols": list("abcd"), "variable": "obs", "random_state": 0,
            **ENDLESS},
    "gaussian_graphical": {"model": "gaussian_graphical", "edges": [["x0", "x1"], ["x1", "x2"]], **ENDLESS},
    "gaussian_mixture": {"model": "gaussian_mixture", "n_components": 3, "variables": ["x0", "x1", "x2"],
                         "random_state": 0, **ENDLESS},
    "linear_gaussian": {"model": "linear_gaussian", "edges": [["x0", "w"], ["x1", "w"]]},
    "glm": {"model": "glm", "child": "y", "parents": ["x0", "smoke"], "family": "logistic", "tol": 0.0,
            "max_iter": 100},
    "hybrid_network": {"model": "hybrid_network", "edges": [["x0", "y"], ["smoke", "y"], ["x0", "w"]],
                       "families": {"y": "bernoulli", "w": "gaussian", "x0": "gaussian"}, "tol": 0.0,
                       "max_iter": 100},
    "hybrid_network_em": {"model": "hybrid_network", "edges": [["z", "w"], ["x0", "w"]],
                          "families": {"x0": "gaussian", "w": "gaussian"}, "latent": {"z": ["a", "b"]},
                          "method": "em", "random_state": 0, **ENDLESS},
}
CHECKPOINTED = ["bayesian_network_em", "latent_class", "hmm", "gaussian_mixture", "hybrid_network_em"]


def spec_file(folder: Path, kind: str, **changes) -> Path:
    path = folder / f"{kind}.yaml"
    path.write_text(json.dumps(SPECS[kind] | changes))
    return path


def data_of(stores: dict[str, Path], kind: str) -> Path:
    return stores["seq"] if kind == "hmm" else stores["rows"]


# ---------------------------------------------------------------- tests that take seconds


def test_info_ends_at_once_with_one_line(tmp_path, stores):
    """``info`` never starts a cluster: interrupted as soon as it handles signals, it exits 143/130."""
    hits = 0
    for signum, delay in zip([signal.SIGTERM, signal.SIGINT] * 2, draw(4, 4, 0.0, 0.3), strict=True):
        job = Job(tmp_path, "-q", "info", stores["rows"])
        if not job.wait_until(lambda job=job: handling_signals(job.pid)):
            continue
        time.sleep(delay)
        outcome = job.interrupt(signum)
        if outcome.code == 0 and not outcome.stderr:
            continue  # finished first
        hits += 1
        assert "no output was written" in check_interrupted(outcome, signum)
    assert hits >= 2


def test_generate_interrupted_before_the_cluster_is_up(tmp_path):
    """While the embedded cluster starts (its worker processes spawned, not yet all connected): the
    half-started workers go too, nothing is written."""
    out = tmp_path / "x.zarr"
    for signum in (signal.SIGTERM, signal.SIGINT):
        job = Job(tmp_path, "generate", "asia", out, "--rows", "1e5", "--workers", "2")
        assert job.wait_until(lambda job=job: any("spawn_main" in p for p in session(job.pid)))
        assert "dashboard:" not in job.stderr()
        line = check_interrupted(job.interrupt(signum), signum, quiet=False)
        assert check_store(out, line) == "absent" and "no output was written" in line


INTERRUPTED_IMPORT = """
import importlib.abc, os, signal, sys
from dpgm.cli.signals import Terminated, handle_signals

class SignalDuringImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "asyncio" and "dpgm.cluster" in sys.modules:  # dpgm.cluster's first import
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

handle_signals()
sys.modules.pop("asyncio", None)
sys.meta_path.insert(0, SignalDuringImport())
try:
    import dpgm.cluster
except Terminated as error:
    print("interrupted:", error, "partial:", not hasattr(sys.modules.get("dpgm.cluster"), "interrupt"))
"""


def test_a_signal_while_dpgm_cluster_is_imported_is_the_interrupt(tmp_path):
    """The signal arrives while ``dpgm.cluster`` is half imported (its ``interrupt`` not yet defined): the
    handler raises the interrupt, not an AttributeError from the half-made module (seen in a real
    ``dpgm generate`` signalled at a random moment)."""
    script = tmp_path / "interrupted_import.py"
    script.write_text(INTERRUPTED_IMPORT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == "interrupted: SIGTERM partial: True", done.stdout


def test_a_swallowed_interrupt_is_raised_by_the_next_wait(tmp_path, client):
    """The handler's exception lost where Python ignores it (a garbage-collection callback): recorded, it is
    raised by the wait for the next pass, which is stopped (its tasks cancelled) before it propagates."""
    import dask

    from dpgm.cli.signals import Terminated
    from dpgm.cluster import compute, processes

    def slow(i):
        time.sleep(0.5)
        return i

    tasks = dask.delayed(sum)([dask.delayed(slow)(i, dask_key_name=("dpgm-slow", i)) for i in range(40)])
    assert processes.interrupt(Terminated(signal.SIGTERM)) is True
    try:
        began = time.monotonic()
        with pytest.raises(Terminated):
            compute(tasks, client=client)
        assert time.monotonic() - began < 2.5
        # this pass's tasks only: the session's cluster may still finish another test's abandoned task
        ours = {"dpgm-slow", str(tasks.key)}
        running = client.run(lambda dask_worker: sorted(str(ts.key) for ts in dask_worker.state.executing
                                                        if str(ts.key[0] if isinstance(ts.key, tuple) else ts.key)
                                                        in ours))
        assert not any(running.values()), running
    finally:
        processes._INTERRUPTS.pending = None


def test_a_failed_pass_leaves_no_task_writing(tmp_path, client):
    """A task fails while others still write files: when ``compute`` raises, none writes any more (the
    caller may remove the output at once, with no stray file appearing after)."""
    import dask

    from dpgm.cluster import compute

    def write(i, folder):
        if i == 0:
            time.sleep(0.2)
            raise ValueError("chunk 0 is bad")
        time.sleep(2.0)
        (Path(folder) / f"{i}.chunk").write_text("x")
        return i

    folder = tmp_path / "chunks"
    folder.mkdir()
    tasks = dask.delayed(sum)([dask.delayed(write)(i, str(folder), dask_key_name=("dpgm-write", i))
                               for i in range(5)])
    with pytest.raises(ValueError, match="chunk 0"):
        compute(tasks, client=client)
    written = sorted(folder.iterdir())
    time.sleep(1.5)
    assert sorted(folder.iterdir()) == written


# ---------------------------------------------------------------- every command, at random moments


@pytest.mark.slow
def test_generate_at_random_moments(tmp_path):
    """10 trials, SIGTERM and SIGINT alternating, at moments drawn within an uninterrupted run's length after the
    handlers are installed: before the cluster is up, during the pass, while the store is marked complete and
    the cluster stops."""
    out = tmp_path / "x.zarr"
    hits, seen = 0, []
    lasts = running_time(tmp_path, "-q", "generate", "alarm", out, "--rows", "1e6", "--chunk-rows", "5e4",
                         "--workers", "2")
    shutil.rmtree(out)
    for trial, delay in enumerate(draw(6, 10, 0.0, 0.95 * lasts)):
        signum = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        job = Job(tmp_path, *(["-q"] if trial % 3 else []), "generate", "alarm", out, "--rows", "1e6",
                  "--chunk-rows", "5e4", "--workers", "2", name=f"generate-{trial}")
        assert job.wait_until(lambda job=job: handling_signals(job.pid))
        time.sleep(delay)
        outcome = job.interrupt(signum)
        if not outcome.hit or outcome.code == 0:
            assert outcome.code == 0 and out.exists(), outcome.stderr  # finished first: a complete store
            seen.append("finished first")
        else:
            hits += 1
            line = check_interrupted(outcome, signum, quiet=bool(trial % 3))
            seen.append(check_store(out, line))
        if out.exists():
            shutil.rmtree(out)
    assert hits >= 7, seen


@pytest.mark.slow
def test_generate_interrupted_while_the_metadata_is_written(tmp_path):
    """A network of 600 variables: the store's 600 arrays are created one by one on the driver (through
    Zarr's I/O thread) for seconds before the pass. A signal then leaves no array directory behind."""
    bif = tmp_path / "wide.bif"
    bif.write_text("network wide {\n}\n" + "".join(
        f"variable v{i} {{\n  type discrete [ 2 ] {{ no, yes }};\n}}\n" for i in range(600)) + "".join(
        f"probability ( v{i} ) {{\n  table 0.3, 0.7;\n}}\n" for i in range(600)))
    out = tmp_path / "w.zarr"
    for trial, delay in enumerate(draw(8, 3, 0.2, 2.0)):
        signum = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        job = Job(tmp_path, "-q", "generate", bif, out, "--rows", "1000", "--workers", "1", name=f"wide-{trial}")
        assert job.wait_until(out.exists)
        time.sleep(delay)
        outcome = job.interrupt(signum)
        assert outcome.code != 0, "finished before the signal"
        assert check_store(out, check_interrupted(outcome, signum)) == "absent"


@pytest.mark.slow
def test_convert_at_random_moments(tmp_path, stores):
    """Both passes of a conversion (labels, then codes): nothing half-written, no stray chunk file."""
    out = tmp_path / "c.zarr"
    hits, seen = 0, []
    lasts = running_time(tmp_path, "-q", "convert", stores["csv"], out, "--chunk-rows", "5e4", "--workers", "2")
    shutil.rmtree(out)
    for trial, delay in enumerate(draw(7, 4, 0.15 * lasts, 0.9 * lasts)):
        signum = (signal.SIGTERM, signal.SIGINT)[trial % 2]
        job = Job(tmp_path, "-q", "convert", stores["csv"], out, "--chunk-rows", "5e4", "--workers", "2",
                  name=f"convert-{trial}")
        assert job.wait_until(lambda job=job: handling_signals(job.pid))
        time.sleep(delay)
        outcome = job.interrupt(signum)
        if outcome.code == 0:
            seen.append("finished first")
        else:
            hits += 1
            seen.append(check_store(out, check_interrupted(outcome, signum)))
        if out.exists():
            shutil.rmtree(out)
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith((".out", ".err"))) == []
    assert hits >= 3, seen


@pytest.mark.slow
def test_counts_and_predict_during_their_pass(tmp_path, stores):
    """``counts --out`` writes nothing; ``predict`` adds no variable to the store (it stays readable)."""
    import shutil

    data = tmp_path / "rows.zarr"
    shutil.copytree(stores["rows"], data)
    for trial, signum in enumerate([signal.SIGTERM, signal.SIGINT]):
        job = Job(tmp_path, "counts", data, "--scope", "smoke,lung,either,bronc,dysp", "--scope", "asia,tub",
                  "--out", tmp_path / "tables.json", "--workers", "2", name=f"counts-{trial}")
        assert job.wait_until(lambda job=job: "dashboard:" in job.stderr())
        time.sleep(0.3)
        line = check_interrupted(job.interrupt(signum), signum, quiet=False)
        assert "no output was written" in line and not (tmp_path / "tables.json").exists()
        job = Job(tmp_path, "predict", stores["model"], data, "--variable", "either", "--workers", "2",
                  name=f"predict-{trial}")
        assert job.wait_until(lambda job=job: "dashboard:" in job.stderr())
        time.sleep(1.0 + trial)
        line = check_interrupted(job.interrupt(signum), signum, quiet=False)
        with warnings.catch_warnings(record=True) as caught:  # an unlisted, half-written array is ignored
            warnings.simplefilter("always", dpgm.DpgmWarning)
            listed = "either_proba" in dpgm.open_dataset(data).data_vars
        assert listed == ("after writing 'either_proba'" in line), line
        assert listed or not caught or "either_proba" in str(caught[0].message)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_fit_of_every_kind_interrupted(tmp_path, stores, kind):
    """During the fit's passes (half a second to two after the cluster is up): nothing written."""
    signum = (signal.SIGTERM, signal.SIGINT)[sorted(SPECS).index(kind) % 2]
    out, report = tmp_path / "m.zarr", tmp_path / "r.json"
    job = Job(tmp_path, "fit", spec_file(tmp_path, kind), data_of(stores, kind), "--out", out, "--report", report,
              "--workers", "2")
    assert job.wait_until(lambda: "dashboard:" in job.stderr())
    time.sleep(draw(sorted(SPECS).index(kind), 1, 0.5, 2.0)[0])
    outcome = job.interrupt(signum)
    assert outcome.code != 0, f"the fit finished before its signal: {outcome.stderr}"
    line = check_interrupted(outcome, signum, quiet=False)
    assert "no output was written" in line and not out.exists() and not report.exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", CHECKPOINTED)
def test_checkpointed_fit_interrupted(tmp_path, stores, kind):
    """With --checkpoint, once an iteration is saved: 75 naming it; SIGINT to the whole process group
    (a terminal's Ctrl-C) reaches the workers too, which leave it to the command."""
    checkpoint, out = tmp_path / "ck", tmp_path / "m.zarr"
    signum = (signal.SIGTERM, signal.SIGINT)[CHECKPOINTED.index(kind) % 2]
    job = Job(tmp_path, "fit", spec_file(tmp_path, kind), data_of(stores, kind), "--out", out, "--checkpoint",
              checkpoint, "--workers", "2")
    assert job.wait_until(lambda: (checkpoint / "LATEST").exists())
    outcome = job.interrupt(signum, group=signum == signal.SIGINT)
    check_interrupted(outcome, signum, quiet=False, checkpoint=checkpoint)
    assert outcome.code == 75 and not out.exists()


@pytest.mark.slow
def test_checkpointed_fit_interrupted_then_resumed_is_the_uninterrupted_fit(tmp_path, stores):
    """SIGTERM after iteration 3 of 12, --resume: the model of a run never interrupted (the oracle)."""
    spec = spec_file(tmp_path, "bayesian_network_em", max_iter=12)
    data = data_of(stores, "bayesian_network_em")
    full = Job(tmp_path, "fit", spec, data, "--out", tmp_path / "full.zarr", "--workers", "2", name="full")
    checkpoint = tmp_path / "ck"
    job = Job(tmp_path, "fit", spec, data, "--out", tmp_path / "part.zarr", "--checkpoint", checkpoint,
              "--workers", "2", name="part")

    def latest() -> int:
        with contextlib.suppress(OSError, ValueError):
            return int((checkpoint / "LATEST").read_text().split("\n", 1)[0].strip().rsplit("-", 1)[-1])
        return 0

    assert job.wait_until(lambda: latest() >= 3)
    outcome = job.interrupt(signal.SIGTERM)
    check_interrupted(outcome, signal.SIGTERM, quiet=False, checkpoint=checkpoint)
    assert outcome.code == 75 and latest() < 12
    resumed = subprocess.run([sys.executable, "-m", "dpgm.cli", "fit", spec, data, "--out", tmp_path / "resumed.zarr",
                              "--checkpoint", checkpoint, "--resume", "--workers", "2"], capture_output=True,
                             text=True, env=environment(), timeout=600)
    assert full.process.wait(timeout=600) == 3, full.stderr()  # tol 0: stops at max_iter (exit 3)
    assert resumed.returncode == 3, resumed.stderr
    a, b = dpgm.load(tmp_path / "full.zarr"), dpgm.load(tmp_path / "resumed.zarr")
    for variable in a.variables:
        assert np.array_equal(a.cpds[variable].values, b.cpds[variable].values), variable

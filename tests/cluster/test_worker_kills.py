"""A worker SIGKILLed during a counts pass, an iteration of every EM kind (Bayesian network, Markov network,
HMM, Gaussian mixture, hybrid network) or an IRLS pass, on a real loopback `dask scheduler` and two
`dask worker` processes: passes are pure, the lost tasks run again elsewhere, and the result equals an
undisturbed run bit for bit. The scheduler killed mid-fit: exit 69, and `--resume` on a new cluster
finishes bit for bit as an undisturbed fit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask_processes import dask_processes

import dpgm

pytestmark = pytest.mark.slow
WORKERS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_processes(tmp_path_factory.mktemp("killed"), WORKERS) as file:  # nannies restart a killed worker
        yield str(file)


def _kill_a_worker_when_busy(client, prefix: str, done: threading.Event, killed: list) -> None:
    """SIGKILL the process of a worker that is running a task whose key starts with ``prefix``."""
    while not done.is_set():
        processing = client.processing()
        busy = [w for w, keys in processing.items() if any(str(k).startswith(f"('{prefix}") or
                                                             str(k).startswith(prefix) for k in keys)]
        if busy:
            pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.02)


def _with_a_kill(client, prefix: str, run):
    """``run()`` while a worker is killed mid-pass; run again (up to 3 times) if the pass ended before
    the killer saw one of its tasks running, so the test never passes without a kill."""
    for _ in range(3):
        done, killed = threading.Event(), []
        killer = threading.Thread(target=_kill_a_worker_when_busy, args=(client, prefix, done, killed))
        killer.start()
        try:
            result = run()
        finally:
            done.set()
            killer.join()
        if killed:
            client.wait_for_workers(WORKERS, timeout=60)  # the nanny brings the worker back
            return result
    raise AssertionError(f"no {prefix} task was seen running in 3 passes: no kill happened during a pass")


def test_counts_pass_survives_a_killed_worker_bit_for_bit(tmp_path, cluster):
    truth = dpgm.load_network("alarm")
    dpgm.sample_bayesian_network(truth, 400_000, tmp_path / "alarm.zarr", seed=1, chunk_rows=4000)
    scopes = [(v, *truth.parents(v)) for v in truth.variables]
    with dpgm.connect(scheduler_file=cluster) as client:
        client.wait_for_workers(WORKERS, timeout=60)
        ds = dpgm.open_dataset(tmp_path / "alarm.zarr")
        undisturbed = dpgm.counts(ds, scopes, client=client)
        disturbed = _with_a_kill(client, "dpgm-counts", lambda: dpgm.counts(ds, scopes, client=client))
    for scope in scopes:
        np.testing.assert_array_equal(disturbed[scope].values, undisturbed[scope].values)


def test_em_iteration_survives_a_killed_worker_bit_for_bit(tmp_path, cluster):
    truth = dpgm.load_network("asia")
    dpgm.sample_bayesian_network(truth, 200_000, tmp_path / "asia.zarr", seed=2, chunk_rows=2000, missing=0.1)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    options = {"method": "em", "random_state": 0, "max_iter": 6, "tol": 0}
    with dpgm.connect(scheduler_file=cluster) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        client.wait_for_workers(WORKERS, timeout=60)
        ds = dpgm.open_dataset(tmp_path / "asia.zarr").drop_vars("either")
        undisturbed = dpgm.fit(structure, ds, client=client, **options)
        disturbed = _with_a_kill(client, "dpgm-", lambda: dpgm.fit(structure, ds, client=client, **options))
    assert [h["loglik"] for h in disturbed.history] == [h["loglik"] for h in undisturbed.history]
    for v in truth.variables:
        np.testing.assert_array_equal(disturbed.model.cpds[v].values, undisturbed.model.cpds[v].values)


def _tables(model) -> dict[str, np.ndarray]:
    """Every array a model is saved as (its labelled tables and numeric attributes)."""
    stored = dict(model._to_store())
    attrs = stored.pop("__attrs__", {})
    return {str(k): np.asarray(v.values) for k, v in stored.items()} | {
        f"attr:{k}": np.asarray(v) for k, v in attrs.items() if isinstance(v, int | float)}


def _same(disturbed, undisturbed) -> None:
    assert [h.get("loglik", h.get("deviance")) for h in disturbed.history] == [
        h.get("loglik", h.get("deviance")) for h in undisturbed.history]
    first, second = _tables(disturbed.model), _tables(undisturbed.model)
    assert sorted(first) == sorted(second)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def _markov(folder):
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 2, (150_000, 3)).astype(np.int8)
    codes[:, 1] = np.where(rng.random(len(codes)) < 0.8, codes[:, 0], codes[:, 1])
    ds = xr.Dataset({v: ("row", codes[:, i], {"states": ["0", "1"]}) for i, v in enumerate("abc")})
    dpgm.write_dataset(ds, folder / "d.zarr", chunk_rows=5000)
    model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "h"), ("h", "a")],
                                            {v: ["0", "1"] for v in "abch"})
    return model, {"method": "em", "random_state": 1, "max_iter": 4, "tol": 0}


def _hmm(folder):
    rng = np.random.default_rng(6)
    hidden = np.cumsum(rng.random((3000, 40)) < 0.1, axis=1) % 3
    symbols = np.where(rng.random(hidden.shape) < 0.7, hidden, rng.integers(0, 4, hidden.shape)).astype(np.int8)
    dpgm.write_dataset(xr.Dataset({"obs": (("row", "time"), symbols, {"states": list("abcd")})}),
                       folder / "d.zarr", chunk_rows=100)
    return dpgm.hmm(3, list("abcd")), {"random_state": 2, "n_init": 2, "max_iter": 4, "tol": 0}


def _mixture(folder):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal([0, 0, 1], 1, (200_000, 3)), rng.normal([3, 4, 0], 0.7, (150_000, 3))])
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=list("uvw"))), folder / "d.zarr", chunk_rows=10_000)
    return dpgm.GaussianMixture(2, list("uvw")), {"random_state": 3, "n_init": 2, "max_iter": 4, "tol": 0}


def _hybrid(folder):
    rng = np.random.default_rng(8)
    x = rng.normal(0, 1, 300_000)
    z = rng.random(len(x)) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - x) + rng.normal(0, np.where(z, 0.7, 1.0))
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame({"x": x, "y": y})), folder / "d.zarr", chunk_rows=10_000)
    model = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                               states={"z": ["a", "b"]})
    return model, {"method": "em", "random_state": 4, "n_init": 2, "max_iter": 4, "tol": 0}


def _irls(folder):
    rng = np.random.default_rng(9)
    n = 400_000
    frame = pd.DataFrame({"x": rng.normal(size=n), "w": rng.normal(size=n),
                          "r": pd.Categorical(rng.choice(["n", "s", "e"], n))})
    eta = -0.3 + 0.8 * frame["x"] - 0.5 * frame["w"] + (frame["r"] == "s") * 0.4
    frame["y"] = pd.Categorical(np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), "yes", "no"),
                                categories=["no", "yes"])
    dpgm.write_dataset(dpgm.from_pandas(frame), folder / "d.zarr", chunk_rows=10_000)
    return dpgm.GLMConditional("y", ["x", "w", "r"], "bernoulli"), {"tol": 1e-12, "max_iter": 25}


@pytest.mark.parametrize("problem", [_markov, _hmm, _mixture, _hybrid, _irls],
                         ids=["markov-em", "hmm", "gaussian-mixture", "hybrid-em", "irls"])
def test_every_em_kind_and_irls_survive_a_killed_worker_bit_for_bit(tmp_path, cluster, problem):
    model, options = problem(tmp_path)
    with dpgm.connect(scheduler_file=cluster) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        client.wait_for_workers(WORKERS, timeout=60)
        ds = dpgm.open_dataset(tmp_path / "d.zarr")
        undisturbed = dpgm.fit(model, ds, client=client, **options)
        disturbed = _with_a_kill(client, "dpgm-", lambda: dpgm.fit(model, ds, client=client, **options))
    _same(disturbed, undisturbed)


def _latest(checkpoint) -> int:
    try:
        return int((checkpoint / "LATEST").read_text().splitlines()[0].rsplit("-", 1)[-1])
    except (OSError, ValueError, IndexError):
        return 0


def _fit_command(spec, data, out, scheduler_file, *extra) -> list[str]:
    return [sys.executable, "-m", "dpgm.cli", "fit", str(spec), str(data), "--out", str(out),
            "--scheduler-file", str(scheduler_file), *map(str, extra)]


def test_scheduler_killed_mid_fit_exits_69_and_resumes_bit_for_bit_on_a_new_cluster(tmp_path):
    """An HMM fit with --checkpoint on scheduler + 2 workers; the scheduler SIGKILLed after iteration 2: exit 69
    naming the checkpoint; a new cluster resumes it to max_iter, equal to an undisturbed fit there (every table
    ``np.array_equal``, the same history)."""
    _hmm(tmp_path)
    spec = "model: hmm\nn_states: 3\nsymbols: [a, b, c, d]\nvariable: obs\nrandom_state: 2\nn_init: 2\ntol: 0.0\n"
    (tmp_path / "long.yaml").write_text(spec + "max_iter: 100000\n")
    checkpoint = tmp_path / "ck"
    env = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with dask_processes(tmp_path / "first", WORKERS) as file:
        job = subprocess.Popen(_fit_command(tmp_path / "long.yaml", tmp_path / "d.zarr", tmp_path / "m.zarr", file,
                                            "--checkpoint", checkpoint),
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while _latest(checkpoint) < 2:
            assert job.poll() is None, job.communicate()
            assert time.time() < deadline, "no checkpoint after 240 s"
            time.sleep(0.05)
        with dpgm.connect(scheduler_file=file) as client:
            scheduler = client.run_on_scheduler(os.getpid)
        os.kill(scheduler, signal.SIGKILL)
        _, stderr = job.communicate(timeout=180)
    assert job.returncode == 69, stderr
    line = [x for x in stderr.splitlines() if x.startswith("Error")][-1]
    assert "went away" in line and "--resume" in line and str(checkpoint) in line, line
    assert "Traceback" not in stderr and not (tmp_path / "m.zarr").exists()
    total = _latest(checkpoint) + 2
    (tmp_path / "more.yaml").write_text(spec + f"max_iter: {total}\n")
    with dask_processes(tmp_path / "second", WORKERS) as file:
        resumed = subprocess.run(_fit_command(tmp_path / "more.yaml", tmp_path / "d.zarr", tmp_path / "m.zarr", file,
                                              "--checkpoint", checkpoint, "--resume", "--report",
                                              tmp_path / "m.json"),
                                 env=env, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 3, resumed.stderr
        undisturbed = subprocess.run(_fit_command(tmp_path / "more.yaml", tmp_path / "d.zarr", tmp_path / "u.zarr",
                                                  file, "--report", tmp_path / "u.json"),
                                     env=env, capture_output=True, text=True, timeout=600)
        assert undisturbed.returncode == 3, undisturbed.stderr
    a, b = _tables(dpgm.load(tmp_path / "m.zarr")), _tables(dpgm.load(tmp_path / "u.zarr"))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    reports = [json.loads((tmp_path / f"{n}.json").read_text()) for n in "mu"]
    assert [h["loglik"] for h in reports[0]["history"]] == [h["loglik"] for h in reports[1]["history"]]

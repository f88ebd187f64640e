"""A worker SIGKILLed during a counts pass or an EM iteration, on real `dask scheduler` / `dask worker`
processes: passes are pure, the lost tasks run again elsewhere, and the result equals an undisturbed run
bit for bit."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest
from dask_processes import dask_processes

import dpgm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_processes(tmp_path_factory.mktemp("killed"), 3) as file:  # nannies restart a killed worker
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
            client.wait_for_workers(3, timeout=60)  # the nanny brings the worker back
            return result
    raise AssertionError(f"no {prefix} task was seen running in 3 passes: no kill happened during a pass")


def test_counts_pass_survives_a_killed_worker_bit_for_bit(tmp_path, cluster):
    truth = dpgm.load_network("alarm")
    dpgm.sample_bayesian_network(truth, 400_000, tmp_path / "alarm.zarr", seed=1, chunk_rows=4000)
    scopes = [(v, *truth.parents(v)) for v in truth.variables]
    with dpgm.connect(scheduler_file=cluster) as client:
        client.wait_for_workers(3, timeout=60)
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
        client.wait_for_workers(3, timeout=60)
        ds = dpgm.open_dataset(tmp_path / "asia.zarr").drop_vars("either")
        undisturbed = dpgm.fit(structure, ds, client=client, **options)
        disturbed = _with_a_kill(client, "dpgm-", lambda: dpgm.fit(structure, ds, client=client, **options))
    assert [h["loglik"] for h in disturbed.history] == [h["loglik"] for h in undisturbed.history]
    for v in truth.variables:
        np.testing.assert_array_equal(disturbed.model.cpds[v].values, undisturbed.model.cpds[v].values)

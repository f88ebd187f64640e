"""Shared fixtures: a real 2-process LocalCluster for the session.

A run launched with SIGINT ignored (``nohup cmd &`` from a script: the shell sets it so) would pass
that on to every ``dpgm`` process the tests start, and the tests that send them SIGINT would see it
ignored: the run takes SIGINT back here, so the children start with its default action, as they do
from a terminal or CI.

An idle Dask process samples its threads' stacks every 10 ms (the profiler behind the dashboard's
Profile tab) and wakes every 20 ms to time its event loop: about a fifth of a core for a 2-worker
cluster doing nothing, for each pytest process's session cluster and each cluster a test or a
``dpgm`` subprocess starts (``benchmarks/results/test_suite.md``). No test reads either, so the run
turns the profiler off and ticks once a second, here and, through the environment, in every process
it starts. Nothing a fit computes depends on them.
"""

from __future__ import annotations

import os
import signal

import dask
import pytest

QUIET_DASK = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False", "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s"}
for _name, _value in QUIET_DASK.items():
    os.environ.setdefault(_name, _value)
dask.config.refresh()


def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def client():
    """A distributed Client on a LocalCluster of 2 worker processes (1 thread each)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


@pytest.fixture
def shared_cluster(client, monkeypatch):
    """``dpgm`` subprocesses started through ``cli_runs.cli_environment`` connect to the session's cluster."""
    from cli_runs import SHARED

    monkeypatch.setenv(SHARED, client.scheduler.address)
    return client.scheduler.address

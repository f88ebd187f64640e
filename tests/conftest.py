"""Shared fixtures: a real 2-process LocalCluster for the session.

A run launched with SIGINT ignored (``nohup cmd &`` from a script: the shell sets it so) would pass
that on to every ``dpgm`` process the tests start, and the tests that send them SIGINT would see it
ignored: the run takes SIGINT back here, so the children start with its default action, as they do
from a terminal or CI.
"""

from __future__ import annotations

import signal

import pytest


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

"""Shared fixtures: a real 2-process LocalCluster for the session."""

from __future__ import annotations

import pytest


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

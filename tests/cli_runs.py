"""What tests of real ``dpgm`` subprocesses share: their environment (the session's cluster or their
own), the one-line error check, a guard that no pass over the data ran, and an S3-compatible server
on loopback.

A command that starts its own embedded cluster pays about 8 s of CPU for it (two worker processes
importing NumPy, xarray, Dask and Zarr: ``benchmarks/results/test_suite.md``). Tests of what a command
computes or refuses send it to the session's cluster instead (the ``shared_cluster`` fixture of
``conftest.py`` names it in :data:`SHARED`); tests of the cluster's own life (start-up, signals, lost
workers, paths on workers in another folder) keep their own (``own_cluster=True``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import dask
import pytest

SHARED = "DPGM_TEST_SCHEDULER"
DPGM = [sys.executable, "-m", "dpgm.cli"]


def cli_environment(*, own_cluster: bool = False) -> dict[str, str]:
    """The environment of a ``dpgm`` subprocess: the session's scheduler when a test asks for it (the
    ``shared_cluster`` fixture) unless ``own_cluster``, else none (the command starts its own cluster)."""
    environment = {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    environment.pop("DASK_SCHEDULER_ADDRESS", None)
    shared = environment.pop(SHARED, None)
    if shared and not own_cluster:
        environment["DASK_SCHEDULER_ADDRESS"] = shared
    return environment


def run_dpgm(*args, check: bool = False, timeout: float = 240, env: dict | None = None, own_cluster: bool = False,
             cwd=None) -> subprocess.CompletedProcess:
    """Run ``dpgm ARGS`` (this interpreter's) to its end; ``check``: fail the test on a non-zero exit."""
    environment = {**cli_environment(own_cluster=own_cluster), **(env or {})}
    result = subprocess.run([*DPGM, *map(str, args)], capture_output=True, text=True, env=environment,
                            timeout=timeout, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}: {result.stderr}")
    return result


def error_line(result: subprocess.CompletedProcess, code: int) -> str:
    """The one ``Error: ...`` line of a failed command, after checking its exit code (and no traceback)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.stderr
    assert "Traceback (most recent call last)" not in result.stderr, result.stderr
    return lines[0]


@contextlib.contextmanager
def no_pass() -> Iterator[None]:
    """Fail if anything is computed with Dask (the refusal must come before any pass over the data)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a pass over the data ran before the refusal")

    with dask.config.set(scheduler=refuse):
        yield


@contextlib.contextmanager
def s3_server(bucket: str) -> Iterator[dict]:
    """An S3-compatible server (moto) on loopback holding the empty ``bucket``; yields s3fs's storage options."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
    pytest.importorskip("s3fs", reason="s3fs is a test dependency")
    boto3 = pytest.importorskip("boto3")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=bucket)
        yield {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    finally:
        server.stop()

"""What tests of real ``dpgm`` subprocesses share: the one-line error check, a guard that no pass
over the data ran, and an S3-compatible server on loopback."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

import dask
import pytest


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

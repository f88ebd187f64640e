"""Real `dask scheduler` / `dask worker` processes on loopback, for the tests that need them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def dask_processes(folder: Path, n_workers: int, tls: dict[str, Path] | None = None) -> Iterator[Path]:
    """A scheduler on a free loopback port and ``n_workers`` single-threaded workers (with nannies,
    which restart a killed worker); yields the scheduler file once every worker has joined. ``tls``: the
    CA, certificate and key files (``certificates.tls_files``) with which every process speaks TLS only."""
    from certificates import dask_tls_arguments

    secure = [] if tls is None else dask_tls_arguments(tls)
    file = folder / "scheduler.json"
    bin_dir = Path(sys.executable).parent
    quiet = {"env": {**os.environ, "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"},
             "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [subprocess.Popen([bin_dir / "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                   "--dashboard-address", "127.0.0.1:0", "--scheduler-file", file, *secure,
                                   *([] if tls is None else ["--protocol", "tls"])], **quiet)]
    try:
        deadline = time.time() + 60
        while not file.exists() and time.time() < deadline:
            time.sleep(0.2)
        for _ in range(n_workers):
            processes.append(subprocess.Popen(
                [bin_dir / "dask", "worker", "--scheduler-file", file, "--nthreads", "1", "--host", "127.0.0.1",
                 "--no-dashboard", "--local-directory", folder, *secure], **quiet))
        from distributed import Client
        from distributed.security import Security

        security = None if tls is None else Security(
            tls_ca_file=str(tls["ca"]), tls_client_cert=str(tls["cert"]), tls_client_key=str(tls["key"]),
            require_encryption=True)
        with Client(scheduler_file=str(file), timeout=30, security=security) as client:
            client.wait_for_workers(n_workers, timeout=60)
        yield file
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=30)

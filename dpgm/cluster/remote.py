"""Clusters dpgm does not start in this process: a running scheduler (its address or its scheduler
file) and dask-jobqueue batch jobs; waiting for their first worker and noticing their loss."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask

from dpgm.cluster.processes import raise_interrupt, shielded

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["CLUSTERS", "JOBQUEUE_CLUSTERS", "NoWorkers", "SchedulerUnreachable", "WORKER_ENV", "job_script",
           "jobqueue_client", "remote_client"]

# Workers return chunk buffers to the OS by default and allocate them again for the
# next chunk; keeping them mapped measured 1.3-1.6x faster end to end.
WORKER_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "268435456",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

# dask-jobqueue launchers by the name ``connect(cluster=...)`` / ``dpgm --cluster`` takes.
JOBQUEUE_CLUSTERS = {"slurm": "SLURMCluster", "pbs": "PBSCluster"}
CLUSTERS = ("local", *JOBQUEUE_CLUSTERS)


class SchedulerUnreachable(ConnectionError):
    """No Dask scheduler answered at the given address, or the connection to it was lost."""


class NoWorkers(SchedulerUnreachable):
    """The scheduler answered, but no worker joined it in time."""


def _check_connection(cluster: str | None, jobs: int | None, timeout: float) -> None:
    if cluster is not None and cluster not in CLUSTERS:
        raise ValueError(f"unknown cluster {cluster!r}; known: {list(CLUSTERS)}")
    if jobs is not None and (cluster in (None, "local") or jobs < 1):
        raise ValueError(f"jobs={jobs!r} needs cluster= one of {list(JOBQUEUE_CLUSTERS)} and jobs >= 1")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


def _read_scheduler_file(path: str | os.PathLike[str], deadline: float, timeout: float) -> str:
    """The scheduler address in ``path``, waiting until the file exists and parses."""
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return str(json.loads(Path(path).read_text())["address"])
        if time.monotonic() > deadline:
            reason = "is not a scheduler file" if Path(path).exists() else "does not exist"
            raise SchedulerUnreachable(
                f"scheduler file {os.fspath(path)!r} {reason} after {timeout:g} s: did the scheduler start? "
                "(wait longer with --connect-timeout)"
            )
        time.sleep(0.1)


@contextlib.contextmanager
def remote_client(scheduler: str | None, scheduler_file: str | os.PathLike[str] | None,
                   timeout: float, security: Any = None) -> Iterator[Client]:
    from distributed import Client

    deadline = time.monotonic() + timeout
    if not scheduler:
        assert scheduler_file is not None
        scheduler = _read_scheduler_file(scheduler_file, deadline, timeout)
    where = scheduler if scheduler_file is None else f"{scheduler} (from {os.fspath(scheduler_file)!r})"
    try:
        remote = Client(scheduler, timeout=max(deadline - time.monotonic(), 1.0), security=security)
    except TypeError:
        if not str(scheduler).startswith("tls://"):
            raise
        from dpgm.errors import ConfigError

        raise ConfigError(f"the scheduler at {where} speaks TLS only and no client certificate is configured: pass "
                          "--tls-ca-file, --tls-cert and --tls-key (or set distributed.comm.tls.ca-file and "
                          "distributed.comm.tls.client.cert/key in Dask's configuration)") from None
    except (OSError, TimeoutError) as error:
        raise SchedulerUnreachable(f"no Dask scheduler answered at {where} within {timeout:g} s: {error}") from error
    try:
        _wait_for_a_worker(remote, deadline, timeout, f"the scheduler at {where}")
        with _lost_scheduler(remote, where), remote.as_current():
            yield remote
    finally:
        with shielded():
            _close_client(remote)
    raise_interrupt()


@contextlib.contextmanager
def jobqueue_client(cluster: str, jobs: int, options: Mapping[str, Any], timeout: float,
                    security: Any = None) -> Iterator[Client]:
    from distributed import Client

    launcher = _jobqueue_cluster(cluster, {**options, **({"security": security} if security is not None else {})})
    try:
        launcher.scale(jobs=jobs)
        queued = Client(launcher)
        try:
            _wait_for_a_worker(queued, time.monotonic() + timeout, timeout,
                               f"the {jobs} {cluster} job(s) submitted by dask-jobqueue (still queued?)")
            with _lost_scheduler(queued, queued.scheduler.address), queued.as_current():
                yield queued
        finally:
            with shielded():
                _close_client(queued)
    finally:
        with shielded():  # cancels the batch jobs
            with contextlib.suppress(Exception):
                launcher.close(timeout=5)
    raise_interrupt()


def _close_client(client: Client) -> None:
    """Close a client within a few seconds (a lost scheduler does not hold the command up)."""
    with contextlib.suppress(Exception):
        client.close(timeout=3)


def _jobqueue_cluster(cluster: str, options: Mapping[str, Any]) -> Any:
    try:
        import dask_jobqueue
    except ImportError as error:
        raise ImportError(f"cluster={cluster!r} needs dask-jobqueue: pip install 'dpgm[hpc]'") from error
    name = JOBQUEUE_CLUSTERS[cluster]
    configured = dask.config.get(f"jobqueue.{cluster}", {})
    kwargs: dict[str, Any] = {}
    for key, default in (("cores", 1), ("processes", 1), ("memory", "4GiB")):
        if configured.get(key) is None:
            kwargs[key] = default
    kwargs |= dict(options)
    # the scheduler runs in this process: its dashboard on a free port of the scheduler's own address (not on
    # every interface, as dask-jobqueue's default ":8787" does), with the /dpgm page
    scheduler = {**(configured.get("scheduler-options") or {}), **(kwargs.get("scheduler_options") or {})}
    interface = scheduler.get("interface") or kwargs.get("interface") or configured.get("interface")
    if "dashboard_address" not in scheduler:
        from distributed.utils import get_ip, get_ip_interface

        host = scheduler.get("host") or (get_ip_interface(interface) if interface else get_ip())
        scheduler["dashboard_address"] = f"{host}:0"
    scheduler.setdefault("preload", ["dpgm.dashboard"])
    kwargs["scheduler_options"] = scheduler
    # the workers' own dashboards would listen on every interface of their nodes: off unless configured
    extra = list(kwargs.get("worker_extra_args", configured.get("worker-extra-args")) or [])
    if not any("dashboard" in str(argument) for argument in extra):
        kwargs["worker_extra_args"] = [*extra, "--no-dashboard"]
    prologue = kwargs.get("job_script_prologue", configured.get("job-script-prologue")) or []
    kwargs["job_script_prologue"] = [*prologue, *(f"export {k}={v}" for k, v in WORKER_ENV.items())]
    return getattr(dask_jobqueue, name)(**kwargs)


def job_script(cluster: str = "slurm", **cluster_options: Any) -> str:
    """The batch script ``connect(cluster=..., cluster_options=...)`` would submit for each job.

    Examples
    --------
    >>> print(job_script("slurm", queue="short", walltime="01:00:00"))  # doctest: +SKIP
    """
    _check_connection(cluster, None, 1.0)
    if cluster == "local":
        raise ValueError("a local cluster submits no job script")
    with _jobqueue_cluster(cluster, cluster_options) as launcher:
        return launcher.job_script()


def _wait_for_a_worker(client: Client, deadline: float, timeout: float, where: str) -> None:
    try:
        client.wait_for_workers(1, timeout=max(deadline - time.monotonic(), 0.1))
    except (OSError, TimeoutError) as error:
        raise NoWorkers(f"no Dask worker joined {where} within {timeout:g} s "
                        "(wait longer with --connect-timeout)") from error


@contextlib.contextmanager
def _lost_scheduler(client: Client, where: str) -> Iterator[None]:
    """Turn the errors of a pass cut off by a lost scheduler into :class:`SchedulerUnreachable`."""
    from concurrent.futures import CancelledError

    from distributed.comm import CommClosedError

    try:
        yield
    except (CancelledError, CommClosedError, OSError) as error:
        if client.status == "running" and not isinstance(error, CommClosedError):
            raise
        raise SchedulerUnreachable(f"lost the connection to the Dask scheduler at {where}: "
                                   f"{type(error).__name__}: {error}") from error

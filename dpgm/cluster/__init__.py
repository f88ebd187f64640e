"""Where passes over the data run: an embedded LocalCluster, a real scheduler, or in-process.

The math never fetches a client: callers pass ``client=`` (or run inside a
``with connect():`` block, which makes that client the default for Dask), and
:func:`compute` runs one pass with it.

:func:`connect` never waits silently: a scheduler file that does not appear, a
scheduler that does not answer, or no worker joining within ``timeout`` seconds
raises :class:`SchedulerUnreachable` (the CLI exits 69), and so does losing the
scheduler in the middle of a pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask

from dpgm.cluster.passes import PASS_RETRIES, compute, pass_name
from dpgm.cluster.processes import (
    GRACE_SECONDS,
    INTERRUPTED_GRACE_SECONDS,
    EmbeddedCluster,
    interrupt,
    interrupt_pending,
    raise_interrupt,
    shielded,
)

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["PASS_RETRIES", "compute", "connect", "current_client", "embedded_cluster", "interrupt", "job_script",
           "NoWorkers", "pass_name", "SchedulerUnreachable", "UnguardedScript"]

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


def current_client() -> Client | None:
    """The default distributed client of this process, if one is active."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


@contextlib.contextmanager
def connect(
    scheduler: str | None = None,
    *,
    client: Client | None = None,
    scheduler_file: str | os.PathLike[str] | None = None,
    n_workers: int | None = None,
    dashboard_address: str = "127.0.0.1:0",
    timeout: float = 10.0,
    cluster: str | None = None,
    jobs: int | None = None,
    cluster_options: Mapping[str, Any] | None = None,
) -> Iterator[Client]:
    """A Dask client for dpgm's passes over the data, with at least one worker.

    Where the client connects, first match wins: ``client``; ``cluster`` =
    ``"slurm"``/``"pbs"`` (workers submitted as batch jobs through dask-jobqueue);
    ``scheduler``, else Dask's ``scheduler-address`` configuration (which
    ``DASK_SCHEDULER_ADDRESS`` sets), as ``distributed.Client()`` does;
    ``scheduler_file``; otherwise an embedded LocalCluster on 127.0.0.1.

    Parameters
    ----------
    scheduler
        Address of a running scheduler (``tcp://host:8786``).
    client
        An existing client: used as it is, and left open.
    scheduler_file
        A scheduler file written by ``dask scheduler --scheduler-file`` (HPC);
        waited for up to ``timeout`` seconds.
    n_workers
        Workers of the embedded cluster (default: one per core, one thread each).
    dashboard_address
        Where the embedded cluster serves its dashboard (default: a free port on
        127.0.0.1).
    timeout
        Seconds to wait for the scheduler file, for the scheduler to answer and
        for the first worker to join (for ``cluster=``: for the first batch job
        to start).
    cluster
        ``"local"`` (the default) or a dask-jobqueue launcher: ``"slurm"``
        (``SLURMCluster``) or ``"pbs"`` (``PBSCluster``).
    jobs
        Batch jobs to submit with ``cluster=`` (default 1); each runs
        ``processes`` workers.
    cluster_options
        Keyword arguments of the dask-jobqueue cluster (``queue``, ``account``,
        ``walltime``, ``memory``, ...), over Dask's ``jobqueue.<name>``
        configuration; dpgm defaults to ``cores=1``, ``processes=1``,
        ``memory="4GiB"`` where neither sets them, and always appends its worker
        environment (``MALLOC_MMAP_THRESHOLD_``, one BLAS thread) to
        ``job_script_prologue``.

    Yields
    ------
    distributed.Client
        Also the default Dask scheduler inside the ``with`` block.

    Raises
    ------
    SchedulerUnreachable
        No scheduler answered in time, or the connection to it was lost.
    NoWorkers
        No worker joined in time.
    UnguardedScript
        Called while a worker process re-imports the main script: a script must start
        the cluster under ``if __name__ == "__main__":``.

    Examples
    --------
    In a script, under the guard (the embedded cluster's worker processes import the
    script again):

    >>> if __name__ == "__main__":  # doctest: +SKIP
    ...     with connect(n_workers=1) as client:
    ...         result = dpgm.fit(model, "data.zarr", client=client)
    >>> with connect(cluster="slurm", jobs=4, timeout=600,  # doctest: +SKIP
    ...              cluster_options={"queue": "short", "walltime": "02:00:00"}) as client:
    ...     result = dpgm.fit(model, "/shared/data.zarr", client=client)
    """
    _check_not_reimported_main()
    _check_connection(cluster, jobs, timeout)
    if client is not None:
        yield client
        return
    if cluster not in (None, "local"):
        with _jobqueue_client(cluster, jobs or 1, cluster_options or {}, timeout) as queued:
            yield queued
        return
    scheduler = scheduler or dask.config.get("scheduler-address", None) or None
    if scheduler or scheduler_file:
        with _remote_client(scheduler, scheduler_file, timeout) as remote:
            yield remote
        return
    import distributed  # noqa: F401  (its configuration is loaded on import: before it is changed below)

    embedded = EmbeddedCluster()
    try:
        with dask.config.set({"distributed.worker.daemon": False}), _workers_started():
            local = embedded.start(
                n_workers=n_workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=dashboard_address,
                env=WORKER_ENV,
                scheduler_kwargs={"preload": ["dpgm.dashboard"]},  # the dashboard's /dpgm page
                # a failing task reaches the driver as the one error it raises (a pass retries it first):
                # the workers' own "Compute Failed" logs would only repeat it, traceback and all
                silence_logs=logging.CRITICAL,
            )
        _EMBEDDED[id(local)] = embedded
        with local.as_current():
            yield local
    finally:
        _EMBEDDED.pop(id(embedded.client), None)
        with shielded():  # its processes go within seconds, whatever ended the block (a signal included)
            embedded.stop(grace=INTERRUPTED_GRACE_SECONDS if _interrupted() else GRACE_SECONDS)
    raise_interrupt()  # one that arrived while the cluster stopped


_EMBEDDED: dict[int, EmbeddedCluster] = {}


def embedded_cluster(client: Client) -> EmbeddedCluster | None:
    """The embedded cluster :func:`connect` started for ``client``, if it did."""
    return _EMBEDDED.get(id(client))


def _interrupted() -> bool:
    """Whether a signal's interrupt ends the ``with connect()`` block (raised, or recorded by the handler)."""
    import sys

    return interrupt_pending() is not None or isinstance(sys.exc_info()[1], KeyboardInterrupt)


class UnguardedScript(RuntimeError):
    """``connect()`` ran while a worker process was re-importing the user's script."""


GUARD_ADVICE = (
    "dpgm.connect() ran while a worker process was importing your script: put the code that "
    "starts the cluster under `if __name__ == \"__main__\":` (worker processes import the main "
    "script again; see the README, 'Clusters')"
)


def _check_not_reimported_main() -> None:
    """Refuse to start a cluster from a spawned child that is re-importing ``__main__``.

    Worker processes are started with ``spawn``: each imports the main script again
    (as ``__mp_main__``) before it runs. A script that calls ``connect()`` at its top
    level would start a cluster inside every worker, which waits for its own workers,
    forever. :mod:`multiprocessing` marks a child in that phase with ``_inheriting``
    (what its own "bootstrapping phase" check reads).
    """
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # one line from each worker, no traceback: the driver raises the same advice
        raise SystemExit(f"error: {GUARD_ADVICE}")


def _main_script_unguarded() -> bool:
    """Whether ``__main__`` is a script file without an ``if __name__ == "__main__":`` block."""
    import ast
    import sys

    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return False
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__":
            return False
    return True


@contextlib.contextmanager
def _workers_started() -> Iterator[None]:
    """Name the usual cause when the embedded cluster's worker processes fail to start."""
    try:
        yield
    except RuntimeError:
        if _main_script_unguarded():
            raise UnguardedScript(GUARD_ADVICE) from None  # the workers' own lines said why
        raise


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
def _remote_client(scheduler: str | None, scheduler_file: str | os.PathLike[str] | None,
                   timeout: float) -> Iterator[Client]:
    from distributed import Client

    deadline = time.monotonic() + timeout
    if not scheduler:
        assert scheduler_file is not None
        scheduler = _read_scheduler_file(scheduler_file, deadline, timeout)
    where = scheduler if scheduler_file is None else f"{scheduler} (from {os.fspath(scheduler_file)!r})"
    try:
        remote = Client(scheduler, timeout=max(deadline - time.monotonic(), 1.0))
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
def _jobqueue_client(cluster: str, jobs: int, options: Mapping[str, Any], timeout: float) -> Iterator[Client]:
    from distributed import Client

    launcher = _jobqueue_cluster(cluster, options)
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
    if "scheduler_options" not in kwargs and not configured.get("scheduler-options"):
        # the scheduler runs in this process: its dashboard on a free port, with the /dpgm page
        kwargs["scheduler_options"] = {"dashboard_address": ":0", "preload": ["dpgm.dashboard"]}
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


def quiet_client_logs() -> None:
    """Keep the Dask client's own error logs (tracebacks while it tries to reconnect to a lost
    scheduler) off stderr: the caller reports the failure once."""
    import distributed  # noqa: F401  (configures its loggers on import: set the level after)

    logging.getLogger("distributed.client").setLevel(logging.CRITICAL)


def performance_report(path: str | os.PathLike[str] | None) -> contextlib.AbstractContextManager:
    """``distributed.performance_report`` into ``path`` (written when the block ends), or nothing."""
    if path is None:
        return contextlib.nullcontext()
    from distributed import performance_report as report

    return report(filename=str(path))


@contextlib.contextmanager
def iteration_span(name: str, iteration: int) -> Iterator[None]:
    """Tag the tasks of one iteration's pass as the span ``(name, "iteration-<k>")`` in the dashboard."""
    from distributed import span

    with span(name, f"iteration-{iteration}"):
        yield

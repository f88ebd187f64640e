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

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["compute", "connect", "current_client", "job_script", "NoWorkers", "SchedulerUnreachable", "UnguardedScript"]

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
    from distributed import Client, LocalCluster

    workers = n_workers or os.cpu_count() or 1
    with dask.config.set({"distributed.worker.daemon": False}), _workers_started():
        local_cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=dashboard_address,
            env=WORKER_ENV,
            scheduler_kwargs={"preload": ["dpgm.dashboard"]},  # the dashboard's /dpgm page
            # a failing task reaches the driver as the one error it raises (a pass retries it first):
            # the workers' own "Compute Failed" logs would only repeat it, traceback and all
            silence_logs=logging.CRITICAL,
        )
    with local_cluster, Client(local_cluster) as local:
        yield local


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
    with remote:
        _wait_for_a_worker(remote, deadline, timeout, f"the scheduler at {where}")
        with _lost_scheduler(remote, where):
            yield remote


@contextlib.contextmanager
def _jobqueue_client(cluster: str, jobs: int, options: Mapping[str, Any], timeout: float) -> Iterator[Client]:
    from distributed import Client

    launcher = _jobqueue_cluster(cluster, options)
    with launcher:
        launcher.scale(jobs=jobs)
        with Client(launcher) as queued:
            _wait_for_a_worker(queued, time.monotonic() + timeout, timeout,
                               f"the {jobs} {cluster} job(s) submitted by dask-jobqueue (still queued?)")
            with _lost_scheduler(queued, queued.scheduler.address):
                yield queued


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


PASS_RETRIES = 2


def compute(obj: Any, *, client: Client | None = None, progress: Any = False) -> Any:
    """Run one pass: compute a lazy statistic once (no-op for an eager value).

    With ``client`` (or an active default client) the pass runs on that cluster;
    otherwise on Dask's configured scheduler (threads by default;
    ``dask.config.set(scheduler="sync")`` runs it in this thread).

    ``progress``: a :class:`dpgm.progress.FitProgress` (a fit's: told when the pass
    starts, about every :data:`TICK_SECONDS` while it runs, and when it ends; no bar
    of its own); True draws Dask's bar of the pass (a terminal); ``"lines"`` logs
    ``pass dpgm-counts: 37/120 tasks done (31%), 12.3 s`` on the ``dpgm`` logger
    every ``LINE_SECONDS`` and ``pass dpgm-counts finished 3.2 s`` at the end (batch
    logs); None is True where :func:`dpgm.progress.interactive`, else False; False
    nothing.
    """
    if not dask.is_dask_collection(obj):
        return obj
    if progress is None:
        from dpgm.progress import interactive

        progress = interactive()
    client = client or current_client()
    if hasattr(progress, "pass_started"):
        return _watched(obj, client, progress)
    if client is None:
        if progress:
            from dask.diagnostics import ProgressBar

            with ProgressBar():
                return dask.compute(obj)[0]
        return dask.compute(obj)[0]
    # passes are pure: a task that failed on a flaky read (object store, network filesystem) is simply
    # run again; tasks lost with a killed worker are recomputed by distributed anyway
    future = client.compute(obj, retries=PASS_RETRIES)
    if progress == "lines":
        return _line_progress(future, pass_name(obj))
    if progress:
        from distributed.diagnostics.progressbar import TextProgressBar

        try:  # a bar only for a pass that lasts: its listener would hold a short pass to its 100 ms ticks
            future.result(timeout=BAR_AFTER_SECONDS)
        except TimeoutError:
            TextProgressBar([future], scheduler=future.client.scheduler.address)
    return future.result()


LINE_SECONDS = 10.0
BAR_AFTER_SECONDS = 1.0
TICK_SECONDS = 1.0
_PARTS = ("map", "combine", "total", "shared")


def pass_name(obj: Any) -> str:
    """The readable name of a pass: its result key's prefix (``dpgm-estep``) without the reduction's parts,
    or the first ``dpgm-`` task prefix of its graph when the result is a generic step (``list``, ``sum``)."""
    try:
        keys = obj.__dask_keys__()
        while isinstance(keys, list) and keys:
            keys = keys[0]
        name = _prefix(keys)
        if not name.startswith("dpgm-"):
            graph = obj.__dask_graph__()
            for names in (getattr(graph, "layers", {}), graph):
                found = next((_prefix(key) for key in names if _prefix(key).startswith("dpgm-")), None)
                if found:
                    return found
    except Exception:
        return "pass"
    return name


def _prefix(key: Any) -> str:
    """A task key's leading words: ``dpgm-convert-discover`` of ``dpgm-convert-discover-<token>``,
    ``dpgm-estep`` of ``(dpgm-estep-combine-<token>, 1, 0)`` (dask's ``key_split`` would also drop an
    8-letter word that begins with a-f, such as ``discover``)."""
    text = str(key[0] if isinstance(key, tuple) else key)
    words = text.split("-")
    kept = [words[0].strip("_'()\"")]
    for word in words[1:]:
        if not word.isalpha() or (len(word) == 8 and all(c in "abcdef" for c in word)):
            break
        kept.append(word)
    while len(kept) > 1 and kept[-1] in _PARTS:
        kept.pop()
    return "-".join(kept)


def _watched(obj: Any, client: Client | None, watcher: Any) -> Any:
    """One pass told to a fit's progress: started, running (every TICK_SECONDS), finished or failed."""
    name = pass_name(obj)
    began = time.monotonic()
    watcher.pass_started(name)
    status = "failed"
    try:
        if client is None:
            result = dask.compute(obj)[0]
        else:
            future = client.compute(obj, retries=PASS_RETRIES)
            done, result = _result_within(future, TICK_SECONDS)
            while not done:
                watcher.pass_running(name, time.monotonic() - began)
                done, result = _result_within(future, TICK_SECONDS)
        status = "finished"
        return result
    finally:
        watcher.pass_finished(name, time.monotonic() - began, status)


def _result_within(future: Any, seconds: float) -> tuple[bool, Any]:
    """``(True, result)`` if ``future`` finishes within ``seconds``, ``(False, None)`` if it still runs;
    raises its error if it failed."""
    try:
        return True, future.result(timeout=seconds)
    except TimeoutError:
        if future.done():  # finished just now, or failed with a TimeoutError of its own (raised here)
            return True, future.result()
        return False, None


def _line_progress(future: Any, name: str = "pass") -> Any:
    """Log ``pass <name>: 37/120 tasks done (31%), 12.3 s`` every LINE_SECONDS until the pass ends (blocks),
    then ``pass <name> finished 3.2 s``; the pass's result.

    A pass that ends within LINE_SECONDS only waits for its result: the task counts come from a
    progress listener on the scheduler, which reports every 500 ms, so starting one for every
    pass would make no pass shorter than that (an EM iteration on a small store included).
    """
    from distributed.diagnostics.progressbar import TextProgressBar

    log = logging.getLogger("dpgm")
    began = time.monotonic()
    try:
        done, result = _result_within(future, LINE_SECONDS)
    except Exception:
        log.info("pass %s %s %.1f s", name, future.status, time.monotonic() - began)
        raise
    if not done:

        class _Lines(TextProgressBar):
            last = 0.0

            def _draw_bar(self, remaining, all, **kwargs):
                now = time.monotonic()
                if now - self.last >= LINE_SECONDS and all:
                    self.last = now
                    done = all - remaining
                    log.info("pass %s: %d/%d tasks done (%d%%), %.1f s", name, done, all, 100 * done // all,
                             now - began)

            def _draw_stop(self, remaining=0, status="finished", **kwargs):
                pass

        _Lines([future], scheduler=future.client.scheduler.address, interval="500ms")
        log.info("pass %s %s %.1f s", name, future.status, time.monotonic() - began)
        return future.result()
    log.info("pass %s %s %.1f s", name, future.status, time.monotonic() - began)
    return result

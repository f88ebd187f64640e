"""Where passes over the data run: an embedded LocalCluster, a real scheduler, or in-process.

The math never fetches a client: callers pass ``client=`` (or run inside a
``with connect():`` block, which makes that client the default for Dask), and
:func:`compute` runs one pass with it.

:func:`connect` never waits silently: a scheduler file that does not appear, a
scheduler that does not answer, or no worker joining within ``timeout`` seconds
raises :class:`SchedulerUnreachable` (the CLI exits 69), and so does losing the
scheduler in the middle of a pass.

Interrupted (SIGTERM/SIGINT, see :mod:`dpgm.cluster.processes`), nothing outlives the command: the
driver waits for a pass in slices of at most :data:`WAIT_SECONDS`, so an interrupt a signal handler
recorded is raised within that time even where Python swallowed it; a pass that ends by an exception
(a task's error, an interrupt) is stopped before the exception goes on: its futures are cancelled and
the driver waits (up to :data:`STOP_SECONDS`) until the scheduler took the cancel and no worker has run
or readied any of its tasks for :data:`QUIET_SECONDS`, so that the
caller's clean-up (removing a half-written store) does not race with writes still under way (an
interrupted pass on the embedded cluster stops its workers instead, at once); and the embedded
cluster stops within seconds, its workers killed if they do not close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask

from dpgm.cluster import worker_setup
from dpgm.cluster.processes import (
    GRACE_SECONDS,
    INTERRUPTED_GRACE_SECONDS,
    EmbeddedCluster,
    interrupt,
    interrupt_pending,
    raise_interrupt,
    shielded,
)
from dpgm.cluster.remote import (
    CLUSTERS,
    JOBQUEUE_CLUSTERS,
    WORKER_ENV,
    NoWorkers,
    SchedulerUnreachable,
    _check_connection,
    job_script,
    jobqueue_client,
    remote_client,
)
from dpgm.cluster.stopping import count_running, key_names, within

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["CLUSTERS", "JOBQUEUE_CLUSTERS", "PASS_RETRIES", "WORKER_ENV", "NoWorkers", "SchedulerUnreachable",
           "UnguardedScript", "compute", "connect", "current_client", "embedded_cluster", "interrupt", "job_script",
           "pass_name", "tls_security"]


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
    security: Any = None,
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
    security
        A ``distributed.security.Security``: with ``require_encryption`` the embedded cluster, its
        workers and the client speak TLS only (``tls://``); a remote scheduler is reached with its
        certificates. None: Dask's configuration (``distributed.comm.tls.*``,
        ``distributed.comm.require-encryption``), as distributed itself reads it.

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
        with jobqueue_client(cluster, jobs or 1, cluster_options or {}, timeout, security) as queued:
            yield queued
        return
    scheduler = scheduler or dask.config.get("scheduler-address", None) or None
    if scheduler or scheduler_file:
        with remote_client(scheduler, scheduler_file, timeout, security) as remote:
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
                preload=[worker_setup.__name__],  # the workers' logs as silent as silence_logs meant
                **({"security": security} if security is not None else {}),
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


def tls_security(ca_file: str, cert: str, key: str) -> Any:
    """A ``distributed.security.Security`` speaking TLS only, with one certificate for every role.

    What ``dask scheduler`` / ``dask worker --tls-ca-file F --tls-cert C --tls-key K`` take: ``ca_file``
    holds the authority that signed the certificates, ``cert`` and ``key`` (PEM) are the client's, and
    the scheduler's and workers' of a cluster :func:`connect` starts (``connect(security=...)``).
    """
    from distributed.security import Security

    return Security(tls_ca_file=str(ca_file), tls_client_cert=str(cert), tls_client_key=str(key),
                    tls_scheduler_cert=str(cert), tls_scheduler_key=str(key), tls_worker_cert=str(cert),
                    tls_worker_key=str(key), require_encryption=True)


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
    "script again; see the README, 'Quick start')"
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
LINE_SECONDS = 10.0
BAR_AFTER_SECONDS = 1.0
TICK_SECONDS = 1.0
WAIT_SECONDS = 0.25
# how long a failed pass's running tasks are waited for: after a task's error, and after an interrupt
# (then on a cluster dpgm did not start: the embedded one stops its workers instead)
STOP_SECONDS = 10.0
INTERRUPTED_STOP_SECONDS = 2.0
# how long no worker must hold a task of a stopped pass, after the scheduler took the cancel, before the pass
# counts as stopped (a task sent to a worker just before the cancel reaches it within that time)
QUIET_SECONDS = 0.2
_PARTS = ("map", "combine", "total", "shared")


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

    A pass that fails or is interrupted is stopped before its exception is raised: none
    of its tasks runs on after (see the module's description).
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
    future = _submit(client, obj)
    with _stopped_on_failure(future, obj):
        if progress == "lines":
            return _line_progress(future, pass_name(obj))
        if progress:
            return _bar_progress(future)
        return _result(future)


def _result(future: Any, seconds: float | None = None) -> Any:
    """The pass's result, waited for in slices (a recorded interrupt is raised between two); with
    ``seconds``, ``(False, None)`` when it still runs after that long, else ``(True, result)``."""
    end = None if seconds is None else time.monotonic() + seconds
    finished = _finished(future)
    while True:
        raise_interrupt()
        slice_ = WAIT_SECONDS if end is None else min(WAIT_SECONDS, max(end - time.monotonic(), 0.0))
        # waited for here, not by future.result(timeout=...): under load distributed's sync() can lose that
        # call's outcome to a cancelled timeout and raise UnboundLocalError (dask/distributed#8514)
        if not finished.wait(slice_) and not future.done():
            if end is not None and time.monotonic() >= end:
                return False, None
            continue
        result = future.result()
        return result if end is None else (True, result)


def _finished(future: Any) -> threading.Event:
    """An event set once ``future`` is done (finished, failed or cancelled), by the client's callback; the
    event is kept on the future, so waiting for it in slices registers one callback."""
    event = getattr(future, "_dpgm_finished", None)
    if event is None:
        event = threading.Event()
        future.add_done_callback(lambda _: event.set())
        future._dpgm_finished = event
    return event


def _submit(client: Client, obj: Any) -> Any:
    """The pass's future. Interrupted while the graph is sent, the embedded cluster stops its workers (the
    tasks already sent cannot be named to cancel them)."""
    try:
        return client.compute(obj, retries=PASS_RETRIES)
    except KeyboardInterrupt:
        if (embedded := embedded_cluster(client)) is not None:
            embedded.stop(grace=INTERRUPTED_GRACE_SECONDS)
        raise


@contextlib.contextmanager
def _stopped_on_failure(future: Any, obj: Any):
    """Stop the pass of ``future`` when the block ends by an exception, then let the exception go on."""
    try:
        yield
    except BaseException as error:
        _stop(future, obj, interrupted=isinstance(error, KeyboardInterrupt))
        raise


def _stop(future: Any, obj: Any, *, interrupted: bool) -> None:
    """Cancel the pass and wait until none of its tasks runs on a worker; interrupted on the embedded
    cluster, stop its workers instead (at once: the command ends)."""
    client = future.client
    embedded = embedded_cluster(client)
    if interrupted and embedded is not None:
        embedded.stop(grace=INTERRUPTED_GRACE_SECONDS)
        return
    end = time.monotonic() + (INTERRUPTED_STOP_SECONDS if interrupted else STOP_SECONDS)
    # the scheduler took the cancel (it sends no more of the pass's tasks) when the call returned
    cancelled = within(max(end - time.monotonic(), 0.1), client.cancel, [future], force=True)
    names = key_names(obj)
    quiet = None  # since when every worker answered that it holds none of the pass's tasks
    while time.monotonic() < end:
        counts: dict = {}
        within(max(min(end - time.monotonic(), 1.0), 0.1), count_running, client, names, counts)
        if counts and not any(counts.values()):
            quiet = time.monotonic() if quiet is None else quiet
            if cancelled and time.monotonic() - quiet >= QUIET_SECONDS:
                return
        else:
            quiet = None
        time.sleep(0.05)


@contextlib.contextmanager
def _listening(bar: Any, future: Any):
    """Run the progress listener ``bar`` on the client's loop while the block waits for ``future``."""
    listener = asyncio.run_coroutine_threadsafe(bar.listen(), future.client.loop.asyncio_loop)
    try:
        yield
        with contextlib.suppress(Exception):
            listener.result(timeout=2.0)  # its last report (the pass finished) and _draw_stop
    finally:
        listener.cancel()


def _bar_progress(future: Any) -> Any:
    """Dask's bar of the pass, for a pass that lasts (its listener holds a short pass to its 100 ms ticks)."""
    from distributed.diagnostics.progressbar import TextProgressBar

    done, result = _result(future, BAR_AFTER_SECONDS)
    if done:
        return result
    bar = TextProgressBar([future], scheduler=future.client.scheduler.address, loop=future.client.loop,
                          start=False)
    with _listening(bar, future):
        return _result(future)


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
    """One pass told to a fit's progress: started, running (every TICK_SECONDS), finished or failed (an
    interrupted pass is not told: the command's one line says it)."""
    name = pass_name(obj)
    began = time.monotonic()
    watcher.pass_started(name)
    status = "failed"
    try:
        if client is None:
            result = dask.compute(obj)[0]
        else:
            future = _submit(client, obj)
            with _stopped_on_failure(future, obj):
                done, result = _result(future, TICK_SECONDS)
                while not done:
                    watcher.pass_running(name, time.monotonic() - began)
                    done, result = _result(future, TICK_SECONDS)
        status = "finished"
        return result
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if status != "interrupted":
            watcher.pass_finished(name, time.monotonic() - began, status)


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
        done, result = _result(future, LINE_SECONDS)
        if not done:

            class _Lines(TextProgressBar):
                last = 0.0

                def _draw_bar(self, remaining, all, **kwargs):
                    now = time.monotonic()
                    if now - self.last >= LINE_SECONDS and all:
                        self.last = now
                        done = all - remaining
                        log.info("pass %s: %d/%d tasks done (%d%%), %.1f s", name, done, all,
                                 100 * done // all, now - began)

                def _draw_stop(self, remaining=0, status="finished", **kwargs):
                    pass

            bar = _Lines([future], scheduler=future.client.scheduler.address, interval="500ms",
                         loop=future.client.loop, start=False)
            with _listening(bar, future):
                result = _result(future)
    except Exception:
        log.info("pass %s %s %.1f s", name, future.status, time.monotonic() - began)
        raise
    log.info("pass %s %s %.1f s", name, future.status, time.monotonic() - began)
    return result

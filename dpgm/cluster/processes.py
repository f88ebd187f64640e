"""The embedded LocalCluster's processes, and the interrupts a signal handler records.

Interrupts
    Python runs a signal handler in the main thread between two bytecodes, wherever that thread is,
    also inside a garbage-collection callback (distributed installs one), a ``__del__`` or a weakref
    finalizer, where an exception is printed and ignored. The ``dpgm`` command's handler therefore
    records its interrupt here (:func:`interrupt`) before it raises it: every wait for a pass raises
    a recorded interrupt again (:func:`raise_interrupt`), so none is lost, and the shutdown of an
    embedded cluster runs :func:`shielded` from it (it is raised once the processes are gone).

Processes
    :class:`EmbeddedCluster` starts the LocalCluster's event loop in a thread that blocks SIGINT:
    the threads it starts, and through them every worker process (a restarted one too), inherit
    that mask, so a Ctrl-C, which a terminal sends to the whole process group, reaches only this
    process, which stops the workers, instead of tearing each worker down with its own traceback.
    :meth:`EmbeddedCluster.stop` gives the workers a few seconds to close, then kills them and every
    process they started, and returns once they are gone: no worker outlives the command, and with
    none left multiprocessing's resource tracker (which waits for every process that holds its pipe)
    ends with it.

    Why a Ctrl-C could take a minute before: the workers got the SIGINT too and died (dask/distributed
    issue 1925, "KeyboardInterrupt kills workers in LocalCluster"); their nannies, still running,
    started new ones while the driver closed the cluster; a nanny closing waits, without a timeout,
    for a worker that is still starting to be up before it stops it (``WorkerProcess.kill``), and a
    ``LocalCluster.close()`` without a timeout waits for every nanny. The resource tracker, which
    every worker process holds open, lived on until the last of them ended. Now the workers never see
    the SIGINT, nannies close with a short grace, every wait has a deadline and what is left is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil
    from distributed import Client

__all__ = ["EmbeddedCluster", "interrupt", "interrupt_pending", "raise_interrupt", "shielded"]

# seconds the workers get to close by themselves before they are killed: after the work (or a failure),
# and once interrupted (a signal: the whole stop then takes about 2 s)
GRACE_SECONDS = 3.0
INTERRUPTED_GRACE_SECONDS = 0.5


class _Interrupts:
    """The first interrupt a signal handler recorded, and how many shielded blocks run."""

    def __init__(self) -> None:
        self.pending: BaseException | None = None
        self.shielded = 0


_INTERRUPTS = _Interrupts()


def interrupt(error: BaseException) -> bool:
    """Record ``error``, the interrupt a signal handler is about to raise in the main thread.

    Every later wait for a pass raises it again, until the process ends. Returns whether the
    handler should raise it now: False inside a :func:`shielded` block, which raises it at its end.
    """
    if _INTERRUPTS.pending is None:
        _INTERRUPTS.pending = error
    return _INTERRUPTS.shielded == 0


def interrupt_pending() -> BaseException | None:
    """The recorded interrupt, if a signal handler recorded one."""
    return _INTERRUPTS.pending


def raise_interrupt() -> None:
    """Raise the recorded interrupt, if any, outside a shielded block (a wait checks between slices)."""
    if _INTERRUPTS.pending is not None and _INTERRUPTS.shielded == 0:
        raise _INTERRUPTS.pending.with_traceback(None)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A block a signal does not cut short: the handler only records its interrupt (the caller raises it
    after the block with :func:`raise_interrupt`, unless another error is on its way)."""
    _INTERRUPTS.shielded += 1
    try:
        yield
    finally:
        _INTERRUPTS.shielded -= 1


class _Deadline:
    """Seconds left of a stop, cut to a short grace when an interrupt arrives meanwhile."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        if _INTERRUPTS.pending is not None:
            self.end = min(self.end, time.monotonic() + INTERRUPTED_GRACE_SECONDS + 0.5)
        return max(self.end - time.monotonic(), 0.0)


def _wait(future: Any, deadline: _Deadline) -> None:
    """Wait for a concurrent future until ``deadline``, in slices; its error or a timeout is ignored."""
    while not future.done() and deadline.left() > 0:
        with contextlib.suppress(Exception):
            future.result(timeout=min(deadline.left(), 0.1))
    if not future.done():
        future.cancel()


def _quietly(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    with contextlib.suppress(Exception):
        function(*args, **kwargs)


class EmbeddedCluster:
    """A LocalCluster of worker processes started by this process, with its client.

    ``start`` returns the client; ``stop`` ends client, cluster and every worker process within a
    few seconds, also after ``start`` was interrupted halfway.
    """

    def __init__(self) -> None:
        self.started = time.time()
        self.runner: Any = None
        self.cluster: Any = None
        self.client: Client | None = None
        self._others: set[int] = set()
        self._stopped = False

    def start(self, **cluster_options: Any) -> Client:
        """Start the cluster (``LocalCluster(**cluster_options)``) on a loop thread that blocks SIGINT."""
        from distributed import Client, LocalCluster

        self._others = {id(c) for c in _clusters()}
        self.runner = _loop_without_sigint()
        self.cluster = LocalCluster(loop=self.runner.loop, **cluster_options)
        self.client = Client(self.cluster)
        return self.client

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """Close the client and the cluster, giving the workers ``grace`` seconds to close, then kill
        them and every process they started; returns once they are gone (a few seconds at most)."""
        if self._stopped:
            return
        self._stopped = True
        deadline = _Deadline(grace + 2.5)
        clusters = [self.cluster] if self.cluster is not None else self._half_built()
        doomed = self._workers(clusters)
        if self.client is not None:
            _quietly(self.client.close, timeout=min(1.0, max(deadline.left(), 0.1)))
        for cluster in clusters:
            _close(cluster, grace, deadline)
        # closing the cluster gave distributed's loggers back their level (silence_logs): the comms still
        # closing would log their INFO lines after the command's last line, even after this stop returns
        # (a late 'close-stream'), so INFO stays off once the cluster is gone; warnings pass as before
        log = logging.getLogger("distributed")
        restored = log.level
        log.setLevel(logging.CRITICAL)
        try:
            _kill(doomed + self._workers(clusters))
            if self.runner is not None:
                _quietly(self.runner.stop, timeout=1)
        finally:
            log.setLevel(max(restored, logging.WARNING))

    def _half_built(self) -> list[Any]:
        """The cluster ``start`` left unfinished (interrupted while the workers started)."""
        return [c for c in _clusters() if id(c) not in self._others]

    def _workers(self, clusters: list[Any]) -> list[psutil.Process]:
        """The worker processes of ``clusters`` (from their nannies) and their descendants; for a cluster
        interrupted while it started, also every worker process this process spawned since then."""
        import psutil

        pids = {pid for cluster in clusters for nanny in list(getattr(cluster, "workers", {}).values())
                if (pid := _nanny_pid(nanny)) is not None}
        if self.cluster is None:
            pids |= self._spawned_since_start()
        found: dict[int, psutil.Process] = {}
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                found[pid] = process
                found.update((p.pid, p) for p in process.children(recursive=True))
        return list(found.values())

    def _spawned_since_start(self) -> set[int]:
        """Multiprocessing children started since ``start`` that no other live cluster's nanny owns."""
        import psutil

        owned = {pid for c in _clusters() if id(c) in self._others
                 for n in list(getattr(c, "workers", {}).values()) if (pid := _nanny_pid(n)) is not None}
        pids = set()
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                command = " ".join(child.cmdline())
                if (child.create_time() >= self.started - 1 and "multiprocessing.spawn" in command
                        and child.pid not in owned):
                    pids.add(child.pid)
        return pids


def _clusters() -> list[Any]:
    """Every SpecCluster of this process that is not closed (distributed keeps them for its atexit)."""
    from distributed.deploy.spec import SpecCluster

    return [c for c in list(getattr(SpecCluster, "_instances", ())) if str(getattr(c, "status", "")) != "Status.closed"]


def _nanny_pid(nanny: Any) -> int | None:
    with contextlib.suppress(Exception):
        return nanny.process.process.pid
    return None


def _loop_without_sigint() -> Any:
    """A started ``LoopRunner`` whose thread blocks SIGINT (the threads and processes it starts inherit it).

    Multiprocessing's resource tracker is started first, from this thread: the thread that starts it
    unblocks SIGINT and SIGTERM when done (CPython issue 110844), which would hand the first worker
    process an unblocked mask.
    """
    from distributed.utils import LoopRunner

    _start_resource_tracker()
    if not hasattr(signal, "pthread_sigmask"):
        runner = LoopRunner()
        runner.start()
        return runner
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        runner = LoopRunner()
        runner.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return runner


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (if it is not running) with its stderr on the null device.

    The workers' queues are registered with it; a worker killed before it unregistered them makes the
    tracker warn, at its own exit, after the command's last line ("There appear to be 1 leaked semaphore
    objects to clean up at shutdown"), and it cleans them up all the same. For the few milliseconds of
    the start, this process's own stderr goes to the null device too.
    """
    import multiprocessing.resource_tracker
    import os

    try:
        saved = os.dup(2)
    except OSError:
        multiprocessing.resource_tracker.ensure_running()
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        multiprocessing.resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


async def _close_nannies(nannies: list[Any], grace: float) -> None:
    """Each nanny asks its worker to close and kills it after ``0.8 * grace`` s (and restarts none after)."""
    await asyncio.gather(*(n.close(timeout=grace) for n in nannies if hasattr(n, "close")), return_exceptions=True)


def _close(cluster: Any, grace: float, deadline: _Deadline) -> None:
    """Close ``cluster``'s nannies, then the cluster, each within ``deadline``; a cluster that does not close
    is dropped from distributed's list of clusters to close at exit (its processes are killed next)."""
    from distributed.deploy.spec import SpecCluster

    nannies = list(getattr(cluster, "workers", {}).values())
    with contextlib.suppress(Exception):
        loop = cluster.loop.asyncio_loop
        _wait(asyncio.run_coroutine_threadsafe(_close_nannies(nannies, min(grace, deadline.left())), loop), deadline)
    _quietly(cluster.close, timeout=max(min(deadline.left(), 2.0), 0.2))
    if str(getattr(cluster, "status", "")) != "Status.closed":
        with contextlib.suppress(Exception):
            SpecCluster._instances.discard(cluster)


def _kill(processes: list[psutil.Process], seconds: float = 2.0) -> None:
    """SIGKILL ``processes`` and wait (up to ``seconds``) until each is gone or a zombie."""
    import psutil

    alive = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE:
                process.kill()
                alive.append(process)
    end = time.monotonic() + seconds
    while alive and time.monotonic() < end:
        still = []
        for process in alive:
            with contextlib.suppress(psutil.Error):
                if process.status() != psutil.STATUS_ZOMBIE:
                    still.append(process)
        alive = still
        if alive:
            time.sleep(0.02)

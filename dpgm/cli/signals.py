"""SIGTERM and SIGINT in the ``dpgm`` command: every command ends within seconds with one line.

The handler (:func:`terminate`) records the signal and raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so the command unwinds as from Ctrl-C: a pass under
way is stopped, the outputs being written are removed, the cluster's processes are ended. It
does not raise while the main thread is handling an exception already (that unwinding goes on,
and the first failure is the one reported), inside the embedded cluster's shutdown
(:func:`dpgm.cluster.interrupt`); when the main thread waits for Zarr's (or fsspec's) I/O thread,
which would write on into a store the clean-up removes, it lets that operation end first (up to
2 s). Where it did not raise, and where Python swallows the exception (a garbage-collection
callback, a ``__del__``), the signal is sent to the main thread again every 50 ms until the
command has reported it, so its exception is raised as soon as it can be (and every wait for a
pass, and the end of the command's error handling, raise it too). Repeating the signal changes
nothing; the other one (SIGINT after SIGTERM, or the reverse) ends the process at once (its child
processes killed first).

:func:`interrupted` is the one line: exit 75 when a fit's ``--checkpoint`` holds an iteration to
resume, else 130 (SIGINT) or 143 (SIGTERM); it names every output written before the signal
(outputs are compared with what they were when the command started its work), and says "no
output was written" only when none was.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from dpgm.cli.failures import Failure

__all__ = ["Terminated", "finish", "handle_signals", "ignore_signals", "interrupted", "received", "terminate"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system's time limit, ``kill``) or SIGINT: unwinds like Ctrl-C, so outputs are cleaned up."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


RETRY_SECONDS = 0.05


class _Signal:
    """The first SIGTERM/SIGINT this process received (the handler is process-wide), whether the command
    has said so (:func:`interrupted`), and the thread that delivers it to the main thread again until then."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.handled = False
        self.finishing = False
        self.wake = threading.Event()


_SIGNAL = _Signal()


def _redeliver() -> None:
    """Once a signal is received, send it to the main thread again every RETRY_SECONDS until the command
    says it was interrupted: its exception, deferred (Zarr's I/O waited for, an exception being handled) or
    swallowed (a garbage-collection callback), is raised within that time of the moment it can be."""
    _SIGNAL.wake.wait()
    main = threading.main_thread().ident
    while not _SIGNAL.handled and main is not None and _SIGNAL.signum is not None:
        time.sleep(RETRY_SECONDS)
        if _SIGNAL.handled:
            return
        with contextlib.suppress(Exception):
            signal.pthread_kill(main, _SIGNAL.signum)


def handle_signals() -> None:
    """Install :func:`terminate` for SIGTERM, and for SIGINT unless it is ignored (a background job of a
    non-interactive shell ignores it, and so does dpgm); Python's report of an interrupt it had to drop
    (where it cannot raise one) stays off stderr."""
    signal.signal(signal.SIGTERM, terminate)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, terminate)
    sys.unraisablehook = _unraisable
    if hasattr(signal, "pthread_kill"):
        threading.Thread(target=_redeliver, name="dpgm-signal", daemon=True).start()


def _unraisable(unraisable: Any) -> None:
    """Python's report of an exception it cannot raise (in a garbage-collection callback, a ``__del__``): not
    for the handler's interrupt, which is delivered again until it is raised."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _SIGNAL.signum is not None:
        return
    sys.__unraisablehook__(unraisable)


def terminate(signum: int, frame: Any) -> None:
    """The handler: record the signal; raise :class:`Terminated` unless an exception is being handled or the
    cluster's shutdown runs (after the Zarr operation the main thread waits for, if any: see the module's
    description); the other signal ends the process now."""
    if _SIGNAL.signum is None:
        _SIGNAL.signum = signum
        _quiet_event_loops()
        _SIGNAL.wake.set()
    elif signum != _SIGNAL.signum:  # the other signal (the same one again is also how it is redelivered)
        _abort(signum)
    elif _SIGNAL.handled:  # reported already: the command is ending
        return
    error = Terminated(_SIGNAL.signum)
    # dpgm.cluster is loaded when a pass may be waited for; while it is still being imported it has no
    # interrupt yet, and nothing waits on a pass: the interrupt is raised now
    interrupt = getattr(sys.modules.get("dpgm.cluster"), "interrupt", None)
    now = interrupt(error) if interrupt is not None else True
    if now and sys.exc_info()[1] is None and not _SIGNAL.finishing:
        _finish_storage_io(frame)
        raise error


# the functions through which Zarr and fsspec run their I/O on an event loop in another thread, and what
# each waits on: an exception raised in the main thread there leaves that I/O running (neither cancels
# it), which could write into a store the clean-up has just removed
_STORAGE_WAITS = {os.path.join("zarr", "core", "sync.py"): "future", os.path.join("fsspec", "asyn.py"): "event"}
STORAGE_SECONDS = 2.0


def _finish_storage_io(frame: Any) -> None:
    """If the main thread waits for Zarr's or fsspec's I/O thread, let that operation end first (up to
    STORAGE_SECONDS): the interrupt is raised once nothing writes on behalf of the command."""
    while frame is not None:
        for path, name in _STORAGE_WAITS.items():
            if frame.f_code.co_filename.endswith(path):
                waited = frame.f_locals.get(name)
                _SIGNAL.finishing = True
                try:
                    with contextlib.suppress(Exception):
                        if hasattr(waited, "add_done_callback"):  # a concurrent future (Zarr)
                            concurrent.futures.wait([waited], timeout=STORAGE_SECONDS)
                        elif hasattr(waited, "wait"):  # a threading.Event (fsspec)
                            waited.wait(STORAGE_SECONDS)
                finally:
                    _SIGNAL.finishing = False
                return
        frame = frame.f_back


def _quiet_event_loops() -> None:
    """Without -v, keep the event loops' and distributed's logs off stderr from now on: the cluster's tasks
    and comms cut short by the interrupt ("Task exception was never retrieved") are no errors; the command
    says one line."""
    ctx = click.get_current_context(silent=True)
    if not (ctx is not None and ctx.meta.get("dpgm.verbose")):
        for name in ("asyncio", "tornado.application", "distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def received() -> int | None:
    """The signal received, if any."""
    return _SIGNAL.signum


def ignore_signals() -> None:
    """Ignore SIGTERM and SIGINT from now on: the command has ended and only exiting is left."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_IGN)


def _abort(signum: int) -> None:
    """The other signal: kill this process's children, say so in one line, exit with 128 + the signal."""
    _SIGNAL.handled = True
    with contextlib.suppress(Exception):
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError):
        os.write(2, f"Error: interrupted again by {name}: stopped at once (an output being written stays "
                    "marked incomplete)\n".encode())
    os._exit(128 + signum)


def finish(code: int) -> None:
    """Exit with ``code`` (after an interrupt without collecting the heap's garbage first: the clean-up is
    done, and Python's last collections of a large heap take seconds)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if _SIGNAL.signum is not None:
        import gc

        gc.freeze()  # the final collections skip the heap: exiting takes a fraction of a second, not seconds
    sys.exit(code)


class Run:
    """What the running command had written when it started its work, and its checkpoint: to tell an
    interrupt's line what the command wrote before the signal."""

    last: Run | None = None

    def __init__(self, meta: dict) -> None:
        self.meta = meta
        self.checkpoint: str | None = None
        self.outputs = {path: _signature(path) for path in self._outputs()}
        self.stores = {path: _listed(path) for path in self._inputs()}

    @classmethod
    def begin(cls, checkpoint: str | None) -> Run:
        """The run of the current command (begun at its first error-handling block)."""
        ctx = click.get_current_context(silent=True)
        meta = ctx.meta if ctx is not None else {}
        run = meta.get("dpgm.run")
        if run is None:
            run = meta["dpgm.run"] = cls(meta)
        run.checkpoint = checkpoint or run.checkpoint
        Run.last = run
        return run

    @classmethod
    def current(cls) -> Run | None:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            return ctx.meta.get("dpgm.run")
        return cls.last

    def _outputs(self) -> list[Path]:
        return [Path(p) for p in self.meta.get("dpgm.outputs", ())]

    def _inputs(self) -> list[Path]:
        return [Path(os.path.abspath(p)) for p in self.meta.get("dpgm.inputs", ()) if "://" not in str(p)]

    def written(self) -> list[str]:
        """What the command wrote since it began: new or replaced complete outputs (not the checkpoint
        folder), and variables added to an input store (``predict``)."""
        skip = Path(os.path.abspath(self.checkpoint)) if self.checkpoint and "://" not in self.checkpoint else None
        done = [repr(str(path)) for path, before in self.outputs.items()
                if path != skip and (now := _signature(path)) is not None and now != before and _complete(path)]
        for path, before in self.stores.items():
            added = [v for v in _listed(path) if v not in before]
            done += [f"{v!r} into {str(path)!r}" for v in added]
        return done


def _signature(path: Path) -> tuple | None:
    """What identifies the file at ``path``, or the metadata of the Zarr store there (None: neither)."""
    with contextlib.suppress(OSError):
        if path.is_dir():
            meta = (path / "zarr.json").stat()
            return path.stat().st_ino, meta.st_ino, meta.st_mtime_ns, meta.st_size
        status = path.stat()
        return status.st_ino, status.st_mtime_ns, status.st_size
    return None


def _attributes(path: Path) -> dict:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads((path / "zarr.json").read_text()).get("attributes") or {}
    return {}


def _complete(path: Path) -> bool:
    """A file, or a store its writer did not mark incomplete."""
    from dpgm.data.integrity import COMPLETE

    return not path.is_dir() or _attributes(path).get(COMPLETE, True) is True


def _listed(path: Path) -> list[str]:
    """The variables a dpgm dataset store lists (a variable enters the list once written)."""
    listed = _attributes(path).get("variables") if path.is_dir() else None
    return [str(v) for v in listed] if isinstance(listed, list) else []


def interrupted(error: BaseException) -> Failure:
    """The one line of an interrupted command: 75 with a checkpoint to resume, else 128 + the signal
    (130 SIGINT, 143 SIGTERM), naming what was written before the signal."""
    from dpgm.cli.failures import EX_TEMPFAIL, Failure, last_iteration

    _SIGNAL.handled = True
    signum = int(getattr(error, "signum", None) or _SIGNAL.signum or signal.SIGINT)
    name = signal.Signals(signum).name
    run = Run.current()
    written = run.written() if run is not None else []
    checkpoint = run.checkpoint if run is not None else None
    if written:
        return Failure(f"interrupted by {name} after writing {', '.join(written)}", 128 + signum)
    iteration = last_iteration(checkpoint) if checkpoint else None
    if iteration is not None:
        return Failure(f"interrupted by {name}; the checkpoint {checkpoint!r} holds iteration {iteration}: rerun "
                       "with --resume", EX_TEMPFAIL)
    return Failure(f"interrupted by {name}; no output was written", 128 + signum)

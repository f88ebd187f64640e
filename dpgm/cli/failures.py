"""Failures of the ``dpgm`` command: one line naming the culprit, and a documented exit code.

Exit codes (docs/exit-codes.md says which a retry can help):
0 success, 2 usage, 3 a fit stopped at its iteration limit without converging, 65 bad
data (incl. an incomplete or corrupted store), 66 missing input, 69 scheduler unreachable
or lost mid-run, 70 internal error (the traceback with -v), 73 an output cannot be created,
74 I/O error (disk full, read-only file system), 75 interrupted with a checkpoint to
--resume, 78 bad configuration (specification, options, sizes, or --resume of a
checkpoint written for other data or another specification), 130/143 interrupted by
SIGINT/SIGTERM with nothing to resume.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import click

from dpgm.cli.signals import Run, Terminated, interrupted, received
from dpgm.errors import unreachable

EX_NOT_CONVERGED = 3
EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_SOFTWARE, EX_CONFIG = 65, 66, 69, 70, 78
EX_CANTCREAT, EX_IOERR, EX_TEMPFAIL = 73, 74, 75


class Failure(click.ClickException):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


@contextlib.contextmanager
def errors(checkpoint: str | None = None) -> Iterator[None]:
    """Map every failure to one line naming the culprit and a documented exit code (docs/exit-codes.md).

    Retrying helps for 69 (scheduler unreachable or lost) and 75 (interrupted, checkpoint
    written: rerun with --resume), sometimes for 74 (I/O: once space is freed); never for
    2, 65, 66, 73, 78 without changing the input, and 70 is a bug (-v shows the traceback).
    ``checkpoint``: the fit's --checkpoint folder, named when the run is cut short.
    """
    from dpgm.cluster import SchedulerUnreachable
    from dpgm.data.claim import OutputBusy
    from dpgm.errors import ConfigError, DataError, StoreUnreachable
    from dpgm.inference.triangulation import TreeTooLarge
    from dpgm.io.checkpoint import CheckpointMismatch

    Run.begin(checkpoint)
    try:
        yield
        if (signum := received()) is not None:  # the handler's exception was lost (swallowed where it landed)
            raise Terminated(signum)
    except click.ClickException:
        raise
    except KeyboardInterrupt as error:
        raise interrupted(error) from None
    except (ConfigError, CheckpointMismatch, TreeTooLarge) as error:
        raise Failure(str(error), EX_CONFIG) from None
    except DataError as error:
        raise Failure(str(error), EX_DATAERR) from None
    except OutputBusy as error:  # another writer holds an output
        raise Failure(str(error), EX_CANTCREAT) from None
    except FileExistsError as error:
        raise Failure(f"{_os_message(error)}; pass --overwrite to replace it", EX_CANTCREAT) from None
    except SchedulerUnreachable as error:
        raise Failure(_lost(error, checkpoint), EX_UNAVAILABLE) from None
    except StoreUnreachable as error:
        raise Failure(str(error), EX_UNAVAILABLE) from None
    except MemoryError as error:
        raise Failure(f"out of memory{f' ({error})' if str(error) else ''}: use smaller --chunk-rows, smaller "
                      "scopes or models, or workers with more memory", EX_SOFTWARE) from None
    except OSError as error:
        if _scheduler_lost(error):
            raise Failure(_lost(error, checkpoint), EX_UNAVAILABLE) from None
        if type(error).__module__.startswith("zarr"):  # e.g. GroupNotFoundError: the input is no Zarr store
            raise Failure(*_other_failure(error, checkpoint)) from None
        raise Failure(*_os_failure(error)) from None
    except Exception as error:
        raise Failure(*_other_failure(error, checkpoint)) from None


def _os_message(error: OSError) -> str:
    """``strerror: 'filename'`` (what the OS said and about which path), else the error's text."""
    if error.strerror and error.filename is not None:
        return f"{error.strerror}: {os.fsdecode(error.filename)!r}"
    return str(error) or type(error).__name__


def _os_failure(error: OSError) -> tuple[str, int]:
    """sysexits for an OSError: 74 a failing device (full, read-only, I/O), 73 an output that cannot be
    created, 66 an input that cannot be read."""
    if isinstance(error, FileNotFoundError) and not _is_output(error.filename):
        return _os_message(error), EX_NOINPUT
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG):
        return f"I/O error: {_os_message(error)}", EX_IOERR
    if isinstance(error, PermissionError | NotADirectoryError | IsADirectoryError | FileNotFoundError):
        if _is_output(error.filename) or error.filename is None:
            return f"cannot create an output: {_os_message(error)}", EX_CANTCREAT
        return f"cannot read an input: {_os_message(error)}", EX_NOINPUT
    return f"I/O error: {_os_message(error)}", EX_IOERR


def _is_output(filename) -> bool:
    """Whether ``filename`` is (inside) an output of the running command."""
    if filename is None:
        return False
    ctx = click.get_current_context(silent=True)
    outputs = ctx.meta.get("dpgm.outputs", ()) if ctx else ()
    path = Path(os.path.abspath(os.fsdecode(filename)))
    return any(path == out or out in path.parents or path.parent == out.parent for out in outputs)


def _scheduler_lost(error: BaseException) -> bool:
    """A pass cut off by a lost scheduler: distributed's cancelled futures and closed comms."""
    from concurrent.futures import CancelledError

    names = {type(e).__name__ for e in (error, error.__cause__, error.__context__) if e is not None}
    return isinstance(error, CancelledError) or bool(names & {"FutureCancelledError", "CommClosedError",
                                                             "CancelledError", "StreamClosedError"})


def _lost(error: BaseException, checkpoint: str | None) -> str:
    """The message of exit 69: never reached, or went away mid-run (with how to go on)."""
    ctx = click.get_current_context(silent=True)
    address = ctx.meta.get("dpgm.address") if ctx else None
    if address is None:  # never connected: SchedulerUnreachable's own message names the address
        return str(error)
    if checkpoint:
        return (f"the scheduler at {address} went away; rerun with --resume (the checkpoint {checkpoint!r} "
                f"holds {_last_iteration(checkpoint)})")
    return f"the scheduler at {address} went away ({type(error).__name__}); rerun the command"


def last_iteration(checkpoint: str) -> int | None:
    """The iteration a --checkpoint's ``LATEST`` names (a folder or a URL read with --storage-options), None if
    it holds none or cannot be read now."""
    from dpgm.cli.connection import checkpoint_location
    from dpgm.io.checkpoint import latest_iteration

    try:
        return latest_iteration(checkpoint_location(checkpoint))
    except Exception:  # an unreachable store while reporting another failure: say nothing of it
        return None


def _last_iteration(checkpoint: str) -> str:
    iteration = last_iteration(checkpoint)
    return "no iteration yet" if iteration is None else f"iteration {iteration}"


def _other_failure(error: BaseException, checkpoint: str | None) -> tuple[str, int]:
    """65 for a chunk the codecs cannot decode or a ValueError/TypeError dpgm raised on purpose about its
    input; 69 for a lost scheduler; anything else is a bug: 70, the traceback under -v."""
    import traceback

    if _scheduler_lost(error):
        return _lost(error, checkpoint), EX_UNAVAILABLE
    if (failure := unreachable(error)) is not None:
        return f"cannot reach a remote store: {type(failure).__name__}: {' '.join(str(failure).split())}", \
            EX_UNAVAILABLE
    if type(error).__name__ == "KilledWorker":
        return (f"a task killed the workers that ran it ({error}); out of memory? use smaller --chunk-rows "
                "or workers with more memory", EX_SOFTWARE)
    frames = traceback.extract_tb(error.__traceback__)
    text = " ".join(str(error).split())
    ctx = click.get_current_context(silent=True)
    inputs = ", ".join(repr(str(p)) for p in (ctx.meta.get("dpgm.inputs", ()) if ctx else ())) or "the input"
    if any("/numcodecs/" in f.filename or "/zarr/codecs/" in f.filename for f in frames):
        return f"cannot decode a chunk of {inputs}: {type(error).__name__}: {text}", EX_DATAERR
    module = type(error).__module__
    if module.startswith(("pandas", "pyarrow")):  # a CSV/Parquet file the parsers refuse
        return f"cannot parse {inputs}: {type(error).__name__}: {text}", EX_DATAERR
    if module.startswith("zarr"):  # not a Zarr store, or a damaged one
        return f"cannot read {inputs} as a Zarr store: {type(error).__name__}: {text}", EX_DATAERR
    deliberate = frames and (frames[-1].line or "").startswith("raise") and "/dpgm/" in frames[-1].filename
    if isinstance(error, ValueError | TypeError) and deliberate:
        return text, EX_DATAERR
    if ctx and ctx.meta.get("dpgm.verbose"):
        traceback.print_exception(error)
        return f"internal error: {type(error).__name__}: {text}", EX_SOFTWARE
    return f"internal error: {type(error).__name__}: {text} (rerun with -v for the traceback)", EX_SOFTWARE

"""The ``dpgm`` command line: batch jobs on an embedded or a real Dask cluster.

Exit codes (the README's "Exit codes and failures" table says which a retry can help):
0 success, 2 usage, 3 a fit stopped at its iteration limit without converging, 65 bad
data (incl. an incomplete or corrupted store), 66 missing input, 69 scheduler unreachable
or lost mid-run, 70 internal error (the traceback with -v), 73 an output cannot be created,
74 I/O error (disk full, read-only file system), 75 interrupted with a checkpoint to
--resume, 78 bad configuration (specification, options, sizes, or --resume of a
checkpoint written for other data or another specification), 130/143 interrupted by
SIGINT/SIGTERM with nothing to resume. Every output is checked before any work and
written under a temporary name first: a failed or interrupted command leaves none half-written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import click

EX_NOT_CONVERGED = 3
EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_SOFTWARE, EX_CONFIG = 65, 66, 69, 70, 78
EX_CANTCREAT, EX_IOERR, EX_TEMPFAIL = 73, 74, 75

logger = logging.getLogger("dpgm")


class _Count(click.ParamType):
    """A whole number, written as ``2000``, ``1e6`` or ``1_000_000``; refuses ``2.7`` (exit 2) and counts
    outside ``[minimum, 2**53]`` (the largest a float such as ``1e6`` holds exactly)."""

    name = "count"

    def __init__(self, minimum: int = 1):
        self.minimum = minimum

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            try:
                number = int(text)
            except ValueError:
                try:
                    real = float(text)
                except ValueError:
                    self.fail(f"{value!r} is not a number", param, ctx)
                if not math.isfinite(real) or not real.is_integer():
                    self.fail(f"{value!r} is not a whole number", param, ctx)
                if abs(real) > MAX_COUNT:
                    self.fail(f"{value!r} is more than {MAX_COUNT:.3g} (2**53)", param, ctx)
                number = int(real)
        if not self.minimum <= number <= MAX_COUNT:
            self.fail(f"{value!r} is not between {self.minimum} and {MAX_COUNT:.3g} (2**53)", param, ctx)
        return number


MAX_COUNT = 2**53
# generate and convert write one task per chunk: more chunks than this is a typo (--rows 1e20) or a graph
# the scheduler cannot hold
MAX_CHUNKS = 1_000_000

_ADDRESS = re.compile(r"^(?:(?P<protocol>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
                      r"(?::(?P<port>[^/]*))?/?$")


def _check_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--scheduler (or $DASK_SCHEDULER_ADDRESS): ``[protocol://]host[:port]``, port 0..65535 (exit 2 if not)."""
    if value is None or value.startswith("inproc://"):
        return value
    match = _ADDRESS.match(value.strip())
    where = "--scheduler" + (" ($DASK_SCHEDULER_ADDRESS)" if os.environ.get("DASK_SCHEDULER_ADDRESS") == value
                              else "")
    if not match or not match["host"]:
        raise click.BadParameter(f"{value!r} is not a scheduler address ([tcp://]host:port)", ctx, param,
                                 param_hint=where)
    port = match["port"]
    if port is not None and not (port.isdigit() and 0 <= int(port) <= 65535):
        raise click.BadParameter(f"{value!r}: port {port!r} is not a number in 0..65535", ctx, param,
                                 param_hint=where)
    protocols = ("tcp", "tls", "ucx", "ws", "wss")
    if match["protocol"] is not None and match["protocol"] not in protocols:
        raise click.BadParameter(f"{value!r}: unknown protocol {match['protocol']!r}; known: {list(protocols)}",
                                 ctx, param, param_hint=where)
    return value.strip()


def _remote(path: str) -> bool:
    return "://" in str(path)


def _check_output(option: str, path: str | os.PathLike[str] | None, *, overwrite: bool = False,
                  folder: bool = False, inputs: tuple = ()) -> None:
    """Refuse, before any work, an output that could not be written (exit 73), naming it and why.

    An existing output without --overwrite, a missing or non-directory parent, a parent
    where a file cannot be created (read-only, no permission: probed by creating one),
    an output that is one of the inputs. ``folder``: the output is a directory that may
    exist (--checkpoint). Remote paths (``s3://...``) are left to the writer.
    """
    if path is None or _remote(path):
        return
    target = Path(os.path.abspath(path))
    ctx = click.get_current_context()
    ctx.meta.setdefault("dpgm.outputs", []).append(target)
    for given in inputs:
        if given is not None and not _remote(given) and Path(os.path.abspath(given)) == target:
            raise _Failure(f"{option} {os.fspath(path)!r} is also an input: it would be overwritten", EX_CANTCREAT)
    if target.exists() or target.is_symlink():
        if folder and not target.is_dir():
            raise _Failure(f"{option} {os.fspath(path)!r} exists and is not a folder", EX_CANTCREAT)
        if not folder and not overwrite:
            raise _Failure(f"{option} {os.fspath(path)!r} exists; pass --overwrite to replace it", EX_CANTCREAT)
    parent = target.parent
    if not parent.exists():
        raise _Failure(f"{option} {os.fspath(path)!r}: the folder {str(parent)!r} does not exist", EX_CANTCREAT)
    if not parent.is_dir():
        raise _Failure(f"{option} {os.fspath(path)!r}: {str(parent)!r} is not a folder", EX_CANTCREAT)
    probe_in = target if folder and target.is_dir() else parent
    try:
        with tempfile.NamedTemporaryFile(dir=probe_in, prefix=".dpgm-probe-"):
            pass
    except OSError as error:
        raise _Failure(f"{option} {os.fspath(path)!r}: cannot create a file in {str(probe_in)!r}: "
                       f"{error.strerror or error}", EX_CANTCREAT) from None


def _temporary_sibling(path: Path, suffix: str = "") -> Path:
    return path.parent / f".{path.name}.partial-{os.getpid()}{suffix}"


def _write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary name next to ``path``, then rename it (no half-written file, ever)."""
    target = Path(path)
    pending = _temporary_sibling(target)
    try:
        with open(pending, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(pending, target)
    except BaseException:
        pending.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _replacing(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write a file or store into; on success it replaces
    ``path`` (an existing one is removed only once the new one is complete), on failure it is removed."""
    target = Path(path)
    pending = _temporary_sibling(target, suffix)
    try:
        yield pending
        if target.is_dir() and not target.is_symlink():
            old = _temporary_sibling(target, ".old")
            os.replace(target, old)
            os.replace(pending, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(pending, target)
    except BaseException:
        if pending.is_dir():
            shutil.rmtree(pending, ignore_errors=True)
        else:
            pending.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _removed_on_failure(path: str | os.PathLike[str]) -> Iterator[None]:
    """A store written in place (generate, convert): removed again if its writer fails or is interrupted,
    so no half-written store is left behind (one killed outright stays marked incomplete)."""
    target = Path(path)
    try:
        yield
    except BaseException:
        if not _remote(path) and target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        raise


scheduler_option = click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    default=None,
    callback=_check_address,
    help="Address of a running Dask scheduler (default: $DASK_SCHEDULER_ADDRESS, else an embedded local cluster).",
)
scheduler_file_option = click.option("--scheduler-file", default=None, help="Scheduler file of a running cluster (HPC).")
workers_option = click.option("--workers", type=click.IntRange(min=1), default=None, help="Workers of the embedded cluster (default: one per core).")


def _connection_option(*names: str, **attrs):
    """An option read by ``_cluster`` from the click context instead of the command's arguments."""
    def remember(ctx: click.Context, param: click.Parameter, value):
        ctx.meta[f"dpgm.{param.name}"] = value
    return click.option(*names, expose_value=False, callback=remember, **attrs)


def _remember_storage_options(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        ctx.meta["dpgm.storage_options"] = None
        return
    try:
        options = json.loads(value)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}") from None
    if not isinstance(options, dict):
        raise click.BadParameter(f"must be a JSON object, got {value!r}")
    ctx.meta["dpgm.storage_options"] = options


def _storage_options() -> dict | None:
    return click.get_current_context().meta.get("dpgm.storage_options")


def _location(path: str) -> object:
    """A checkpoint folder: the path itself, or an fsspec mapper carrying --storage-options for a URL."""
    options = _storage_options()
    if options and _remote(path):
        import fsspec

        return fsspec.get_mapper(path, **options)
    return path


def connection_options(command):
    """--connect-timeout, --cluster, --jobs and --storage-options, on every command that connects."""
    for option in reversed([
        _connection_option("--connect-timeout", type=float, default=10.0, show_default=True,
                           help="Seconds to wait for the scheduler (file) and a first worker; exits 69 after."),
        _connection_option("--cluster", type=click.Choice(["local", "slurm", "pbs"]), default=None,
                           help="Submit workers as batch jobs with dask-jobqueue (configured in Dask's "
                                "jobqueue.<name> settings) instead of an embedded local cluster."),
        _connection_option("--jobs", type=int, default=None, help="Batch jobs to submit with --cluster (default 1)."),
        click.option("--storage-options", "storage_options", expose_value=False, callback=_remember_storage_options,
                     default=None, metavar="JSON",
                     help='fsspec options for URLs of data and checkpoints, e.g. \'{"anon": true}\'.'),
    ]):
        command = option(command)
    return command


class _Failure(click.ClickException):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


@contextlib.contextmanager
def _errors(checkpoint: str | None = None) -> Iterator[None]:
    """Map every failure to one line naming the culprit and a documented exit code (README table).

    Retrying helps for 69 (scheduler unreachable or lost) and 75 (interrupted, checkpoint
    written: rerun with --resume), sometimes for 74 (I/O: once space is freed); never for
    2, 65, 66, 73, 78 without changing the input, and 70 is a bug (-v shows the traceback).
    ``checkpoint``: the fit's --checkpoint folder, named when the run is cut short.
    """
    from dpgm.algorithms.checkpoint import CheckpointMismatch
    from dpgm.cluster import SchedulerUnreachable
    from dpgm.errors import ConfigError, DataError
    from dpgm.inference.triangulation import TreeTooLarge

    try:
        yield
    except click.ClickException:
        raise
    except KeyboardInterrupt as error:
        raise _interrupted(error, checkpoint) from None
    except (ConfigError, CheckpointMismatch, TreeTooLarge) as error:
        raise _Failure(str(error), EX_CONFIG) from None
    except DataError as error:
        raise _Failure(str(error), EX_DATAERR) from None
    except FileExistsError as error:
        raise _Failure(f"{_os_message(error)}; pass --overwrite to replace it", EX_CANTCREAT) from None
    except SchedulerUnreachable as error:
        raise _Failure(_lost(error, checkpoint), EX_UNAVAILABLE) from None
    except MemoryError as error:
        raise _Failure(f"out of memory{f' ({error})' if str(error) else ''}: use smaller --chunk-rows, smaller "
                       "scopes or models, or workers with more memory", EX_SOFTWARE) from None
    except OSError as error:
        if _scheduler_lost(error):
            raise _Failure(_lost(error, checkpoint), EX_UNAVAILABLE) from None
        if type(error).__module__.startswith("zarr"):  # e.g. GroupNotFoundError: the input is no Zarr store
            raise _Failure(*_other_failure(error, checkpoint)) from None
        raise _Failure(*_os_failure(error)) from None
    except Exception as error:
        raise _Failure(*_other_failure(error, checkpoint)) from None


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


def _last_iteration(checkpoint: str) -> str:
    latest = Path(checkpoint) / "LATEST"
    if latest.exists():
        name = latest.read_text().strip()
        return f"iteration {int(name.rsplit('-', 1)[-1])}" if name.rsplit("-", 1)[-1].isdigit() else name
    return "no iteration yet"


def _interrupted(error: KeyboardInterrupt, checkpoint: str | None) -> _Failure:
    """SIGINT / SIGTERM: 75 with a checkpoint to resume, else 130 / 143 (128 + the signal)."""
    signum = getattr(error, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    if checkpoint and (Path(checkpoint) / "LATEST").exists():
        return _Failure(f"interrupted by {name}; the checkpoint {checkpoint!r} holds "
                        f"{_last_iteration(checkpoint)}: rerun with --resume", EX_TEMPFAIL)
    return _Failure(f"interrupted by {name}; no output was written", 128 + int(signum))


def _other_failure(error: BaseException, checkpoint: str | None) -> tuple[str, int]:
    """65 for a chunk the codecs cannot decode or a ValueError/TypeError dpgm raised on purpose about its
    input; 69 for a lost scheduler; anything else is a bug: 70, the traceback under -v."""
    import traceback

    if _scheduler_lost(error):
        return _lost(error, checkpoint), EX_UNAVAILABLE
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


def _quiet_client_logs(meta: dict) -> None:
    """Without -v, the Dask client's own error logs (tracebacks while it tries to reconnect to a lost
    scheduler) stay off stderr: the failure is reported once, as dpgm's one-line error (exit 69)."""
    if meta.get("dpgm.verbose"):
        return
    import distributed  # noqa: F401  (configures its loggers on import: set the level after)

    logging.getLogger("distributed.client").setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _cluster(scheduler: str | None, scheduler_file: str | None, workers: int | None, quiet: bool = False):
    from dpgm.cluster import connect

    meta = click.get_current_context().meta
    _quiet_client_logs(meta)
    with connect(scheduler, scheduler_file=scheduler_file, n_workers=workers, timeout=meta["dpgm.connect_timeout"],
                 cluster=meta["dpgm.cluster"], jobs=meta["dpgm.jobs"]) as client:
        meta["dpgm.address"] = client.scheduler.address  # for "the scheduler at ... went away" (exit 69)
        if not quiet and not meta.get("dpgm.quiet"):
            click.echo(f"dashboard: {client.dashboard_link}", err=True)
        yield client


def _check_chunks(rows: int, chunk_rows: int, n_variables: int) -> None:
    """Refuse (exit 78), before anything is allocated, a dataset of more chunks than one pass can schedule."""
    n_chunks = -(-rows // chunk_rows)
    if n_chunks > MAX_CHUNKS:
        raise _Failure(f"--rows {rows:,} in chunks of {chunk_rows:,} rows makes {n_chunks:,} chunks "
                       f"({rows * n_variables:,} values); at most {MAX_CHUNKS:,} chunks: fewer --rows "
                       "or larger --chunk-rows", EX_CONFIG)


def _default_chunk_rows(rows: int) -> int:
    from dpgm.data.convert import default_chunk_rows

    return default_chunk_rows(rows)


def _progress() -> bool | str:
    """A bar on a terminal; plain periodic lines on the ``dpgm`` logger in batch logs."""
    return True if sys.stderr.isatty() else "lines"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpgm")
@click.option("-v", "--verbose", count=True, help="More log lines (the 'dpgm' logger); tracebacks of internal errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Fit probabilistic graphical models to chunked Zarr datasets on a Dask cluster.

    Every failure exits with one line naming the culprit and a documented code
    (README: "Exit codes and failures"); -v adds the traceback of internal errors (70).
    """
    ctx.meta["dpgm.verbose"] = verbose
    ctx.meta["dpgm.quiet"] = quiet
    # INFO by default: batch logs get the passes' periodic progress lines; -q keeps warnings only
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 1 else logging.INFO
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(level)


@cli.command()
@click.argument("network")
@click.argument("out", type=click.Path())
@click.option("--rows", type=_Count(), required=True, help="Number of rows (1e6 accepted).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--missing", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Fraction of values missing completely at random.")
@click.option("--chunk-rows", type=_Count(), default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def generate(network, out, rows, seed, missing, chunk_rows, overwrite, scheduler, scheduler_file, workers) -> None:
    """Sample ROWS rows of NETWORK (a shipped network's name or a BIF file) into the Zarr store OUT."""
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.networks import load_network

    _check_output("OUT", out, overwrite=overwrite)
    with _errors():
        model = load_network(network)
        chunk_rows = chunk_rows or _default_chunk_rows(rows)
        _check_chunks(rows, chunk_rows, len(model.variables))
        with _cluster(scheduler, scheduler_file, workers) as client, _removed_on_failure(out):
            start = time.perf_counter()
            ds = sample_bayesian_network(
                model, rows, out, seed=seed, missing=missing, chunk_rows=chunk_rows,
                client=client, progress=_progress(), mode="w" if overwrite else "w-",
            )
            seconds = time.perf_counter() - start
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out} in {seconds:.1f} s")


@cli.command()
@click.argument("source", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--chunk-rows", type=_Count(), default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--categorical", multiple=True, help="Column to treat as categorical (repeatable).")
@click.option("--continuous", multiple=True, help="Column to treat as continuous (repeatable).")
@click.option("--weight", default=None, help="Column of frequency weights.")
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
def convert(source, out, chunk_rows, categorical, continuous, weight, overwrite) -> None:
    """Convert CSV/TSV/Parquet SOURCE (a file, a directory of files or a glob) to the Zarr dataset OUT.

    One task per Parquet row group or 64 MiB of CSV, in two passes (labels, then codes).
    """
    from dpgm.data.convert import convert as run

    _check_output("OUT", out, overwrite=overwrite, inputs=(source,))
    click.get_current_context().meta["dpgm.inputs"] = [source]
    with _errors(), _removed_on_failure(out):
        ds = run(source, out, chunk_rows=chunk_rows, categorical=categorical,
                 continuous=continuous,
                 weight=weight, mode="w" if overwrite else "w-")
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out}")


@cli.command()
@click.argument("data", type=click.Path())
def info(data) -> None:
    """Schema, chunking and row count of the dataset DATA."""
    from dpgm.data import Schema, open_dataset

    click.get_current_context().meta["dpgm.inputs"] = [data]
    with _errors():
        ds = open_dataset(data, storage_options=_storage_options())
        schema = Schema.from_dataset(ds)
    chunks = ds[next(iter(ds.data_vars))].chunks[0] if ds.data_vars else ()
    click.echo(f"{data}: {schema.n_rows:,} rows in {len(chunks)} chunks of up to {max(chunks, default=0):,} rows")
    for name, variable in schema.items():
        if variable.categorical:
            click.echo(f"  {name:24s} {str(variable.dtype):8s} {variable.cardinality:3d} states: {', '.join(variable.states)}")
        else:
            click.echo(f"  {name:24s} {str(variable.dtype):8s} continuous")
    if schema.weight:
        click.echo(f"  {schema.weight:24s} frequency weights")
    if "dpgm_complete" not in ds.attrs:
        click.echo("note: no completion marker (written by an earlier dpgm or another tool): dpgm cannot tell "
                   "whether every chunk was written; write it again with this dpgm to be sure")


@cli.command()
@click.argument("data", type=click.Path())
@click.option("--scope", "scopes", multiple=True, required=True, help="Comma-separated variables, e.g. A,B (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
@click.option("--out", type=click.Path(), default=None, help="Save the tables as JSON to this file instead.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def counts(data, scopes, as_json, out, overwrite, scheduler, scheduler_file, workers) -> None:
    """Contingency tables of each --scope of DATA, in one pass."""
    from dpgm.data import Schema, open_dataset
    from dpgm.stats import counts as run
    from dpgm.stats.counts import check_table_sizes

    parsed = [tuple(s.strip() for s in scope.split(",") if s.strip()) for scope in scopes]
    _check_output("--out", out, overwrite=overwrite, inputs=(data,))
    click.get_current_context().meta["dpgm.inputs"] = [data]
    with _errors():
        ds = open_dataset(data, storage_options=_storage_options())
        schema = Schema.from_dataset(ds)
        checked = schema.check_scopes(parsed)
        check_table_sizes(checked, {v: schema[v].cardinality for s in checked for v in s})
        with _cluster(scheduler, scheduler_file, workers, quiet=as_json) as client:
            tables = run(ds, parsed, client=client, progress=False if as_json else _progress())
    payload = {
        ",".join(scope): {
            "dims": list(table.dims),
            "states": {d: list(map(str, table.coords[d].values)) for d in table.dims},
            "counts": table.values.tolist(),
            "n_missing": tables.n_missing[scope],
        }
        for scope, table in tables.items()
    }
    text = json.dumps({"n_rows": tables.n_rows, "tables": payload})
    if as_json:
        click.echo(text)
        return
    if out:
        with _errors():
            _write_text_atomically(out, text)
        click.echo(f"saved {len(tables)} tables to {out}")
        return
    for scope, table in tables.items():
        click.echo(f"\n{','.join(scope)}  (missing: {tables.n_missing[scope]:,})")
        click.echo(table.to_series().to_string())


@cli.command()
@click.argument("spec", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--out", type=click.Path(), required=True, help="Zarr group to write the fitted model to.")
@click.option("--method", default=None, help="Override the specification's method.")
@click.option("--report", type=click.Path(), default=None, help="Write the result summary as JSON here.")
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@click.option("--checkpoint", type=click.Path(), default=None, help="Folder to checkpoint EM into every iteration.")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --checkpoint.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Save a convergence plot (log-likelihood per iteration) to this PNG/SVG/PDF file.")
@click.option("--drop", multiple=True, help="Variable to remove from the data first, e.g. to fit it as latent "
              "(repeatable; the specification's 'drop:' list does the same).")
@click.option("--performance-report", type=click.Path(), default=None,
              help="Save Dask's performance report of the fit (task stream, profile) to this HTML file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def fit(spec, data, out, method, report, overwrite, checkpoint, resume, plot_path, drop, performance_report, scheduler,
        scheduler_file, workers) -> None:
    """Fit the model of SPEC (YAML/TOML) to the dataset DATA and save it to --out.

    Exits 0 on convergence and 3 when the iteration limit was reached first.
    """
    from dpgm.api import fit as run
    from dpgm.api.checks import check_checkpoint
    from dpgm.data import Schema, open_dataset
    from dpgm.spec import SpecError, build_model, drop_variables, read_spec

    if resume and not checkpoint:
        raise click.UsageError("--resume needs --checkpoint")
    # every output is checked before any work: a finished fit is never lost to a path that cannot be written
    _check_output("--out", out, overwrite=overwrite, inputs=(data, spec))
    _check_output("--report", report, overwrite=overwrite, inputs=(data, spec))
    _check_plot(plot_path, overwrite, inputs=(data, spec))
    _check_output("--performance-report", performance_report, overwrite=overwrite, inputs=(data, spec))
    _check_output("--checkpoint", checkpoint, folder=True, inputs=(data, spec))
    if checkpoint and not resume and not overwrite and (Path(checkpoint) / "LATEST").exists():
        raise _Failure(f"--checkpoint {checkpoint!r} holds the checkpoint of an earlier run: pass --resume to "
                       "continue it, or --overwrite to start afresh", EX_CANTCREAT)
    click.get_current_context().meta["dpgm.inputs"] = [data]
    with _errors(checkpoint):
        ds = open_dataset(data, storage_options=_storage_options())
        parsed = read_spec(spec)
        try:
            parsed, ds = drop_variables(parsed, ds, drop)
            schema = Schema.from_dataset(ds)
            model, chosen, options = build_model(parsed, schema.states, method=method, continuous=schema.continuous)
        except SpecError as error:
            raise SpecError(f"specification {spec!r}: {error}") from None
        if checkpoint:
            options["checkpoint"] = _location(checkpoint)
        if resume:
            options["resume"] = _location(checkpoint)
        # a checkpoint of other data or another specification is refused before the cluster starts
        check_checkpoint(model, ds, chosen or _default_method(model), options,
                         extra={"specification": _spec_fingerprint(parsed, method)})
        with _cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            with _performance_report(performance_report):
                result = run(model, ds, method=chosen, client=client, progress=_progress(),
                             callback=_echo_iteration, **options)
            seconds = time.perf_counter() - start
        _save_model(result.model, out)
        click.echo(result.summary())
        click.echo(f"fitted in {seconds:.2f} s; model saved to {out}")
        if plot_path:
            _save_plot(result, plot_path)
        if report:
            payload = result.to_dict() | {"seconds": seconds, "model_path": str(out), "data": str(data)}
            _write_text_atomically(report, json.dumps(payload, indent=2, default=float))
    if not result.converged:
        sys.exit(EX_NOT_CONVERGED)


def _performance_report(path):
    """``distributed.performance_report`` into ``path`` (written when the block ends), or nothing."""
    if path is None:
        return contextlib.nullcontext()
    from distributed import performance_report

    return performance_report(filename=str(path))


def _default_method(model) -> str:
    from dpgm.api.checks import DEFAULT_METHODS, model_kind

    return DEFAULT_METHODS[model_kind(model)]


def _save_model(model, out: str) -> None:
    """Save under a temporary name next to ``out``, then rename (a remote store is written in place; its
    completion marker, set last, tells a finished store from a partial one)."""
    if _remote(out):
        model.save(out, mode="w")
        return
    with _replacing(out) as pending:
        model.save(pending, mode="w-")


_PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def _check_plot(path: str | None, overwrite: bool, inputs: tuple) -> None:
    if path is None:
        return
    if Path(path).suffix.lower() not in _PLOT_FORMATS:
        raise click.BadParameter(f"{path!r}: the file name must end with one of {list(_PLOT_FORMATS)}",
                                 param_hint="--plot")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise _Failure("--plot needs matplotlib: pip install 'dpgm[plot]'", EX_CONFIG)
    _check_output("--plot", path, overwrite=overwrite, inputs=inputs)


_STOPPING_RULE = ("max_iter", "tol", "loglik_tol")


def _spec_fingerprint(spec: dict, method: str | None) -> dict:
    """The specification a checkpoint belongs to: everything but the stopping rule (a resumed fit may
    run longer or to a tighter tolerance), with a --method override."""
    kept = {k: v for k, v in spec.items() if k not in _STOPPING_RULE}
    return kept | ({"method": method} if method else {})


def _save_plot(result, path) -> None:
    if not result.history:
        click.echo(f"no convergence plot: {result.method} is a closed form (no iterations)", err=True)
        return
    with _replacing(path, suffix=Path(path).suffix) as pending:
        result.plot(pending)
    click.echo(f"convergence plot saved to {path}")


def _echo_iteration(record: dict) -> None:
    parts = [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()]
    click.echo("  " + " ".join(parts), err=True)


@cli.command()
@click.argument("model_path", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--variable", required=True, help="Variable whose posterior to compute (e.g. the latent class).")
@click.option("--name", default=None, help="Name of the new variable (default <variable>_proba).")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def predict(model_path, data, variable, name, scheduler, scheduler_file, workers) -> None:
    """Write every row's posterior of --variable under MODEL_PATH into the dataset DATA."""
    from dpgm.api import predict_proba
    from dpgm.data import open_dataset
    from dpgm.models.store import load

    click.get_current_context().meta["dpgm.inputs"] = [model_path, data]
    with _errors():
        model = load(model_path)
        ds = open_dataset(data, storage_options=_storage_options())
        with _cluster(scheduler, scheduler_file, workers) as client:
            result = predict_proba(model, ds, variable, write=True, name=name, client=client)
    click.echo(f"wrote {result.name} ({ds.sizes['row']:,} rows x {result.shape[1]} states) into {data}")


@cli.command()
@click.option("--rows", type=_Count(), default="1e6", show_default=True)
@click.option("--network", default="alarm", show_default=True)
@click.option("--latent", default="HYPOVOLEMIA,LVFAILURE", show_default=True,
              help="Variables hidden from the EM fit (comma-separated; empty to skip EM).")
@click.option("--em-rows", type=_Count(), default="2e4", show_default=True, help="Rows the EM fit uses (the first ones).")
@click.option("--plot", "plot_path", type=click.Path(), default="dpgm-demo-em.png", show_default=True,
              help="Where to save the EM convergence plot.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def demo(rows, network, latent, em_rows, plot_path, scheduler, scheduler_file, workers) -> None:
    """Generate a dataset from a shipped network on a local cluster, count it, fit it, and run EM
    with latent variables and the generated missing values."""
    import numpy as np

    from dpgm.api import fit as run_fit
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network
    from dpgm.stats import counts as run

    model = load_network(network)
    with _errors(), tempfile.TemporaryDirectory() as folder, _cluster(scheduler, scheduler_file, workers) as client:
        path = Path(folder) / f"{network}.zarr"
        click.echo(f"generating {int(rows):,} rows of {network} ({len(model.variables)} variables, "
                   f"5% of values missing) into {path} ...")
        start = time.perf_counter()
        ds = sample_bayesian_network(model, int(rows), path, seed=0, missing=0.05,
                                     chunk_rows=max(int(rows) // 8, 1), client=client)
        click.echo(f"  {time.perf_counter() - start:.1f} s")
        click.echo(f"counting {len(model.families)} family tables in one pass ...")
        start = time.perf_counter()
        tables = run(ds, model.families, client=client)
        seconds = time.perf_counter() - start
        click.echo(f"  {seconds:.2f} s, {ds.sizes['row'] / seconds:,.0f} rows/s\n")
        click.echo(tables.summary())

        complete = Path(folder) / f"{network}-complete.zarr"
        click.echo(f"\nfitting the {network} structure by maximum likelihood to {int(rows):,} complete rows ...")
        ds = sample_bayesian_network(model, int(rows), complete, seed=1, chunk_rows=max(int(rows) // 8, 1),
                                     client=client)
        start = time.perf_counter()
        result = run_fit(BayesianNetwork.from_edges(model.edges, variables=model.variables), ds, client=client)
        seconds = time.perf_counter() - start
        click.echo(result.summary())
        error = max(float(np.abs(result.model.cpds[v].transpose(*model.cpds[v].dims).values
                                 - model.cpds[v].values).max()) for v in model.variables)
        click.echo(f"  {seconds:.2f} s; largest |fitted - true| CPT entry: {error:.4f}")
        hidden = [v for v in latent.split(",") if v]
        if hidden:
            _demo_em(model, Path(folder) / f"{network}.zarr", hidden, int(em_rows), plot_path, client)
        click.echo(f"\ndashboard: {client.dashboard_link}")


def _demo_em(model, path: Path, hidden: list[str], n_rows: int, plot_path: str, client) -> None:
    """EM on the first rows of the first dataset (5% missing values) with ``hidden`` removed."""
    from dpgm.api import fit as run_fit
    from dpgm.data import open_dataset

    unknown = [v for v in hidden if v not in model.variables]
    if unknown:
        raise click.UsageError(f"--latent names variables not in the network: {unknown}")
    ds = open_dataset(path).drop_vars(hidden).isel(row=slice(0, n_rows))
    rows = ds.sizes["row"]
    click.echo(f"\nEM with {', '.join(hidden)} latent and 5% of the other values missing, {rows:,} rows, "
               "3 random restarts sharing each pass over the data ...")
    start = time.perf_counter()
    result = run_fit(model, ds, method="em", n_init=3, random_state=0, tol=1e-5, max_iter=40, client=client,
                     callback=_echo_restart_iteration)
    seconds = time.perf_counter() - start
    click.echo(result.summary().splitlines()[0])
    click.echo(f"  log-likelihood {result.loglik:,.1f} after {result.n_iter} iterations; {seconds:.1f} s, "
               f"{seconds / max(result.passes, 1):.2f} s per pass ({rows / (seconds / max(result.passes, 1)):,.0f} "
               "rows/s for all restarts together)")
    _save_plot(result, plot_path)


def _echo_restart_iteration(record: dict) -> None:
    if record["restart"] == 0:
        change = record["change"]
        click.echo(f"  iteration {record['iteration']:3d}  loglik {record['loglik']:,.2f}"
                   + (f"  change {change:+.3g}" if change is not None else ""))


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system's time limit, ``kill``): unwinds like Ctrl-C, so outputs are cleaned up."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
    raise _Terminated(signum)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one ``warning: ...`` line on stderr (not Python's two-line source excerpt)."""
    click.echo(f"warning: {message}", err=True)


def main() -> None:
    """Entry point of the ``dpgm`` command."""
    import warnings

    signal.signal(signal.SIGTERM, _terminate)
    warnings.showwarning = _show_warning
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort as error:
        signum = getattr(error.__context__, "signum", signal.SIGINT)
        click.echo(f"interrupted by {signal.Signals(signum).name}", err=True)
        sys.exit(128 + int(signum))
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as error:
        sys.exit(error.exit_code)

if __name__ == "__main__":
    main()

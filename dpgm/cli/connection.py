"""How a ``dpgm`` command reaches its cluster and its storage: --scheduler, --scheduler-file,
--workers, --connect-timeout, --cluster, --jobs, --storage-options."""

from __future__ import annotations

import contextlib
import json
import os
import re

import click

from dpgm.cli.outputs import is_remote

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



scheduler_option = click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    default=None,
    callback=_check_address,
    help="Address of a running Dask scheduler (default: $DASK_SCHEDULER_ADDRESS, else an embedded local cluster).",
)
scheduler_file_option = click.option("--scheduler-file", default=None, help="Scheduler file of a running cluster (HPC).")
workers_option = click.option("--workers", type=click.IntRange(min=1), default=None, help="Workers of the embedded cluster (default: one per core).")


def _connection_option(*names: str, callback=None, **attrs):
    """An option read by ``cluster`` from the click context instead of the command's arguments."""
    def remember(ctx: click.Context, param: click.Parameter, value):
        ctx.meta[f"dpgm.{param.name}"] = value if callback is None else callback(param, value)
    return click.option(*names, expose_value=False, callback=remember, **attrs)


TLS_OPTIONS = {
    "--tls-ca-file": "CA certificate(s) file for TLS (PEM), as `dask scheduler --tls-ca-file`: with --tls-cert and "
                     "--tls-key the cluster dpgm starts, or the scheduler it connects to, speaks TLS only.",
    "--tls-cert": "Certificate file for TLS (PEM): the client's, and the scheduler's and workers' of a cluster dpgm "
                  "starts.",
    "--tls-key": "Private key file for TLS (PEM) of --tls-cert.",
}


def _existing_file(param: click.Parameter, value: str | None) -> str | None:
    """A --tls-* file that exists, else the one-line failure of a missing input (exit 66)."""
    if value is not None and not os.path.isfile(value):
        from dpgm.cli.failures import EX_NOINPUT, Failure

        raise Failure(f"{param.opts[0]} {value!r}: no such file", EX_NOINPUT)
    return value


def security() -> object | None:
    """The ``distributed.security.Security`` of the command's --tls-* options (all three, or none: then
    Dask's configuration decides, as distributed reads it)."""
    meta = click.get_current_context().meta
    given = {name: meta.get(f"dpgm.{name.lstrip('-').replace('-', '_')}") for name in TLS_OPTIONS}
    if not any(given.values()):
        return None
    if not all(given.values()):
        missing = [name for name, value in given.items() if not value]
        raise click.UsageError(f"{', '.join(TLS_OPTIONS)} go together: {', '.join(missing)} missing")
    from dpgm.cluster import tls_security

    return tls_security(*given.values())


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


def storage_options(path: str | None = None) -> dict | None:
    """The command's --storage-options (None outside a command); given the ``path`` they are for, None unless
    it is a URL (they are options of fsspec's remote filesystems, not of a local path)."""
    context = click.get_current_context(silent=True)
    if context is None or (path is not None and not is_remote(str(path))):
        return None
    return context.meta.get("dpgm.storage_options")


def checkpoint_location(path: str) -> object:
    """A checkpoint folder: the path itself, or an fsspec mapper carrying --storage-options for a URL."""
    options = storage_options()
    if options and is_remote(path):
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
        *(_connection_option(name, type=str, default=None, callback=_existing_file, metavar="PATH", help=text)
          for name, text in TLS_OPTIONS.items()),
        click.option("--storage-options", "storage_options", expose_value=False, callback=_remember_storage_options,
                     default=None, metavar="JSON",
                     help='fsspec options for URLs of data and checkpoints, e.g. \'{"anon": true}\'.'),
    ]):
        command = option(command)
    return command


def _quiet_client_logs(meta: dict) -> None:
    """Without -v, the Dask client's own error logs (tracebacks while it tries to reconnect to a lost
    scheduler) stay off stderr: the failure is reported once, as dpgm's one-line error (exit 69)."""
    if not meta.get("dpgm.verbose"):
        from dpgm.cluster import quiet_client_logs

        quiet_client_logs()


@contextlib.contextmanager
def cluster(scheduler: str | None, scheduler_file: str | None, workers: int | None, quiet: bool = False):
    from dpgm.cluster import connect

    meta = click.get_current_context().meta
    _quiet_client_logs(meta)
    with connect(scheduler, scheduler_file=scheduler_file, n_workers=workers, timeout=meta["dpgm.connect_timeout"],
                 cluster=meta["dpgm.cluster"], jobs=meta["dpgm.jobs"], security=security()) as client:
        meta["dpgm.address"] = client.scheduler.address  # for "the scheduler at ... went away" (exit 69)
        if not quiet and not meta.get("dpgm.quiet"):
            click.echo(f"dashboard: {client.dashboard_link}", err=True)
        yield client

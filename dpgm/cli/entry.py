"""The ``dpgm`` command group and its entry point (signals, warnings, exit codes)."""

from __future__ import annotations

import logging
import signal
import sys

import click

from dpgm.cli.failures import terminate

logger = logging.getLogger("dpgm")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpgm")
@click.option("-v", "--verbose", count=True,
              help="More log lines (each restart's iterations, every pass); tracebacks of internal errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress: only warnings and errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Fit probabilistic graphical models to chunked Zarr datasets on a Dask cluster.

    Every failure exits with one line naming the culprit and a documented code
    (README: "Exit codes and failures"); -v adds the traceback of internal errors (70).
    """
    ctx.meta["dpgm.verbose"] = verbose
    ctx.meta["dpgm.quiet"] = quiet
    # INFO by default: a fit's iteration lines, the passes' lines in batch logs; -v each restart's record
    # too; -q warnings only
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    from dpgm.cli.options import log_handler

    # one handler of the CLI's own, on the stderr of this invocation (a second in-process call replaces it)
    for old in [h for h in logger.handlers if getattr(h, "dpgm_cli", False)]:
        logger.removeHandler(old)
    if not logger.handlers:
        handler = log_handler()
        handler.dpgm_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(level)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one ``warning: ...`` line on stderr (not Python's two-line source excerpt)."""
    click.echo(f"warning: {message}", err=True)


def main() -> None:
    """Entry point of the ``dpgm`` command."""
    import warnings

    signal.signal(signal.SIGTERM, terminate)
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

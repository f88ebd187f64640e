"""The ``dpgm`` command group and its entry point (signals, warnings, exit codes)."""

from __future__ import annotations

import logging
import sys

import click

from dpgm.cli.signals import (
    Terminated,
    finish,
    handle_signals,
    ignore_signals,
    interrupted,
    received,
)

logger = logging.getLogger("dpgm")


class _Interrupt(BaseException):
    """A ``KeyboardInterrupt`` raised outside a command's error handling, carried past click (which would
    print an empty line and raise ``Abort``) to :func:`main`."""

    def __init__(self, error: KeyboardInterrupt):
        super().__init__(error)
        self.error = error


class _Commands(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as error:
            raise _Interrupt(error) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpgm")
@click.option("-v", "--verbose", count=True,
              help="More log lines (each restart's iterations, every pass); tracebacks of internal errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress: only warnings and errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Fit probabilistic graphical models to chunked Zarr datasets on a Dask cluster.

    Every failure exits with one line naming the culprit and a documented code
    (docs/exit-codes.md); -v adds the traceback of internal errors (70).
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

    handle_signals()
    warnings.showwarning = _show_warning
    sys.unraisablehook = _unraisable
    finish(_run())


def _unraisable(unraisable) -> None:
    """Errors Python cannot raise (a remote filesystem's coroutine closed at exit after the failure the command
    already reported): under ``-v`` only, never a traceback after the one ``Error:`` line."""
    logger.debug("ignored in %r: %s: %s", unraisable.object, type(unraisable.exc_value).__name__,
                 unraisable.exc_value)


def _run() -> int:
    """Run the command; its exit code, its failure (an interrupt included) said in one line."""
    try:
        try:
            cli.main(standalone_mode=False)
        finally:
            ignore_signals()  # from here on a signal is ignored: what is left is saying how the command ended
    except _Interrupt as stop:
        return _say(interrupted(stop.error))
    except (KeyboardInterrupt, click.exceptions.Abort) as error:  # while click read the command line
        return _say(interrupted(error if isinstance(error, KeyboardInterrupt) else Terminated(received() or 2)))
    except click.ClickException as error:
        return _say(error)
    except click.exceptions.Exit as error:
        return error.exit_code
    except SystemExit as error:
        return error.code if isinstance(error.code, int) else 0 if error.code is None else 1
    if received() is not None:  # the signal's exception was lost after the command's error handling
        return _say(interrupted(Terminated(received())))
    return 0


def _say(error: click.ClickException) -> int:
    error.show()
    return error.exit_code

"""Option types and checks shared by the ``dpgm`` commands: counts, chunk limits, progress and its log lines."""

from __future__ import annotations

import logging
import math
import sys

import click

from dpgm.cli.failures import EX_CONFIG, Failure


class Count(click.ParamType):
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


def check_chunks(rows: int, chunk_rows: int, n_variables: int) -> None:
    """Refuse (exit 78), before anything is allocated, a dataset of more chunks than one pass can schedule."""
    n_chunks = -(-rows // chunk_rows)
    if n_chunks > MAX_CHUNKS:
        raise Failure(f"--rows {rows:,} in chunks of {chunk_rows:,} rows makes {n_chunks:,} chunks "
                      f"({rows * n_variables:,} values); at most {MAX_CHUNKS:,} chunks: fewer --rows "
                      "or larger --chunk-rows", EX_CONFIG)


def default_chunk_rows(rows: int) -> int:
    """The chunk size of a dataset of ``rows`` rows when --chunk-rows is not given."""
    from dpgm.data.convert import default_chunk_rows as rule

    return rule(rows)


def _quiet() -> bool:
    context = click.get_current_context(silent=True)
    return bool(context and context.find_root().meta.get("dpgm.quiet"))


def progress() -> bool | str:
    """A pass's progress: Dask's bar on a terminal; plain periodic lines on the ``dpgm`` logger in batch
    logs; nothing with ``-q``."""
    if _quiet():
        return False
    return True if sys.stderr.isatty() else "lines"


def fit_progress() -> bool:
    """A fit's ``progress=``: one line per iteration of the best restart (under a counter of iterations on
    a terminal, timestamped in batch logs) and no per-pass bar; nothing with ``-q``."""
    return not _quiet()


LOG_FORMAT = "dpgm: %(message)s"
BATCH_LOG_FORMAT = "%(asctime)s dpgm: %(message)s"  # stderr not a terminal: every line with its time


def log_handler() -> logging.Handler:
    """The ``dpgm`` logger's handler on stderr: through ``tqdm.write`` (a line never breaks the fit's bar),
    timestamped (``2026-11-26 21:04:05 dpgm: ...``) when stderr is not a terminal."""
    from dpgm.progress import TIMESTAMP, LineHandler

    handler = LineHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT if sys.stderr.isatty() else BATCH_LOG_FORMAT, TIMESTAMP))
    return handler

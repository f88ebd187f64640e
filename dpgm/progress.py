"""What a long call tells its user while it runs: one line per iteration, restarts summarised, the outcome.

One module for :func:`dpgm.fit` and the ``dpgm`` command line. A :class:`FitProgress`
receives the algorithm's per-iteration records (as the ``callback`` does) and the
passes over the data (:func:`dpgm.cluster.compute` calls :meth:`FitProgress.pass_started`,
:meth:`~FitProgress.pass_running` and :meth:`~FitProgress.pass_finished`), and says:

* one line per iteration for the **best restart** (the restart of highest
  log-likelihood so far), e.g. ``iteration 5  loglik -199,472.84  change +373
  0.9 s/pass  restart #3``; iterations that run on the driver only (IPF, GIS, L-BFGS
  on counted tables) at most one line per :data:`THROTTLE_SECONDS`, and the last;
* one ``restarts: ...`` line when several restarts start, whenever some stop
  (converged, or dropped by ``prune_restarts``) and every :data:`SUMMARY_SECONDS`;
* ``pass dpgm-estep finished 3.2 s`` for passes before the first iteration or
  longer than :data:`LINE_SECONDS`, and a line every :data:`LINE_SECONDS` while
  a pass runs;
* at the end one line with the outcome (converged or stopped, iterations, passes,
  seconds, log-likelihood, the best restart).

Every line goes to the ``dpgm`` logger (INFO; each restart's own record at DEBUG),
so ``logging.basicConfig(level=logging.INFO)`` shows them in a script. Where the
``dpgm`` logger would not print them, a display writes them itself: ``"lines"``
(plain lines with a timestamp on stderr, for logs) or ``"bar"`` (the lines above a
tqdm counter of iterations, the notebook widget in Jupyter). Nothing here
configures logging.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from dpgm.errors import ConfigTypeError

__all__ = ["FitProgress", "LineHandler", "check_progress", "interactive"]

logger = logging.getLogger("dpgm")

LINE_SECONDS = 10.0
"""A running pass says so this often in lines; a pass this long says when it finished."""
SUMMARY_SECONDS = 60.0
"""Restarts are summarised at least this often while several run."""
THROTTLE_SECONDS = 1.0
"""Iterations without a pass over the data of their own: at most one line this often."""
TIMESTAMP = "%Y-%m-%d %H:%M:%S"


def interactive() -> bool:
    """Whether someone watches: stderr is a terminal, or this runs in IPython or Jupyter."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        pass
    return _ipython()


def _ipython() -> bool:
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and shell.get_ipython() is not None
    except Exception:
        return False


def _terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def check_progress(progress: Any) -> bool | None:
    """``progress`` of a public entry point: None (on where :func:`interactive`), True or False."""
    if progress is None or isinstance(progress, bool):
        return progress
    raise ConfigTypeError(f"progress must be None (on in an interactive session), True or False, got {progress!r}")


def _logged_to_stderr(level: int) -> bool:
    """Whether a handler on the ``dpgm`` logger's chain writes records of ``level`` to stderr.

    Handlers that write elsewhere (a file, pytest's capture, a log service) do not count:
    the progress line still goes to stderr then.
    """
    streams = {id(sys.stderr), id(sys.__stderr__)}
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if (isinstance(handler, logging.StreamHandler) and id(getattr(handler, "stream", None)) in streams
                    and level >= handler.level):
                return True
        current = current.parent if current.propagate else None
    return False


class LineHandler(logging.StreamHandler):
    """A stream handler that writes through ``tqdm.write``: a log line never breaks a bar on the same stream."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            # one write, its newline included: a signal's exception between two writes would glue the
            # command's last "Error:" line to this one
            tqdm.write(self.format(record) + "\n", file=self.stream, end="")
            self.flush()
        except Exception:
            self.handleError(record)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _seconds(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _count(value: Any) -> str:
    number = _number(value)
    if number is None:
        return str(value)
    return str(int(number)) if number.is_integer() else f"{number:g}"


class FitProgress:
    """Progress of one fit: per-iteration lines of the best restart, restart summaries, the outcome.

    Parameters
    ----------
    display
        ``None`` (log only), ``"lines"`` (plain timestamped lines on stderr) or
        ``"bar"`` (lines and a tqdm counter of iterations).
    method
        The fitting method, named on the bar.
    tol
        The fit's ``tol``: with no ``converged`` flag in the records (IPF and other loops), the
        relative log-likelihood change at which a restart converges (tells a converged restart
        from a dropped one); EM's records say it themselves.

    Examples
    --------
    >>> watch = FitProgress(None, method="em")
    >>> watch({"restart": 0, "iteration": 1, "loglik": -10.0, "change": None, "passes": 1.0, "seconds": 0.5})
    >>> watch.lines
    []
    >>> watch.close()
    >>> watch.lines
    ['iteration 1  loglik -10.00  0.5 s/pass']
    """

    def __init__(self, display: str | None, *, method: str = "", tol: float | None = None) -> None:
        if display not in (None, "lines", "bar"):
            raise ValueError(f"display must be None, 'lines' or 'bar', got {display!r}")
        self.display = display
        self.method = method
        self.tol = tol
        self.lines: list[str] = []  # the iteration lines said so far
        self._clock = time.perf_counter()
        self._pending: dict[int, dict] = {}  # this iteration's records by restart
        self._iteration: Any = None
        self._previous: dict[int, dict] = {}  # each restart's last record
        self._earlier: dict[int, dict] = {}  # and the one before
        self._best: dict[int, float] = {}  # each restart's best accepted log-likelihood
        self._running: set[int] = set()
        self._stopped: dict[int, str] = {}  # restart -> "converged" | "dropped"
        self._last = (0.0, 0.0)  # (seconds, passes) at the previous iteration
        self._iterations = 0
        self._passes_since = 0  # passes finished since the previous iteration
        self._unsaid: str | None = None  # a throttled iteration line, said at the end
        self._said_at = -math.inf
        self._summary_at = -math.inf
        self._pass_line_at = 0.0
        self._postfix = ""
        self._bar: Any = None
        self._closed = False

    @classmethod
    def start(cls, progress: bool | None, *, method: str = "", tol: float | None = None) -> FitProgress:
        """The progress of a fit for ``dpgm.fit(..., progress=...)``: None is on where :func:`interactive`;
        on, a terminal or Jupyter gets ``"bar"`` and anything else (a log file, a pipe) ``"lines"``."""
        on = interactive() if check_progress(progress) is None else progress
        display = None if not on else "bar" if _terminal() or _ipython() else "lines"
        return cls(display, method=method, tol=tol)

    # ------------------------------------------------------------------ what the fit reports

    def watch(self, callback: Callable[[dict], None] | None) -> Callable[[dict], None]:
        """A callback that tells this progress each record, then calls ``callback`` with it."""

        def both(record: dict) -> None:
            self(record)
            if callback is not None:
                callback(record)

        return both

    def __call__(self, record: dict) -> None:
        """One record of the algorithm (one restart's iteration)."""
        try:
            self._record(record)
        except Exception:  # telling must never stop a fit
            logger.debug("dpgm: could not report an iteration", exc_info=True)

    def pass_started(self, name: str) -> None:
        """A pass over the data begins: the previous iteration's records are all in."""
        self._guard(self._flush)
        self._pass_line_at = 0.0

    def pass_running(self, name: str, seconds: float) -> None:
        """A pass still runs after ``seconds`` (called about once a second)."""

        def tell() -> None:
            if seconds - self._pass_line_at >= LINE_SECONDS:
                self._pass_line_at = seconds
                self._say(f"pass {name} running {seconds:.0f} s", show=self.display == "lines")
            if self.display == "bar":  # a pass that lasts: the counter shows it running
                self._open_bar().set_postfix_str(f"{self._postfix}{', ' if self._postfix else ''}pass {name} "
                                                 f"{seconds:.0f} s", refresh=True)

        self._guard(tell)

    def pass_finished(self, name: str, seconds: float, status: str = "finished") -> None:
        """A pass ended (``status``: ``"finished"`` or ``"failed"``)."""

        def tell() -> None:
            self._passes_since += 1
            loud = self._iterations == 0 and not self._pending or seconds >= LINE_SECONDS or status != "finished"
            self._say(f"pass {name} {status} {seconds:.1f} s", logging.INFO if loud else logging.DEBUG)
            if self._bar is not None:
                self._bar.set_postfix_str(self._postfix, refresh=True)

        self._guard(tell)

    def finish(self, result: Any) -> None:
        """The fit returned ``result`` (a :class:`~dpgm.FitResult`): its outcome in one line."""

        def tell() -> None:
            self._flush()
            if self._unsaid is not None:
                self._line(self._unsaid)
            self._close_bar()
            self._say(self.outcome(result))

        self._guard(tell)
        self._closed = True

    def fail(self, error: BaseException) -> None:
        """The fit raised ``error`` (reported by the caller): close the display."""

        def tell() -> None:
            self._flush()
            self._close_bar()
            seconds = time.perf_counter() - self._clock
            self._say(f"stopped by {type(error).__name__} after {_seconds(seconds)} s", logging.DEBUG)

        self._guard(tell)
        self._closed = True

    def close(self) -> None:
        """Say what is pending and close the display (no outcome line)."""
        self._guard(self._flush)
        if self._unsaid is not None:
            self._guard(lambda: self._line(self._unsaid))
        self._guard(self._close_bar)
        self._closed = True

    def outcome(self, result: Any) -> str:
        """The closing line for ``result``."""
        seconds = time.perf_counter() - self._clock
        passes = _count(getattr(result, "passes", 0))
        over = f"{passes} pass{'' if passes == '1' else 'es'} over the data"
        n_iter = int(getattr(result, "n_iter", 0) or 0)
        if n_iter:
            state = "converged" if result.converged else "stopped without converging"
            text = f"{state} after {n_iter} iteration{'' if n_iter == 1 else 's'}, {over}, {_seconds(seconds)} s"
        else:
            text = f"fitted in {_seconds(seconds)} s, {over}"
        loglik = _number(getattr(result, "loglik", None))
        if loglik is not None:
            text += f"; loglik {loglik:,.2f}"
        info = getattr(result, "info", {}) or {}
        restarts = info.get("restart_logliks") or []
        if len(restarts) > 1:
            text += f"; best restart #{info.get('restart', 0)} of {len(restarts)}"
            dropped = len(info.get("pruned_restarts") or [])
            if dropped:
                text += f" ({dropped} dropped)"
        return text

    # ------------------------------------------------------------------ inside

    def _guard(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:  # telling must never stop a fit
            logger.debug("dpgm: progress could not be reported", exc_info=True)

    def _record(self, record: dict) -> None:
        iteration = record.get("iteration")
        if self._pending and (iteration is None or iteration != self._iteration):
            self._flush()
        restart = int(record.get("restart", 0) or 0)
        record = dict(record)
        record.setdefault("_clock", time.perf_counter() - self._clock)
        self._pending[restart] = record
        self._iteration = iteration

    def _flush(self) -> None:
        """Say the iteration whose records are all in."""
        if not self._pending:
            return
        records, self._pending = self._pending, {}
        now = time.perf_counter()
        first = next(iter(records.values()))
        for restart, record in records.items():
            value = _number(record.get("loglik"))
            if value is not None and record.get("accepted", True) is not False:
                self._best[restart] = max(value, self._best.get(restart, -math.inf))
        several = len(set(self._previous) | set(records)) > 1
        if several:
            for restart, record in records.items():
                logger.debug("restart #%d: %s", restart, self._describe(record, restart))
        leader = self._leader(records)
        seconds = _number(first.get("seconds"))
        seconds = first["_clock"] if seconds is None else seconds
        passes = _number(first.get("passes"))
        step = seconds - self._last[0]
        if passes is not None and passes > self._last[1]:
            rate = f"  {_seconds(step / (passes - self._last[1]))} s/pass"
        else:
            rate = f"  {_seconds(step)} s/iteration"
        self._last = (seconds, self._last[1] if passes is None else passes)
        had_pass = passes is not None or self._passes_since > 0
        self._passes_since = 0
        stopped = [r for r in self._running if r not in records]
        for restart in stopped:
            self._stopped[restart] = self._why_stopped(restart)
        started = not self._running
        self._running = set(records)
        shown = leader if leader in records else self._leader(records, running_only=True)
        line = self._describe(records[shown], shown) + rate + (f"  restart #{shown}" if several else "")
        for restart, record in records.items():
            if restart in self._previous:
                self._earlier[restart] = self._previous[restart]
            self._previous[restart] = record
        self._iterations += 1
        if had_pass or now - self._said_at >= THROTTLE_SECONDS or self._iterations == 1:
            self._line(line)
        else:
            self._unsaid = line
        if several and (started or stopped or now - self._summary_at >= SUMMARY_SECONDS):
            self._summarise(leader, now)
        self._postfix = self._short(records[shown], shown, several)
        if self.display == "bar":
            bar = self._open_bar()
            bar.set_postfix_str(self._postfix, refresh=False)
            bar.update(1)

    def _leader(self, records: dict[int, dict], running_only: bool = False) -> int:
        """The restart of the best log-likelihood so far (``running_only``: among those in ``records``)."""
        best = {r: v for r, v in self._best.items() if r in records} if running_only else self._best
        if best:
            return max(best, key=best.__getitem__)
        values = {r: _number(rec.get("loglik")) for r, rec in records.items()}
        known = {r: v for r, v in values.items() if v is not None}
        return max(known, key=known.__getitem__) if known else next(iter(records))

    def _why_stopped(self, restart: int) -> str:
        last, earlier = self._previous.get(restart, {}), self._earlier.get(restart, {})
        loglik, change = _number(last.get("loglik")), _number(last.get("change"))
        if earlier.get("step") == "extrapolated" and _number(earlier.get("loglik")) is not None and loglik is not None:
            change = loglik - _number(earlier["loglik"])  # SQUAREM judges the image against its extrapolated point
        if self.tol is None or loglik is None or change is None or last.get("step", "em") != "em":
            return "stopped"
        if "gap" in last:  # EM's rule (the estimated distance to the maximum within tol) is the loop's to judge
            return "converged" if last.get("converged") else "dropped"
        return "converged" if abs(change) <= self.tol * abs(loglik) else "dropped"

    def _describe(self, record: dict, restart: int) -> str:
        parts = [f"iteration {_count(record.get('iteration', self._iterations + 1))}"]
        value = _number(record.get("loglik"))
        name = "loglik"
        if value is None:
            name, value = next(((k, _number(record.get(k))) for k in ("deviance", "objective")
                                if _number(record.get(k)) is not None), (None, None))
        if name is not None and value is not None:
            parts.append(f"{name} {value:,.2f}")
            change = _number(record.get("change"))
            before = _number(self._previous.get(restart, {}).get(name))
            if change is None and "change" not in record and before is not None:
                change = value - before
            if change is not None:
                parts.append(f"change {change:+.3g}")
        error = _number(record.get("max_error"))
        if error is not None:
            parts.append(f"max error {error:.3g}")
        step = record.get("step")
        if step in ("extrapolated", "incremental"):
            parts.append(f"({step})")
        elif step == "em" and record.get("accepted", True) is False:
            parts.append("(rejected)")
        return "  ".join(parts)

    def _short(self, record: dict | None, restart: int, several: bool) -> str:
        if record is None:
            return f"best #{restart} done, {len(self._running)} running"
        value = _number(record.get("loglik"))
        text = "" if value is None else f"loglik {value:,.2f}"
        if several:
            text += f"{', ' if text else ''}best #{restart}, {len(self._running)} running"
        return text

    def _summarise(self, leader: int, now: float) -> None:
        self._summary_at = now
        parts = [f"{len(self._running)} running"]
        for why in ("converged", "dropped", "stopped"):
            n = sum(1 for reason in self._stopped.values() if reason == why)
            if n:
                parts.append(f"{n} {why}")
        parts.append(f"best #{leader}" + (f" ({self._stopped[leader]})" if leader in self._stopped else ""))
        self._say("restarts: " + ", ".join(parts))

    def _line(self, line: str) -> None:
        self._unsaid = None
        self._said_at = time.perf_counter()
        self.lines.append(line)
        self._say(line)

    def _say(self, message: str, level: int = logging.INFO, *, show: bool = True) -> None:
        logger.log(level, message)
        if self.display is None or not show or level < logging.INFO:
            return
        if logger.isEnabledFor(level) and _logged_to_stderr(level):
            return  # a handler of the user's already prints it on stderr
        if self.display == "bar":
            self._tqdm().write(message + "\n", file=sys.stderr, end="")  # one write (see LineHandler)
        else:
            sys.stderr.write(f"{time.strftime(TIMESTAMP)} dpgm: {message}\n")
            sys.stderr.flush()

    def _tqdm(self) -> Any:
        if _ipython():
            try:
                from tqdm.auto import tqdm

                return tqdm
            except ImportError:
                pass
        from tqdm import tqdm

        return tqdm

    def _open_bar(self) -> Any:
        if self._bar is None:
            options = dict(desc=f"dpgm {self.method}".strip(), total=None, unit="it", file=sys.stderr, leave=False,
                           bar_format="{desc}: {n_fmt} iterations [{elapsed}, {rate_inv_fmt}{postfix}]")
            try:
                self._bar = self._tqdm()(**options)
            except ImportError:  # Jupyter without ipywidgets: the text bar
                from tqdm import tqdm

                self._bar = tqdm(**options)
        return self._bar

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

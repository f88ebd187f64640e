"""Watching a fit live: ``/dpgm`` in the Dask dashboard.

Three pieces, one per process:

* **Driver** — :class:`FitReporter` wraps the callback of :func:`dpgm.fit`: every
  iteration's record (log-likelihood, change, parameter change, marginal error, seconds) gains the fit
  id, method, restart, elapsed time and rows/s of the last pass over the data, and is
  logged with ``client.log_event("dpgm.fit", record)`` from a background thread, so a
  fit never waits on the scheduler and never fails because logging failed.
* **Scheduler** — :class:`FitLog`, a ``SchedulerPlugin``, keeps every point of every
  fit (the scheduler's own event log keeps only the last 1000 events per topic).
* **Dashboard** — ``/dpgm`` (a Bokeh page: log-likelihood per iteration for every
  restart of every fit, and a table of the latest values) and ``/dpgm/data.json``
  on the scheduler's dashboard address.

The scheduler side is installed by preloading this module::

    dask scheduler --preload dpgm.dashboard

:func:`dpgm.cluster.connect`'s embedded LocalCluster preloads it already.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client, Scheduler

__all__ = ["FitLog", "FitReporter", "TOPIC", "PAGE", "dask_setup"]

logger = logging.getLogger(__name__)

TOPIC = "dpgm.fit"
"""Event topic of the per-iteration records."""
PAGE = "dpgm"
"""Path of the page on the scheduler's dashboard (``/dpgm``; data at ``/dpgm/data.json``)."""
PLUGIN_NAME = "dpgm-fit-log"
MAX_FITS = 200
"""Fits the scheduler remembers; the oldest finished ones are forgotten first."""
PASS_PER_ITERATION = {"em"}
"""Methods whose every iteration is one pass over the data (the others count once, then iterate)."""
FINISHED = ("converged", "stopped", "failed")


# --------------------------------------------------------------------------- driver


def _scalar(value: Any) -> Any:
    """A msgpack-safe scalar (numpy numbers become Python numbers), or None."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class FitReporter:
    """The callback :func:`dpgm.fit` hands to the algorithm when a cluster is at hand.

    Queues an enriched copy of the algorithm's record for the ``"dpgm.fit"`` event
    log, then calls the user's ``callback`` with the record, unchanged.

    Parameters
    ----------
    client
        Client whose scheduler receives the events.
    method
        Fitting method (``"em"``, ``"ipf"``, ``"gis"``, ``"lbfgs"``, ...).
    model
        Kind of model (class name).
    rows
        Rows of the data (None for a contingency table: no pass over rows).
    callback
        The user's callback, called first.
    interval
        Seconds between two sends of the queued events.
    """

    def __init__(self, client: Client, method: str, model: str, rows: float | None,
                 callback=None, *, interval: float = 0.1) -> None:
        self.client = client
        self.callback = callback
        self.method = method
        self.model = model
        self.rows = rows
        self.interval = interval
        self.fit = f"{method}-{uuid.uuid4().hex[:8]}"
        self.started = time.time()
        self._clock = time.perf_counter()
        self._queue: list[dict] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_loglik: dict[int, float] = {}
        self._pass = (None, None)  # (iteration, seconds of the algorithm's clock) of the last pass seen
        self._pass_seconds: float | None = None
        self.failed = False
        self._put({"status": "running", "rows": _scalar(rows), "started": self.started})

    def __call__(self, record: dict) -> None:
        try:
            self._put(self._enrich(record))
        except Exception:  # never fail a fit because its progress could not be reported
            logger.debug("dpgm: could not queue a fit event", exc_info=True)
        if self.callback is not None:
            self.callback(record)

    def _enrich(self, record: dict) -> dict:
        restart = int(record.get("restart", 0))
        iteration = record.get("iteration")
        seconds = _scalar(record.get("seconds"))
        loglik = _scalar(record.get("loglik"))
        change = _scalar(record.get("change"))
        if change is None and loglik is not None and restart in self._last_loglik:
            change = loglik - self._last_loglik[restart]
        if loglik is not None:
            self._last_loglik[restart] = loglik
        elapsed = time.perf_counter() - self._clock
        if self.method in PASS_PER_ITERATION:
            # one pass per iteration, shared by the restarts: the time between iterations
            if seconds is not None and iteration != self._pass[0]:
                previous_iteration, previous_seconds = self._pass
                self._pass_seconds = seconds - (previous_seconds if previous_iteration is not None else 0.0)
                self._pass = (iteration, seconds)
        elif self._pass_seconds is None and seconds is not None:
            # one counting pass before the first iteration: the time before the algorithm's clock started
            self._pass_seconds = max(elapsed - seconds, 0.0)
        rate = None
        if self.rows and self._pass_seconds:
            rate = self.rows / self._pass_seconds
        extra = {k: _scalar(v) for k, v in record.items()
                 if k not in ("restart", "iteration", "loglik", "change", "seconds")}
        return {
            **{k: v for k, v in extra.items() if v is not None},
            "status": "running",
            "restart": restart,
            "iteration": _scalar(iteration),
            "loglik": loglik,
            "change": change,
            "seconds": seconds,
            "elapsed": elapsed,
            "pass_seconds": self._pass_seconds,
            "rows_per_second": rate,
        }

    def finish(self, status: str, **info: Any) -> None:
        """Queue the fit's last event (``converged``, ``stopped`` or ``failed``) and send everything queued."""
        try:
            self._put({"status": status, "elapsed": time.perf_counter() - self._clock,
                       **{k: _scalar(v) for k, v in info.items()}})
        except Exception:
            logger.debug("dpgm: could not queue a fit event", exc_info=True)
        self._done.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        else:
            self._send()

    def _put(self, event: dict) -> None:
        event = {"fit": self.fit, "method": self.method, "model": self.model, **event}
        with self._lock:
            self._queue.append(event)
            if self._thread is None and not self._done.is_set():
                self._thread = threading.Thread(target=self._run, name=f"dpgm-events-{self.fit}", daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._send()
            if self._done.is_set():
                self._send()
                return
            self._done.wait(self.interval)

    def _send(self) -> None:
        with self._lock:
            events, self._queue = self._queue, []
        for event in events:
            if self.failed:
                return
            try:
                self.client.log_event(TOPIC, event)
            except Exception:
                # a closed client or an unreachable scheduler: stop trying, keep fitting
                self.failed = True
                logger.debug("dpgm: could not log a fit event", exc_info=True)


# --------------------------------------------------------------------------- scheduler


class FitLog:
    """What the scheduler remembers of every fit: all its points, per restart.

    A ``distributed.diagnostics.plugin.SchedulerPlugin`` (see :func:`plugin`).
    """

    def __init__(self) -> None:
        self.fits: OrderedDict[str, dict] = OrderedDict()
        self.version = 0

    def add(self, event: Any) -> None:
        if not isinstance(event, dict) or not isinstance(event.get("fit"), str):
            return
        fit_id = event["fit"]
        fit = self.fits.get(fit_id)
        if fit is None:
            fit = self.fits[fit_id] = {
                "fit": fit_id, "method": event.get("method"), "model": event.get("model"),
                "status": "running", "started": event.get("started") or time.time(), "rows": None,
                "restarts": {},
            }
            self._forget_old()
        fit["updated"] = time.time()
        for key in ("status", "rows", "started", "converged", "n_iter", "error", "elapsed"):
            if event.get(key) is not None and not (key == "status" and fit["status"] in FINISHED):
                fit[key] = event[key]
        if event.get("iteration") is not None:
            restart = fit["restarts"].setdefault(
                int(event.get("restart", 0)), {"iteration": [], "loglik": [], "gap": [], "latest": {}})
            restart["iteration"].append(event["iteration"])
            restart["loglik"].append(event.get("loglik"))
            restart["gap"].append(event.get("gap"))  # EM's estimated distance to the maximum (None: none)
            restart["latest"] = {k: v for k, v in event.items() if k not in ("fit", "method", "model", "status")}
        self.version += 1

    def _forget_old(self) -> None:
        while len(self.fits) > MAX_FITS:
            finished = [k for k, f in self.fits.items() if f["status"] in FINISHED]
            self.fits.pop(finished[0] if finished else next(iter(self.fits)))

    def summary(self) -> list[dict]:
        """Every fit with all its points: the body of ``/dpgm/data.json``."""
        return [
            {**{k: v for k, v in fit.items() if k != "restarts"},
             "restarts": [{"restart": r, "iteration": list(p["iteration"]), "loglik": list(p["loglik"]),
                           "gap": list(p["gap"]), "latest": dict(p["latest"])} for r, p in sorted(fit["restarts"].items())]}
            for fit in self.fits.values()
        ]


def plugin() -> Any:
    """A new :class:`FitLog` that is also a ``SchedulerPlugin`` (distributed imported here, not at import)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class FitLogPlugin(FitLog, SchedulerPlugin):
        name = PLUGIN_NAME

        async def start(self, scheduler: Scheduler) -> None:
            for _, event in scheduler.get_events(TOPIC):  # events logged before the plugin
                self.add(event)

        def log_event(self, topic: str, msg: Any) -> None:
            if topic == TOPIC:
                self.add(msg)

    return FitLogPlugin()


def fit_log(scheduler: Scheduler) -> FitLog | None:
    return scheduler.plugins.get(PLUGIN_NAME)


async def dask_setup(scheduler: Scheduler) -> None:
    """Scheduler preload: the fit log, ``/dpgm/data.json`` and the ``/dpgm`` page."""
    if fit_log(scheduler) is None:
        scheduler.add_plugin(plugin(), name=PLUGIN_NAME)
    application = getattr(scheduler, "http_application", None)
    if application is None:
        return
    prefix = _prefix(application)
    application.add_handlers(r".*", [(f"{prefix}{PAGE}/data.json", _json_handler(), {"dask_server": scheduler})])
    _serve_page(scheduler, application, prefix)


def _prefix(application: Any) -> str:
    """The dashboard's URL prefix (``/`` unless the scheduler was given ``http_prefix``)."""
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:
        return "/"
    for app in application.applications:
        if isinstance(app, BokehTornado) and app.prefix.strip("/"):
            return "/" + app.prefix.strip("/") + "/"
    return "/"


def _json_handler() -> type:
    from distributed.http.utils import RequestHandler

    class FitsJSON(RequestHandler):
        def get(self) -> None:
            log = fit_log(self.server)
            fits = log.summary() if log is not None else []
            wanted = self.get_argument("fit", None)
            if wanted is not None:
                fits = [f for f in fits if f["fit"] == wanted]
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps({"fits": fits}))

    return FitsJSON


def _serve_page(scheduler: Scheduler, application: Any, prefix: str) -> None:
    """Add ``/dpgm`` as a Bokeh app next to distributed's own, the way distributed adds them.

    distributed builds its pages in ``distributed.dashboard.scheduler.connect`` from the
    ``applications`` dict, before any preload's ``dask_setup`` runs; a second
    ``BokehApplication`` added to the same HTTP application serves ``/dpgm`` (and
    distributed's navigation bar gains a "Dpgm" link). Not public API: the tests load
    the page in a browser.
    """
    if not getattr(scheduler, "services", {}).get("dashboard"):
        return
    if any(f"/{PAGE}" in getattr(app, "app_paths", ()) for app in application.applications):
        return
    try:
        from distributed.dashboard.core import BokehApplication
        from distributed.dashboard.scheduler import template_variables
        from tornado.ioloop import IOLoop
    except ImportError:  # no bokeh: distributed serves its "install bokeh" page
        return
    variables = template_variables(scheduler)
    pages = variables.get("pages")
    if isinstance(pages, list) and PAGE not in pages:
        pages.append(PAGE)  # the shared, memoized list behind every page's navigation bar
    app = BokehApplication({f"/{PAGE}": fit_page}, scheduler, prefix=prefix, template_variables=variables)
    application.add_application(app)
    app.initialize(IOLoop.current())
    app.start()


# --------------------------------------------------------------------------- page

COLUMNS = [
    ("fit", "fit"), ("method", "method"), ("status", "status"), ("restart", "restart"),
    ("iteration", "iteration"), ("points", "points"), ("loglik", "log-likelihood"), ("change", "Δ log-lik"),
    ("gap", "est. distance to max"), ("param_change", "parameter change"), ("max_error", "max marginal error"), ("elapsed", "elapsed (s)"), ("rows_per_second", "rows/s (last pass)"),
]
TABLE_STYLE = ("<style>table.dpgm{border-collapse:collapse;font-size:12px;width:100%}"
               "table.dpgm th,table.dpgm td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
               "table.dpgm th:nth-child(-n+3),table.dpgm td:nth-child(-n+3){text-align:left}</style>")
SHOWN_FITS = 8
"""Plots on the page: the most recent fits."""


def _html_table(rows: dict[str, list]) -> str:
    """The table of the latest values, one ``<tr class="dpgm-row">`` per fit and restart."""
    import html

    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in COLUMNS)
    body = "".join("<tr class='dpgm-row'>" + "".join(f"<td>{html.escape(str(rows[key][i]))}</td>" for key, _ in COLUMNS)
                   + "</tr>" for i in range(len(rows["fit"])))
    return f"{TABLE_STYLE}<table class='dpgm'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def format_value(value: Any, digits: int = 6) -> str:
    """A value as the page's table shows it (6 significant digits; thousands separated from 10⁶; blank if None)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
            return f"{value:.{digits - 2}e}"
        return f"{value:.{digits}g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


class FitPage:
    """One browser session of ``/dpgm``: a table of the latest values and a plot per fit."""

    def __init__(self, scheduler: Scheduler, doc: Any) -> None:
        from bokeh.layouts import column
        from bokeh.models import Div

        self.scheduler = scheduler
        self.doc = doc
        self.version = -1
        self.figures: dict[Any, Any] = {}
        self.sources: dict[tuple, Any] = {}
        self.heading = Div(text="", name="dpgm-summary", sizing_mode="stretch_width")
        # the latest values as an HTML table (a Bokeh DataTable kept drawing the first rows it got, though every
        # update reached the browser)
        self.table = Div(text="", name="dpgm-table", sizing_mode="stretch_width")
        self.plots = column(sizing_mode="stretch_width", name="dpgm-plots")
        self.root = column(self.heading, self.table, self.plots, sizing_mode="stretch_width")

    def update(self) -> None:
        log = fit_log(self.scheduler)
        if log is None:
            self.heading.text = ("<b>dpgm</b>: the fit log is not installed on this scheduler "
                                 "(start it with <code>--preload dpgm.dashboard</code>)")
            return
        if log.version == self.version:
            return
        self.version = log.version
        fits = list(log.fits.values())
        rows: dict[str, list] = {key: [] for key, _ in COLUMNS}
        points = 0
        for fit in reversed(fits):
            for restart, data in sorted(fit["restarts"].items()):
                latest = data["latest"]
                points += len(data["iteration"])
                values = {**latest, "fit": fit["fit"], "method": fit["method"], "status": fit["status"],
                          "restart": restart, "points": len(data["iteration"])}
                for key, _ in COLUMNS:
                    rows[key].append(format_value(values.get(key)))
        self.table.text = _html_table(rows)
        running = sum(f["status"] == "running" for f in fits)
        self.heading.text = (f"<b>dpgm fits</b>: {len(fits)} fits ({running} running), "
                             f"<span id='dpgm-points'>{points}</span> points")
        for fit in fits[-SHOWN_FITS:]:
            self._plot(fit)

    def _plot(self, fit: dict) -> None:
        from bokeh.models import BasicTicker, ColumnDataSource
        from bokeh.palettes import Category10_10
        from bokeh.plotting import figure

        fit_id = fit["fit"]
        plot = self.figures.get(fit_id)
        if plot is None:
            plot = figure(title=f"{fit_id} ({fit['model']}, {fit['method']}): log-likelihood per iteration",
                          height=260, sizing_mode="stretch_width", x_axis_label="iteration",
                          y_axis_label="log-likelihood", tools="pan,wheel_zoom,box_zoom,reset,hover",
                          tooltips=[("restart", "@restart"), ("iteration", "@iteration"),
                                    ("log-likelihood", "@loglik")], name=f"dpgm-plot|{fit_id}")
            plot.xaxis.ticker = BasicTicker(min_interval=1)  # iterations are whole numbers
            self.figures[fit_id] = plot
            self.plots.children = [*self.plots.children, plot]
        colors = itertools.cycle(Category10_10)
        for restart, data in sorted(fit["restarts"].items()):
            color = next(colors)
            key = (fit_id, restart)
            source = self.sources.get(key)
            if source is None:
                source = self.sources[key] = ColumnDataSource(
                    {"iteration": [], "loglik": [], "restart": []}, name=f"dpgm-points|{fit_id}|{restart}")
                plot.line("iteration", "loglik", source=source, color=color,
                          legend_label=f"restart {restart}")
                plot.scatter("iteration", "loglik", source=source, color=color, size=4)
                plot.legend.location = "bottom_right"
                plot.legend.click_policy = "hide"
            shown = len(source.data["iteration"])
            new = len(data["iteration"]) - shown
            if new > 0:
                source.stream({"iteration": data["iteration"][shown:],
                               "loglik": [math.nan if v is None else v for v in data["loglik"][shown:]],
                               "restart": [restart] * new})
        self._plot_gaps(fit)  # below the fit's log-likelihood


    def _plot_gaps(self, fit: dict) -> None:
        """The convergence panel: how far below the fit's best log-likelihood so far each iteration of each
        restart is, on a log scale (the phase the raw curve flattens once the first iterations are drawn), and
        for EM the estimated distance to the maximum (``gap``, dashed: EM stops when it is within tol)."""
        from bokeh.models import BasicTicker, ColumnDataSource
        from bokeh.palettes import Category10_10
        from bokeh.plotting import figure

        fit_id, key = fit["fit"], ("gap", fit["fit"])
        values = [v for data in fit["restarts"].values() for v in data["loglik"] if v is not None]
        if not values:
            return
        best = max(values)
        plot = self.figures.get(key)
        if plot is None:
            plot = figure(title=f"{fit_id}: log-likelihood below the best so far (log scale)", height=220,
                          sizing_mode="stretch_width", x_axis_label="iteration", y_axis_label="best − log-likelihood",
                          y_axis_type="log", tools="pan,wheel_zoom,box_zoom,reset,hover",
                          tooltips=[("restart", "@restart"), ("iteration", "@iteration"), ("below the best", "@gap")],
                          name=f"dpgm-gap-plot|{fit_id}")
            plot.xaxis.ticker = BasicTicker(min_interval=1)
            self.figures[key] = plot
            self.plots.children = [*self.plots.children, plot]
        colors = itertools.cycle(Category10_10)
        for restart, data in sorted(fit["restarts"].items()):
            color = next(colors)
            points = [(k, best - v) for k, v in zip(data["iteration"], data["loglik"], strict=True)
                      if v is not None and best - v > 0]
            new = {"iteration": [k for k, _ in points], "gap": [g for _, g in points], "restart": [restart] * len(points)}
            source = self.sources.get((*key, restart))
            if source is None:
                source = self.sources[(*key, restart)] = ColumnDataSource(new, name=f"dpgm-gap|{fit_id}|{restart}")
                plot.line("iteration", "gap", source=source, color=color)
                plot.scatter("iteration", "gap", source=source, color=color, size=4)
            elif source.data["gap"] != new["gap"] or source.data["iteration"] != new["iteration"]:
                source.data = new
            estimated = [(k, g) for k, g in zip(data["iteration"], data.get("gap", ()), strict=False)
                         if g is not None and g > 0]
            if estimated:
                new = {"iteration": [k for k, _ in estimated], "gap": [g for _, g in estimated],
                       "restart": [restart] * len(estimated)}
                source = self.sources.get((*key, restart, "estimated"))
                if source is None:
                    source = self.sources[(*key, restart, "estimated")] = ColumnDataSource(
                        new, name=f"dpgm-estimated-gap|{fit_id}|{restart}")
                    plot.line("iteration", "gap", source=source, color=color, line_dash="dashed",
                              legend_label="estimated distance to the maximum")
                    plot.legend.location = "bottom_left"
                elif source.data["gap"] != new["gap"] or source.data["iteration"] != new["iteration"]:
                    source.data = new


def fit_page(scheduler: Scheduler, extra: dict, doc: Any) -> None:
    """The Bokeh document of ``/dpgm`` (signature of distributed's dashboard pages)."""
    page = FitPage(scheduler, doc)
    page.update()
    doc.add_periodic_callback(page.update, 500)
    doc.title = "Dask: dpgm fits"
    doc.add_root(page.root)
    try:
        from distributed.dashboard.components.scheduler import BOKEH_THEME, env

        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.theme = BOKEH_THEME
    except (ImportError, AttributeError):  # distributed's page template moved: the page still works
        pass

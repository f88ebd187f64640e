"""The dashboard's /dpgm page: events per iteration, the scheduler's fit log, the page in a real browser."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from browser import Chromium, FitThread, Pause, fits_on, get, load_page, wait_for

import dpgm
from dpgm.cluster import connect
from dpgm.dashboard import COLUMNS, FitLog, FitReporter

QUESTIONS = {f"q{i}": ["a", "b", "c"] for i in range(6)}
CYCLE = [("q0", "q1"), ("q1", "q2"), ("q2", "q3"), ("q3", "q0")]  # not decomposable: IPF iterates
SCREENSHOT = os.environ.get("DPGM_DASHBOARD_SCREENSHOT")  # e.g. docs/dashboard.png to refresh the README's


class RecordingClient:
    status = "running"

    def __init__(self, broken: bool = False):
        self.events: list[tuple[str, dict]] = []
        self.broken = broken

    def log_event(self, topic, msg):
        if self.broken:
            raise OSError("scheduler gone")
        json.dumps(msg)  # what msgpack would refuse, json refuses too
        self.events.append((topic, msg))


def test_reporter_logs_each_record_with_fit_id_restart_and_change_and_passes_the_record_on():
    seen = []
    client = RecordingClient()
    reporter = FitReporter(client, "ipf", "MarkovNetwork", 1000, seen.append)
    records = [{"iteration": k, "loglik": np.float64(-10.0 + k), "max_error": 0.1 / k, "seconds": 1e-4 * k,
                "param_change": [np.inf, np.float64(0.5), None][k - 1]} for k in (1, 2, 3)]
    time.sleep(0.02)  # the counting pass, before the algorithm's clock starts
    for record in records:
        reporter(record)
    reporter.finish("converged", converged=True, n_iter=3)
    assert seen == records  # the user's callback gets the algorithm's records, unchanged
    topics = {topic for topic, _ in client.events}
    assert topics == {"dpgm.fit"}
    events = [event for _, event in client.events]
    assert [e["status"] for e in events] == ["running"] * 4 + ["converged"]
    assert {e["fit"] for e in events} == {reporter.fit} and reporter.fit.startswith("ipf-")
    points = [e for e in events if "iteration" in e]
    assert [e["iteration"] for e in points] == [1, 2, 3]
    assert [e["restart"] for e in points] == [0, 0, 0]
    assert [e["change"] for e in points] == [None, 1.0, 1.0]
    assert [e["max_error"] for e in points] == [0.1, 0.05, 0.1 / 3]
    assert [e.get("param_change") for e in points] == [None, 0.5, None]  # inf is not JSON: left blank
    assert all(1000 / 0.1 < e["rows_per_second"] < 1000 / 0.02 for e in points)  # 1000 rows in the pass


def test_reporter_never_fails_the_fit_when_the_scheduler_is_gone():
    seen = []
    reporter = FitReporter(RecordingClient(broken=True), "em", "BayesianNetwork", 10, seen.append)
    for k in range(1, 4):
        reporter({"restart": 0, "iteration": k, "loglik": -5.0, "change": 0.0, "seconds": 0.1 * k})
    reporter.finish("stopped")
    assert len(seen) == 3 and reporter.failed


def test_fit_log_keeps_every_point_and_the_final_status():
    log = FitLog()
    log.add({"fit": "em-1", "method": "em", "model": "BayesianNetwork", "status": "running", "rows": 5})
    for k in range(1, 1501):  # more than the 1000 events per topic the scheduler keeps
        for restart in (0, 1):
            log.add({"fit": "em-1", "status": "running", "restart": restart, "iteration": k, "loglik": -k})
    log.add({"fit": "em-1", "status": "stopped", "n_iter": 1500})
    log.add({"fit": "em-1", "status": "running"})  # a late event does not revive a finished fit
    log.add({"no": "fit id"})
    (fit,) = log.summary()
    assert fit["status"] == "stopped" and fit["n_iter"] == 1500 and fit["rows"] == 5
    assert [r["iteration"] for r in fit["restarts"]] == [list(range(1, 1501))] * 2
    assert fit["restarts"][1]["latest"]["loglik"] == -1500


@pytest.fixture(scope="module")
def zarr_data(tmp_path_factory):
    truth = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(3), concentration=0.4)
    data = dpgm.sample_bayesian_network(truth, 20_000, None, seed=4).drop_vars("class")
    path = tmp_path_factory.mktemp("dashboard") / "answers.zarr"
    dpgm.write_dataset(data, path, chunk_rows=5_000)
    return path


def test_dpgm_page_in_headless_chromium_shows_every_point_of_runningfits_on(tmp_path, zarr_data):
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (scripts/install-system-packages.sh installs it as root)")
    chromium = Chromium(tmp_path / "profile")
    try:
        with connect(n_workers=1, dashboard_address="127.0.0.1:0") as client:
            base = client.dashboard_link.rsplit("/", 1)[0]
            assert 'href="dpgm"' in get(f"{base}/status").decode()  # the printed link leads to the page
            data = dpgm.open_dataset(zarr_data)
            em_pause, ipf_pause = Pause(restart=1, iteration=8), Pause(restart=0, iteration=4)
            em = FitThread(dpgm.latent_class_model(QUESTIONS, 3), data, method="em", n_init=2, random_state=0,
                           tol=0, max_iter=10, client=client, callback=em_pause)
            ipf = FitThread(dpgm.MarkovNetwork.from_cliques(CYCLE, QUESTIONS), data, method="ipf", tol=0,
                            max_iter=6, client=client, callback=ipf_pause)
            em.start()
            ipf.start()
            try:
                for pause in (em_pause, ipf_pause):
                    assert pause.reached.wait(60), "a fit never reached its pause"

                def points(fits):
                    return {(f["method"], r["restart"]): len(r["iteration"])
                            for f in fits.values() for r in f["restarts"]}

                def paused_fits():  # every point up to the pause has reached the scheduler
                    fits = fits_on(base)
                    return fits if points(fits) == {("em", 0): 8, ("em", 1): 8, ("ipf", 0): 4} else None

                fits = wait_for(paused_fits, 30, "the paused fits' points in /dpgm/data.json",
                                 lambda: points(fits_on(base)))
                assert all(f["status"] == "running" for f in fits.values())
                assert {f["model"] for f in fits.values()} == {"BayesianNetwork", "MarkovNetwork"}
                latest = [r["latest"] for f in fits.values() for r in f["restarts"]]
                assert all(p["rows_per_second"] > 0 and p["elapsed"] > 0 for p in latest)
                (ipf_id,) = [k for k, f in fits.items() if f["method"] == "ipf"]
                assert fits[ipf_id]["restarts"][0]["latest"]["max_error"] > 0  # IPF's marginal error

                expected = {f"dpgm-points|{k}|{r['restart']}": len(r["iteration"])
                            for k, f in fits.items() for r in f["restarts"]}
                shot = Path(SCREENSHOT) if SCREENSHOT else tmp_path / "dashboard.png"
                state = asyncio.run(load_page(chromium.page_socket(), f"{base}/dpgm", expected, shot))
                assert state.get("points") == expected  # the browser's Bokeh document holds every point
                assert "20 points" in state["text"] and "2 running" in state["text"]
                assert all(fit_id in state["text"] for fit_id in fits)  # the table lists every fit
                assert "parameter change" in state["text"]
                # the parameter change shown for each fit and restart is the one in the algorithm's last record
                at = [key for key, _ in COLUMNS].index  # the rendered table's cells, in COLUMNS order
                shown = {(row[at("fit")], row[at("restart")]): row[at("param_change")] for row in state["rows"]}
                last = {("em", r["restart"]): r for r in em_pause.records} | {("ipf", 0): ipf_pause.records[-1]}
                assert len(shown) == len(last) == 3
                for fit_id, fit in fits.items():
                    for restart in fit["restarts"]:
                        record = last[fit["method"], restart["restart"]]
                        assert record["iteration"] == restart["iteration"][-1]
                        value = record.get("param_change")
                        text = shown[fit_id, str(restart["restart"])]
                        if value is None or not np.isfinite(value):
                            assert text == "", (fit_id, text)
                        else:  # shown to 6 significant digits
                            assert float(text) == pytest.approx(value, rel=1e-5, abs=0), (fit_id, text, value)
                assert ipf_pause.records[-1]["param_change"] > 0  # IPF's records carry it (EM's may not)
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
            finally:
                em_pause.release.set()
                ipf_pause.release.set()
                em.join(120)
                ipf.join(120)
            for thread in (em, ipf):
                if thread.error is not None:
                    raise thread.error
            # driver-side gradient fits are watched the same way
            results = {"em": em.result, "ipf": ipf.result}
            for method in ("gis", "lbfgs", "newton"):
                results[method] = dpgm.fit(dpgm.MarkovNetwork.from_cliques(CYCLE, QUESTIONS), data, method=method,
                                           tol=1e-6, max_iter=2000, client=client)
            fits = fits_on(base)
            by_method = {f["method"]: f for f in fits.values()}
            assert set(by_method) == set(results)
            for method in ("ipf", "gis", "lbfgs", "newton"):  # the last record's parameter change reached the log
                assert by_method[method]["restarts"][0]["latest"]["param_change"] == pytest.approx(
                    results[method].history[-1]["param_change"], rel=1e-15), method
            for method, result in results.items():
                fit = by_method[method]
                assert fit["status"] == ("converged" if result.converged else "stopped"), method
                assert fit["n_iter"] == result.n_iter
                histories = result.info["restart_histories"] if method == "em" else [result.history]
                assert [r["loglik"] for r in fit["restarts"]] == [[h["loglik"] for h in history]
                                                                  for history in histories], method
    finally:
        chromium.close()


@pytest.mark.usefixtures("shared_cluster")  # the dpgm command on the session's cluster (cli_runs)
def test_cli_fit_writes_a_performance_report(tmp_path, zarr_data):
    from cli_runs import run_dpgm

    (tmp_path / "mn.yaml").write_text("model: markov_network\ncliques: [[q0, q1], [q1, q2], [q2, q3], [q3, q0]]\n"
                                      "method: ipf\ntol: 1.0e-8\n")
    report = tmp_path / "report.html"
    result = run_dpgm("fit", tmp_path / "mn.yaml", zarr_data, "--out", tmp_path / "mn.zarr", "--performance-report",
                      report, timeout=180)
    assert result.returncode == 0, result.stderr
    html = report.read_text()
    assert "Dask Performance Report" in html and "Task Stream" in html
    assert "dpgm" in html  # the counting pass's tasks are in the task stream


# ---------------------------------------------------------------- the records' parameter change


def _ipf_log_potentials(table, k: int) -> dict:
    model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "a")],
                                            {v: list(table.coords[v].values) for v in table.dims})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(model, table, method="ipf", tol=0.0, max_iter=k)
    return result, {s: np.log(p.transpose(*s).values) for s, p in result.model.potentials.items()}


def test_ipf_records_param_change_equal_to_the_change_between_fits_of_k_and_k_plus_1_sweeps():
    """Oracle: two independent fits stopped after k and k + 1 sweeps; the (k + 1)-th record's
    parameter change is their largest log-potential difference (k = 0: the uniform start, log 1 = 0)."""
    import xarray as xr

    rng = np.random.default_rng(7)
    states = {"a": ["0", "1"], "b": ["x", "y", "z"], "c": ["u", "v"]}
    table = xr.DataArray(rng.integers(1, 40, size=(2, 3, 2)).astype(float), dims=list(states), coords=states)
    longest, _ = _ipf_log_potentials(table, 5)
    changes = [record["param_change"] for record in longest.history]
    assert len(changes) == 5
    previous = {s: np.zeros(np.shape(t)) for s, t in _ipf_log_potentials(table, 1)[1].items()}
    for k in range(1, 6):
        _, current = _ipf_log_potentials(table, k)
        expected = max(float(np.abs(current[s] - previous[s]).max()) for s in current)
        # log(exp(x)) through the fitted model's potentials: rounding of ~1e-16 |x|
        assert changes[k - 1] == pytest.approx(expected, rel=1e-9, abs=1e-13), k
        previous = current
    assert changes[0] > changes[-1] > 0  # a loop: IPF iterates, and slows down


def test_gaussian_ips_records_param_change_equal_to_the_change_between_fits_of_k_and_k_plus_1_sweeps():
    import pandas as pd

    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.multivariate_normal(np.zeros(4), np.eye(4) + 0.3, 500), columns=list("abcd"))
    cycle = dpgm.GaussianGraphicalModel([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    data = dpgm.from_pandas(frame)

    def precision(k):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
            result = dpgm.fit(cycle, data, method="ipf", tol=0.0, max_iter=k)
        return result, result.model.precision.values

    longest, _ = precision(4)
    start = np.diag(1.0 / np.diag(np.cov(frame.to_numpy().T, bias=True)))  # IPS starts from diag(S)^-1
    previous = start
    for k in range(1, 5):
        _, current = precision(k)
        expected = float(np.abs(current - previous).max())
        assert longest.history[k - 1]["param_change"] == pytest.approx(expected, rel=1e-9, abs=1e-13), k
        previous = current

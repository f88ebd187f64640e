"""The /dpgm page stays live: one browser page, loaded once, follows a running fit through several updates.

Headless Chromium watches the same page while the fit is held at iterations 3, 6 and 9 (``browser.Steps``);
at each stop the table the user sees (its rendered cells) shows that iteration and its log-likelihood, and
the convergence panel holds, for every earlier iteration, how far below the best log-likelihood so far it
is. Oracles: the algorithm's own records (handed to the fit's callback) and NumPy on them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import warnings

import numpy as np
import pytest
from browser import TABLE_ROWS, Chromium, DevTools, FitThread, Steps, get

import dpgm
from dpgm.cluster import connect
from dpgm.dashboard import format_value

QUESTIONS = {f"q{i}": ["a", "b", "c"] for i in range(6)}

# the data of the page's convergence panels, as the browser's Bokeh document holds them
GAPS = """(() => {
  if (!window.Bokeh || !Bokeh.documents || !Bokeh.documents.length) return null;
  const gaps = {};
  for (const doc of Bokeh.documents)
    for (const model of doc.all_models)
      if (typeof model.name === "string" && model.name.startsWith("dpgm-gap|")) {
        const get = (key) => Array.from(model.data instanceof Map ? model.data.get(key) : model.data[key]);
        gaps[model.name] = {iteration: get("iteration"), gap: get("gap")};
      }
  return JSON.stringify(gaps);
})()"""


def _expected_gaps(logliks: list[float]) -> tuple[list[int], list[float]]:
    """Iterations before the best so far and how far below it each is (NumPy: the oracle)."""
    values = np.asarray(logliks, dtype=float)
    best = values.max()
    keep = np.flatnonzero(best - values > 0)
    return (keep + 1).tolist(), (best - values[keep]).tolist()


async def _watch(socket_url: str, url: str, steps: Steps, fit_id: str) -> list[dict]:
    seen = []
    async with DevTools(socket_url) as page:
        await page.call("Page.navigate", url=url)  # once: every later check is on this same page
        for stop in (3, 6, 9):
            assert steps.held.wait(120), f"the fit never reached iteration {stop}"
            assert steps.at == stop
            record = steps.records[-1]
            shown = format_value(record["loglik"])

            def current(rows, stop=stop, shown=shown):
                return any(fit_id in row and str(stop) in row and shown in row for row in rows)

            rows = await page.until(TABLE_ROWS, current, 30, f"the table's row of iteration {stop} ({shown})")
            logliks = [r["loglik"] for r in steps.records if r.get("restart", 0) == 0]
            want = _expected_gaps(logliks)

            def gaps_now(gaps, want=want):
                data = gaps.get(f"dpgm-gap|{fit_id}|0")
                return data is not None and data["iteration"] == want[0]

            gaps = await page.until(GAPS, gaps_now, 30, f"the convergence panel at iteration {stop}")
            seen.append({"stop": stop, "rows": rows, "gaps": gaps[f"dpgm-gap|{fit_id}|0"], "want": want})
            steps.next()
    return seen


def test_one_dpgm_page_follows_a_fit_through_several_updates(tmp_path):
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (scripts/install-system-packages.sh installs it as root)")
    truth = dpgm.latent_class_model(QUESTIONS, 3).randomized(np.random.default_rng(3), concentration=0.4)
    data = dpgm.sample_bayesian_network(truth, 5_000, tmp_path / "a.zarr", seed=4, chunk_rows=2_500)
    data = data.drop_vars("class")
    chromium = Chromium(tmp_path / "profile")
    try:
        with connect(n_workers=1, dashboard_address="127.0.0.1:0") as client:
            base = client.dashboard_link.rsplit("/", 1)[0]
            steps = Steps(3, 6, 9)
            fit = FitThread(dpgm.latent_class_model(QUESTIONS, 3), data, method="em", n_init=1, random_state=0,
                            tol=0, max_iter=10, client=client, callback=steps)
            fit.start()
            try:
                assert steps.held.wait(120)
                (fit_id,) = [f["fit"] for f in json.loads(get(f"{base}/dpgm/data.json"))["fits"]]
                seen = asyncio.run(_watch(chromium.page_socket(), f"{base}/dpgm", steps, fit_id))
            finally:
                steps.stops.clear()
                steps.next()
                fit.join(120)
            if fit.error is not None:
                raise fit.error
    finally:
        chromium.close()
    assert [s["stop"] for s in seen] == [3, 6, 9]
    for step in seen:
        iterations, gaps = step["want"]
        assert step["gaps"]["iteration"] == iterations
        np.testing.assert_allclose(step["gaps"]["gap"], gaps, rtol=1e-12, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fit.result.n_iter == 10

"""Per-row log-likelihood (``dpgm.score``): rows/s against pgmpy and scikit-learn per core, and vs N from Zarr.

Run: ``python -m benchmarks.score [--quick] [--bn-rows 1e4 1e5] [--gmm-rows 1e5 1e6]
[--zarr-rows 1e6 1e7 3e7 1e8] [--budget-seconds 1500]`` (``--render results/score.json`` rewrites
the .md and .png of a run).

In one run:

* **Bayesian network in memory, one core** (alarm, complete rows forward-sampled):
  ``dpgm.score(model, dataset).compute()`` on the dataset loaded in this process with Dask's
  synchronous scheduler (one thread) against pgmpy 1.x's per-row probability of a full
  assignment, ``DiscreteBayesianNetwork.get_state_probability`` (pgmpy 1.1 has no
  ``BayesianModelProbability.log_probability`` nor ``log_likelihood_score``), on the network
  converted by ``model.to_pgmpy()``; and, as a floor, a hand-written NumPy gather of
  ``log cpd.values[codes]`` over pgmpy's tables (not a library API). Totals compared (rel 1e-9).
* **Gaussian mixture in memory, one core** (5 components, 8 variables, full covariance):
  ``dpgm.score`` against scikit-learn's ``GaussianMixture.score_samples`` with the same
  parameters (``weights_``, ``means_``, ``covariances_``, ``precisions_cholesky_``) copied in.
  Per-row values compared (rtol 1e-9).
* **Out of core**: alarm rows in Zarr stores (chunks of 500,000 rows, under
  /tmp/dpgm-bench-score, reused between runs); ``float(dpgm.score(model, ds, client=client).total)``
  on a fresh 2-worker LocalCluster (processes, one thread each), the first score recorded apart,
  both workers' memory sampled by distributed's ``MemorySampler``. Sizes whose expected time
  (sampling + scoring, from the rates measured so far) exceeds what is left of the budget are
  skipped, with the extrapolated time written down.

BLAS/numba threads pinned to 1 before numpy is imported; the cluster's workers get the same.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import dask  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from distributed.diagnostics import MemorySampler  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.timing import median_time, timed_on_cluster  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench-score")
CHUNK_ROWS = 500_000
GMM_COMPONENTS, GMM_VARIABLES = 5, 8


def _load() -> tuple[float, float, float]:
    return tuple(round(x, 2) for x in os.getloadavg())


# --- Bayesian network in memory ------------------------------------------------------------------

def _dpgm_in_memory(model, data, repeats: int) -> tuple[dict, np.ndarray, float]:
    with dask.config.set(scheduler="sync"):
        seconds, times, result = median_time(lambda: dpgm.score(model, data).compute(), repeats)
    return {"seconds": seconds, "times": times}, result.values, float(result.total)


def _pgmpy_codes(pg, truth, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each column's dpgm codes mapped to pgmpy's state positions."""
    codes = {}
    for v in truth.variables:
        cpd = pg.get_cpds(v)
        order = np.array([cpd.name_to_no[v][str(s)] for s in frame[v].cat.categories])
        codes[v] = order[frame[v].cat.codes.to_numpy()]
    return codes


def _bn_in_memory(truth, n: int, repeats: int, pgmpy_repeats: int) -> dict:
    data = dpgm.sample_bayesian_network(truth, n, seed=2).compute()
    ours, values, total = _dpgm_in_memory(truth, data, repeats)
    ours["rows_per_s"] = n / ours["seconds"]
    print(f"  dpgm {ours['seconds']:.4f}s ({ours['rows_per_s']:.3g} rows/s)", flush=True)
    pg = truth.to_pgmpy()
    start = time.perf_counter()
    frame = dpgm.to_pandas(data)[list(truth.variables)]
    records = frame.astype(str).to_dict("records")
    prepare = time.perf_counter() - start
    seconds, times, theirs = median_time(lambda: np.log([pg.get_state_probability(r) for r in records]),
                                         pgmpy_repeats)
    peer = {"seconds": seconds, "times": times, "rows_per_s": n / seconds, "to_records_seconds": prepare,
            "total": float(theirs.sum()),
            "total_rel_diff": abs(float(theirs.sum()) - total) / abs(total),
            "max_row_rel_diff": float(np.max(np.abs(theirs - values) / np.abs(theirs)))}
    print(f"  pgmpy get_state_probability {seconds:.3f}s ({peer['rows_per_s']:.3g} rows/s), "
          f"total rel diff {peer['total_rel_diff']:.1e}", flush=True)
    codes = _pgmpy_codes(pg, truth, frame)
    cpds = [(np.log(c.values), c.variables) for c in pg.get_cpds()]

    def gather():
        out = np.zeros(n)
        for table, variables in cpds:
            out += table[tuple(codes[v] for v in variables)]
        return out

    g_seconds, g_times, gathered = median_time(gather, repeats)
    floor = {"seconds": g_seconds, "times": g_times, "rows_per_s": n / g_seconds,
             "total_rel_diff": abs(float(gathered.sum()) - total) / abs(total)}
    print(f"  NumPy gather {g_seconds:.4f}s ({floor['rows_per_s']:.3g} rows/s)", flush=True)
    return {"n_rows": n, "dpgm": ours, "total": total, "pgmpy": peer, "numpy_gather": floor}


# --- Gaussian mixture in memory -------------------------------------------------------------------

def _mixture(seed: int = 3):
    rng = np.random.default_rng(seed)
    k, p = GMM_COMPONENTS, GMM_VARIABLES
    weights = rng.dirichlet(np.full(k, 5.0))
    means = rng.normal(0, 3, (k, p))
    covariances = np.empty((k, p, p))
    for c in range(k):
        a = rng.normal(0, 1, (p, p))
        covariances[c] = a @ a.T / p + 0.5 * np.eye(p)
    variables = [f"x{i}" for i in range(p)]
    return dpgm.GaussianMixture(k, variables, "full").with_parameters(weights, means, covariances)


def _mixture_rows(model, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weights, means, covariances = model.weights.values, model.means.values, model.covariances.values
    component = rng.choice(len(weights), n, p=weights)
    z = rng.normal(0, 1, (n, len(model.variables)))
    x = np.empty_like(z)
    for c in range(len(weights)):
        rows = component == c
        x[rows] = means[c] + z[rows] @ np.linalg.cholesky(covariances[c]).T
    return x


def _sklearn(model, x: np.ndarray):
    from sklearn.mixture import GaussianMixture
    from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = GaussianMixture(model.n_components, covariance_type="full", max_iter=2, random_state=0).fit(x[:500])
    peer.weights_, peer.means_ = model.weights.values, model.means.values
    peer.covariances_ = model.covariances.values
    peer.precisions_cholesky_ = _compute_precision_cholesky(model.covariances.values, "full")
    return peer


def _gmm_in_memory(model, n: int, repeats: int) -> dict:
    x = _mixture_rows(model, n, seed=4)
    data = dpgm.from_pandas(pd.DataFrame(x, columns=list(model.variables)))
    ours, values, total = _dpgm_in_memory(model, data, repeats)
    ours["rows_per_s"] = n / ours["seconds"]
    print(f"  dpgm {ours['seconds']:.4f}s ({ours['rows_per_s']:.3g} rows/s)", flush=True)
    peer = _sklearn(model, x)
    seconds, times, theirs = median_time(lambda: peer.score_samples(x), repeats)
    rel = float(np.max(np.abs(theirs - values) / np.abs(theirs)))
    sk = {"seconds": seconds, "times": times, "rows_per_s": n / seconds, "max_row_rel_diff": rel,
          "total_rel_diff": abs(float(theirs.sum()) - total) / abs(total), "equal_rtol_1e-9": bool(rel <= 1e-9)}
    print(f"  sklearn score_samples {seconds:.4f}s ({sk['rows_per_s']:.3g} rows/s), max rel diff {rel:.1e}",
          flush=True)
    return {"n_rows": n, "dpgm": ours, "total": total, "sklearn": sk}


# --- out of core --------------------------------------------------------------------------------------

def _store(truth, n: int) -> tuple[Path, float | None]:
    path = STORE / f"alarm_{n:.0e}_seed1_c{CHUNK_ROWS}.zarr".replace("+", "")
    if (path / ".done").exists():
        return path, None
    start = time.perf_counter()
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        dpgm.sample_bayesian_network(truth, n, path, seed=1, chunk_rows=min(CHUNK_ROWS, n), client=client, mode="w")
    (path / ".done").write_text("ok")
    return path, time.perf_counter() - start


def _start_peak_rss(dask_worker) -> None:
    """Sample this worker's RSS every 20 ms in a thread until :func:`_stop_peak_rss`."""
    import threading

    import psutil

    state = {"peak": psutil.Process().memory_info().rss, "stop": False}

    def loop() -> None:
        process = psutil.Process()
        while not state["stop"]:
            state["peak"] = max(state["peak"], process.memory_info().rss)
            time.sleep(0.02)

    threading.Thread(target=loop, daemon=True).start()
    dask_worker.score_bench_peak = state


def _stop_peak_rss(dask_worker) -> float:
    state = dask_worker.score_bench_peak
    state["stop"] = True
    return state["peak"] / 2**20


def _rss(dask_worker) -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _out_of_core(truth, sizes: list[int], deadline: float) -> tuple[list[dict], list[dict]]:
    done, skipped = [], []
    sample_rate = None  # rows/s of writing a store, once one was written in this run
    score_rate = None
    stores = {}
    for n in sizes:
        left = deadline - time.monotonic()
        path = STORE / f"alarm_{n:.0e}_seed1_c{CHUNK_ROWS}.zarr".replace("+", "")
        needs_sampling = not (path / ".done").exists()
        expected = (n / sample_rate if needs_sampling and sample_rate else 0.0) + (2 * n / score_rate if score_rate else 0.0)
        if done and expected > left:
            skipped.append({"n_rows": n, "expected_seconds": expected, "left_seconds": left,
                            "extrapolated_score_seconds": n / score_rate,
                            "extrapolated_sample_seconds": n / sample_rate if needs_sampling and sample_rate else 0.0})
            print(f"N={n:.0e}: skipped (expected {expected:.0f}s, {left:.0f}s left)", flush=True)
            continue
        print(f"N={n:.0e}: sampling/reusing store", flush=True)
        stores[n], sampled = _store(truth, n)
        if sampled is not None:
            sample_rate = n / sampled
            print(f"  sampled in {sampled:.1f}s", flush=True)
        row = {"n_rows": n, "sample_seconds": sampled, "chunks": -(-n // CHUNK_ROWS)}
        with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
            client.run(lambda: None)
            before = client.run(_rss)

            def one_pass(path=stores[n], client=client) -> float:
                return float(dpgm.score(truth, dpgm.open_dataset(path), client=client).total)

            first, _, _ = median_time(one_pass, 1)
            repeats = 3 if n <= 10**7 else 1
            sampler = MemorySampler()
            client.run(_start_peak_rss)
            with sampler.sample("workers", interval=0.05):
                seconds, total = timed_on_cluster(client, one_pass, repeats)
            peaks = client.run(_stop_peak_rss)
        memory = sampler.to_pandas()["workers"] / 2**20
        row.update({"seconds": seconds, "first_seconds": first, "repeats": repeats, "rows_per_s": n / seconds,
                    "total": total, "mean_per_row": total / n,
                    "workers_memory_max_mb": float(memory.max()), "workers_memory_median_mb": float(memory.median()),
                    "worker_rss_start_mb": max(before.values()),
                    "worker_peak_rss_mb": max(peaks.values()), "load_average": _load()})
        score_rate = row["rows_per_s"]
        done.append(row)
        print(f"  score {seconds:.2f}s (first {first:.2f}s), {row['rows_per_s']:.3g} rows/s, "
              f"2 workers' memory max {row['workers_memory_max_mb']:.0f} MB, "
              f"one worker's peak RSS {row['worker_peak_rss_mb']:.0f} MB, load {row['load_average']}", flush=True)
    return done, skipped


# --- report -------------------------------------------------------------------------------------------

def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["out_of_core"]
    if not rows:
        return
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r["n_rows"] for r in rows]
    ax.loglog(xs, [r["seconds"] for r in rows], "o-", label="dpgm.score, Zarr, 2 workers")
    ax.loglog(xs, [rows[0]["seconds"] * x / xs[0] for x in xs], "k--", label="linear in N")
    ax.set_xlabel("rows")
    ax.set_ylabel("seconds")
    ax.set_title("alarm score pass vs N")
    ax.legend()
    mem.semilogx(xs, [r["workers_memory_max_mb"] for r in rows], "o-", label="both workers, max during the passes")
    mem.semilogx(xs, [r["worker_peak_rss_mb"] for r in rows], "s--", label="larger worker's peak RSS")
    mem.set_ylim(bottom=0)
    mem.set_xlabel("rows")
    mem.set_ylabel("MB")
    mem.set_title("worker memory during the passes")
    mem.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    start, end = report["load_average_start"], report["load_average_end"]
    lines = ["# score: per-row log-likelihood, dpgm vs pgmpy vs scikit-learn, and vs N from Zarr", "",
             f"One run (`python -m benchmarks.score{' --quick' if report['quick'] else ''}`, "
             f"{report['wall_seconds'] / 60:.1f} min); BLAS/numba threads pinned to 1. The machine "
             f"({report['machine']['cpus']} cores) is shared: load average (1, 5, 15 min) {start} at the start, "
             f"{end} at the end. Read the ratios, not the absolute seconds. Median of repeats (times in the json).",
             "", "## Bayesian network (alarm, 37 variables, complete rows), in memory, one core", "",
             "dpgm = `dpgm.score(alarm, ds).compute()` (values and total) on the dataset in this process, Dask's "
             "synchronous scheduler. pgmpy = `np.log(DiscreteBayesianNetwork.get_state_probability(row))` per row "
             "(pgmpy 1.1 has neither `BayesianModelProbability.log_probability` nor `log_likelihood_score`; "
             "each call also runs `check_model`), on `alarm.to_pgmpy()`, rows as dicts of strings (building them "
             "not timed). NumPy gather = `sum over CPDs of log(cpd.values)[codes]` on pgmpy's arrays, hand-written: "
             "the floor of a complete-row score, not a library API.", "",
             "| N | dpgm s | dpgm rows/s | pgmpy s | pgmpy rows/s | dpgm / pgmpy | NumPy gather rows/s | "
             "dpgm rows/s / gather rows/s | total rel diff vs pgmpy | max row rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["bayesian_network"]:
        d, p, g = r["dpgm"], r["pgmpy"], r["numpy_gather"]
        lines.append(f"| {r['n_rows']:.0e} | {d['seconds']:.4f} | {d['rows_per_s']:.3g} | {p['seconds']:.2f} | "
                     f"{p['rows_per_s']:.3g} | {p['seconds'] / d['seconds']:.0f}x | {g['rows_per_s']:.3g} | "
                     f"{d['rows_per_s'] / g['rows_per_s']:.3g} | {p['total_rel_diff']:.1e} | {p['max_row_rel_diff']:.1e} |")
    if len(report["bayesian_network"]) >= 2:
        a, b = report["bayesian_network"][0], report["bayesian_network"][-1]
        per_row = (b["dpgm"]["seconds"] - a["dpgm"]["seconds"]) / (b["n_rows"] - a["n_rows"])
        fixed = a["dpgm"]["seconds"] - per_row * a["n_rows"]
        lines += ["", f"dpgm's time on one core is about {fixed:.3f} s per call (building the pass: the network's "
                  f"junction tree and its graph) + {per_row * 1e6:.2f} us per row ({1 / per_row:.3g} rows/s "
                  "asymptotically): complete rows go through the batched junction tree like rows with missing "
                  "values, so the NumPy gather, which only complete rows allow, stays ahead of it. pgmpy's "
                  "per-row call is linear in N with no fixed part worth measuring."]
    lines += ["", "## Gaussian mixture (5 components, 8 variables, full covariance), in memory, one core", "",
              "dpgm = `dpgm.score(mixture, ds).compute()`, synchronous scheduler; scikit-learn = "
              "`GaussianMixture.score_samples(x)` with dpgm's weights, means, covariances and "
              "`_compute_precision_cholesky(covariances, 'full')` copied in.", "",
              "| N | dpgm s | dpgm rows/s | sklearn s | sklearn rows/s | sklearn / dpgm | same, best of repeats | "
              "max row rel diff | equal (rtol 1e-9) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report["gaussian_mixture"]:
        d, s = r["dpgm"], r["sklearn"]
        lines.append(f"| {r['n_rows']:.0e} | {d['seconds']:.4f} | {d['rows_per_s']:.3g} | {s['seconds']:.4f} | "
                     f"{s['rows_per_s']:.3g} | {s['seconds'] / d['seconds']:.2f}x | {min(s['times']) / min(d['times']):.2f}x | "
                     f"{s['max_row_rel_diff']:.1e} | "
                     f"{'yes' if s['equal_rtol_1e-9'] else '**no**'} |")
    lines += ["", "## Out of core: alarm rows from Zarr on 2 workers", "",
              f"`float(dpgm.score(alarm, dpgm.open_dataset(store), client=client).total)` on a fresh LocalCluster "
              f"per N (2 worker processes x 1 thread), chunks of {report['chunk_rows']:,} rows. Seconds = median "
              "of the passes after the first (3 up to 1e7 rows, else 1), each after the scheduler forgot the "
              "previous one's keys; the first pass on the fresh cluster (workers' imports, kernel compilation) "
              "apart. Memory: distributed's MemorySampler (both workers' process memory together, every 50 ms) "
              "during the timed passes; each worker's own RSS sampled every 20 ms by a thread in the worker during the "
              "same passes (the larger worker's peak and its RSS before the first pass shown; `ru_maxrss` is not "
              "used: on Linux it carries over the peak of the process a worker was forked from). Load = the "
              "machine's load average (1, 5, 15 min) after the passes.", "",
              "| N | chunks | seconds (first) | rows/s | s per 1e6 rows | 2 workers' memory max MB (median) | "
              "worker peak RSS MB (before) | mean log-lik per row | sampling s (0 = store reused) | load |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    ooc = report["out_of_core"]
    for r in ooc:
        lines.append(f"| {r['n_rows']:.0e} | {r['chunks']} | {r['seconds']:.2f} ({r['first_seconds']:.2f}) | "
                     f"{r['rows_per_s']:.3g} | {r['seconds'] / r['n_rows'] * 1e6:.3f} | "
                     f"{r['workers_memory_max_mb']:.0f} ({r['workers_memory_median_mb']:.0f}) | "
                     f"{r['worker_peak_rss_mb']:.0f} ({r['worker_rss_start_mb']:.0f}) | {r['mean_per_row']:.4f} | "
                     f"{r['sample_seconds'] or 0:.0f} | {r['load_average']} |")
    for s in report["skipped"]:
        sampling = s["extrapolated_sample_seconds"]
        lines.append(f"| {s['n_rows']:.0e} | - | not run: its 2 passes alone were expected to take "
                     f"{2 * s['extrapolated_score_seconds']:.0f} s at the rate of the largest N run"
                     + (f" (+ {sampling:.0f} s sampling its store)" if sampling else
                        " (sampling its store, absent, not counted)")
                     + f", more than the {max(s['left_seconds'], 0):.0f} s left of the budget "
                     "| - | - | - | - | - | - | - |")
    lines += ["", "## How the cost grows", ""]
    if len(ooc) >= 2:
        a, b = ooc[0], ooc[-1]
        slope = np.log(b["seconds"] / a["seconds"]) / np.log(b["n_rows"] / a["n_rows"])
        lines.append(f"* N: from {a['n_rows']:.0e} to {b['n_rows']:.0e} rows the pass time grows as N^{slope:.2f} "
                     f"(1.00 = linear); seconds per 1e6 rows {a['seconds'] / a['n_rows'] * 1e6:.3f} -> "
                     f"{b['seconds'] / b['n_rows'] * 1e6:.3f}. Worker memory max {a['workers_memory_max_mb']:.0f} -> "
                     f"{b['workers_memory_max_mb']:.0f} MB (both workers together), the larger worker's peak "
                     f"{a['worker_peak_rss_mb']:.0f} -> {b['worker_peak_rss_mb']:.0f} MB, while the data grows "
                     f"{b['n_rows'] / a['n_rows']:.0f}x: "
                     + ("flat, it does not depend on N." if b["workers_memory_max_mb"] <= 1.1 * a["workers_memory_max_mb"]
                        else "**it grows with N**."))
    top = max((r["n_rows"] for r in ooc), default=0)
    if ooc and top < 10**8:
        rate = ooc[-1]["rows_per_s"]
        lines.append(f"* 1e8 rows was not run within this run's budget: at the measured {rate:.3g} rows/s one "
                     f"pass would take about {1e8 / rate / 60:.1f} min (plus sampling the store), with the same "
                     "per-chunk memory.")
    if ooc and report["bayesian_network"]:
        one_core = report["bayesian_network"][-1]["dpgm"]["rows_per_s"]
        lines.append(f"* Workers: at {ooc[-1]['n_rows']:.0e} rows the 2-worker pass from Zarr scores "
                     f"{ooc[-1]['rows_per_s']:.3g} rows/s, {ooc[-1]['rows_per_s'] / one_core:.2f}x the one-core "
                     f"in-memory rate ({one_core:.3g} rows/s at {report['bayesian_network'][-1]['n_rows']:.0e}): "
                     "the machine's load average during these passes (last column) was well above its 2 cores, so the "
                     "two workers had less than a core each: this ratio is no measure of scaling. ""The pass is parallel over chunks (one partial sum per chunk, tree-summed), so rows/s grows "
                     "with workers while there are at least as many chunks as workers.")
    lines += ["* Chunks: each task reads one chunk of 37 int8 columns (37 bytes a row, "
              f"{37 * report['chunk_rows'] / 2**20:.0f} MiB at {report['chunk_rows']:,} rows) and keeps its float64 "
              "scores (8 bytes a row) only until it has summed them: a worker holds about one chunk and its "
              "scores at a time, so worker memory is set by the chunk size, not by N.",
              "* Per core: the in-memory columns compare one thread against one thread."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (about a minute)")
    parser.add_argument("--bn-rows", type=float, nargs="*", help="alarm rows in memory (default 1e4 1e5)")
    parser.add_argument("--gmm-rows", type=float, nargs="*", help="mixture rows in memory (default 1e5 1e6)")
    parser.add_argument("--zarr-rows", type=float, nargs="*", help="alarm rows in Zarr (default 1e6 1e7 3e7 1e8)")
    parser.add_argument("--render", metavar="JSON", help="only rewrite the .md and .png of a results json")
    parser.add_argument("--zarr-only", action="store_true", help="only the out-of-core passes (no peers in memory)")
    parser.add_argument("--name", default=None, help="results file name (default score, or score_quick)")
    parser.add_argument("--budget-seconds", type=float, default=1500.0,
                        help="larger Zarr sizes are skipped when their expected time exceeds what is left")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        report = json.loads(path.read_text())
        _plot(report, path.with_suffix(".png"))
        path.with_suffix(".md").write_text(_markdown(report))
        return
    bn_rows = [int(x) for x in (args.bn_rows or ([1e3] if args.quick else [1e4, 1e5]))]
    gmm_rows = [int(x) for x in (args.gmm_rows or ([1e4] if args.quick else [1e5, 1e6]))]
    zarr_rows = [int(x) for x in (args.zarr_rows or ([1e6] if args.quick else [1e6, 1e7, 3e7, 1e8]))]
    if args.zarr_only:
        bn_rows, gmm_rows = [], []
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    began, load_start = time.monotonic(), _load()
    deadline = began + args.budget_seconds
    truth = dpgm.load_network("alarm")
    # one-time imports and kernel compilation, not part of any figure
    with dask.config.set(scheduler="sync"):
        dpgm.score(truth, dpgm.sample_bayesian_network(truth, 100, seed=0).compute()).compute()
        dpgm.score(_mixture(), dpgm.from_pandas(pd.DataFrame(_mixture_rows(_mixture(), 100, 0),
                                                             columns=list(_mixture().variables)))).compute()
    bn = []
    for n in bn_rows:
        print(f"alarm in memory N={n:.0e}", flush=True)
        bn.append(_bn_in_memory(truth, n, 5, 3 if n <= 10**4 else 1))
    model, gmm = _mixture(), []
    for n in gmm_rows:
        print(f"mixture in memory N={n:.0e}", flush=True)
        gmm.append(_gmm_in_memory(model, n, 5 if n <= 10**5 else 3))
    ooc, skipped = _out_of_core(truth, zarr_rows, deadline)
    report = {"benchmark": "score", "quick": args.quick, "chunk_rows": CHUNK_ROWS, "bayesian_network": bn,
              "gaussian_mixture": gmm, "out_of_core": ooc, "skipped": skipped,
              "load_average_start": load_start, "load_average_end": _load(),
              "wall_seconds": time.monotonic() - began, "budget_seconds": args.budget_seconds,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = args.name or ("score_quick" if args.quick else "score")
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    _plot(report, RESULTS / f"{name}.png")
    (RESULTS / f"{name}.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

"""Cross-validation: ``dpgm.cross_validate`` (shared passes) against the same folds fitted and scored one by one.

Run: ``python -m benchmarks.cv [--rows 1e6 3e6] [--quick]``.

* **Structures (cluster, Zarr):** 5 folds x 10 Bayesian-network structures (alarm's and nine with
  1-9 of its edges removed, BDeu), alarm's rows in a Zarr store on a 2-worker LocalCluster.
  ``cross_validate`` (every fold fit in one pass, then one scoring pass; ``refit=False``) against
  the loop a user writes without it: for each candidate and fold, ``dpgm.fit`` on the rows
  weighted by the fold mask and ``dpgm.score`` of the held-out fold (100 passes). Both give the
  same numbers (checked, rel 1e-9); passes counted by a scheduler plugin (computations submitted),
  wall seconds and CPU seconds (this process + workers).
* **Peers in memory** (one process, BLAS pinned to one thread): a graphical-lasso alpha path of
  10 alphas, 5 folds, 10 variables, against scikit-learn's ``GraphicalLassoCV`` on the same
  folds; Gaussian mixtures over ``n_components`` 1-5 x ``covariance_type`` full/diag, 5 folds,
  against ``GridSearchCV(GaussianMixture)`` on the same folds (its score: mean log-likelihood).

The two variants of each comparison run alternately in one process, median of the repeats.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import dpgm  # noqa: E402
from dpgm.stats.folds import fold_of  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench-cv")
FOLDS = 5


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _worker_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _GraphCounter:
    """A scheduler plugin counting the computations submitted (``update_graph``): the passes."""

    name = "dpgm-bench-passes"

    def __init__(self):
        self.count = 0

    def update_graph(self, scheduler, **kwargs):
        self.count += 1


def _submitted(dask_scheduler) -> int:
    return dask_scheduler.plugins[_GraphCounter.name].count


def _measure(client, run):
    """Wall and CPU seconds (this process and the workers) of ``run()``, its value and the passes it submitted."""
    workers = sum(client.run(_worker_cpu).values())
    before = client.run_on_scheduler(_submitted)
    cpu, start = _cpu(), time.perf_counter()
    value = run()
    wall = time.perf_counter() - start
    cpu = _cpu() - cpu + sum(client.run(_worker_cpu).values()) - workers
    return wall, cpu, value, client.run_on_scheduler(_submitted) - before


def _structures(truth) -> dict:
    rng = np.random.default_rng(0)
    edges = list(truth.edges)
    out = {"alarm": dpgm.Candidate(dpgm.BayesianNetwork.from_edges(edges, variables=truth.variables), "bayes")}
    for drop in range(1, 10):
        kept = [edges[i] for i in sorted(rng.choice(len(edges), len(edges) - drop, replace=False))]
        out[f"minus {drop}"] = dpgm.Candidate(dpgm.BayesianNetwork.from_edges(kept, variables=truth.variables),
                                              "bayes")
    return out


def _one_by_one(candidates, data, folds, client):
    """The loop without cross_validate: a weighted fit and a scoring pass per (candidate, fold)."""
    n = data.sizes["row"]
    chunks = data.chunks["row"]
    from dpgm.stats.folds import fold_codes

    codes = fold_codes(n, chunks, folds, 0)
    out = {}
    for name, candidate in candidates.items():
        totals = []
        for k in range(folds):
            train = data.assign(weight=(("row",), (codes != k).astype(np.float64)))
            model = dpgm.fit(candidate.model, train, candidate.method, client=client, progress=False).model
            held = data.assign(weight=(("row",), (codes == k).astype(np.float64)))
            totals.append(float(dpgm.score(model, held, client=client).total))
        out[name] = totals
    return out


def structures(rows: list[int], repeats: int) -> list[dict]:
    from distributed import Client, LocalCluster

    truth = dpgm.load_network("alarm")
    candidates = _structures(truth)
    records = []
    from distributed.diagnostics.plugin import SchedulerPlugin

    counter = type("GraphCounter", (_GraphCounter, SchedulerPlugin), {})()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        cluster.scheduler.add_plugin(counter)
        for n in rows:
            path = STORE / f"alarm-{n}.zarr"
            if not path.exists():
                dpgm.sample_bayesian_network(truth, n, path, seed=0, chunk_rows=500_000, client=client)
            data = dpgm.open_dataset(path)
            n_chunks = len(data.chunks["row"])

            def shared_run(data=data):
                return dpgm.cross_validate(candidates, data, folds=FOLDS, refit=False, client=client, progress=False)

            def separate_run(data=data):
                return _one_by_one(candidates, data, FOLDS, client)

            shared, separate = [], []
            for r in range(repeats):
                order = [("shared", shared), ("separate", separate)]
                for name, sink in (order if r % 2 == 0 else order[::-1]):
                    if name == "shared":
                        wall, cpu, value, passes = _measure(client, shared_run)
                        totals = {c: value.loglik.sel(candidate=c).values.tolist() for c in candidates}
                    else:
                        wall, cpu, totals, passes = _measure(client, separate_run)
                    sink.append({"wall": wall, "cpu": cpu, "passes": passes, "totals": totals})
            for c in candidates:
                np.testing.assert_allclose(shared[-1]["totals"][c], separate[-1]["totals"][c], rtol=1e-9)
            record = {"rows": n, "chunks": n_chunks, "candidates": len(candidates), "folds": FOLDS}
            for name, runs in (("shared", shared), ("separate", separate)):
                record[name] = {"wall": statistics.median(x["wall"] for x in runs),
                                "cpu": statistics.median(x["cpu"] for x in runs), "passes": runs[-1]["passes"]}
            record["chosen"] = max(candidates, key=lambda c: sum(shared[-1]["totals"][c]))
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


def glasso_path(n: int, repeats: int) -> dict:
    from sklearn.covariance import GraphicalLassoCV

    rng = np.random.default_rng(1)
    p = 10
    precision = np.eye(p) + np.diag([0.45] * (p - 1), 1) + np.diag([0.45] * (p - 1), -1)
    x = rng.multivariate_normal(np.zeros(p), np.linalg.inv(precision), n)
    names = [f"x{i}" for i in range(p)]
    data = dpgm.from_pandas(pd.DataFrame(x, columns=names))
    alphas = list(np.geomspace(0.002, 0.5, 10))
    fold = fold_of(np.arange(n), FOLDS, 0)
    splits = [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(FOLDS)]
    model = dpgm.GaussianGraphicalModel([tuple(names)])
    candidates = {f"{a:.6g}": dpgm.Candidate(model, "glasso", {"alpha": a, "tol": 1e-8}) for a in alphas}
    ours, theirs = [], []
    for r in range(repeats):
        for name in (("dpgm", "sklearn") if r % 2 == 0 else ("sklearn", "dpgm")):
            start = time.perf_counter()
            if name == "dpgm":
                result = dpgm.cross_validate(candidates, data, folds=FOLDS, refit=False)
                ours.append(time.perf_counter() - start)
            else:
                peer = GraphicalLassoCV(alphas=alphas, cv=splits, tol=1e-8, enet_tol=1e-8, max_iter=1000).fit(x)
                theirs.append(time.perf_counter() - start)
    record = {"rows": n, "variables": p, "alphas": len(alphas), "folds": FOLDS,
              "dpgm": statistics.median(ours), "sklearn": statistics.median(theirs),
              "dpgm_alpha": float(str(result.chosen.values)), "sklearn_alpha": float(peer.alpha_)}
    print(json.dumps(record), flush=True)
    return record


def mixtures(n: int, repeats: int) -> dict:
    from sklearn.mixture import GaussianMixture
    from sklearn.model_selection import GridSearchCV

    rng = np.random.default_rng(2)
    centres = rng.normal(0, 4, (3, 4))
    x = centres[rng.integers(0, 3, n)] + rng.normal(0, 1, (n, 4))
    names = ["a", "b", "c", "d"]
    data = dpgm.from_pandas(pd.DataFrame(x, columns=names))
    fold = fold_of(np.arange(n), FOLDS, 0)
    splits = [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(FOLDS)]
    grid = [(k, t) for k in range(1, 6) for t in ("full", "diag")]
    options = {"n_init": 1, "random_state": 0, "tol": 1e-6, "max_iter": 500}
    candidates = {f"{k} {t}": dpgm.Candidate(dpgm.GaussianMixture(k, names, t), "em", options) for k, t in grid}
    ours, theirs = [], []
    for r in range(repeats):
        for name in (("dpgm", "sklearn") if r % 2 == 0 else ("sklearn", "dpgm")):
            start = time.perf_counter()
            if name == "dpgm":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = dpgm.cross_validate(candidates, data, folds=FOLDS, refit=False)
                ours.append(time.perf_counter() - start)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    search = GridSearchCV(GaussianMixture(tol=1e-6, max_iter=500, random_state=0),
                                          {"n_components": list(range(1, 6)),
                                           "covariance_type": ["full", "diag"]}, cv=splits, refit=False).fit(x)
                theirs.append(time.perf_counter() - start)
    best = search.best_params_
    record = {"rows": n, "variables": 4, "candidates": len(grid), "folds": FOLDS,
              "dpgm": statistics.median(ours), "sklearn": statistics.median(theirs),
              "dpgm_chosen": str(result.chosen.values),
              "sklearn_chosen": f"{best['n_components']} {best['covariance_type']}"}
    print(json.dumps(record), flush=True)
    return record


def _write(results: dict, name: str = "cv") -> None:
    s = results["structures"]
    lines = ["# Cross-validation: shared passes against fold-by-fold fits, and peers in memory", "",
             "Written by `python -m benchmarks.cv`. Machine: " + results["machine"] + f"; load average "
             f"{results['load'][0]:.1f} at the start, {results['load'][1]:.1f} at the end (a shared machine: the "
             "ratios, measured side by side in one run with the order alternating, are what to read).", "",
             "## 5 folds x 10 Bayesian-network structures (alarm, BDeu), Zarr on 2 worker processes", "",
             "`dpgm.cross_validate(..., refit=False)` against the loop without it (a weighted `dpgm.fit` and a "
             "`dpgm.score` pass per candidate and fold). Same numbers (rel 1e-9, checked). Passes: computations "
             "submitted to the scheduler (a scheduler plugin counts `update_graph`). CPU: this process and both "
             "workers.", "",
             "| rows | chunks | passes (shared / one by one) | wall s (shared / one by one) | ratio | "
             "CPU s (shared / one by one) | ratio | chosen |",
             "|---:|---:|---|---|---:|---|---:|---|"]
    for r in s:
        a, b = r["shared"], r["separate"]
        lines.append(f"| {r['rows']:,} | {r['chunks']} | {a['passes']:.0f} / {b['passes']:.0f} | "
                     f"{a['wall']:.1f} / {b['wall']:.1f} | {b['wall'] / a['wall']:.2f}x | {a['cpu']:.1f} / "
                     f"{b['cpu']:.1f} | {b['cpu'] / a['cpu']:.2f}x | {r['chosen']} |")
    if len(s) > 1:
        growth = (s[-1]["shared"]["wall"] / s[0]["shared"]["wall"]) / (s[-1]["rows"] / s[0]["rows"])
        lines += ["", f"Cost grows with N: {s[-1]['rows'] / s[0]['rows']:.1f}x the rows took "
                      f"{s[-1]['shared']['wall'] / s[0]['shared']['wall']:.2f}x the wall time of the shared "
                      f"passes ({growth:.2f} of linear)."]
    g, m = results["glasso"], results["mixtures"]
    lines += ["", "## In memory, against scikit-learn on the same folds", "",
              "| task | rows | dpgm s | scikit-learn s | sklearn / dpgm | dpgm's choice | scikit-learn's choice |",
              "|---|---:|---:|---:|---:|---|---|",
              f"| glasso path, {g['alphas']} alphas x {g['folds']} folds, {g['variables']} variables "
              f"(`GraphicalLassoCV`) | {g['rows']:,} | {g['dpgm']:.2f} | {g['sklearn']:.2f} | "
              f"{g['sklearn'] / g['dpgm']:.2f}x | alpha {g['dpgm_alpha']:.4g} | alpha {g['sklearn_alpha']:.4g} |",
              f"| mixtures, {m['candidates']} candidates x {m['folds']} folds, {m['variables']} variables "
              f"(`GridSearchCV(GaussianMixture)`) | {m['rows']:,} | {m['dpgm']:.2f} | {m['sklearn']:.2f} | "
              f"{m['sklearn'] / m['dpgm']:.2f}x | {m['dpgm_chosen']} | {m['sklearn_chosen']} |", "",
              "scikit-learn's `GraphicalLassoCV` scores a fold with the covariance centred on the fold's own "
              "mean; dpgm scores the held-out rows' log-density under the training fit (mean included). "
              "`GridSearchCV` fits each (candidate, fold) from one k-means start; dpgm from one k-means++ "
              "start on a hashed sample; both EM to tol 1e-6."]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6, 3e6])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1e5 rows, one repeat (a smoke run)")
    parser.add_argument("--name", default="cv", help="results file name (default cv)")
    args = parser.parse_args()
    rows = [100_000] if args.quick else [int(r) for r in args.rows]
    repeats = 1 if args.quick else args.repeats
    STORE.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()[0]]
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
               "structures": structures(rows, repeats), "glasso": glasso_path(100_000, repeats),
               "mixtures": mixtures(50_000, repeats)}
    load.append(os.getloadavg()[0])
    results["load"] = load
    _write(results, args.name)


if __name__ == "__main__":
    main()

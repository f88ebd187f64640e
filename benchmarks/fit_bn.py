"""Bayesian-network parameter fitting (MLE) of alarm vs N: dpgm against pgmpy and pyAgrum.

Run: ``python -m benchmarks.fit_bn [--quick] [--rows 1e5 1e6 1e7]``.

For each N the rows are forward-sampled from alarm into a Zarr store under /tmp
(reused between runs), then in the same run:

* **dpgm (cluster)**: ``dpgm.fit`` end to end from the Zarr store on a fresh
  2-worker LocalCluster (one pass of family counts, driver-side normalization);
* **dpgm (in-memory)**: the same fit on the dataset loaded into this process
  (no cluster, Dask not involved);
* **pgmpy**: ``DiscreteBayesianNetwork.fit(df, estimator=DiscreteMLE())`` on a
  pandas DataFrame of categoricals built from the same rows;
* **pyAgrum**: ``BNLearner(df, bn).fitParameters(bn)`` on the same DataFrame
  (string columns); the learner's construction (which parses the DataFrame)
  and the fit are timed together, and the fit alone is also recorded.

Median of 3 runs where cheap (1 run for peers above 1e6 rows). Parameters are
compared (max abs difference over every CPD entry). BLAS/numba threads are
pinned to 1 before numpy is imported; the cluster's workers get the same.
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
from distributed.diagnostics import MemorySampler  # noqa: E402

import dpgm  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
CHUNK_ROWS = 500_000


from benchmarks.timing import median_time as _median_time  # noqa: E402


def _store(truth, n_rows: int) -> Path:
    path = STORE / f"alarm_{n_rows:.0e}_seed1_c{CHUNK_ROWS}.zarr".replace("+", "")
    if not (path / ".done").exists():
        with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
            dpgm.sample_bayesian_network(truth, n_rows, path, seed=1, chunk_rows=min(CHUNK_ROWS, n_rows),
                                         client=client, mode="w")
        (path / ".done").write_text("ok")
    return path


def _worker_rss(client) -> dict[str, float]:
    def probe():
        import psutil

        # VmHWM, the process's own peak (getrusage's ru_maxrss carries over the peak of the process the
        # worker was started from)
        with open("/proc/self/status") as status:
            peak = next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")), float("nan"))
        return {"peak_mb": peak, "rss_mb": psutil.Process().memory_info().rss / 2**20}

    return client.run(probe)


def _dpgm_cluster(truth, path: Path, repeats: int):
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        before = _worker_rss(client)
        # the first fit on a fresh cluster also pays the workers' one-time imports and
        # kernel loading: recorded apart, the steady-state fits are what a service pays
        first, _, _ = _median_time(lambda: dpgm.fit(structure, dpgm.open_dataset(path), client=client), 1)
        sampler = MemorySampler()
        with sampler.sample("workers", interval=0.02):
            seconds, times, result = _median_time(
                lambda: dpgm.fit(structure, dpgm.open_dataset(path), client=client), repeats)
        after = _worker_rss(client)
    return {
        "seconds": seconds, "times": times, "first_fit_seconds": first, "passes": result.passes,
        "workers_memory_max_mb": float(sampler.to_pandas()["workers"].max()) / 2**20,
        "worker_rss_start_mb": max(v["rss_mb"] for v in before.values()),
        "worker_peak_rss_mb": max(v["peak_mb"] for v in after.values()),
    }, result


def _pgmpy(truth, frame, repeats: int):
    from pgmpy.models import DiscreteBayesianNetwork
    from pgmpy.parameter_estimator import DiscreteMLE

    def run():
        model = DiscreteBayesianNetwork(truth.edges)
        model.add_nodes_from(truth.variables)
        return model.fit(frame, estimator=DiscreteMLE())

    seconds, times, model = _median_time(run, repeats)
    return {"seconds": seconds, "times": times}, model


def _pyagrum(truth, frame, repeats: int):
    import pyagrum as gum

    def structure():
        bn = gum.BayesNet("alarm")
        for v in truth.variables:
            bn.add(gum.LabelizedVariable(v, v, [str(s) for s in truth.states[v]]))
        for a, b in truth.edges:
            bn.addArc(a, b)
        return bn

    fit_times = []

    def run():
        bn = structure()
        learner = gum.BNLearner(frame, bn)
        start = time.perf_counter()
        learner.fitParameters(bn)
        fit_times.append(time.perf_counter() - start)
        return bn

    seconds, times, bn = _median_time(run, repeats)
    return {"seconds": seconds, "times": times, "fit_only_seconds": statistics.median(fit_times)}, bn


def _diff_pgmpy(ours, pg_model) -> float:
    worst = 0.0
    for cpd in pg_model.get_cpds():
        table = ours.cpds[cpd.variable].transpose(*cpd.variables)
        theirs = cpd.get_values().reshape(cpd.cardinality)
        for axis, d in enumerate(cpd.variables):
            order = [cpd.state_names[d].index(str(s)) for s in table.coords[d].values]
            theirs = np.take(theirs, order, axis=axis)
        worst = max(worst, float(np.abs(table.values - theirs).max()))
    return worst


def _diff_pyagrum(ours, bn) -> float:
    worst = 0.0
    for v in ours.variables:
        pot = bn.cpt(v)
        names = list(pot.names)[::-1]  # toarray() axes are the reversed names
        theirs = pot.toarray()
        for axis, d in enumerate(names):
            labels = list(bn.variable(d).labels())
            order = [labels.index(str(s)) for s in ours.cpds[v].coords[d].values]
            theirs = np.take(theirs, order, axis=axis)
        worst = max(worst, float(np.abs(ours.cpds[v].transpose(*names).values - theirs).max()))
    return worst


def run(sizes: list[int], peer_max_rows: int, pyagrum_max_rows: int) -> dict:
    truth = dpgm.load_network("alarm")
    rows = []
    for n in sizes:
        print(f"N={n:.0e}: sampling/reusing store", flush=True)
        path = _store(truth, n)
        repeats = 3 if n <= 10**6 else 1
        cluster, ours = _dpgm_cluster(truth, path, 3 if n <= 10**7 else 1)
        print(f"  dpgm cluster {cluster['seconds']:.3f}s", flush=True)
        loaded = dpgm.open_dataset(path).load()
        memory, _, _ = _median_time(lambda d=loaded: dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), d),
                                    3 if n <= 10**7 else 1)
        print(f"  dpgm in-memory {memory:.3f}s", flush=True)
        row = {"n_rows": n, "dpgm_cluster": cluster, "dpgm_in_memory": {"seconds": memory}}
        row["dpgm_cluster"]["rows_per_s"] = n / cluster["seconds"]
        if n <= peer_max_rows:
            start = time.perf_counter()
            frame = dpgm.to_pandas(loaded)[list(truth.variables)]
            row["to_pandas_seconds"] = time.perf_counter() - start
            del loaded
            pg, pg_model = _pgmpy(truth, frame, repeats)
            pg["rows_per_s"] = n / pg["seconds"]
            pg["max_abs_diff"] = _diff_pgmpy(ours.model, pg_model)
            row["pgmpy"] = pg
            print(f"  pgmpy {pg['seconds']:.3f}s diff {pg['max_abs_diff']:.2e}", flush=True)
            if n <= pyagrum_max_rows:
                strings = frame.astype(str)
                ag, bn = _pyagrum(truth, strings, repeats)
                del strings
                ag["rows_per_s"] = n / ag["seconds"]
                ag["max_abs_diff"] = _diff_pyagrum(ours.model, bn)
                row["pyagrum"] = ag
                print(f"  pyAgrum {ag['seconds']:.3f}s (fit {ag['fit_only_seconds']:.3f}s) "
                      f"diff {ag['max_abs_diff']:.2e}", flush=True)
            del frame
        rows.append(row)
    return {"benchmark": "fit_bn", "network": "alarm", "chunk_rows": CHUNK_ROWS, "rows": rows,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "notes": "BLAS/numba threads pinned to 1; dpgm cluster = 2 worker processes x 1 thread; "
                     "peers single-process on the same machine, same run",
            "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4))
    rows = report["rows"]
    for key, label in [("dpgm_cluster", "dpgm, Zarr, 2 workers"), ("dpgm_in_memory", "dpgm, in memory"),
                       ("pgmpy", "pgmpy DiscreteMLE"), ("pyagrum", "pyAgrum BNLearner")]:
        xs = [r["n_rows"] for r in rows if key in r]
        ys = [r[key]["seconds"] for r in rows if key in r]
        if xs:
            ax.loglog(xs, ys, "o-", label=label)
    ax.set_xlabel("rows")
    ax.set_ylabel("seconds")
    ax.set_title("alarm MLE fit time")
    ax.legend()
    mem.semilogx([r["n_rows"] for r in rows], [r["dpgm_cluster"]["workers_memory_max_mb"] for r in rows], "o-")
    mem.set_xlabel("rows")
    mem.set_ylabel("2 workers' memory during the fits (MB)")
    mem.set_title("dpgm worker memory")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    lines = ["# fit_bn: alarm MLE, dpgm vs pgmpy vs pyAgrum", "",
             "Same rows, same run; BLAS threads pinned to 1; dpgm cluster = 2 worker processes "
             f"from Zarr (chunks of {report['chunk_rows']:,} rows). Ratios > 1 mean dpgm is faster.", "",
             "dpgm in memory = the dataset loaded in this process, its slices counted on a thread per core. "
             "dpgm cluster = median of the fits after the first on a fresh cluster (first fit, which also pays "
             "the workers' one-time imports, in its own column). Workers' memory: distributed's MemorySampler "
             "(both workers together, every 20 ms) during the timed fits.", "",
             "| N | dpgm cluster s (first) | rows/s | passes | 2 workers' memory MB | dpgm in-mem s | pgmpy s | "
             "pgmpy / dpgm in-mem | pgmpy / dpgm cluster | pyAgrum s (fit only) | pyAgrum / dpgm in-mem | "
             "max abs diff pgmpy / pyAgrum |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        c, m = r["dpgm_cluster"], r["dpgm_in_memory"]["seconds"]
        pg, ag = r.get("pgmpy"), r.get("pyagrum")
        lines.append(
            f"| {r['n_rows']:.0e} | {c['seconds']:.3f} ({c.get('first_fit_seconds', float('nan')):.3f}) | "
            f"{c['rows_per_s']:.3g} | {c['passes']} | {c.get('workers_memory_max_mb', float('nan')):.0f} | {m:.3f} | "
            + (f"{pg['seconds']:.3f} | {pg['seconds'] / m:.1f}x | {pg['seconds'] / c['seconds']:.1f}x | "
               if pg else "- | - | - | ")
            + (f"{ag['seconds']:.3f} ({ag['fit_only_seconds']:.3f}) | {ag['seconds'] / m:.1f}x | "
               if ag else "- | - | ")
            + (f"{pg['max_abs_diff']:.1e}" if pg else "-") + " / " + (f"{ag['max_abs_diff']:.1e}" if ag else "-")
            + " |")
    at = [r for r in report["rows"] if r["n_rows"] == 10**6 and "pgmpy" in r]
    if at:
        pg = at[0]["pgmpy"]["seconds"]
        memory, cluster = pg / at[0]["dpgm_in_memory"]["seconds"], pg / at[0]["dpgm_cluster"]["seconds"]
        lines += ["", f"Target (issue 4): >= 20x pgmpy at 1e6 rows. Measured: {memory:.1f}x in memory "
                  + ("(met)" if memory >= 20 else "(**missed**)")
                  + f", {cluster:.1f}x from Zarr on the 2-worker cluster "
                  + ("(met)." if cluster >= 20 else "(**missed**).")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 rows only (under a minute)")
    parser.add_argument("--rows", type=float, nargs="*", help="row counts (default 1e5 1e6 1e7)")
    parser.add_argument("--peer-max-rows", type=float, default=1e7, help="largest N for pgmpy")
    parser.add_argument("--pyagrum-max-rows", type=float, default=1e7, help="largest N for pyAgrum")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e5] if args.quick else [1e5, 1e6, 1e7]))]
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    report = run(sizes, int(args.peer_max_rows), int(args.pyagrum_max_rows))
    report["quick"] = args.quick
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "fit_bn"
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    _plot(report, RESULTS / f"{name}.png")
    (RESULTS / f"{name}.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

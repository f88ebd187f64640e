"""EM for Bayesian networks with latent variables: dpgm vs pgmpy and pyAgrum, seconds per iteration.

Run: ``python -m benchmarks.em [--quick] [--rows 1e4 1e5 1e6] [--iterations 3]``.

Part 1, dpgm scaling (N = 1e4, 1e5, 1e6 by default; 1e7 via ``--rows``). Each case
is sampled once into a Zarr store under /tmp (2-worker cluster), and the same rows
are loaded into memory for the in-memory fit:

* **alarm2**: alarm with HYPOVOLEMIA and LVFAILURE latent (dropped) and 20% MCAR
  missing values in the 35 observed columns;
* **lcm20**: a latent class model, 20 observed variables with 3-4 states, 3 classes
  (class dropped), 20% MCAR missing values.

``dpgm.fit(model, ds, method="em", n_init=1, random_state=0, tol=0, max_iter=K, accelerate=None)``
in memory (no client, one process) and from Zarr on a 2-worker LocalCluster
(2 processes x 1 thread). Recorded: wall time / K, the steady-state iteration
(median of ``history`` increments after the first), E-step rows/s per core
(N / steady-state seconds / cores), passes, the cluster's total worker memory
(``distributed.diagnostics.MemorySampler``, process RSS, peak and baseline) and the
largest per-iteration log-likelihood difference between in-memory and cluster. On the
cluster it also times the floor of a pass over the same store (a no-op kernel through
``dpgm.stats.engine.map_reduce``: Zarr reads, scheduling, the reduction tree) and the
construction of one pass's task graph, so steady minus floor is the E step's own cost.

Part 2, peers, same data and same run. pgmpy's ``ExpectationMaximization`` drops
every row with a missing value, so the peer case is **alarm1**: alarm with only
HYPOVOLEMIA latent and no missing values, at 1e3 and 1e4 rows, K = 1 and 2:

* **pgmpy 1.1.2** ``ExpectationMaximization(model with latents, df).get_parameters(
  latent_card=..., max_iter=K, seed=0)`` (random init of the latent families, MLE
  for the rest; its convergence check cannot stop it early at K <= 2);
* **pyAgrum** ``BNLearner(df, bn, ["?"])`` with the latent column all ``"?"``,
  ``useSmoothingPrior(1e-6)`` (without a prior its M step fails on parent
  configurations absent from 1e3-1e4 rows), ``useEMWithDiffCriterion(1e-300, 0)``,
  ``EMsetMaxIter(K)``, ``learnParameters(bn, False)`` where ``bn`` carries random
  CPTs (pyAgrum's default initialization cannot estimate a never-observed variable
  and raises "No data for target node"); learner construction included;
* **dpgm** in memory on the same DataFrame's rows (median of 3).

Per-iteration seconds of a peer = wall time of the K-iteration fit / K; the
marginal cost of an iteration = t(K=2) - t(K=1). pyAgrum also runs the MCAR case
with both latent variables (alarm2) at 1e3 rows, K = 1 and 2, against dpgm on the
same rows. BLAS/numba threads are pinned to 1 before numpy is imported (workers
inherit the environment).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
LATENT2 = ["HYPOVOLEMIA", "LVFAILURE"]
LATENT1 = ["HYPOVOLEMIA"]
MISSING = 0.2


from benchmarks.timing import median_time as _median_time  # noqa: E402


def _cases():
    truth = dpgm.load_network("alarm")
    lcm = dpgm.latent_class_model({f"q{i:02d}": [f"s{k}" for k in range(3 + i % 2)]
                                   for i in range(20)}, 3)
    lcm_truth = lcm.randomized(np.random.default_rng(0), concentration=0.5)
    return {
        "alarm2": {"truth": truth, "latent": LATENT2,
                   "model": dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)},
        "lcm20": {"truth": lcm_truth, "latent": ["class"], "model": lcm},
    }


def _chunk_rows(n: int) -> int:
    return int(min(max(n // 8, 1000), 500_000))


def _store(name: str, case: dict, n: int, client) -> Path:
    chunk_rows = _chunk_rows(n)
    path = STORE / f"em_{name}_{n:.0e}_seed1_m{MISSING}_c{chunk_rows}.zarr".replace("+", "")
    if not (path / ".done").exists():
        dpgm.sample_bayesian_network(case["truth"], n, path, seed=1, missing=MISSING,
                                     chunk_rows=chunk_rows, client=client, mode="w")
        (path / ".done").write_text("ok")
    return path


def _fit(model, data, iterations: int, client=None):
    start = time.perf_counter()
    result = dpgm.fit(model, data, method="em", n_init=1, random_state=0, tol=0,
                      max_iter=iterations, accelerate=None, client=client)
    wall = time.perf_counter() - start
    tree_width = result.info.get("tree_width")
    cumulative = [h["seconds"] for h in result.history]
    steps = np.diff([0.0] + cumulative)
    steady = float(np.median(steps[1:])) if len(steps) > 1 else float(steps[0])
    return {"seconds_per_iter": wall / iterations, "steady_seconds_per_iter": steady,
            "first_iter_seconds": float(steps[0]), "passes": result.passes, "tree_width": tree_width,
            "_loglik": np.array([h["loglik"] for h in result.history])}


def _noop(index, columns, shared):
    return np.zeros(1)


def _noop_pass(data, client) -> dict:
    """The cluster's floor per pass on the same store: graph build and one pass of a no-op kernel
    (Zarr reads of the same columns, scheduling, the tree reduction), median of 3."""
    from dpgm.cluster import compute
    from dpgm.data.columns import zarr_columns
    from dpgm.stats.engine import map_reduce

    columns = list(data.data_vars)
    arrays = zarr_columns(data, columns) or {v: data[v].data for v in columns}
    builds, passes = [], []
    for i in range(3):
        start = time.perf_counter()
        lazy = map_reduce(arrays, _noop, name="bench-noop", shared=np.full(4, float(i)))
        built = time.perf_counter()
        compute(lazy, client=client)
        builds.append(built - start)
        passes.append(time.perf_counter() - built)
    return {"graph_build_s": statistics.median(builds), "noop_pass_s": statistics.median(passes)}


def scaling(sizes: list[int], iterations: int) -> list[dict]:
    from distributed.diagnostics import MemorySampler

    cases = _cases()
    rows = []
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        for n in sizes:
            for name, case in cases.items():
                path = _store(name, case, n, client)
                row = {"case": name, "rows": n, "iterations": iterations, "chunk_rows": _chunk_rows(n)}
                sampler = MemorySampler()
                with sampler.sample("fit", client=client, measure="process", interval=0.1):
                    row["dpgm_cluster"] = _fit(
                        case["model"], dpgm.open_dataset(path).drop_vars(case["latent"]),
                        iterations, client=client)
                row["dpgm_cluster"].update(_noop_pass(dpgm.open_dataset(path).drop_vars(case["latent"]), client))
                memory = sampler.to_pandas()["fit"] / 2**20
                row["dpgm_cluster"].update(cores=2, workers_rss_peak_mb=float(memory.max()),
                                           workers_rss_start_mb=float(memory.iloc[0]))
                local = dpgm.open_dataset(path).drop_vars(case["latent"]).load()
                row["dpgm_in_memory"] = _fit(case["model"], local, iterations)
                # in-memory passes run a thread per core once there are >= 2 slices of MIN_THREAD_ROWS
                from dpgm.stats.engine import MIN_THREAD_ROWS

                row["dpgm_in_memory"]["cores"] = min(os.cpu_count() or 1, max(n // MIN_THREAD_ROWS, 1))
                a, b = row["dpgm_in_memory"]["_loglik"], row["dpgm_cluster"]["_loglik"]
                rel = float(np.max(np.abs(a - b) / np.abs(a)))
                row["loglik_max_rel_diff_cluster_vs_memory"] = rel
                row["final_loglik"] = float(a[-1])
                for key in ("dpgm_in_memory", "dpgm_cluster"):
                    v = row[key]
                    del v["_loglik"]
                    v["rows_per_s_per_core"] = n / (v["steady_seconds_per_iter"] * v["cores"])
                print(f"{name} N={n:.0e}: memory "
                      f"{row['dpgm_in_memory']['seconds_per_iter']:.3f} s/it "
                      f"(steady {row['dpgm_in_memory']['steady_seconds_per_iter']:.3f}), cluster "
                      f"{row['dpgm_cluster']['seconds_per_iter']:.3f} s/it (steady "
                      f"{row['dpgm_cluster']['steady_seconds_per_iter']:.3f}), workers peak "
                      f"{row['dpgm_cluster']['workers_rss_peak_mb']:.0f} MB", flush=True)
                rows.append(row)
    return rows


def _pyagrum_bn(truth):
    import pyagrum as gum

    gum.initRandom(0)
    bn = gum.BayesNet("alarm")
    for v in truth.variables:
        bn.add(gum.LabelizedVariable(v, v, [str(s) for s in truth.states[v]]))
    for a, b in truth.edges:
        bn.addArc(a, b)
    bn.generateCPTs()
    return bn


def _pyagrum(truth, frame, latent: list[str], iterations: int) -> float:
    import pyagrum as gum

    bn = _pyagrum_bn(truth)
    frame = frame.astype(str).replace("nan", "?")
    for v in latent:
        frame[v] = "?"
    start = time.perf_counter()
    learner = gum.BNLearner(frame, bn, ["?"])
    learner.useSmoothingPrior(1e-6)
    learner.useEMWithDiffCriterion(1e-300, 0.0)
    learner.EMsetMaxIter(iterations)
    learner.learnParameters(bn, False)
    seconds = time.perf_counter() - start
    assert learner.EMnbrIterations() == iterations, learner.EMStateMessage()
    return seconds


def _pgmpy(truth, frame, latent: list[str], iterations: int) -> float:
    from pgmpy.estimators import ExpectationMaximization
    from pgmpy.models import DiscreteBayesianNetwork

    frame = frame.astype(str)
    start = time.perf_counter()
    model = DiscreteBayesianNetwork(truth.edges, latents=set(latent))
    estimator = ExpectationMaximization(model, frame)
    estimator.get_parameters(latent_card={v: len(truth.states[v]) for v in latent},
                             max_iter=iterations, seed=0, show_progress=False)
    return time.perf_counter() - start


def _dpgm_peer_case(model, ds, iterations: int) -> float:
    seconds, _, _ = _median_time(lambda: dpgm.fit(model, ds, method="em", n_init=1, random_state=0,
                                                  tol=0, max_iter=iterations, accelerate=None), 3)
    return seconds


def peers(sizes: list[int], pgmpy_max: int, pyagrum_mcar_max: int) -> list[dict]:
    truth = dpgm.load_network("alarm")
    model = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    rows = []
    cases = [("alarm1", LATENT1, 0.0, n) for n in sizes]
    cases += [("alarm2", LATENT2, MISSING, n) for n in sizes if n <= pyagrum_mcar_max]
    for name, latent, missing, n in cases:
        ds = dpgm.sample_bayesian_network(truth, n, None, seed=2, missing=missing).drop_vars(latent)
        frame = dpgm.to_pandas(ds)
        row = {"case": name, "rows": n, "missing": missing, "latent": latent}
        for k in (1, 2):
            row[f"dpgm_K{k}"] = _dpgm_peer_case(model, ds, k)
            row[f"pyagrum_K{k}"] = _pyagrum(truth, frame, latent, k)
            if missing == 0 and n <= pgmpy_max:
                row[f"pgmpy_K{k}"] = _pgmpy(truth, frame, latent, k)
        for peer in ("dpgm", "pyagrum", "pgmpy"):
            if f"{peer}_K2" in row:
                row[f"{peer}_per_iter"] = row[f"{peer}_K2"] / 2
                row[f"{peer}_marginal_iter"] = row[f"{peer}_K2"] - row[f"{peer}_K1"]
        for peer in ("pyagrum", "pgmpy"):
            if f"{peer}_K2" in row:
                row[f"ratio_{peer}_per_iter"] = row[f"{peer}_per_iter"] / row["dpgm_per_iter"]
                row[f"ratio_{peer}_K1"] = row[f"{peer}_K1"] / row["dpgm_K1"]
        print(name, n, {k: round(v, 4) for k, v in row.items() if isinstance(v, float)}, flush=True)
        rows.append(row)
    return rows


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, rate, mem) = plt.subplots(1, 3, figsize=(15, 4))
    for case, marker in (("alarm2", "o"), ("lcm20", "s")):
        rows = [r for r in report["scaling"] if r["case"] == case]
        xs = [r["rows"] for r in rows]
        for key, style in (("dpgm_in_memory", "-"), ("dpgm_cluster", "--")):
            label = f"{case} {key.removeprefix('dpgm_')}"
            ax.loglog(xs, [r[key]["seconds_per_iter"] for r in rows], marker + style, label=label)
            rate.semilogx(xs, [r[key]["rows_per_s_per_core"] / 1e3 for r in rows], marker + style,
                          label=label)
        mem.semilogx(xs, [r["dpgm_cluster"]["workers_rss_peak_mb"] - r["dpgm_cluster"]["workers_rss_start_mb"]
                          for r in rows], marker + "-", label=f"{case} peak - start of fit")
    for peer, marker in (("pgmpy", "^"), ("pyagrum", "v"), ("dpgm", "x")):
        rows = [r for r in report["peers"] if r["case"] == "alarm1" and f"{peer}_per_iter" in r]
        ax.loglog([r["rows"] for r in rows], [r[f"{peer}_per_iter"] for r in rows], marker + ":",
                  label=f"alarm1 {peer}")
    ax.set_xlabel("rows")
    ax.set_ylabel("seconds per EM iteration (wall / K)")
    ax.legend(fontsize=7)
    rate.set_xlabel("rows")
    rate.set_ylabel("E-step k rows / s / core (steady state)")
    rate.legend(fontsize=7)
    mem.set_xlabel("rows")
    mem.set_ylabel("2 workers' RSS growth during the fit, MB")
    mem.set_title(f"chunks of min(N/8, {_chunk_rows(10**9):,}) rows", fontsize=9)
    mem.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    lines = ["# em: EM with latent variables, dpgm vs pgmpy and pyAgrum", "",
             f"K = {report['iterations']} iterations, no early stop; "
             "BLAS/numba pinned to 1 thread; "
             "2-core shared machine. s/it = fit wall time / K (setup included); steady = median "
             "per-iteration time after the first (from `result.history`); rows/s/core from steady "
             "(in memory: one thread per core from 2 x 65,536 rows, else one core).",
             "", "## dpgm scaling (alarm2: 2 latent + 20% MCAR; "
             "lcm20: 20 items, 3 classes, 20% MCAR)",
             "", "cluster floor = one pass of a no-op kernel over the same store on the same cluster "
             "(Zarr reads, scheduling, reduction; median of 3); graph = building the pass's task graph.",
             "", "| case | N | chunk rows | mem s/it | mem steady | cluster s/it | cluster steady | "
             "cluster floor | graph ms | rows/s/core mem | rows/s/core cluster | "
             "workers RSS start / peak MB | loglik rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["scaling"]:
        m, c = r["dpgm_in_memory"], r["dpgm_cluster"]
        lines.append(
            f"| {r['case']} | {r['rows']:.0e} | {r.get('chunk_rows', _chunk_rows(r['rows'])):,} | "
            f"{m['seconds_per_iter']:.3f} | "
            f"{m['steady_seconds_per_iter']:.3f} | {c['seconds_per_iter']:.3f} | "
            f"{c['steady_seconds_per_iter']:.3f} | {c['noop_pass_s']:.3f} | {1e3 * c['graph_build_s']:.1f} | "
            f"{m['rows_per_s_per_core']:.3g} | "
            f"{c['rows_per_s_per_core']:.3g} | {c['workers_rss_start_mb']:.0f} / "
            f"{c['workers_rss_peak_mb']:.0f} | {r['loglik_max_rel_diff_cluster_vs_memory']:.1e} |")
    lines += ["", "## Peers (same rows, same run; dpgm in memory, median of 3)", "",
              "alarm1 = HYPOVOLEMIA latent, no missing values; alarm2 = 2 latent + 20% MCAR "
              "(pgmpy cannot: it drops rows with missing values). per-iter = t(K=2)/2; "
              "marginal = t(K=2) - t(K=1). Targets: >= 1000x pgmpy, >= 100x pyAgrum per iteration.",
              "", "| case | N | dpgm per-iter | pgmpy per-iter | pyAgrum per-iter | "
              "pgmpy marginal | pyAgrum marginal | pgmpy / dpgm | pyAgrum / dpgm | "
              "pgmpy / dpgm K=1 | pyAgrum / dpgm K=1 |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(row, key, fmt):
        return format(row[key], fmt) if key in row else "-"

    for r in report["peers"]:
        lines.append(
            f"| {r['case']} | {r['rows']:.0e} | {r['dpgm_per_iter']:.4f} | "
            f"{f(r, 'pgmpy_per_iter', '.2f')}"
            f" | {f(r, 'pyagrum_per_iter', '.2f')} | {f(r, 'pgmpy_marginal_iter', '.2f')} | "
            f"{f(r, 'pyagrum_marginal_iter', '.2f')} | {f(r, 'ratio_pgmpy_per_iter', '.0f')} | "
            f"{f(r, 'ratio_pyagrum_per_iter', '.0f')} | {f(r, 'ratio_pgmpy_K1', '.0f')} | "
            f"{f(r, 'ratio_pyagrum_K1', '.0f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    parser.add_argument("--rows", type=float, nargs="*", help="dpgm scaling sizes")
    parser.add_argument("--peer-rows", type=float, nargs="*", help="peer comparison sizes")
    parser.add_argument("--iterations", type=int, help="EM iterations for scaling (default 3)")
    parser.add_argument("--pgmpy-max", type=float, default=1e4, help="largest N for pgmpy")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e4] if args.quick else [1e4, 1e5, 1e6]))]
    peer_sizes = [int(x) for x in (args.peer_rows or ([1e3] if args.quick else [1e3, 1e4]))]
    iterations = args.iterations or (2 if args.quick else 3)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    STORE.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "em", "quick": args.quick, "iterations": iterations,
              "scaling": scaling(sizes, iterations),
              "peers": peers(peer_sizes, int(args.pgmpy_max),
                             pyagrum_mcar_max=0 if args.quick else 1000),
              "load_average_at_end": os.getloadavg(),
              "notes": "BLAS/numba threads pinned to 1; the machine's 2 cores are shared"}
    out = RESULTS if not args.quick else STORE / "results-quick"
    out.mkdir(parents=True, exist_ok=True)
    (out / "em.json").write_text(json.dumps(report, indent=2))
    _plot(report, out / "em.png")
    (out / "em.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

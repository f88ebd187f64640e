"""The Poisson bootstrap in one pass: ``dpgm.bootstrap`` of alarm against a counting pass and replicate-by-replicate fits.

Run: ``python -m benchmarks.bootstrap [--rows 1e6 1e7] [--replicates 20 200] [--network alarm] [--quick]``.

alarm's rows (37 variables; ``--network``: another of :func:`dpgm.load_network`'s, the same way) in a Zarr store (500,000 rows per chunk) on a 2-worker LocalCluster
(processes, one thread each). Side by side in one run, the order alternating over the repeats:

* **counting pass**: ``dpgm.fit(alarm, data, "mle")``, one pass of the count kernel;
* **bootstrap**: ``dpgm.bootstrap(alarm, data, replicates=B)`` for each ``B``: the fit on the data and
  ``B`` replicates in one pass (every replicate's tables and the data's own from one kernel per chunk),
  the replicates' tables normalised all at once;
* **replicate by replicate**: the loop without it, a weighted ``dpgm.fit`` per replicate (its Poisson
  weights computed per chunk on the workers, :func:`dpgm.stats.resample.replicate_weights`), for
  ``--naive`` replicates; the cost of ``B`` of them is ``B`` times the measured mean (stated as such).

Replicates of both equal (rel 1e-12, checked). Passes are counted by a scheduler plugin, CPU is this
process and both workers. Every variant runs once, untimed, before the measurements (the workers'
imports and compiled kernels). Each bootstrap's time splits in two, read from the cluster's task stream:
the **pass** (its computation, first task start to last task end, one kernel reading every chunk) and
the **driver** (the rest of the wall time: the fit on the data from its tables, every replicate's tables
normalised at once, the result).

**Kernels alone** (``--kernel-rows``, default 500,000: one chunk of the largest store, in this process,
one thread): :func:`dpgm.stats.resample.replicate_count_chunk` for each ``B`` (with the chunk's own tables, as
the bootstrap runs it) against
:func:`dpgm.stats.kernels.count_chunk` on the same codes, the best of 5 thread-CPU times.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.cv import STORE, _GraphCounter, _measure  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _replicate_by_replicate(model, data, replicates: int, client) -> list:
    from dpgm.stats.resample import replicate_weights

    fits = []
    for b in range(replicates):
        weights = replicate_weights(data.sizes["row"], data.chunks["row"], b, 0).astype(np.float64)
        fits.append(dpgm.fit(model, data.assign(weight=xr.DataArray(weights, dims=("row",))), "mle", client=client,
                             progress=False).model)
    return fits


def _measure_pass(client, run):
    """:func:`_measure` of ``run()``, and the span of its computations on the cluster (first task start to last
    task end, from the task stream)."""
    from distributed import get_task_stream

    with get_task_stream(client=client) as stream:
        wall, cpu, value, passes = _measure(client, run)
    times = [t for task in stream.data for span in task["startstops"] for t in (span["start"], span["stop"])]
    return wall, cpu, value, passes, (max(times) - min(times)) if times else 0.0


def _best(run, repeats: int = 5) -> float:
    """The least thread-CPU seconds of ``repeats`` calls of ``run()``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        run()
        best = min(best, time.thread_time() - start)
    return best


def kernels(path: Path, rows: int, replicates: list[int], network: str = "alarm") -> dict:
    """Thread-CPU seconds of the replicate count kernel for each ``B`` and of the count kernel, on the first
    ``rows`` rows of the store at ``path`` counted for ``network``'s families."""
    from dpgm.stats.counts import _count_plan
    from dpgm.stats.kernels import count_chunk
    from dpgm.stats.resample import replicate_count_chunk
    from dpgm.stats.source import DataSource

    truth = dpgm.load_network(network)
    data = dpgm.open_dataset(path).isel(row=slice(0, rows))
    _, _, plan = _count_plan(DataSource.of(data), list(truth.families))
    codes = np.stack([np.asarray(data[v].values) for v in plan.variables])
    positions = np.arange(codes.shape[1])
    count_chunk(codes[:, :1000].copy(), plan)
    replicate_count_chunk(codes[:, :1000].copy(), positions[:1000], plan, 8, 0)  # compiled or loaded
    record = {"rows": codes.shape[1], "tables": len(plan.scopes), "cells": int(plan.offsets[-1]),
              "count": _best(lambda: count_chunk(codes, plan))}
    for b in replicates:
        record[f"replicates {b}"] = _best(lambda b=b: replicate_count_chunk(codes, positions, plan, b, 0, own=True))
    print(json.dumps(record), flush=True)
    return record


def run(rows: list[int], replicates: list[int], naive: int, repeats: int, network: str = "alarm") -> list[dict]:
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    truth = dpgm.load_network(network)
    model = dpgm.BayesianNetwork.from_edges(truth.edges, variables=truth.variables)
    counter = type("GraphCounter", (_GraphCounter, SchedulerPlugin), {})()
    records = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        cluster.scheduler.add_plugin(counter)
        for n in rows:
            path = STORE / f"{network}-{n}.zarr"
            if not path.exists():
                dpgm.sample_bayesian_network(truth, n, path, seed=0, chunk_rows=500_000, client=client)
            data = dpgm.open_dataset(path)
            variants = {"count": lambda data=data: dpgm.fit(model, data, "mle", client=client, progress=False),
                        "naive": lambda data=data: _replicate_by_replicate(model, data, naive, client)}
            for b in replicates:
                variants[f"bootstrap {b}"] = lambda data=data, b=b: dpgm.bootstrap(
                    model, data, replicates=b, method="mle", client=client, progress=False)
            if not records:  # the workers' imports and compiled kernels, untimed
                for name, variant in variants.items():
                    if name != "naive":
                        variant()
            runs: dict[str, list] = {name: [] for name in variants}
            values = {}
            for r in range(repeats):
                order = list(variants) if r % 2 == 0 else list(variants)[::-1]
                for name in order:
                    wall, cpu, value, passes, span = _measure_pass(client, variants[name])
                    runs[name].append({"wall": wall, "cpu": cpu, "passes": passes, "span": span})
                    values[name] = value
            boot = values[f"bootstrap {replicates[0]}"]
            for b, fitted in enumerate(values["naive"][: replicates[0]]):
                for v in model.variables:
                    np.testing.assert_allclose(boot.replicates[f"table:{v}"].isel(replicate=b).values,
                                               fitted.cpds[v].values, rtol=1e-12)
            record = {"rows": n, "chunks": len(data.chunks["row"]), "naive_replicates": naive}
            for name, measured in runs.items():
                record[name] = {"wall": statistics.median(x["wall"] for x in measured),
                                "cpu": statistics.median(x["cpu"] for x in measured),
                                "span": statistics.median(x["span"] for x in measured),
                                "walls": [x["wall"] for x in measured],
                                "passes": measured[-1]["passes"]}
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


def _spread(boot: dict, count: dict) -> str:
    """The wall ratios of the repeats (each repeat times both, side by side): least, median and most."""
    if "walls" not in boot:  # results written before the repeats were kept
        return "-"
    ratios = sorted(b / c for b, c in zip(boot["walls"], count["walls"], strict=True))
    return f"{ratios[0]:.2f}x / {statistics.median(ratios):.2f}x / {ratios[-1]:.2f}x"


def _write(results: dict, name: str) -> None:
    network = results.get("network", "alarm")
    lines = [f"# The Poisson bootstrap in one pass ({network}, Zarr, 2 workers)", "",
             f"Written by `python -m benchmarks.bootstrap`. Machine: {results['machine']}; load average "
             f"{results['load'][0]:.1f} at the start, {results['load'][1]:.1f} at the end (a shared machine: the "
             "ratios, measured side by side in one run with the order alternating, are what to read).", "",
             f"`dpgm.bootstrap({network}, data, replicates=B, method=\"mle\")` (the fit on the data and `B` replicates, "
             "every replicate's count tables and the data's own from one kernel per chunk, the replicates' tables "
             "normalised all at once) against one counting pass "
             f"(`dpgm.fit({network}, data, \"mle\")`) and against replicates fitted one by one (a weighted `dpgm.fit` "
             "each, one pass each; the cost of `B` of them is `B` times the measured mean over the "
             "`naive` replicates run). Replicates equal (rel 1e-12, checked). CPU: this process and both workers. "
             "Pass: the computation on the cluster (first task start to last task end); driver: the rest of the "
             "bootstrap's wall time (the fit on the data from its tables, the replicates' tables normalised at once, the "
             "result).",
             "", "| rows | chunks | B | passes | wall s (bootstrap / one count pass) | wall ratio | CPU ratio | "
             "pass s (bootstrap / count) | pass ratio | driver s | one by one, B passes: wall s (extrapolated) | "
             "bootstrap faster by (wall) | wall ratio in each repeat (min / median / max) |",
             "|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for record in results["records"]:
        count, naive = record["count"], record["naive"]
        per_replicate = naive["wall"] / record["naive_replicates"]
        for key in (k for k in record if k.startswith("bootstrap ")):
            b = int(key.split()[1])
            boot = record[key]
            lines.append(f"| {record['rows']:,} | {record['chunks']} | {b} | {boot['passes']} | "
                         f"{boot['wall']:.2f} / {count['wall']:.2f} | {boot['wall'] / count['wall']:.2f}x | "
                         f"{boot['cpu'] / count['cpu']:.2f}x | {boot['span']:.2f} / {count['span']:.2f} | "
                         f"{boot['span'] / count['span']:.2f}x | {boot['wall'] - boot['span']:.2f} | "
                         f"{per_replicate * b:.0f} | {per_replicate * b / boot['wall']:.1f}x | {_spread(boot, count)} |")
    kernel = results.get("kernels")
    if kernel:
        lines += ["", f"Kernels alone, one chunk of {kernel['rows']:,} rows in this process (one thread; "
                  f"{kernel['tables']} tables, {kernel['cells']:,} cells; best of 5 thread-CPU times):", "",
                  "| B | replicate kernel ms | count kernel ms | ratio | ns per row and replicate |",
                  "|---:|---:|---:|---:|---:|"]
        for key in (k for k in kernel if k.startswith("replicates ")):
            b = int(key.split()[1])
            lines.append(f"| {b} | {kernel[key] * 1e3:.0f} | {kernel['count'] * 1e3:.1f} | "
                         f"{kernel[key] / kernel['count']:.1f}x | {kernel[key] / (kernel['rows'] * b) * 1e9:.2f} |")
    lines += ["", "The issue's goal is a bootstrap pass of 200 replicates of alarm at most 3x a counting pass. The kernel "
              "groups a chunk's rows by their codes, sums each group's Poisson weights per replicate (four "
              "weights from each 64-bit hash) and adds the sums to the group's cell of every table: its cost "
              "grows as rows x replicates plus distinct rows x tables x replicates, where a counting pass grows "
              "as rows x tables; it is linear in rows (one task per chunk, the same worker memory per chunk "
              "whatever N) and splits over workers as a counting pass does."]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--replicates", type=int, nargs="+", default=[20, 200])
    parser.add_argument("--naive", type=int, default=5, help="replicates fitted one by one (default 5)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1e5 rows, one repeat (a smoke run)")
    parser.add_argument("--name", default="bootstrap", help="results file name (default bootstrap)")
    parser.add_argument("--network", default="alarm",
                        help="the network whose rows are sampled and fitted (default alarm, the issue's case)")
    parser.add_argument("--kernel-rows", type=float, default=5e5,
                        help="rows of the kernels-alone measurement (default 500,000, one chunk; 0: none)")
    args = parser.parse_args()
    rows = [100_000] if args.quick else [int(r) for r in args.rows]
    repeats = 1 if args.quick else args.repeats
    STORE.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()[0]]
    records = run(rows, args.replicates, args.naive, repeats, args.network)
    measured = None
    if args.kernel_rows:
        measured = kernels(STORE / f"{args.network}-{max(rows)}.zarr", int(args.kernel_rows), args.replicates,
                           args.network)
    load.append(os.getloadavg()[0])
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}", "records": records,
               "load": load, "kernels": measured, "network": args.network}
    _write(results, args.name)


if __name__ == "__main__":
    main()

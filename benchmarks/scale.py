"""Scale: one EM iteration and one counting pass vs N and workers, from Zarr, with worker memory.

Run: ``python -m benchmarks.scale [--quick] [--rows 2.5e7 5e7 1e8] [--base-rows 2.5e7]``.

Data: alarm (37 variables) forward-sampled into a Zarr store under ``--data``
(default ``/work/scale-data``, outside the repository; ``--clean`` deletes it at the
end) in chunks of ``--chunk-rows`` rows (default 10^6). ``--base-rows`` rows are
sampled once; the store of each larger N reuses the base store's chunk files by
hard links (chunk ``i`` of the big store is chunk ``i mod n_base`` of the base
store), only the arrays' ``shape`` differs. Every pass still reads, decodes and
processes N rows; the rows repeat, which costs nothing in disk space and does not
change the per-row work (the kernels never skip a repeated row).

Per N, on a 1-worker and a 2-worker LocalCluster (processes, 1 thread each, both
started once and alive side by side, N's cases interleaved between them):

* **counts**: ``dpgm.counts(ds, families)`` over all 37 alarm families (one pass);
* **EM**: ``dpgm.fit(model, ds.drop_vars(["HYPOVOLEMIA", "LVFAILURE"]), method="em",
  n_init=1, max_iter=1, tol=0)`` -- one EM iteration (``result.passes`` is recorded:
  1 pass over the data) on alarm with two latent variables;
* **floor**: one pass of a no-op kernel over the same store through
  ``dpgm.stats.engine.map_reduce`` (Zarr reads + decode, scheduling, the reduction
  tree) and the client-side time to build that pass's task graph;
* **peak worker memory**: each worker's ``VmHWM`` (peak resident set) from
  ``/proc/self/status``, reset before the N's passes by writing ``5`` to
  ``/proc/self/clear_refs``.

Around each pass the workers' CPU seconds (``time.process_time`` through ``client.run``)
are read: the work done, whatever share of the cores a shared machine gives.
Each timing goes through :func:`benchmarks.timing.timed_on_cluster` (a run starts once
the scheduler has forgotten the previous run's keys). Before the timings both
clusters run the EM and counting passes once on the smallest store (numba
compilation and imports in the workers are not timed). Scheduler per-task overhead:
``client.map`` of a no-op over ``--noop-tasks`` tasks, tasks per second.
Results: ``results/scale.json``, ``.md``, ``.png``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.timing import timed_on_cluster  # noqa: E402

RESULTS = Path(__file__).parent / "results"
LATENT = ["HYPOVOLEMIA", "LVFAILURE"]


def _label(n: int) -> str:
    return f"{n:.2e}".replace("+", "")


def _base_store(data: Path, truth, n: int, chunk_rows: int, client) -> tuple[Path, float]:
    path = data / f"alarm_base_{_label(n)}_c{chunk_rows}.zarr"
    if (path / ".done").exists():
        return path, float("nan")
    start = time.perf_counter()
    dpgm.sample_bayesian_network(truth, n, path, seed=1, chunk_rows=chunk_rows, client=client, mode="w")
    seconds = time.perf_counter() - start
    (path / ".done").write_text("ok")
    return path, seconds


def _linked_store(base: Path, n: int, chunk_rows: int, data: Path) -> Path:
    """A store of ``n`` rows whose chunk ``i`` is a hard link to the base store's chunk ``i mod n_base``."""
    if n % chunk_rows:
        raise ValueError(f"rows {n} must be a multiple of chunk rows {chunk_rows}")
    base_meta = json.loads((base / "HR" / "zarr.json").read_text())
    n_base = base_meta["shape"][0] // chunk_rows
    if n == n_base * chunk_rows:
        return base
    path = data / f"alarm_linked_{_label(n)}_c{chunk_rows}.zarr"
    if (path / ".done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    shutil.copy(base / "zarr.json", path / "zarr.json")
    for var_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        meta = json.loads((var_dir / "zarr.json").read_text())
        meta["shape"] = [n]
        (path / var_dir.name / "c").mkdir(parents=True)
        (path / var_dir.name / "zarr.json").write_text(json.dumps(meta, indent=2))
        for i in range(n // chunk_rows):
            os.link(var_dir / "c" / str(i % n_base), path / var_dir.name / "c" / str(i))
    (path / ".done").write_text("ok")
    return path


def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return os.getpid()


def _memory_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmHWM", "VmRSS")}


def _noop_task(i):
    return i


def _task_overhead(client, n_tasks: int) -> dict:
    """Scheduler throughput on no-op tasks (one key each, pure=False so nothing is reused)."""
    rates = []
    for _ in range(3):
        start = time.perf_counter()
        client.gather(client.map(_noop_task, range(n_tasks), pure=False))
        rates.append(n_tasks / (time.perf_counter() - start))
    rate = float(np.median(rates))
    return {"noop_tasks": n_tasks, "tasks_per_s": rate, "ms_per_task": 1e3 / rate}


def _noop_kernel(index, columns, shared):
    return np.zeros(1)


def _floor(ds, client, repeats: int) -> dict:
    from dpgm.cluster import compute
    from dpgm.data.columns import zarr_columns
    from dpgm.stats.engine import map_reduce, n_tree_levels

    columns = list(ds.data_vars)
    arrays = zarr_columns(ds, columns)
    build = []
    counter = iter(range(10**6))

    def run():
        start = time.perf_counter()
        lazy = map_reduce(arrays, _noop_kernel, name="bench-noop", shared=np.full(4, float(next(counter))))
        build.append(time.perf_counter() - start)
        return compute(lazy, client=client)

    seconds, _ = timed_on_cluster(client, run, repeats)
    return {"floor_s": seconds, "graph_build_s": float(np.median(build)),
            "chunks": arrays.n_chunks, "tree_levels": n_tree_levels(arrays.n_chunks, 8)}


def _worker_cpu() -> float:
    return time.process_time()


def _cpu_of(client, repeats: int, measure) -> tuple[float, float]:
    """``measure()``'s median seconds and the workers' CPU seconds per repeat (all worker processes,
    all their threads: ``time.process_time`` read through ``client.run`` before and after)."""
    before = client.run(_worker_cpu)
    seconds = measure()
    after = client.run(_worker_cpu)
    return seconds, sum(after[k] - before[k] for k in after) / repeats


def _case(client, path: Path, truth, model, families, repeats: int) -> dict:
    ds = dpgm.open_dataset(path)
    latent_free = ds.drop_vars(LATENT)
    pids = client.run(_reset_peak)
    before = client.run(_memory_mb)
    out = {"workers": len(pids)}
    out["counts_s"], out["counts_cpu_s"] = _cpu_of(client, repeats, lambda: timed_on_cluster(
        client, lambda: dpgm.counts(ds, families, client=client), repeats)[0])
    seeds = iter(range(10**6))
    passes = []

    def em():
        result = dpgm.fit(model, latent_free, method="em", n_init=1, max_iter=1, tol=0,
                          random_state=next(seeds), client=client)
        passes.append(result.passes)
        return result

    out["em_s"], out["em_cpu_s"] = _cpu_of(client, repeats, lambda: timed_on_cluster(client, em, repeats)[0])
    out["em_passes"] = passes[-1]
    floor_cpu = {}

    def floor():
        floor_cpu.update(_floor(latent_free, client, repeats))
        return floor_cpu["floor_s"]

    _, out["floor_cpu_s"] = _cpu_of(client, repeats, floor)
    out.update(floor_cpu)
    after = client.run(_memory_mb)
    out["rss_before_mb"] = [m["VmRSS"] for m in before.values()]
    out["peak_rss_mb"] = [m["VmHWM"] for m in after.values()]
    return out


def run(args) -> dict:
    truth = dpgm.load_network("alarm")
    model = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    families = [(v, *truth.parents(v)) for v in truth.variables]
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    record = {"rows": args.rows, "chunk_rows": args.chunk_rows, "base_rows": args.base_rows,
              "repeats": args.repeats, "load_start": os.getloadavg(), "cases": [], "load": []}
    with contextlib.ExitStack() as stack:
        clients = {w: stack.enter_context(dpgm.connect(n_workers=w, dashboard_address=":0")) for w in args.workers}
        base, record["base_sample_s"] = _base_store(data, truth, args.base_rows, args.chunk_rows, clients[max(clients)])
        stores = {n: _linked_store(base, n, args.chunk_rows, data) for n in args.rows}
        record["disk_mb"] = sum(f.stat().st_size for f in base.rglob("*") if f.is_file()) / 2**20
        warm = stores[min(stores)]
        for client in clients.values():  # imports and numba compilation in every worker, not timed
            ds = dpgm.open_dataset(warm)
            dpgm.counts(ds, families, client=client)
            dpgm.fit(model, ds.drop_vars(LATENT), method="em", n_init=1, max_iter=1, tol=0, client=client)
        record["overhead"] = {w: _task_overhead(c, args.noop_tasks) for w, c in clients.items()}
        print("overhead", record["overhead"], flush=True)
        for n in args.rows:
            for w, client in clients.items():
                row = {"rows": n, **_case(client, stores[n], truth, model, families, args.repeats)}
                row["load"] = os.getloadavg()
                record["cases"].append(row)
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
                _write_json(record, args.out)
    record["load_end"] = os.getloadavg()
    _write_json(record, args.out)
    if args.clean:
        shutil.rmtree(data, ignore_errors=True)
    return record


def _write_json(record: dict, out: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{out}.json").write_text(json.dumps(record, indent=1))


def _by(record: dict) -> dict[tuple[int, int], dict]:
    return {(c["rows"], c["workers"]): c for c in record["cases"]}


def projection(record: dict, rows: float = 1e10, workers: int = 100, split_every: int = 8) -> dict:
    """A paper estimate of one pass over ``rows`` rows on ``workers`` workers from this run's costs.

    seconds = graph build + max(compute, scheduler) + tree depth x (one task's latency), where
    compute = chunks per worker x the measured seconds per chunk on one worker (largest N),
    scheduler = chunks x the scheduler's measured seconds per no-op task (one scheduler
    process handles every task, so it bounds the pass when chunks are cheap).
    """
    import math

    by = _by(record)
    n = max(r for r, w in by if w == 1)
    one = by[(n, 1)]
    overhead = record["overhead"]
    task_s = min(v["ms_per_task"] for v in overhead.values()) / 1e3
    chunks = math.ceil(rows / record["chunk_rows"])
    depth = math.ceil(math.log(chunks, split_every))
    build_per_task = one["graph_build_s"] / one["chunks"]
    out = {"rows": rows, "workers": workers, "chunks": chunks, "tree_levels": depth,
           "chunks_per_worker": math.ceil(chunks / workers), "task_s": task_s,
           "graph_build_s": build_per_task * chunks * (1 + 1 / (split_every - 1))}
    for kind in ("em", "counts", "floor"):
        per_chunk = one[f"{kind}_s"] / one["chunks"]
        compute = out["chunks_per_worker"] * per_chunk
        scheduler = chunks * (1 + 1 / (split_every - 1)) * task_s
        cpu = record.get("worker_cpu_1e8")
        if f"{kind}_cpu_s" in one:  # the pass's own worker CPU seconds
            busy = one[f"{kind}_cpu_s"] / one[f"{kind}_s"]
        else:
            busy = sum(cpu["1"]["cpu_s"]) / cpu["1"]["wall_s"] if cpu else 1.0
        out[kind] = {"per_chunk_s": per_chunk, "compute_s": compute, "scheduler_s": scheduler,
                     "tree_s": depth * task_s,
                     "total_s": out["graph_build_s"] + max(compute, scheduler) + depth * task_s,
                     "total_cpu_bound_s": out["graph_build_s"] + max(compute * busy, scheduler) + depth * task_s}
    return out


def report(record: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _by(record)
    sizes = sorted({r for r, _ in by})
    workers = sorted({w for _, w in by})
    loads = [c["load"][0] for c in record["cases"]]
    lines = [
        "# scale: one EM iteration and one counting pass vs N and workers, from Zarr",
        "",
        "alarm (37 variables), Zarr chunks of {:,} rows. **counts** = `dpgm.counts` of all 37 alarm "
        "families in one pass; **EM** = one iteration of `dpgm.fit(method=\"em\", max_iter=1)` with "
        "HYPOVOLEMIA and LVFAILURE latent (dropped from the data), no missing values "
        "(`result.passes` = {}); **floor** = one pass of a no-op kernel over the same store "
        "(Zarr read + decode, scheduling, the reduction tree). A 1-worker and a 2-worker "
        "LocalCluster (processes, 1 thread each) alive side by side, each N run on both "
        "back to back; {} timed run(s) per cell after an untimed warm-up pass on each cluster.".format(
            record["chunk_rows"], by[(sizes[0], workers[0])]["em_passes"], record["repeats"]),
        "",
        "Data: {:,} rows sampled once (seed 1); the stores of larger N hard-link its chunk files "
        "(chunk i = base chunk i mod {}), so every pass reads, decodes and processes N rows "
        "that repeat every {:,} rows. Base store on disk: {:.0f} MB; sampling it took {:.0f} s on the "
        "2-worker cluster.".format(
            record["base_rows"], record["base_rows"] // record["chunk_rows"], record["base_rows"],
            record["disk_mb"], record["base_sample_s"]),
        "",
        "**The machine was shared**: 2 cores, other sessions' tests running; 1-minute load "
        "average {:.1f} at the start, {:.1f}-{:.1f} during the cases, {} at the end. Absolute "
        "seconds are inflated by that load (read the ratios, measured side by side in one run); "
        "with load ~15 on 2 cores, two workers compete with a dozen other processes for the same "
        "2 cores, so the 2-vs-1-worker ratio understates what 2 idle cores give.".format(
            record["load_start"][0], min(loads), max(loads),
            f"{record['load_end'][0]:.1f}" if "load_end" in record else "(run stopped early)"),
        "",
        *([f"Code: {record['code_note']}.", ""] if "code_note" in record else []),
        "Weak scaling (rows per worker constant as workers grow) needs more than 2 workers "
        "to say anything; on 2 cores it is N-scaling at fixed workers (per-row cost vs N) "
        "plus strong scaling at fixed N (2 workers vs 1).",
        "",
        "| N | workers | chunks | tree levels | counts s | counts rows/s | EM s | EM rows/s | floor s "
        "| graph build ms | worker RSS before MB | peak worker RSS MB | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        for w in workers:
            c = by.get((n, w))
            if c is None:
                continue
            lines.append(
                f"| {n:.2e} | {w} | {c['chunks']} | {c['tree_levels']} | {c['counts_s']:.2f} | "
                f"{n / c['counts_s']:.3g} | {c['em_s']:.1f} | {n / c['em_s']:.3g} | {c['floor_s']:.2f} | "
                f"{1e3 * c['graph_build_s']:.1f} | {max(c['rss_before_mb']):.0f} | "
                f"{max(c['peak_rss_mb']):.0f} | {c['load'][0]:.1f} |")
    lines += ["", "## Ratios (same run)", "",
              "| N | EM 2w vs 1w (speed-up) | counts 2w vs 1w | "
              + " | ".join(f"EM per-row cost vs N={sizes[0]:.1e}, {w}w | counts per-row vs smallest, {w}w"
                           for w in workers) + " |",
              "|---|---|---|" + "---|---|" * len(workers)]
    for n in sizes:
        cells = []
        if (n, 1) in by and (n, 2) in by:
            cells += [f"{by[(n, 1)]['em_s'] / by[(n, 2)]['em_s']:.2f}x",
                      f"{by[(n, 1)]['counts_s'] / by[(n, 2)]['counts_s']:.2f}x"]
        else:
            cells += ["-", "-"]
        for w in workers:
            c, c0 = by.get((n, w)), by.get((sizes[0], w))
            if c is None or c0 is None:
                cells += ["-", "-"]
                continue
            cells += [f"{(c['em_s'] / n) / (c0['em_s'] / sizes[0]):.2f}",
                      f"{(c['counts_s'] / n) / (c0['counts_s'] / sizes[0]):.2f}"]
        lines.append(f"| {n:.2e} | " + " | ".join(cells) + " |")
    if all("em_cpu_s" in c for c in record["cases"]):
        lines += ["", "## Worker CPU seconds per pass (same run)", "",
                  "Sum over the cluster's worker processes of `time.process_time()` (all threads) across "
                  "each pass: the work done, whatever share of the cores the shared machine gave. "
                  "2w/1w = CPU seconds of 2 workers / of 1 worker for the same pass (1 = no parallel "
                  "overhead; the projected speed-up on idle cores is 2 / that).", "",
                  "| N | workers | counts CPU s | counts rows/s per core | EM CPU s | EM rows/s per core "
                  "| floor CPU s | EM CPU 2w/1w | counts CPU 2w/1w |", "|---|---|---|---|---|---|---|---|---|"]
        for n in sizes:
            for w in workers:
                c = by.get((n, w))
                if c is None:
                    continue
                ratio = ["-", "-"]
                if w == 2 and (n, 1) in by:
                    ratio = [f"{c['em_cpu_s'] / by[(n, 1)]['em_cpu_s']:.2f}",
                             f"{c['counts_cpu_s'] / by[(n, 1)]['counts_cpu_s']:.2f}"]
                lines.append(f"| {n:.2e} | {w} | {c['counts_cpu_s']:.2f} | {n / c['counts_cpu_s']:.3g} | "
                             f"{c['em_cpu_s']:.2f} | {n / c['em_cpu_s']:.3g} | {c['floor_cpu_s']:.2f} | "
                             f"{ratio[0]} | {ratio[1]} |")
    cpu = record.get("worker_cpu_1e8")
    if cpu:
        one, two = sum(cpu["1"]["cpu_s"]), sum(cpu["2"]["cpu_s"])
        lines += ["", "## Worker CPU time at N = 1e8 (same run)", "",
                  f"How: {cpu['how']}.", "",
                  "| workers | wall s | worker CPU s | CPU share per worker (cores) |", "|---|---|---|---|"]
        for w in ("1", "2"):
            c = cpu[w]
            shares = ", ".join(f"{x / c['wall_s']:.2f}" for x in c["cpu_s"])
            lines.append(f"| {w} | {c['wall_s']:.1f} | {' + '.join(f'{x:.1f}' for x in c['cpu_s'])} | {shares} |")
        lines += ["", f"The machine's scheduler gives the whole run one share of the 2 cores (Linux "
                  f"autogroup: `kernel.sched_autogroup_enabled = 1`, every process of a session shares "
                  f"one group): with 2 workers each got half the CPU one worker got, so wall time cannot "
                  f"show strong scaling here. The work itself: 2 workers used {two / one:.2f}x the CPU "
                  f"seconds of 1 worker for the same passes (parallel efficiency {one / two:.2f}); on two "
                  f"idle cores that is a projected {2 * one / two:.2f}x speed-up. On one worker the 1e8 case "
                  f"(counts + EM + floor) cost {one:.0f} CPU seconds ({1e8 / one:.2e} rows/s per core for the "
                  f"three passes); its wall time was {cpu['1']['wall_s'] / one:.1f}x that."]
    lines += ["", "## Scheduler overhead (same run)", "",
              "| cluster | no-op tasks | tasks/s | ms per task |", "|---|---|---|---|"]
    for w, v in record["overhead"].items():
        lines.append(f"| {w} worker(s) | {v['noop_tasks']} | {v['tasks_per_s']:.0f} | {v['ms_per_task']:.2f} |")
    p = projection(record)
    lines += ["", "## Paper estimate: 10^10 rows on 100 workers, one pass", "",
              f"{p['chunks']:,} chunks of {record['chunk_rows']:,} rows, {p['chunks_per_worker']} per "
              f"worker, a reduction tree of fan-in 8 and depth {p['tree_levels']}; scheduler "
              f"{1e3 * p['task_s']:.2f} ms per task (measured above, best cluster), graph build "
              f"{p['graph_build_s']:.2f} s (measured per task x map + combine tasks). Per-chunk seconds are "
              "the 1-worker pass at the largest N divided by its chunks, on this loaded machine. "
              "seconds = graph build + max(chunks per worker x per-chunk, all tasks x scheduler) "
              "+ depth x one task.", "",
              "The last column takes the per-chunk cost at the CPU share the worker actually had "
              "(worker CPU seconds / wall seconds of the 1-worker pass at the largest N), i.e. a worker with "
              "a core of its own; the scheduler's per-task cost is kept as measured under load.", "",
              "| pass | per chunk s | compute s | scheduler s | tree s | estimate s (as measured) "
              "| estimate s (a core per worker) |", "|---|---|---|---|---|---|---|"]
    for kind in ("em", "counts", "floor"):
        k = p[kind]
        lines.append(f"| {kind} | {k['per_chunk_s']:.3f} | {k['compute_s']:.1f} | {k['scheduler_s']:.1f} | "
                     f"{k['tree_s']:.3f} | {k['total_s']:.1f} | {k['total_cpu_bound_s']:.1f} |")
    (RESULTS / f"{out}.md").write_text("\n".join(lines) + "\n")

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for w, style in zip(workers, ("o-", "s--"), strict=False):
        ns = [n for n in sizes if (n, w) in by]
        left.plot(ns, [by[(n, w)]["em_s"] for n in ns], style, color="C0", label=f"EM iteration, {w} worker(s)")
        left.plot(ns, [by[(n, w)]["counts_s"] for n in ns], style, color="C1", label=f"counts pass, {w} worker(s)")
        left.plot(ns, [by[(n, w)]["floor_s"] for n in ns], style, color="C2", label=f"no-op floor, {w} worker(s)")
        right.plot(ns, [max(by[(n, w)]["peak_rss_mb"]) for n in ns], style, label=f"peak, {w} worker(s)")
        right.plot(ns, [max(by[(n, w)]["rss_before_mb"]) for n in ns], style, alpha=0.4,
                   label=f"before the passes, {w} worker(s)")
    left.set(xscale="log", yscale="log", xlabel="rows N", ylabel="seconds (shared machine)",
             title="one pass from Zarr")
    right.set(xscale="log", xlabel="rows N", ylabel="largest worker RSS, MB", title="worker memory (VmHWM)")
    right.set_ylim(bottom=0)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{out}.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e6 and 2e6 rows, chunks of 2.5e5")
    parser.add_argument("--rows", type=float, nargs="+", default=[2.5e7, 5e7, 1e8])
    parser.add_argument("--base-rows", type=float, default=2.5e7)
    parser.add_argument("--chunk-rows", type=float, default=1e6)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--noop-tasks", type=int, default=2000)
    parser.add_argument("--data", default="/work/scale-data")
    parser.add_argument("--out", default="scale")
    parser.add_argument("--clean", action="store_true", help="delete --data at the end")
    parser.add_argument("--report-only", action="store_true", help="rewrite .md/.png from the .json")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.base_rows, args.chunk_rows, args.out = [1e6, 2e6], 1e6, 2.5e5, "scale_quick"
    args.rows = [int(n) for n in args.rows]
    args.base_rows, args.chunk_rows = int(args.base_rows), int(args.chunk_rows)
    if not args.report_only:
        logging.getLogger("distributed").setLevel(logging.ERROR)
        warnings.simplefilter("ignore")
        run(args)
    report(json.loads((RESULTS / f"{args.out}.json").read_text()), args.out)


if __name__ == "__main__":
    main()

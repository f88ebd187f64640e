"""Many short HMM sequences out of core: Baum-Welch on a 2-worker cluster from Zarr, cost and worker memory vs N.

Run: ``python -m benchmarks.hmm_many [--quick] [--sequences 1e4 1e5 3e5 1e6] [--length 100]
[--chunk-rows 2e4] [--iterations 3] [--hmmlearn-max 1e4] [--name hmm_many]``.

Data: N sequences of ``length`` steps (default 100: 10^6 sequences are 10^8 steps)
from the 4-state, 6-symbol HMM of ``benchmarks/hmm.py`` (vectorized NumPy sampler
drawing 10^5 sequences at a time, seed fixed), stored as rows of an int8
``(row, time)`` variable in a Zarr store under /tmp/dpgm-bench with ``chunk_rows``
sequences per chunk (the same chunk for every N, so worker memory should not grow
with N; the store is reused between runs).

* **dpgm cluster**: ``dpgm.fit(start, store, init="model", tol=0, max_iter=K)`` on a
  fresh 2-worker LocalCluster (2 processes x 1 thread) per N, after one warm-up
  iteration; the workers read their chunks from the store (one E step = one pass).
  Each worker's peak RSS during the timed fit is sampled every 20 ms by a thread in
  the worker (psutil, as ``benchmarks/hmm_long.py``), with its RSS before the fit
  and the CPU seconds of both workers.
* **hmmlearn** (``CategoricalHMM``, one core, the whole data in memory) from the same
  start, in the same run, for N up to ``--hmmlearn-max``: the per-core ratio and the
  log-likelihoods of every iteration (max relative difference).

Linearity: seconds per iteration per 10^6 steps, and worker CPU seconds per 10^6 steps,
at each N. BLAS/numba threads pinned to 1. Results: ``results/<name>.{json,md}``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.hmm import N_STATES, SYMBOLS, _truth  # noqa: E402
from benchmarks.hmm_long import _worker_probe_start, _worker_probe_stop  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
BLOCK = 100_000


def sample(n_sequences: int, length: int, seed: int = 1) -> np.ndarray:
    """``(n_sequences, length)`` int8 symbols, drawn ``BLOCK`` sequences at a time, one step at a time."""
    start, transition, emission = _truth()
    cdfs = [np.cumsum(p, axis=-1) for p in (start, transition, emission)]
    for cdf in cdfs:
        cdf[..., -1] = 1.0
    start_cdf, transition_cdf, emission_cdf = cdfs
    rng = np.random.default_rng(seed)
    out = np.empty((n_sequences, length), dtype=np.int8)
    for a in range(0, n_sequences, BLOCK):
        b = min(a + BLOCK, n_sequences)
        state = np.searchsorted(start_cdf, rng.random(b - a))
        for t in range(length):
            u = rng.random(b - a)
            out[a:b, t] = (u[:, None] > emission_cdf[state]).sum(axis=1)
            state = (rng.random(b - a)[:, None] > transition_cdf[state]).sum(axis=1)
    return out


def store(n_sequences: int, length: int, chunk_rows: int) -> tuple[Path, np.ndarray | None]:
    """The Zarr store (written once) and, when written now, the codes."""
    path = STORE / f"hmm_many_{n_sequences}_L{length}_c{chunk_rows}.zarr"
    if (path / ".done").exists():
        return path, None
    codes = sample(n_sequences, length)
    ds = xr.Dataset({"obs": (("row", "time"), codes, {"states": SYMBOLS})})
    STORE.mkdir(parents=True, exist_ok=True)
    dpgm.write_dataset(ds, path, chunk_rows=chunk_rows)
    (path / ".done").write_text("")
    return path, codes


def _start() -> dpgm.HiddenMarkovModel:
    return dpgm.hmm(N_STATES, SYMBOLS).randomized(np.random.default_rng(7))


def on_cluster(path: Path, iterations: int) -> dict:
    """Fit on a fresh 2-worker cluster: seconds per iteration, passes, worker memory and CPU."""
    from distributed import Client, LocalCluster

    start = _start()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        data = dpgm.open_dataset(path)
        dpgm.fit(start, data, init="model", tol=0, max_iter=1, client=client)  # warm-up: numba, imports
        before = client.run(_worker_probe_start)
        begin = time.perf_counter()
        result = dpgm.fit(start, data, init="model", tol=0, max_iter=iterations, client=client)
        seconds = time.perf_counter() - begin
        peaks = client.run(_worker_probe_stop)
    return {"seconds_per_iter": seconds / iterations, "passes": result.passes,
            "loglik": [h["loglik"] for h in result.history],
            "worker_rss_before_mb": [b / 2**20 for b in before.values()],
            "worker_peak_rss_mb": [p[1] / 2**20 for p in peaks.values()],
            "worker_cpu_seconds": float(sum(p[2] for p in peaks.values()))}


def with_hmmlearn(codes: np.ndarray, iterations: int) -> dict:
    """hmmlearn's CategoricalHMM from the same start (one core), and its peak RSS increase."""
    from hmmlearn.hmm import CategoricalHMM

    from benchmarks.hmm_long import PeakRSS

    start = _start()
    model = CategoricalHMM(n_components=N_STATES, n_features=len(SYMBOLS), init_params="", params="ste",
                           n_iter=iterations, tol=-np.inf, implementation="log")
    model.startprob_, model.transmat_, model.emissionprob_ = start.arrays()
    probe = PeakRSS()
    probe.start()
    begin = time.perf_counter()
    model.fit(codes.reshape(-1, 1), [codes.shape[1]] * codes.shape[0])
    seconds = time.perf_counter() - begin
    before, peak, cpu = probe.stop()
    return {"seconds_per_iter": seconds / iterations, "loglik": list(model.monitor_.history),
            "peak_rss_increase_mb": (peak - before) / 2**20, "cpu_seconds": cpu}


def run(sizes: list[int], length: int, chunk_rows: int, iterations: int, hmmlearn_max: int) -> list[dict]:
    rows = []
    for n in sizes:
        path, codes = store(n, length, chunk_rows)
        steps = n * length
        row = {"n_sequences": n, "length": length, "steps": steps, "chunk_rows": chunk_rows,
               "chunks": -(-n // chunk_rows), "store_mb": sum(f.stat().st_size for f in path.rglob("*")
                                                              if f.is_file()) / 2**20}
        row["dpgm_cluster"] = on_cluster(path, iterations)
        if n <= hmmlearn_max:
            if codes is None:
                codes = sample(n, length)
            row["hmmlearn"] = with_hmmlearn(codes, iterations)
            mine, theirs = np.array(row["dpgm_cluster"]["loglik"]), np.array(row["hmmlearn"]["loglik"])
            row["loglik_max_rel_diff"] = float(np.max(np.abs(mine - theirs) / np.abs(theirs)))
        cluster = row["dpgm_cluster"]
        cluster["seconds_per_iter_per_1e6_steps"] = cluster["seconds_per_iter"] / (steps / 1e6)
        cluster["worker_cpu_seconds_per_iter_per_1e6_steps"] = (cluster["worker_cpu_seconds"] / iterations
                                                                / (steps / 1e6))
        cluster["steps_per_s_per_core"] = steps / (cluster["seconds_per_iter"] * 2)
        print(f"N={n:.0e} ({steps:.0e} steps): {cluster['seconds_per_iter']:.2f} s/it, worker peak RSS "
              f"{max(cluster['worker_peak_rss_mb']):.0f} MB" + (
                  f", hmmlearn {row['hmmlearn']['seconds_per_iter']:.2f} s/it" if "hmmlearn" in row else ""),
              flush=True)
        rows.append(row)
    return rows


def markdown(report: dict) -> str:
    lines = [f"# hmm_many: many short sequences out of core, Baum-Welch on 2 workers ({report['name']})", "",
             f"{N_STATES} hidden states, {len(SYMBOLS)} symbols (categorical emissions), sequences of length "
             f"{report['length']} stored as rows of an int8 `(row, time)` variable in Zarr on disk, "
             f"{report['chunk_rows']} sequences per chunk at every N; {report['iterations']} iterations from the "
             "same start after a warm-up iteration, on a fresh 2-worker LocalCluster (2 processes x 1 thread) "
             "per N; one pass over the store per iteration. Worker RSS sampled every 20 ms in each worker during "
             "the timed fit. BLAS/numba threads pinned to 1. The machine's 2 cores are shared with other work "
             f"(load average at the start {report['load'][0]:.1f}): the ratios are of one run.", "",
             "| N seq | steps | chunks | store MB | s/it | s/it per 1e6 steps | worker CPU s/it per 1e6 steps | "
             "Msteps/s/core | worker RSS before MB | worker peak RSS MB | passes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        c = r["dpgm_cluster"]
        lines.append(
            f"| {r['n_sequences']:.0e} | {r['steps']:.0e} | {r['chunks']} | {r['store_mb']:.1f} | "
            f"{c['seconds_per_iter']:.2f} | {c['seconds_per_iter_per_1e6_steps']:.3f} | "
            f"{c['worker_cpu_seconds_per_iter_per_1e6_steps']:.3f} | {c['steps_per_s_per_core'] / 1e6:.2f} | "
            f"{' / '.join(f'{x:.0f}' for x in c['worker_rss_before_mb'])} | "
            f"{' / '.join(f'{x:.0f}' for x in c['worker_peak_rss_mb'])} | {c['passes']} |")
    compared = [r for r in report["rows"] if "hmmlearn" in r]
    if compared:
        lines += ["", "Against hmmlearn (`CategoricalHMM`, one core, the data in memory), same start, same run:", "",
                  "| N seq | dpgm cluster s/it (2 cores) | hmmlearn s/it (1 core) | per-core ratio | "
                  "hmmlearn peak RSS increase MB | loglik max rel diff |", "|---|---|---|---|---|---|"]
        for r in compared:
            c, h = r["dpgm_cluster"], r["hmmlearn"]
            lines.append(f"| {r['n_sequences']:.0e} | {c['seconds_per_iter']:.3f} | {h['seconds_per_iter']:.3f} | "
                         f"{h['seconds_per_iter'] / (2 * c['seconds_per_iter']):.2f} | "
                         f"{h['peak_rss_increase_mb']:.0f} | {r['loglik_max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (about a minute)")
    parser.add_argument("--sequences", type=float, nargs="*", help="numbers of sequences")
    parser.add_argument("--length", type=int, default=100, help="steps per sequence")
    parser.add_argument("--chunk-rows", type=float, default=2e4, help="sequences per chunk")
    parser.add_argument("--iterations", type=int, default=3, help="Baum-Welch iterations timed")
    parser.add_argument("--hmmlearn-max", type=float, default=1e4, help="largest N for hmmlearn")
    parser.add_argument("--name", help="results/<name>.{json,md} (default hmm_many, hmm_many_quick)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.sequences or ([1e3, 1e4] if args.quick else [1e4, 1e5, 3e5, 1e6]))]
    name = args.name or ("hmm_many_quick" if args.quick else "hmm_many")
    warnings.filterwarnings("ignore")
    load = list(psutil.getloadavg())
    rows = run(sizes, args.length, int(args.chunk_rows), args.iterations, int(args.hmmlearn_max))
    report = {"benchmark": "hmm_many", "name": name, "iterations": args.iterations, "length": args.length,
              "chunk_rows": int(args.chunk_rows), "n_states": N_STATES, "symbols": len(SYMBOLS), "load": load,
              "rows": rows, "notes": "BLAS/numba threads pinned to 1; the machine's 2 cores are shared"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    (RESULTS / f"{name}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()

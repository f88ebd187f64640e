"""One long HMM sequence split across workers: the long layout's E step vs in-memory forward-backward.

Run: ``python -m benchmarks.hmm_long [--quick] [--steps 1e6 1e7 1e8] [--chunk-rows 1e6]
[--sweep-steps 1e7 --sweep-chunk-rows 2.5e5 1e6 4e6] [--in-memory-max 3e7]``.

Data: ONE sequence of N steps from a 4-state, 6-symbol HMM (numba sampler, seed
fixed), in the long layout (one row per step: an int8 ``sequence`` id, all 0, and
the int8 symbol ``letter``), written to Zarr under /tmp/dpgm-bench with
``chunk_rows`` rows per chunk (reused between runs).

* **split E step** (:func:`dpgm.stats.long_sequences.long_expected_stats`, categorical
  emissions): a fresh 2-worker LocalCluster (2 processes x 1 thread) per setting; the
  sequence layout is computed once (its pass timed apart), then one E step = pass 1
  (``dpgm-segments``: each chunk's segment operator, O(S^3) per step), the driver's scan
  over the chunk boundaries, pass 2 (``dpgm-estep``: forward-backward with the boundary
  messages); median of 3 E steps after one warm-up E step. Every pass's seconds are
  recorded. Each worker's peak RSS during the timed E steps is sampled every 20 ms
  by a thread in the worker (psutil), and reported with its RSS before them.
* **in memory**: today's single-process forward-backward
  (:func:`dpgm.inference.chain.forward_backward_counts`, numba) on the whole sequence
  as one ``(1, N)`` array, in this process (the codes already in memory; its alpha and
  beta are ``N x S`` floats each), up to ``--in-memory-max`` steps; median of 3, peak RSS
  increase sampled the same way.

Besides wall seconds, the CPU seconds of an E step (both workers' processes, psutil) and of
the in-memory run (this process) are recorded: on a machine shared with other work they
measure the cost where wall-clock ratios depend on the load.

The log-likelihoods and expected counts of both are compared (max relative
difference). BLAS/numba threads pinned to 1. Results: ``results/hmm_long{,_quick}.{json,md}``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from dpgm.cluster import pass_name  # noqa: E402
from dpgm.data.schema import Schema, state_attrs  # noqa: E402
from dpgm.inference.segments import FORWARD_BACKWARD  # noqa: E402
from dpgm.stats.long_sequences import long_expected_stats, sequence_layout  # noqa: E402
from dpgm.stats.source import DataSource  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
N_STATES, SYMBOLS = 4, list("abcdef")


def _truth(seed: int = 0):
    rng = np.random.default_rng(seed)
    n, m = N_STATES, len(SYMBOLS)
    start = rng.dirichlet(np.full(n, 3.0))
    transition = rng.dirichlet(np.ones(n), n) * 0.5 + np.eye(n) * 0.5
    emission = rng.dirichlet(np.ones(m) * 0.7, n)
    return start, transition, emission


def _start_model(seed: int = 7):
    """The parameters the E step runs with (not the truth: as an EM iteration would)."""
    rng = np.random.default_rng(seed)
    return (rng.dirichlet(np.ones(N_STATES)), rng.dirichlet(np.ones(N_STATES), N_STATES),
            rng.dirichlet(np.ones(len(SYMBOLS)), N_STATES))


def sample(n: int, seed: int = 1) -> np.ndarray:
    """The symbols of one sequence of ``n`` steps (int8)."""
    start, transition, emission = _truth()
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.int8)
    block = 10_000_000
    # one pass of the chain, the uniforms drawn in blocks to bound memory
    state_cdf, transition_cdf, emission_cdf = np.cumsum(start), np.cumsum(transition, 1), np.cumsum(emission, 1)
    state_cdf[-1] = transition_cdf[:, -1] = emission_cdf[:, -1] = 1.0
    previous = None
    for a in range(0, n, block):
        b = min(a + block, n)
        u, v = rng.random(b - a), rng.random(b - a)
        first = state_cdf if previous is None else transition_cdf[previous]
        codes = np.empty(b - a, dtype=np.int8)
        states = np.empty(b - a, dtype=np.int8)
        _chain_states(b - a, first, transition_cdf, emission_cdf, u, v, codes, states)
        out[a:b] = codes
        previous = int(states[-1])
    return out


@numba.njit(cache=True)
def _chain_states(n, first_cdf, transition_cdf, emission_cdf, u, v, codes, states):
    state = np.searchsorted(first_cdf, u[0])
    for t in range(n):
        if t > 0:
            state = np.searchsorted(transition_cdf[state], u[t])
        states[t] = state
        codes[t] = np.searchsorted(emission_cdf[state], v[t])


def store(n: int, chunk_rows: int) -> Path:
    """The Zarr store of one sequence of ``n`` steps in chunks of ``chunk_rows`` (written once)."""
    import dask.array as da

    path = STORE / f"hmm_long_{n}_{chunk_rows}.zarr"
    if path.exists():
        try:
            dpgm.open_dataset(path)
            return path
        except Exception:
            shutil.rmtree(path)
    codes = da.from_array(sample(n), chunks=chunk_rows)
    ds = xr.Dataset({"sequence": ("row", da.zeros(n, dtype=np.int8, chunks=chunk_rows), state_attrs(["s0"])),
                     "letter": ("row", codes, state_attrs(SYMBOLS))})
    STORE.mkdir(parents=True, exist_ok=True)
    dpgm.write_dataset(ds, path, chunk_rows=chunk_rows)
    return path


def log_emission(chunk: int, columns: dict, table: np.ndarray) -> np.ndarray:
    """Categorical emissions: ``log table[s, x_t]`` (no missing step in this data)."""
    return np.log(table).T[columns["letter"]]


def accumulate(chunk: int, columns: dict, gamma: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Expected emission counts ``(S, symbols)``."""
    codes = columns["letter"]
    return np.stack([np.bincount(codes, gamma[:, s], minlength=table.shape[1]) for s in range(table.shape[0])])


@dataclasses.dataclass(frozen=True)
class TimedSource(DataSource):
    """A data source that records each pass's name and seconds."""

    passes: list = dataclasses.field(default_factory=list)

    def compute(self, lazy):
        begin = time.perf_counter()
        value = super().compute(lazy)
        self.passes.append((pass_name(lazy), time.perf_counter() - begin))
        return value


class PeakRSS:
    """The peak RSS of a process, sampled every ``interval`` seconds by a thread, from ``start()`` to ``stop()``,
    and the CPU seconds it used meanwhile."""

    def __init__(self, interval: float = 0.02):
        self.interval, self.peak, self.before, self.cpu = interval, 0, 0, 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        process = psutil.Process()
        self.cpu = sum(process.cpu_times()[:2])
        self.before = self.peak = process.memory_info().rss
        self._stop.clear()

        def sample():
            while not self._stop.wait(self.interval):
                self.peak = max(self.peak, process.memory_info().rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self.before

    def stop(self) -> tuple[int, int, float]:
        self._stop.set()
        self._thread.join()
        process = psutil.Process()
        self.peak = max(self.peak, process.memory_info().rss)
        return self.before, self.peak, sum(process.cpu_times()[:2]) - self.cpu


def _worker_probe_start(dask_worker) -> int:
    dask_worker._dpgm_peak_rss = PeakRSS()
    return dask_worker._dpgm_peak_rss.start()


def _worker_probe_stop(dask_worker) -> tuple[int, int, float]:
    return dask_worker._dpgm_peak_rss.stop()


def _gather_statistics(results):
    [(loglik, counts)] = results
    return loglik, np.concatenate([counts["start"], counts["transition"].ravel(), counts["emission"].ravel()])


def split_estep(n: int, chunk_rows: int, repeats: int) -> dict:
    """The split E step on a fresh 2-worker cluster: seconds per pass, worker memory, the statistics."""
    from distributed import Client, LocalCluster

    path = store(n, chunk_rows)
    small = store(20_000, 5_000)
    model = _start_model()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        def run(p):
            data = dpgm.open_dataset(p)
            source = TimedSource(data, Schema.from_dataset(data), client)
            begin = time.perf_counter()
            layout = sequence_layout(source, "sequence")
            layout_seconds = time.perf_counter() - begin
            return source, layout, layout_seconds

        warm, warm_layout, _ = run(small)  # the workers' imports and numba's cached kernels
        long_expected_stats(warm, ["letter"], "sequence", [model], log_emission, accumulate,
                            segments=FORWARD_BACKWARD, layout=warm_layout)
        source, layout, layout_seconds = run(path)
        long_expected_stats(source, ["letter"], "sequence", [model], log_emission, accumulate,
                            segments=FORWARD_BACKWARD, layout=layout)  # warm-up on this store
        before = client.run(_worker_probe_start)
        times, passes = [], []
        for _ in range(repeats):
            source.passes.clear()
            begin = time.perf_counter()
            result = long_expected_stats(source, ["letter"], "sequence", [model], log_emission, accumulate,
                                         segments=FORWARD_BACKWARD, layout=layout)
            times.append(time.perf_counter() - begin)
            passes.append(list(source.passes))
        peaks = client.run(_worker_probe_stop)
    pass_seconds = {name: statistics.median(p[i][1] for p in passes) for i, (name, _) in enumerate(passes[0])}
    seconds = statistics.median(times)
    driver = statistics.median(t - sum(s for _, s in p) for t, p in zip(times, passes, strict=True))
    return {
        "steps": n, "chunk_rows": chunk_rows, "chunks": layout.n_chunks, "seconds": seconds, "times": times,
        "passes": pass_seconds, "driver_seconds": driver,
        "layout_seconds": layout_seconds,
        "worker_rss_before_mb": sorted(round(b / 2**20) for b, _, _ in peaks.values()),
        "worker_peak_rss_mb": sorted(round(p / 2**20) for _, p, _ in peaks.values()),
        "worker_cpu_seconds": sum(c for _, _, c in peaks.values()) / repeats,
        "statistics": _gather_statistics(result),
        "before": before,
    }


def in_memory(n: int, repeats: int) -> dict:
    """Today's single-process forward-backward on the whole sequence."""
    from dpgm.inference.chain import forward_backward_counts

    start, transition, emission = _start_model()
    codes = sample(n)[None, :]
    forward_backward_counts(codes[:, :100], start, transition, emission)  # compile
    probe = PeakRSS()
    probe.start()
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        loglik, counts = forward_backward_counts(codes, start, transition, emission)
        times.append(time.perf_counter() - begin)
    before, peak, cpu = probe.stop()
    values = np.concatenate([counts["start"], counts["transition"].ravel(), counts["emission"].ravel()])
    return {"steps": n, "seconds": statistics.median(times), "times": times, "cpu_seconds": cpu / repeats,
            "peak_rss_increase_mb": round((peak - before) / 2**20), "statistics": (loglik, values)}


def _difference(a, b) -> tuple[float, float]:
    loglik = abs(a[0] - b[0]) / abs(b[0])
    counts = float(np.max(np.abs(a[1] - b[1]) / np.maximum(np.abs(b[1]), 1e-300)))
    return loglik, counts


def report(rows: list[dict], memory: dict[int, dict], name: str, load: list[float]) -> None:
    lines = [
        "# hmm_long: one long HMM sequence split across 2 workers vs in-memory forward-backward",
        "",
        f"One sequence of N steps, {N_STATES} states, {len(SYMBOLS)} symbols, categorical emissions; long layout in "
        "Zarr; fresh 2-worker LocalCluster (2 processes x 1 thread) per row; median of 3 E steps after a warm-up. "
        "E step = pass 1 (segment operators) + driver scan + pass 2 (forward-backward with boundary messages). "
        "In memory: `dpgm.inference.chain.forward_backward_counts` on the whole sequence, one process. "
        "BLAS/numba threads pinned to 1; the 2 cores are shared with other sessions: read ratios. "
        f"Load average (1 min) at the start and end of the run: {' -> '.join(f'{x:.1f}' for x in load)}.",
        "",
        "| N steps | chunk rows | chunks | E step s | pass 1 s | driver s | pass 2 s | layout pass s (once) "
        "| Msteps/s | in-memory s | in-memory / split | split CPU s (2 workers) | in-memory CPU s "
        "| worker RSS before -> peak (MB) | in-memory RSS increase (MB) | loglik rel diff | counts max rel diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mem = memory.get(row["steps"])
        passes = row["passes"]
        cells = [f"{row['steps']:.0e}", f"{row['chunk_rows']:.1e}", str(row["chunks"]), f"{row['seconds']:.2f}",
                 f"{passes.get('dpgm-segments', 0):.2f}", f"{row['driver_seconds']:.3f}",
                 f"{passes.get('dpgm-estep', 0):.2f}", f"{row['layout_seconds']:.2f}",
                 f"{row['steps'] / row['seconds'] / 1e6:.1f}"]
        if mem:
            loglik, counts = _difference(row["statistics"], mem["statistics"])
            cells += [f"{mem['seconds']:.2f}", f"{mem['seconds'] / row['seconds']:.2f}x"]
        else:
            cells += ["-", "-"]
        cells += [f"{row['worker_cpu_seconds']:.2f}", f"{mem['cpu_seconds']:.2f}" if mem else "-"]
        cells.append(f"{' / '.join(map(str, row['worker_rss_before_mb']))} -> "
                     f"{' / '.join(map(str, row['worker_peak_rss_mb']))}")
        cells += [str(mem["peak_rss_increase_mb"]), f"{loglik:.1e}", f"{counts:.1e}"] if mem else ["-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")

    def plain(value):
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    payload = {"split": [plain({k: v for k, v in r.items() if k != "before"}) for r in rows],
               "in_memory": plain(memory), "load_average": load}
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=1))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=float, nargs="+", default=[1e6, 1e7, 3e7, 1e8])
    parser.add_argument("--chunk-rows", type=float, default=1e6)
    parser.add_argument("--sweep-steps", type=float, default=1e7)
    parser.add_argument("--sweep-chunk-rows", type=float, nargs="*", default=[2.5e5, 4e6])
    parser.add_argument("--in-memory-max", type=float, default=3e7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.sweep_chunk_rows, args.chunk_rows, args.sweep_steps = [1e5, 1e6], [5e4], 2.5e5, 1e6
    load = [os.getloadavg()[0]]
    settings = [(int(n), int(args.chunk_rows)) for n in args.steps]
    settings += [(int(args.sweep_steps), int(c)) for c in args.sweep_chunk_rows]
    memory = {}
    for n in sorted({n for n, _ in settings}):
        if n <= args.in_memory_max:
            memory[n] = in_memory(n, args.repeats)
            print(f"in memory {n:.0e}: {memory[n]['seconds']:.2f} s", flush=True)
    rows = []
    for n, chunk_rows in settings:
        rows.append(split_estep(n, chunk_rows, args.repeats))
        print(f"split {n:.0e} / {chunk_rows:.0e}: {rows[-1]['seconds']:.2f} s {rows[-1]['passes']}", flush=True)
    load.append(os.getloadavg()[0])
    report(rows, memory, args.name or ("hmm_long_quick" if args.quick else "hmm_long"), load)


if __name__ == "__main__":
    main()

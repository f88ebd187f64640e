"""Gaussian models at scale: mixture EM seconds per iteration vs N, and covariance selection on 200 variables.

Run: ``python -m benchmarks.gaussian [--quick] [--part gmm|ggm|all] [--rows 1e5 1e6 1e7] [--ggm-rows 1e7]``
(``--quick``: 1e5 rows only, results under /tmp/dpgm-bench/results-quick/). Each part
rewrites its own section of ``results/gaussian.json`` and ``gaussian.md``.

**GMM** (``--part gmm``). Data: N rows from a 5-component, 10-dimensional Gaussian
mixture (full covariances, seed fixed), float64, written to Zarr under
/tmp/dpgm-bench (chunks of N/8 rows, at most 500,000). Both fits start from the
same parameters (``init=`` a dict for dpgm; ``weights_init``/``means_init``/
``precisions_init`` for scikit-learn) and run K iterations without early stopping,
in the same run, one N after the other (all four fits of one N back to back, so
they see the same load on a shared machine):

* **dpgm cluster**: ``dpgm.fit(GaussianMixture(5, variables, "full"), store, init=start,
  max_iter=K, tol=0)`` on a LocalCluster of 2 processes x 1 thread (and of 1 process
  at 1e6 rows, for the scaling with workers): one pass per iteration (E step on the
  workers, M step on the driver); the workers' peak resident memory is read after
  each N (it stays flat: a task holds one chunk);
* **dpgm in memory**: the same on the dataset held in this process (no cluster);
* **scikit-learn**: ``GaussianMixture(5, covariance_type="full", max_iter=K, tol=0)``
  on the same rows as a NumPy array in this process, where they fit in memory.

Seconds per iteration = wall time of the fit / K (setup included). BLAS threads
pinned to 1, so scikit-learn uses one core and the cluster two. The per-iteration
log-likelihoods are compared with scikit-learn's (max relative difference).

**Covariance selection** (``--part ggm``): a sparse 200-variable graph (a ring plus
200 random chords, non-decomposable) and rows drawn from a precision with that
pattern, float32 in Zarr (chunks of 250,000 rows). dpgm: the moments pass on the
2-worker cluster, then IPS to ``tol=1e-10`` on the driver (timed apart); SciPy:
L-BFGS-B maximising ``log det K - tr(S K)`` over the same free entries from the
same ``S`` (in memory), its covariance compared with dpgm's.
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
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.graphs import ring_with_chords  # noqa: E402
from benchmarks.timing import timed  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
K, P = 5, 10
VARIABLES = [f"x{i}" for i in range(P)]


def _truth(seed: int = 0):
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(K, 5.0))
    means = rng.normal(0, 4, (K, P))
    covariances = np.empty((K, P, P))
    for k in range(K):
        a = rng.normal(size=(P, P))
        covariances[k] = a @ a.T / P + np.eye(P) * 0.5
    return weights, means, covariances


def _sample(n: int, seed: int = 1) -> np.ndarray:
    weights, means, covariances = _truth()
    rng = np.random.default_rng(seed)
    labels = rng.choice(K, n, p=weights)
    factors = np.linalg.cholesky(covariances)
    z = rng.normal(size=(n, P))
    return means[labels] + np.einsum("nij,nj->ni", factors[labels], z)


def _dataset(x: np.ndarray) -> xr.Dataset:
    return xr.Dataset({v: ("row", x[:, i]) for i, v in enumerate(VARIABLES)})


def _store(n: int) -> tuple[np.ndarray, Path]:
    x = _sample(n)
    path = STORE / f"gmm_{n:.0e}_k{K}_p{P}.zarr".replace("+", "")
    if not (path / ".done").exists():
        chunk_rows = int(min(max(n // 8, 10_000), 500_000))
        dpgm.write_dataset(_dataset(x), path, chunk_rows=chunk_rows, mode="w")
        (path / ".done").write_text(str(chunk_rows))
    return x, path


def _start(x: np.ndarray) -> dict:
    """A start shared by both: K rows as means, the data's covariance for every component."""
    rng = np.random.default_rng(3)
    covariance = np.cov(x[:10_000].T, bias=True)
    return {"weights": np.full(K, 1 / K), "means": x[rng.choice(min(len(x), 10_000), K, replace=False)],
            "covariances": np.stack([covariance] * K)}


def _sklearn(x: np.ndarray, start: dict, iterations: int):
    from sklearn.mixture import GaussianMixture

    def run():
        model = GaussianMixture(K, covariance_type="full", weights_init=start["weights"], means_init=start["means"],
                                precisions_init=np.linalg.inv(start["covariances"]), max_iter=iterations, tol=0)
        model.fit(x)
        return np.array(model.lower_bounds_) * len(x)

    seconds, history = timed(run, 1)
    return seconds / iterations, history


def _dpgm(data, start: dict, iterations: int, client=None):
    model = dpgm.GaussianMixture(K, VARIABLES, "full")

    def run():
        result = dpgm.fit(model, data, init=start, max_iter=iterations, tol=0, client=client)
        return np.array([h["loglik"] for h in result.history]), result.passes

    seconds, (history, passes) = timed(run, 1)
    return seconds / iterations, history, passes


def _rel(a: np.ndarray, b: np.ndarray | None) -> float | None:
    return None if b is None else float(np.max(np.abs(a - b) / np.abs(b)))


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: reset by exec, unlike getrusage's maxrss)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(sizes: list[int], iterations: int, memory_max: int, sklearn_max: int) -> list[dict]:
    """For each N in turn, side by side: scikit-learn, dpgm in memory, dpgm on 2 workers and on 1 worker."""
    import contextlib

    rows = []
    with contextlib.ExitStack() as stack:
        clients = {workers: stack.enter_context(dpgm.connect(n_workers=workers, dashboard_address=":0"))
                   for workers in (2, 1)}
        for n in sizes:
            x, path = _store(n)
            start = _start(x)
            row = {"rows": n, "iterations": iterations}
            reference = None
            if n <= sklearn_max:
                per_iter, reference = _sklearn(x, start, iterations)
                row["sklearn"] = {"seconds_per_iter": per_iter, "cores": 1}
                print(f"N={n:.0e}: sklearn {per_iter:.3f} s/it", flush=True)
            if n <= memory_max:
                per_iter, history, passes = _dpgm(_dataset(x), start, iterations)
                row["dpgm_in_memory"] = {"seconds_per_iter": per_iter, "cores": 1, "passes": passes,
                                         "loglik_max_rel_diff": _rel(history, reference)}
            del x
            for workers, client in clients.items():
                if workers == 1 and n > 1_000_000:
                    continue
                if n == sizes[0]:  # the workers' imports and the numba/BLAS warm-up, not timed
                    _dpgm(dpgm.open_dataset(path), start, 1, client=client)
                per_iter, history, passes = _dpgm(dpgm.open_dataset(path), start, iterations, client)
                key = "dpgm_cluster" if workers == 2 else "dpgm_cluster_1_worker"
                row[key] = {"seconds_per_iter": per_iter, "cores": workers, "passes": passes,
                            "loglik_max_rel_diff": _rel(history, reference),
                            "worker_peak_rss_mb": max(client.run(_peak_rss_mb).values())}
                print(f"N={n:.0e}: dpgm {workers} worker(s) {per_iter:.3f} s/it, worker peak "
                      f"{row[key]['worker_peak_rss_mb']:.0f} MB", flush=True)
            for key in ("dpgm_in_memory", "dpgm_cluster", "dpgm_cluster_1_worker", "sklearn"):
                if key in row:
                    v = row[key]
                    v["rows_per_s_per_core"] = n / (v["seconds_per_iter"] * v["cores"])
            rows.append(row)
    return rows


def out_of_core(n: int, iterations: int = 2, block: int = 500_000) -> dict:
    """GMM EM on ``n`` rows the driver never holds: the store is written block by block from a dask
    array (one sample per block), then the workers restart so their peak memory is the fit's."""
    import dask
    import dask.array as da

    path = STORE / f"gmm_{n:.0e}_k{K}_p{P}_blocks.zarr".replace("+", "")
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        began = time.perf_counter()
        if not (path / ".done").exists():
            parts = [da.from_delayed(dask.delayed(_sample)(block, seed=1000 + i), (block, P), float)
                     for i in range(n // block)]
            x = da.concatenate(parts).rechunk((block, P))
            dpgm.write_dataset(xr.Dataset({v: ("row", x[:, i]) for i, v in enumerate(VARIABLES)}), path,
                               chunk_rows=block, mode="w")
            (path / ".done").write_text(str(block))
        write_seconds = time.perf_counter() - began
        client.restart()
        start = _start(_sample(10_000, seed=1000))
        _dpgm(dpgm.open_dataset(path).isel(row=slice(0, 1_000_000)), start, 1, client=client)  # warm-up
        per_iter, _, passes = _dpgm(dpgm.open_dataset(path), start, iterations, client)
        peak = max(client.run(_peak_rss_mb).values())
    row = {"rows": n, "iterations": iterations, "write_seconds": write_seconds,
           "dpgm_cluster": {"seconds_per_iter": per_iter, "cores": 2, "passes": passes, "worker_peak_rss_mb": peak,
                            "rows_per_s_per_core": n / (per_iter * 2)}}
    print(json.dumps(row), flush=True)
    return row


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in [("dpgm_cluster", "dpgm Zarr, 2 workers"), ("dpgm_cluster_1_worker", "dpgm Zarr, 1 worker"),
                       ("dpgm_in_memory", "dpgm in memory"), ("sklearn", "scikit-learn (1 core)")]:
        xs = [r["rows"] for r in rows if key in r]
        ax.loglog(xs, [r[key]["seconds_per_iter"] for r in rows if key in r], "o-", label=label)
    ax.set_xlabel("rows")
    ax.set_ylabel("seconds per EM iteration")
    ax.set_title(f"GMM, {K} full components, {P} dimensions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def kernel_comparison(rows: int = 125_000, repeats: int = 7) -> dict:
    """One core, one chunk, in this process: dpgm's E-step kernel (responsibility-weighted statistics and the
    log-likelihood of ``rows`` rows) against scikit-learn's ``_e_step`` + ``_m_step`` on the same rows, timed
    alternately, best of ``repeats`` (the least disturbed run on a shared machine)."""
    from sklearn.mixture import GaussianMixture
    from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

    from dpgm.stats.mixture import ComponentParameters, estep_chunk

    x = _sample(rows)
    start = _start(x)
    params = ComponentParameters.build(start["weights"], start["means"], start["covariances"])
    weights = np.ones(rows)
    reference = GaussianMixture(K, covariance_type="full")

    def sklearn_step():
        reference.weights_, reference.means_ = start["weights"], start["means"]
        reference.covariances_ = start["covariances"]
        reference.precisions_cholesky_ = _compute_precision_cholesky(start["covariances"], "full")
        _, log_resp = reference._e_step(x)
        reference._m_step(x, log_resp)

    ours, theirs = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        estep_chunk(x, weights, [(params, False)])
        ours.append(time.perf_counter() - began)
        began = time.perf_counter()
        sklearn_step()
        theirs.append(time.perf_counter() - began)
    row = {"rows": rows, "repeats": repeats, "dpgm_kernel_seconds": min(ours), "sklearn_e_m_seconds": min(theirs),
           "speedup": min(theirs) / min(ours)}
    print(json.dumps(row), flush=True)
    return row


# ---------------------------------------------------------------- covariance selection on 200 variables

GGM_P = 200
GGM_CHUNK = 250_000


def _ggm_store(rows: int, precision: np.ndarray) -> Path:
    import dask
    import dask.array as da

    p = len(precision)
    path = STORE / f"ggm_{rows:.0e}_p{p}.zarr".replace("+", "")
    if (path / ".done").exists():
        return path
    factor = np.linalg.cholesky(np.linalg.inv(precision)).T  # rows z @ factor have covariance inv(precision)
    noise = da.random.default_rng(5).standard_normal((rows, p), chunks=(GGM_CHUNK, p))
    values = (noise @ factor + 10.0).astype(np.float32)
    ds = xr.Dataset({f"v{i}": ("row", values[:, i]) for i in range(p)})
    with dask.config.set(scheduler="threads", num_workers=2):
        dpgm.write_dataset(ds, path, chunk_rows=GGM_CHUNK, mode="w")
    (path / ".done").write_text("")
    return path



def scipy_selection(sample: np.ndarray, adjacency: np.ndarray) -> tuple[np.ndarray, object, float]:
    """The oracle: the precision with the graph's zeros that maximises the Gaussian log-likelihood of
    ``sample`` (a covariance), by SciPy's L-BFGS-B on the free entries; SciPy's result; the seconds."""
    import scipy.optimize

    p = sample.shape[0]
    r, c = np.nonzero(np.triu(adjacency | np.eye(p, dtype=bool)))

    def objective(free):
        k = np.zeros((p, p))
        k[r, c] = free
        k[c, r] = free
        sign, log_det = np.linalg.slogdet(k)
        if sign <= 0:
            return np.inf, np.zeros_like(free)
        gradient = np.where(r == c, 1.0, 2.0) * (sample - np.linalg.inv(k))[r, c]
        return float(np.trace(sample @ k) - log_det), gradient

    start = time.perf_counter()
    best = scipy.optimize.minimize(objective, np.diag(1 / np.diag(sample))[r, c], jac=True, method="L-BFGS-B",
                                   options={"gtol": 1e-12, "ftol": 0, "maxiter": 20_000, "maxcor": 50})
    seconds = time.perf_counter() - start
    k = np.zeros((p, p))
    k[r, c] = best.x
    k[c, r] = best.x
    return k, best, seconds

def covariance_selection(rows: int) -> dict:

    from dpgm.algorithms.gaussian import ips

    pairs, precision = ring_with_chords(GGM_P)
    p = len(precision)
    start = time.perf_counter()
    path = _ggm_store(rows, precision)
    write_seconds = time.perf_counter() - start
    names = [f"v{i}" for i in range(p)]
    model = dpgm.GaussianGraphicalModel([(names[a], names[b]) for a, b in pairs], variables=names)
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        ds = dpgm.open_dataset(path)
        dpgm.moments(ds, names[:2], client=client)  # workers' imports
        start = time.perf_counter()
        stats = dpgm.moments(ds, names, client=client)
        moments_seconds = time.perf_counter() - start
        peak = max(client.run(_peak_rss_mb).values())
        start = time.perf_counter()
        result = dpgm.fit(model, ds, method="ipf", tol=1e-10, max_iter=10_000, client=client)
        fit_seconds = time.perf_counter() - start
    sample = stats.covariance.values
    start = time.perf_counter()
    run = ips(sample, model.adjacency, n=float(stats.n), tol=1e-10, max_iter=10_000)
    converged, sweeps = run.converged, run.n_iter
    ips_seconds = time.perf_counter() - start
    k, best, scipy_seconds = scipy_selection(sample, model.adjacency)
    theirs = np.linalg.inv(k)
    row = {"variables": p, "edges": len(pairs), "rows": rows, "chunks": -(-rows // GGM_CHUNK),
           "write_seconds": write_seconds, "moments_seconds": moments_seconds, "moments_rows_per_s": rows / moments_seconds,
           "worker_peak_rss_mb": peak, "fit_seconds_incl_moments": fit_seconds, "ips_seconds": ips_seconds,
           "sweeps": sweeps, "converged": converged, "scipy_seconds": scipy_seconds,
           "scipy_iterations": int(best.nit),
           "max_rel_covariance_diff": float(np.abs(result.model.covariance.values - theirs).max()
                                            / np.abs(theirs).max()),
           "loglik_diff_dpgm_minus_scipy": float(result.loglik + 0.5 * stats.n * (p * np.log(2 * np.pi) + best.fun))}
    print(json.dumps(row), flush=True)
    return row


def _markdown(report: dict) -> str:
    lines = ["# gaussian: Gaussian mixture EM and covariance selection, dpgm vs scikit-learn and SciPy", "",
             "Measured side by side in one run per section on a machine of 2 cores shared with other sessions "
             "(load average 16-18 during these runs, with other engineers' test suites): absolute seconds are "
             "noisy, and even back-to-back fits saw different loads (scikit-learn's seconds per row at 1e6 "
             "and 1e7 are 1.5-5x its 1e5 rate), so the one-chunk kernel table below is the firmest per-core "
             "comparison.", ""]
    gmm = report.get("gmm")
    if gmm:
        lines += ["## GMM, seconds per EM iteration", "",
                  f"{K} full-covariance components in {P} dimensions, {gmm['iterations']} EM iterations from the same "
                  "start, no early stop; BLAS threads pinned to 1 (scikit-learn: 1 core; dpgm cluster: 1 or 2 "
                  "worker processes x 1 thread, data read from Zarr every iteration). Per-core ratio = dpgm "
                  "rows/s/core / scikit-learn rows/s/core (issue 14's target at 1e6: >= 1). Each iteration reads "
                  "every chunk once, so its cost is linear in N; a worker holds one chunk at a time (chunks of "
                  "min(N/8, 500,000) rows: its peak memory follows the chunk, not N). Two workers on this "
                  "2-core machine, already loaded, gain what the load leaves free.", "",
                  "| rows | sklearn s/it | dpgm 2 workers s/it | dpgm 1 worker s/it | dpgm in memory s/it | "
                  "per-core ratio (2 workers) | per-core ratio (1 worker) | wall ratio (2 workers) | "
                  "worker peak RSS MB | loglik max rel diff vs sklearn |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in gmm["rows"]:
            ref, clu, one, mem = r.get("sklearn"), r["dpgm_cluster"], r.get("dpgm_cluster_1_worker"), \
                r.get("dpgm_in_memory")

            def fmt(v, spec=".3f"):
                return "-" if v is None else format(v, spec)

            lines.append(
                f"| {r['rows']:.0e} | {fmt(ref and ref['seconds_per_iter'])} | {clu['seconds_per_iter']:.3f} | "
                f"{fmt(one and one['seconds_per_iter'])} | {fmt(mem and mem['seconds_per_iter'])} | "
                f"{fmt(ref and clu['rows_per_s_per_core'] / ref['rows_per_s_per_core'], '.2f')} | "
                f"{fmt(ref and one and one['rows_per_s_per_core'] / ref['rows_per_s_per_core'], '.2f')} | "
                f"{fmt(ref and ref['seconds_per_iter'] / clu['seconds_per_iter'], '.2f')} | "
                f"{clu['worker_peak_rss_mb']:.0f} | {fmt(clu['loglik_max_rel_diff'], '.1e')} |")
    kernel = report.get("kernel")
    if kernel:
        lines += ["", "### One chunk on one core: the E-step kernel against scikit-learn's E and M steps", "",
                  f"{kernel['rows']:,} rows, same start, in one process, the two timed alternately, best of "
                  f"{kernel['repeats']} (`--part kernel`): the per-core comparison least disturbed by the load.", "",
                  "| rows | dpgm kernel s | scikit-learn _e_step + _m_step s | dpgm faster by |", "|---|---|---|---|",
                  f"| {kernel['rows']:,} | {kernel['dpgm_kernel_seconds']:.3f} | {kernel['sklearn_e_m_seconds']:.3f} | "
                  f"{kernel['speedup']:.2f}x |"]
    ggm = report.get("covariance_selection")
    if ggm:
        lines += ["", "## Covariance selection on a sparse 200-variable graph", "",
                  "Ring plus random chords (non-decomposable); float32 rows in Zarr; moments pass on 2 workers, "
                  "then IPS on the driver to tol=1e-10 (a rank-|C| Woodbury correction per clique); SciPy "
                  "L-BFGS-B on the same S in memory. The data pass is linear in N and its per-worker memory is "
                  "one chunk's (250,000 rows x 200 columns as float64 plus the cross-product), whatever N; IPS "
                  "costs the same for any N.", "",
                  "| variables | edges | rows | chunks | moments pass s | rows/s | worker peak RSS MB | IPS s | sweeps | "
                  "dpgm.fit s (moments + IPS) | SciPy L-BFGS-B s | SciPy iterations | max rel covariance diff | "
                  "loglik dpgm - SciPy |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in ggm:
            lines.append(
                f"| {r['variables']} | {r['edges']} | {r['rows']:.0e} | {r['chunks']} | {r['moments_seconds']:.1f} | "
                f"{r['moments_rows_per_s']:.2e} | {r['worker_peak_rss_mb']:.0f} | {r['ips_seconds']:.3f} | "
                f"{r['sweeps']} | {r['fit_seconds_incl_moments']:.1f} | {r['scipy_seconds']:.3f} | "
                f"{r['scipy_iterations']} | {r['max_rel_covariance_diff']:.1e} | {r['loglik_diff_dpgm_minus_scipy']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 rows only (under a minute)")
    parser.add_argument("--part", choices=["gmm", "kernel", "ggm", "out-of-core", "all"], default="all")
    parser.add_argument("--rows", type=float, nargs="*", help="numbers of rows of the GMM part")
    parser.add_argument("--ggm-rows", type=float, default=1e7, help="rows of the covariance-selection part")
    parser.add_argument("--iterations", type=int, help="EM iterations (default 5; 3 with --quick)")
    parser.add_argument("--memory-max", type=float, default=1e6, help="largest N for dpgm in memory")
    parser.add_argument("--sklearn-max", type=float, default=1e7, help="largest N for scikit-learn")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e5] if args.quick else [1e5, 1e6, 1e7]))]
    iterations = args.iterations or (3 if args.quick else 5)
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    out = STORE / "results-quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    previous = json.loads((out / "gaussian.json").read_text()) if (out / "gaussian.json").exists() else {}
    report = {"benchmark": "gaussian", "quick": args.quick,
              "notes": "BLAS threads pinned to 1; the machine's 2 cores are shared with other sessions",
              "gmm": previous.get("gmm"), "kernel": previous.get("kernel"),
              "covariance_selection": previous.get("covariance_selection")}
    if args.part == "out-of-core":  # 2 EM iterations on --rows (default 1e8) written block by block
        report["gmm_out_of_core"] = [out_of_core(int(n)) for n in (args.rows or [1e8])]
    if args.part in ("gmm", "all"):
        rows = run(sizes, iterations, int(args.memory_max), int(args.sklearn_max))
        report["gmm"] = {"iterations": iterations, "components": K, "dimensions": P, "rows": rows}
        _plot(rows, out / "gaussian.png")
    if args.part in ("kernel", "gmm", "all"):
        report["kernel"] = kernel_comparison(20_000 if args.quick else 125_000)
    if args.part in ("ggm", "all"):
        report["covariance_selection"] = [covariance_selection(20_000 if args.quick else int(args.ggm_rows))]
    (out / "gaussian.json").write_text(json.dumps(report, indent=2))
    (out / "gaussian.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

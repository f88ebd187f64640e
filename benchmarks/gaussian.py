"""Gaussian mixture EM, seconds per iteration vs N: dpgm from Zarr on a 2-worker cluster vs scikit-learn.

Run: ``python -m benchmarks.gaussian [--quick] [--rows 1e5 1e6 1e7]`` (default 1e5, 1e6;
``--quick``: 1e5 only, results under /tmp/dpgm-bench/results-quick/).

Data: N rows from a 5-component, 10-dimensional Gaussian mixture (full covariances,
seed fixed), float64, written to Zarr under /tmp/dpgm-bench (chunks of N/8 rows,
at most 500,000). Both fits start from the same parameters (``init=`` a dict for
dpgm; ``weights_init``/``means_init``/``precisions_init`` for scikit-learn) and
run K iterations without early stopping, in the same run:

* **dpgm cluster**: ``dpgm.fit(GaussianMixture(5, variables, "full"), store, init=start,
  max_iter=K, tol=0)`` on a 2-worker LocalCluster (2 processes x 1 thread): one
  pass per iteration (E step on the workers, M step on the driver);
* **dpgm in memory**: the same on the dataset held in this process (no cluster);
* **scikit-learn**: ``GaussianMixture(5, covariance_type="full", max_iter=K, tol=0)``
  on the same rows as a NumPy array in this process.

Seconds per iteration = wall time of the fit / K (setup included). BLAS threads
pinned to 1, so scikit-learn uses one core and the cluster two. The per-iteration
log-likelihoods are compared with scikit-learn's (max relative difference).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
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


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.abs(b)))


def run(sizes: list[int], iterations: int, memory_max: int) -> list[dict]:
    rows, data = [], {}
    for n in sizes:
        data[n] = _store(n)
    for n in sizes:
        x, _ = data[n]
        start = _start(x)
        row = {"rows": n, "iterations": iterations}
        per_iter, reference = _sklearn(x, start, iterations)
        row["sklearn"] = {"seconds_per_iter": per_iter, "cores": 1}
        if n <= memory_max:
            per_iter, history, passes = _dpgm(_dataset(x), start, iterations)
            row["dpgm_in_memory"] = {"seconds_per_iter": per_iter, "cores": 2, "passes": passes,
                                     "loglik_max_rel_diff": _rel(history, reference)}
        row["_reference"], row["_start"] = reference, start
        rows.append(row)
        print(f"N={n:.0e}: sklearn {row['sklearn']['seconds_per_iter']:.3f} s/it", flush=True)
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        _dpgm(dpgm.open_dataset(data[sizes[0]][1]), rows[0]["_start"], 1, client=client)  # workers' imports
        for row in rows:
            n = row["rows"]
            per_iter, history, passes = _dpgm(dpgm.open_dataset(data[n][1]), row["_start"], iterations, client)
            row["dpgm_cluster"] = {"seconds_per_iter": per_iter, "cores": 2, "passes": passes,
                                   "loglik_max_rel_diff": _rel(history, row["_reference"])}
            print(f"N={n:.0e}: dpgm cluster {per_iter:.3f} s/it", flush=True)
    for row in rows:
        del row["_reference"], row["_start"]
        for key in ("dpgm_in_memory", "dpgm_cluster", "sklearn"):
            if key in row:
                v = row[key]
                v["rows_per_s_per_core"] = row["rows"] / (v["seconds_per_iter"] * v["cores"])
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in [("dpgm_cluster", "dpgm Zarr, 2 workers"), ("dpgm_in_memory", "dpgm in memory"),
                       ("sklearn", "scikit-learn (1 core)")]:
        xs = [r["rows"] for r in rows if key in r]
        ax.loglog(xs, [r[key]["seconds_per_iter"] for r in rows if key in r], "o-", label=label)
    ax.set_xlabel("rows")
    ax.set_ylabel("seconds per EM iteration")
    ax.set_title(f"GMM, {K} full components, {P} dimensions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    lines = ["# gaussian: Gaussian mixture EM, dpgm vs scikit-learn", "",
             f"{K} full-covariance components in {P} dimensions, {report['iterations']} EM iterations from the same "
             "start, no early stop; BLAS threads pinned to 1 (scikit-learn: 1 core; dpgm cluster: 2 worker "
             "processes x 1 thread, data read from Zarr every iteration). Per-core ratio = dpgm rows/s/core / "
             "scikit-learn rows/s/core (issue 14's target at 1e6: >= 1).", "",
             "| rows | sklearn s/it | dpgm cluster s/it | dpgm in memory s/it | per-core ratio cluster | "
             "wall ratio cluster | passes | loglik max rel diff vs sklearn |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        ref, clu, mem = r["sklearn"], r["dpgm_cluster"], r.get("dpgm_in_memory")
        lines.append(
            f"| {r['rows']:.0e} | {ref['seconds_per_iter']:.3f} | {clu['seconds_per_iter']:.3f} | "
            + (f"{mem['seconds_per_iter']:.3f}" if mem else "-")
            + f" | {clu['rows_per_s_per_core'] / ref['rows_per_s_per_core']:.2f} | "
            f"{ref['seconds_per_iter'] / clu['seconds_per_iter']:.2f}x | {clu['passes']} | "
            f"{clu['loglik_max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 rows only (under a minute)")
    parser.add_argument("--rows", type=float, nargs="*", help="numbers of rows")
    parser.add_argument("--iterations", type=int, help="EM iterations (default 5; 3 with --quick)")
    parser.add_argument("--memory-max", type=float, default=1e6, help="largest N for dpgm in memory")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e5] if args.quick else [1e5, 1e6]))]
    iterations = args.iterations or (3 if args.quick else 5)
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    rows = run(sizes, iterations, int(args.memory_max))
    report = {"benchmark": "gaussian", "quick": args.quick, "iterations": iterations, "components": K,
              "dimensions": P, "rows": rows,
              "notes": "BLAS threads pinned to 1; the machine's 2 cores are shared with other sessions"}
    out = STORE / "results-quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    (out / "gaussian.json").write_text(json.dumps(report, indent=2))
    _plot(rows, out / "gaussian.png")
    (out / "gaussian.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

"""Moments of continuous columns and covariance selection: dpgm vs the decode limit, NumPy and SciPy.

Run: ``python -m benchmarks.moments [--quick] [--rows 1e6 4e6]``.

1. **Moments pass**: 50 float32 columns in Zarr (chunks of 250,000 rows), a fresh
   2-worker LocalCluster. Timed side by side, medians of 3: ``dpgm.moments`` (count,
   means, centred cross-products), the *decode limit* (the same chunk reads with a
   kernel that does nothing), and NumPy's ``np.cov`` on the same rows in memory
   (loaded beforehand; loading not timed). Cost grows linearly with N (one read of
   every chunk); the cross-product kernel costs O(rows x 50^2) per chunk.
2. **Covariance selection** on a sparse 200-variable graph (a ring plus 100 random
   chords) from the moments of 200,000 rows: dpgm's IPS to 1e-10 and the closed-form
   check of the fixed point against SciPy's L-BFGS-B on the patterned precision
   (same run); cost is independent of N once the moments are in.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.gaussian import scipy_selection  # noqa: E402
from benchmarks.graphs import ring_with_chords  # noqa: E402
from benchmarks.timing import timed, timed_on_cluster  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WORK = Path("/tmp/dpgm-bench/moments")
COLUMNS = 50
CHUNK = 250_000


def _store(rows: int) -> Path:
    path = WORK / f"float32-{rows}.zarr"
    if path.exists():
        return path
    WORK.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(COLUMNS, COLUMNS)) / np.sqrt(COLUMNS)
    import dask.array as da

    noise = da.random.default_rng(1).standard_normal((rows, COLUMNS), chunks=(CHUNK, COLUMNS))
    values = (noise @ mixing + 100.0).astype(np.float32)
    ds = xr.Dataset({f"x{i}": ("row", values[:, i]) for i in range(COLUMNS)})
    dpgm.write_dataset(ds, path, chunk_rows=CHUNK)
    return path


def _nothing(index, columns, shared):
    return 0.0


def moments_pass(sizes: list[int], repeats: int) -> list[dict]:
    from distributed import Client, LocalCluster

    from dpgm.cluster import compute
    from dpgm.data.columns import zarr_columns
    from dpgm.stats.engine import map_reduce

    rows_out = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      env={"MALLOC_MMAP_THRESHOLD_": "268435456"}) as cluster, Client(cluster) as client:
        for rows in sizes:
            ds = dpgm.open_dataset(_store(rows))
            names = [f"x{i}" for i in range(COLUMNS)]
            dpgm.moments(ds, names, client=client)  # warm the workers
            seconds, result = timed_on_cluster(client, functools.partial(dpgm.moments, ds, names, client=client),
                                           repeats)
            decode, _ = timed_on_cluster(client, lambda ds=ds, names=names: compute(
                map_reduce(zarr_columns(ds, names), _nothing, name="dpgm-decode"), client=client), repeats)
            row = {"part": "moments", "rows": rows, "dpgm_seconds": seconds, "decode_seconds": decode,
                   "rows_per_second": rows / seconds, "of_decode_limit": decode / seconds}
            if rows <= 2_000_000:
                matrix = np.column_stack([ds[v].values for v in names]).astype(np.float64)
                numpy_seconds, covariance = timed(lambda matrix=matrix: np.cov(matrix.T, bias=True), repeats)
                row.update({"numpy_seconds": numpy_seconds,
                            "max_rel_diff_vs_numpy": float(np.abs(result.covariance.values - covariance).max()
                                                           / np.abs(covariance).max())})
            print(json.dumps(row))
            rows_out.append(row)
    return rows_out


def covariance_selection(rows: int = 200_000, p: int = 200) -> dict:

    pairs, precision = ring_with_chords(p)
    rng = np.random.default_rng(3)
    values = rng.multivariate_normal(np.zeros(p), np.linalg.inv(precision), rows)
    names = [f"v{i}" for i in range(p)]
    ds = xr.Dataset({v: ("row", values[:, i]) for i, v in enumerate(names)})
    model = dpgm.GaussianGraphicalModel([(names[a], names[b]) for a, b in pairs], variables=names)
    start = time.perf_counter()
    result = dpgm.fit(model, ds, method="ipf", tol=1e-10, max_iter=10_000)
    dpgm_seconds = time.perf_counter() - start
    sample = np.cov(values.T, bias=True)
    k, best, scipy_seconds = scipy_selection(sample, model.adjacency)
    row = {"part": "covariance selection", "variables": p, "edges": len(pairs), "rows": rows,
           "dpgm_seconds": dpgm_seconds, "sweeps": result.n_iter, "scipy_seconds": scipy_seconds,
           "scipy_iterations": int(best.nit),
           "max_rel_covariance_diff": float(np.abs(result.model.covariance.values - np.linalg.inv(k)).max()
                                            / np.abs(np.linalg.inv(k)).max())}
    print(json.dumps(row))
    return row


def _markdown(rows: list[dict]) -> str:
    lines = ["# Moments pass and covariance selection", "",
             "`python -m benchmarks.moments`; side by side in one run on 2 shared cores, medians of 3.", "",
             "## Moments of 50 float32 columns from Zarr, 2 workers", "",
             "| rows | dpgm s | rows/s | decode-only s | share of the decode limit | NumPy np.cov in memory s | "
             "max rel diff vs NumPy |", "|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["part"] == "moments"):
        lines.append(f"| {r['rows']:.0e} | {r['dpgm_seconds']:.3f} | {r['rows_per_second']:.2e} | "
                     f"{r['decode_seconds']:.3f} | {r['of_decode_limit']:.0%} | "
                     f"{r.get('numpy_seconds', float('nan')):.3f} | {r.get('max_rel_diff_vs_numpy', float('nan')):.1e} |")
    lines += ["", "## Covariance selection (IPS) on a sparse graph", "",
              "| variables | edges | rows | dpgm fit s (incl. moments) | sweeps | SciPy L-BFGS-B s | iterations | "
              "max rel covariance diff |", "|---|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["part"] == "covariance selection"):
        lines.append(f"| {r['variables']} | {r['edges']} | {r['rows']:.0e} | {r['dpgm_seconds']:.2f} | {r['sweeps']} | "
                     f"{r['scipy_seconds']:.2f} | {r['scipy_iterations']} | {r['max_rel_covariance_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6, 4e6])
    args = parser.parse_args()
    sizes = [250_000] if args.quick else [int(r) for r in args.rows]
    rows = moments_pass(sizes, 1 if args.quick else 3)
    rows.append(covariance_selection(rows=20_000 if args.quick else 200_000, p=40 if args.quick else 200))
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "moments.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "moments.md").write_text(_markdown(rows))
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()

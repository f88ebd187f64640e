"""Driver-side IPF time vs model size: grid Markov networks and other shapes, vs ipfn.

Run: ``python -m benchmarks.ipf_grid [--quick] [--sides 4 6 8 10 12]``.

For each square grid of binary variables, 50,000 rows are forward-sampled (in
memory, seed fixed) from a random grid Bayesian network (each cell's parents are
its left and upper neighbours, CPT columns ~ Dirichlet(2, 2)), the counts of the
grid's neighbour pairs are taken with ``dpgm.counts``, and
``dpgm.algorithms.tree_ipf.tree_ipf(counts, ..., tol=1e-8, max_iter=500)`` is timed
(median of 3): junction-tree width (largest clique - 1), total clique table size,
sweeps, final max marginal error, seconds. ``dpgm.fit(MarkovNetwork, ds,
method="ipf", tol=1e-8)`` end to end (counts + IPF, in memory) is timed once too.

Other non-decomposable shapes, same procedure: a 2x50 ladder (100 variables) and a
random sparse graph of 80 variables (each variable linked to 1-2 of the 8 before it,
sampled from a Bayesian network with those parents; pair scopes = its edges).

Peer: ``ipfn`` (numpy engine) on the full joint table (2^(rows x cols) cells,
initialized to ones) for grids up to 4x4, with the same pair marginals,
``convergence_rate=1e-8``, ``rate_tolerance=0``, ``max_iteration=500``; the final
max absolute error of its pair marginals (as probabilities) is computed here.
dpgm's error is ``history[-1]["max_error"]`` (same measure, checked before each
update in the last sweep). BLAS/numba threads pinned to 1 before numpy is imported.
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

import dpgm  # noqa: E402
from dpgm.algorithms.tree_ipf import grid_scopes, tree_ipf  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ROWS = 50_000
TOL = 1e-8


from benchmarks.timing import median_time as _median_time  # noqa: E402


def _bn_data(parents: dict[str, list[str]], seed: int):
    rng = np.random.default_rng(seed)
    tables = {v: rng.dirichlet([2, 2], 2 ** len(p)).T.reshape([2] + [2] * len(p))
              for v, p in parents.items()}
    bn = dpgm.BayesianNetwork.from_arrays(parents, dict.fromkeys(parents, ["0", "1"]), tables)
    return dpgm.sample_bayesian_network(bn, ROWS, None, seed=seed + 1)


def _grid(rows: int, columns: int, seed: int):
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]
    parents = {name[i][j]: ([name[i][j - 1]] if j else []) + ([name[i - 1][j]] if i else [])
               for i in range(rows) for j in range(columns)}
    return list(parents), grid_scopes(rows, columns), _bn_data(parents, seed)


def _sparse(n: int, seed: int):
    rng = np.random.default_rng(seed)
    names = [f"v{i:02d}" for i in range(n)]
    parents = {names[0]: []}
    for i in range(1, n):
        window = list(range(max(0, i - 8), i))
        k = min(len(window), int(rng.integers(1, 3)))
        parents[names[i]] = [names[j] for j in sorted(rng.choice(window, k, replace=False))]
    scopes = [(p, v) for v, ps in parents.items() for p in ps]
    return names, scopes, _bn_data(parents, seed)


def _tree_ipf(variables, scopes, ds, repeats: int, end_to_end: bool) -> dict:
    tables = dpgm.counts(ds, scopes)
    counts = {s: tables[s].values for s in scopes}
    cards = dict.fromkeys(variables, 2)
    seconds, times, state = _median_time(
        lambda: tree_ipf(counts, variables, cards, tol=TOL, max_iter=500), repeats)
    row = {"variables": len(variables), "scopes": len(scopes), "width": int(state.width),
           "total_table_size": int(state.total_table_size), "sweeps": int(state.n_iter),
           "max_error": float(state.history[-1]["max_error"]), "seconds": seconds, "times": times}
    if end_to_end:
        model = dpgm.MarkovNetwork.from_cliques(scopes, {v: ["0", "1"] for v in variables})
        start = time.perf_counter()
        result = dpgm.fit(model, ds, method="ipf", tol=TOL, max_iter=500)
        row["fit_seconds"] = time.perf_counter() - start
        row["fit_n_iter"] = int(result.n_iter)
        row["fit_max_error"] = float(result.history[-1]["max_error"])
    row["_counts"] = counts
    return row


def _ipfn(variables, scopes, counts, repeats: int) -> dict:
    from ipfn.ipfn import ipfn

    axis = {v: i for i, v in enumerate(variables)}
    n = float(next(iter(counts.values())).sum())
    dimensions = [[axis[a], axis[b]] for a, b in scopes]
    # each aggregate in its (sorted) dimensions' axis order
    aggregates = []
    for (a, b), dims in zip(scopes, dimensions, strict=True):
        table = np.asarray(counts[(a, b)], dtype=float)
        aggregates.append(table if dims[0] < dims[1] else table.T)
        dims.sort()

    def run():
        fitter = ipfn(np.ones((2,) * len(variables)), [a.copy() for a in aggregates],
                      [list(d) for d in dimensions], convergence_rate=TOL, max_iteration=500,
                      rate_tolerance=0.0, verbose=2)
        return fitter.iteration()

    seconds, times, (table, _, conv) = _median_time(run, repeats)
    error = 0.0
    for target, (i, j) in zip(aggregates, dimensions, strict=True):
        other = tuple(k for k in range(len(variables)) if k not in (i, j))
        error = max(error, float(np.abs(table.sum(axis=other) / n - target / n).max()))
    return {"seconds": seconds, "times": times, "iterations": len(conv), "max_error": error,
            "cells": 2 ** len(variables)}


def run(sides: list[int], ipfn_max: int) -> dict:
    grids = []
    for k in sides:
        variables, scopes, ds = _grid(k, k, seed=4)
        row = {"shape": f"grid {k}x{k}", "side": k,
               **_tree_ipf(variables, scopes, ds, repeats=3, end_to_end=True)}
        if k <= ipfn_max:
            row["ipfn"] = _ipfn(variables, scopes, row["_counts"], repeats=3 if k <= 3 else 1)
            row["ratio_ipfn"] = row["ipfn"]["seconds"] / row["seconds"]
        del row["_counts"]
        print(row["shape"], {k: v for k, v in row.items() if k not in ("times", "ipfn")},
              row.get("ipfn", ""), flush=True)
        grids.append(row)
    others = []
    for shape, (variables, scopes, ds) in (("ladder 2x50", _grid(2, 50, seed=5)),
                                           ("random sparse, 80 vars", _sparse(80, seed=6))):
        row = {"shape": shape, **_tree_ipf(variables, scopes, ds, repeats=3, end_to_end=True)}
        del row["_counts"]
        print(shape, {k: v for k, v in row.items() if k != "times"}, flush=True)
        others.append(row)
    return {"grids": grids, "others": others}


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, size) = plt.subplots(1, 2, figsize=(11, 4))
    grids = report["grids"]
    xs = [g["variables"] for g in grids]
    ax.semilogy(xs, [g["seconds"] for g in grids], "o-", label="dpgm tree_ipf (driver)")
    ax.semilogy(xs, [g["fit_seconds"] for g in grids], "s--", label="dpgm.fit ipf (counts + IPF)")
    with_ipfn = [g for g in grids if "ipfn" in g]
    ax.semilogy([g["variables"] for g in with_ipfn], [g["ipfn"]["seconds"] for g in with_ipfn],
                "^-", label="ipfn (full joint table)")
    for o, marker in zip(report["others"], "Dv", strict=False):
        ax.semilogy([o["variables"]], [o["seconds"]], marker, label=f"tree_ipf {o['shape']}")
    ax.set_xlabel("variables (square grids of binary variables)")
    ax.set_ylabel(f"seconds to max error {TOL:g}")
    ax.legend(fontsize=8)
    size.semilogy(xs, [g["total_table_size"] for g in grids], "o-", label="total clique table size")
    size.semilogy(xs, [2 ** g["width"] for g in grids], "s--", label="2^width")
    size.set_xlabel("variables")
    size.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    lines = ["# ipf_grid: driver-side IPF vs model size (dpgm tree_ipf vs ipfn)", "",
             f"{ROWS:,} rows from a random grid Bayesian network; pair scopes; tol {TOL:g} on the "
             "max marginal error (probabilities); tree_ipf median of 3, dpgm.fit once; BLAS/numba "
             "pinned to 1 thread; 2-core shared machine. Width = largest clique - 1 (a k x k "
             "grid's treewidth is k). Target: 100-variable grid to 1e-8 in under a minute.", "",
             "| shape | vars | width | total table size | sweeps | max error | tree_ipf s | "
             "dpgm.fit s | ipfn s (iters, error) | ipfn / tree_ipf |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["grids"] + report["others"]:
        ipfn = r.get("ipfn")
        peer = (f"{ipfn['seconds']:.3f} ({ipfn['iterations']}, {ipfn['max_error']:.1e}) | "
                f"{r['ratio_ipfn']:.2g}x" if ipfn else "- | -")
        lines.append(f"| {r['shape']} | {r['variables']} | {r['width']} | "
                     f"{r['total_table_size']:,} | "
                     f"{r['sweeps']} | {r['max_error']:.1e} | {r['seconds']:.3f} | "
                     f"{r['fit_seconds']:.3f} | {peer} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids only (under a minute)")
    parser.add_argument("--sides", type=int, nargs="*", help="grid sides")
    parser.add_argument("--ipfn-max", type=int, default=4, help="largest grid side for ipfn")
    args = parser.parse_args(argv)
    sides = args.sides or ([3, 4, 6, 10] if args.quick else [3, 4, 6, 8, 10, 12])
    warnings.filterwarnings("ignore")
    report = {"benchmark": "ipf_grid", "quick": args.quick, "rows": ROWS, "tol": TOL,
              **run(sides, args.ipfn_max),
              "load_average_at_end": os.getloadavg(),
              "notes": "BLAS/numba threads pinned to 1; the machine's 2 cores are shared"}
    out = RESULTS if not args.quick else Path("/tmp/dpgm-bench/results-quick")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ipf_grid.json").write_text(json.dumps(report, indent=2))
    _plot(report, out / "ipf_grid.png")
    (out / "ipf_grid.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

"""Junction-tree inference on every shipped network: dpgm's batched kernel vs pyAgrum, MAP, EM patterns.

Run: ``python -m benchmarks.inference [--quick]`` (about 5-7 minutes; ``--quick`` about one).

``benchmarks/posteriors.py`` (another session's) times the alarm headline in more
detail (profile, memory). This script measures, in one run:

* **every shipped network**: junction-tree width, clique count and total table size;
  the share of rows the evidence-pruned kernel answered (:mod:`dpgm.inference.pruning`) and
  the rate of the dense kernel alone on the same rows;
  dpgm rows/s for ``JunctionTree.posteriors`` (every variable's posterior + log P(e)),
  ``expected_counts`` (the EM E step) and ``map_batch`` (max-product MAP), on rows
  forward-sampled from the network with ``min(10, n/3)`` random variables observed per
  row (different ones per row, so nearly every row is a distinct pattern); against
  pyAgrum ``LazyPropagation`` answering the same posterior query one row at a time
  (a few hundred rows; per-row rate) on a network built from dpgm's doubles, with the
  largest posterior difference;
* **distinct patterns**: alarm with evidence on the same 8 variables in every row
  (10% missing), B = 1e4, 1e5, 1e6 — EM's typical chunk — where rows collapse to a
  few thousand patterns computed once;
* **the issue-3 headline**: alarm, B = 1e4, 1e5, 1e6, 10 random observed variables per
  row, posteriors and E step; pgmpy ``VariableElimination`` answering one query per
  unobserved variable one row at a time (100 rows, per-row rate extrapolated);
* **re-use across EM iterations**: ``JunctionTree(model)`` vs ``tree.with_model(model)``
  and the pickled size of the tree (what ships to every worker per iteration).

BLAS/numba threads are pinned to 1 (``OMP_NUM_THREADS=1`` etc., set before NumPy is
imported); everything runs in this one process on one core. Timings are medians of 3
after a warm-up call (which compiles the numba kernels). The machine has 2 cores shared
with another session: read the ratios, measured side by side, not absolute seconds.
Writes ``benchmarks/results/inference.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from dpgm.inference import JunctionTree, propagation, pruning  # noqa: E402
from dpgm.testing import forward_sample, observe_at_random  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _timed(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _pyagrum(model, codes: np.ndarray, posteriors: dict, budget: float) -> dict:
    import pyagrum as gum

    engine = gum.LazyPropagation(model.to_pyagrum())
    variables = list(model.variables)
    worst, done = 0.0, 0
    start = time.perf_counter()
    for b, row in enumerate(codes):
        engine.eraseAllEvidence()
        engine.setEvidence({v: int(c) for v, c in zip(variables, row, strict=True) if c >= 0})
        engine.makeInference()
        for v in variables:
            worst = max(worst, float(np.abs(engine.posterior(v).toarray() - posteriors[v][b]).max()))
        done += 1
        if time.perf_counter() - start > budget:
            break
    seconds = time.perf_counter() - start
    return {"rows": done, "seconds": seconds, "rows_per_s": done / seconds, "max_abs_diff": worst}


def network_rows(name: str, rows: int, peer_rows: int, peer_budget: float, rng: np.random.Generator) -> dict:
    model = dpgm.load_network(name)
    start = time.perf_counter()
    tree = JunctionTree(model)
    compile_s = time.perf_counter() - start
    observed = max(1, min(10, len(model.variables) // 3))
    codes = observe_at_random(forward_sample(model, rows, rng), observed, rng)
    variables = list(model.variables)
    tree.posteriors(codes[:2], variables)
    tree.expected_counts(codes[:2], variables)
    tree.map_batch(codes[:2], variables)
    repeats = 3 if rows >= 1000 else 1
    post_s = _timed(lambda: tree.posteriors(codes, variables), repeats)
    counts_s = _timed(lambda: tree.expected_counts(codes, variables), repeats)
    map_s = _timed(lambda: tree.map_batch(codes, variables), repeats)
    dense_s = _timed(lambda: _dense_posteriors(tree, codes), repeats)
    compact, chosen = pruning.plan(tree.tree.layout, tree.tree.grids, codes, np.arange(len(variables)))
    _, posteriors = tree.posteriors(codes[:peer_rows], variables)
    peer = _pyagrum(model, codes[:peer_rows], posteriors, peer_budget)
    start = time.perf_counter()
    tree.with_model(model)
    with_model_s = time.perf_counter() - start
    distinct = len(np.unique(codes, axis=0))
    row = {
        "network": name, "variables": len(model.variables), "cliques": len(tree.cliques), "width": tree.width,
        "largest_clique": max(int(np.prod([model.cardinality(v) for v in c])) for c in tree.cliques),
        "total_table_size": tree.total_table_size, "observed_per_row": observed, "rows": rows,
        "distinct_rows": distinct,
        "posteriors_rows_per_s": rows / post_s, "expected_counts_rows_per_s": rows / counts_s,
        "map_rows_per_s": rows / map_s, "pyagrum": peer, "dense_rows_per_s": rows / dense_s,
        "pruned_rows": float(chosen.mean()), "compacted_columns": int(compact.sum()) if chosen.any() else 0,
        "x_pyagrum": (rows / post_s) / peer["rows_per_s"],
        "compile_s": compile_s, "with_model_s": with_model_s, "pickled_bytes": len(pickle.dumps(tree)),
    }
    print(f"{name:11s} width {tree.width:2d} cliques {len(tree.cliques):3d} total table {tree.total_table_size:>10,d}"
          f"  posteriors {row['posteriors_rows_per_s']:>10,.0f} rows/s  E step {row['expected_counts_rows_per_s']:>10,.0f}"
          f"  MAP {row['map_rows_per_s']:>10,.0f}  pyAgrum {peer['rows_per_s']:>8,.1f}  x{_ratio(row['x_pyagrum'])}"
          f"  (diff {peer['max_abs_diff']:.1e})", flush=True)
    return row


def _dense_posteriors(tree: JunctionTree, codes: np.ndarray) -> None:
    """Every posterior through the dense kernel alone (no evidence pruning): what the pruning gains."""
    inner = tree.tree
    cards = [inner.cardinalities[v] for v in inner.variables]
    patterns, _, inverse = propagation.distinct_rows(codes, None, cards)
    targets = np.arange(len(cards), dtype=np.int64)
    offset = np.concatenate([[0], np.cumsum(cards)]).astype(np.int64)
    _, out = propagation.posteriors(inner.layout, inner._base, inner._base_log, patterns, targets,
                                    propagation.SoftEvidence.none(len(patterns)), targets, offset)
    out[inverse]


def patterns(sizes: list[int], rng: np.random.Generator) -> list[dict]:
    """EM-style chunks: the same 8 observed variables in every row, 10% missing."""
    model = dpgm.load_network("alarm")
    tree = JunctionTree(model)
    chosen = list(rng.choice(model.variables, size=8, replace=False))
    columns = [model.variables.index(v) for v in chosen]
    out = []
    for rows in sizes:
        codes = forward_sample(model, rows, rng)[:, columns]
        codes = np.where(rng.random(codes.shape) < 0.1, -1, codes)
        tree.expected_counts(codes[:2], chosen)
        seconds = _timed(lambda codes=codes: tree.expected_counts(codes, chosen))
        distinct = len(np.unique(codes, axis=0))
        out.append({"rows": rows, "distinct_rows": distinct, "seconds": seconds, "rows_per_s": rows / seconds})
        print(f"alarm E step, 8 fixed observed variables: B={rows:>9,d} distinct {distinct:>7,d}"
              f"  {rows / seconds:>12,.0f} rows/s", flush=True)
    return out


def _pgmpy_rate(model, codes: np.ndarray, posteriors: dict, rows: int) -> dict:
    """pgmpy VariableElimination, one query per unobserved variable, one row at a time."""
    from pgmpy.inference import VariableElimination

    engine = VariableElimination(model.to_pgmpy())
    variables = list(model.variables)
    worst = 0.0
    start = time.perf_counter()
    for b, row in enumerate(codes[:rows]):
        evidence = {v: model.states[v][int(c)] for v, c in zip(variables, row, strict=True) if c >= 0}
        for v in variables:
            if v in evidence:
                continue
            factor = engine.query([v], evidence=evidence, show_progress=False)
            order = [factor.state_names[v].index(s) for s in model.states[v]]
            worst = max(worst, float(np.abs(factor.values[order] - posteriors[v][b]).max()))
    seconds = time.perf_counter() - start
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "max_abs_diff": worst}


def alarm_sweep(sizes: list[int], pgmpy_rows: int, rng: np.random.Generator) -> dict:
    """The issue-3 headline: alarm, 10 random observed variables per row, every posterior."""
    model = dpgm.load_network("alarm")
    tree = JunctionTree(model)
    variables = list(model.variables)
    codes = observe_at_random(forward_sample(model, max(sizes), rng), 10, rng)
    tree.posteriors(codes[:2], variables)
    tree.expected_counts(codes[:2], variables)
    out = []
    for rows in sizes:
        part = codes[:rows]
        repeats = 3 if rows <= 100_000 else 1
        post = _timed(lambda part=part: tree.posteriors(part, variables), repeats)
        counts = _timed(lambda part=part: tree.expected_counts(part, variables), repeats)
        out.append({"rows": rows, "posteriors_s": post, "posteriors_rows_per_s": rows / post,
                    "expected_counts_s": counts, "expected_counts_rows_per_s": rows / counts})
        print(f"alarm sweep B={rows:>9,d}: posteriors {rows / post:>10,.0f} rows/s, E step {rows / counts:>10,.0f}"
              " rows/s", flush=True)
    _, posteriors = tree.posteriors(codes[:pgmpy_rows], variables)
    pgmpy = _pgmpy_rate(model, codes, posteriors, pgmpy_rows)
    print(f"alarm pgmpy VariableElimination: {pgmpy['rows_per_s']:.1f} rows/s ({pgmpy_rows} rows), "
          f"max abs diff {pgmpy['max_abs_diff']:.1e}", flush=True)
    return {"sizes": out, "pgmpy": pgmpy}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["networks"]
    names = [r["network"] for r in rows]
    x = np.arange(len(names))
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.16
    for k, (key, label) in enumerate([("posteriors_rows_per_s", "dpgm posteriors"),
                                      ("dense_rows_per_s", "dpgm posteriors, dense kernel only (no pruning)"),
                                      ("expected_counts_rows_per_s", "dpgm E step"),
                                      ("map_rows_per_s", "dpgm MAP")]):
        left.bar(x + (k - 2) * width, [r.get(key, np.nan) for r in rows], width, label=label)
    left.bar(x + 2 * width, [r["pyagrum"]["rows_per_s"] for r in rows], width, label="pyAgrum LazyPropagation")
    left.set_yscale("log")
    left.set_xticks(x, [f"{n} (w{r['width']}, {r['total_table_size']:,})" for n, r in zip(names, rows, strict=True)],
                    fontsize=7, rotation=35, ha="right")
    left.set_ylabel("evidence rows / s (one core)")
    left.set_title("every variable's posterior per row (width, total table size)")
    left.legend(fontsize=7)
    sweep = report["patterns"]
    right.loglog([s["rows"] for s in sweep], [s["rows_per_s"] for s in sweep], "o-", label="alarm, 8 fixed observed")
    alarm = next(r for r in rows if r["network"] == "alarm")
    right.axhline(alarm["expected_counts_rows_per_s"], color="gray", ls="--",
                  label="alarm, 10 random observed (all rows distinct)")
    right.set_xlabel("rows B")
    right.set_ylabel("E-step rows / s")
    right.set_title("distinct evidence patterns computed once")
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _ratio(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2f}"


def _markdown(report: dict) -> str:
    lines = ["# inference: junction trees of the shipped networks, dpgm vs pyAgrum", "",
             report["setup"], "",
             "| network | vars | cliques | width | largest clique | total table | observed/row | B | "
             "posteriors rows/s | pruned rows | dense kernel rows/s | E step rows/s | MAP rows/s | pyAgrum rows/s | "
             "x pyAgrum | max abs diff | JunctionTree() s | with_model s | pickled KB |",
             "|" + "---|" * 19]
    for r in report["networks"]:
        lines.append(
            f"| {r['network']} | {r['variables']} | {r['cliques']} | {r['width']} | {r['largest_clique']:,} | "
            f"{r['total_table_size']:,} | {r['observed_per_row']} | {r['rows']:,} | "
            f"{r['posteriors_rows_per_s']:,.0f} | {r['pruned_rows']:.0%} ({r['compacted_columns']}) | "
            f"{r['dense_rows_per_s']:,.0f} | {r['expected_counts_rows_per_s']:,.0f} | "
            f"{r['map_rows_per_s']:,.0f} | {r['pyagrum']['rows_per_s']:,.1f} | {_ratio(r['x_pyagrum'])} | "
            f"{r['pyagrum']['max_abs_diff']:.1e} | {r['compile_s']:.3f} | {r['with_model_s']:.4f} | "
            f"{r['pickled_bytes'] / 1024:,.0f} |")
    headline = report["alarm_sweep"]
    lines += ["", "Alarm, 10 random observed variables per row, every variable's posterior (issue 3 target: "
              ">= 100,000 rows/s/core); pgmpy VariableElimination "
              f"{headline['pgmpy']['rows_per_s']:.1f} rows/s ({headline['pgmpy']['rows']} rows, max abs diff "
              f"{headline['pgmpy']['max_abs_diff']:.1e}), pyAgrum from the table above:", "",
              "| B | posteriors rows/s | x pgmpy | x pyAgrum | E step rows/s |", "|---|---|---|---|---|"]
    for e in headline["sizes"]:
        lines.append(f"| {e['rows']:,} | {e['posteriors_rows_per_s']:,.0f} | {e['x_pgmpy']:,.0f} | "
                     f"{e['x_pyagrum']:,.0f} | {e['expected_counts_rows_per_s']:,.0f} |")
    lines += ["", "E step on alarm with the same 8 observed variables in every row (10% missing):", "",
              "| B | distinct patterns | seconds | rows/s |", "|---|---|---|---|"]
    for s in report["patterns"]:
        lines.append(f"| {s['rows']:,} | {s['distinct_rows']:,} | {s['seconds']:.3f} | {s['rows_per_s']:,.0f} |")
    lines += ["", f"dpgm at commit `{report['commit']}`; load average before {report['load_before']}, "
              f"after {report['load_after']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows (under a minute)")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from the saved JSON")
    args = parser.parse_args(argv)
    if args.replot:
        _plot(json.loads((RESULTS / "inference.json").read_text()), RESULTS / "inference.png")
        return
    rng = np.random.default_rng(0)
    load_before = [round(x, 2) for x in os.getloadavg()]
    cell_budget = 4e7 if args.quick else 3e8  # rows x total table size per network
    networks = []
    for name in dpgm.available_networks():
        size = JunctionTree(dpgm.load_network(name)).total_table_size
        rows = int(np.clip(cell_budget / size, 20, 5_000 if args.quick else 50_000))
        networks.append(network_rows(name, rows, peer_rows=min(rows, 100 if args.quick else 300),
                                     peer_budget=5.0 if args.quick else 15.0, rng=rng))
    sweep = patterns([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000], rng)
    headline = alarm_sweep([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000],
                           pgmpy_rows=20 if args.quick else 100, rng=rng)
    alarm = next(r for r in networks if r["network"] == "alarm")
    for entry in headline["sizes"]:
        entry["x_pgmpy"] = entry["posteriors_rows_per_s"] / headline["pgmpy"]["rows_per_s"]
        entry["x_pyagrum"] = entry["posteriors_rows_per_s"] / alarm["pyagrum"]["rows_per_s"]
    report = {
        "setup": ("One process, one core, BLAS/numba threads pinned to 1; medians of 3 after a warm-up. "
                  "Rows forward-sampled from each network, min(10, n/3) random variables observed per row. "
                  "pyAgrum LazyPropagation one row at a time (erase evidence, set, makeInference, every "
                  "posterior), on a network built from dpgm's doubles. 'pruned rows': the share of rows the "
                  "evidence-pruned kernel answered (dpgm.inference.pruning; in brackets the observed columns "
                  "compacted out of the cliques), the rest went to the dense kernel; 'dense kernel rows/s': every "
                  "row through the dense kernel, as before pruning. The machine (2 cores) was shared with other "
                  "sessions' jobs during the run (load averages below): read the ratios, measured side by side in "
                  "this one process, not the absolute rates. Headline alarm sweep vs pgmpy: "
                  "benchmarks/posteriors.py."),
        "networks": networks, "patterns": sweep, "alarm_sweep": headline, "commit": _git("rev-parse", "--short=10", "HEAD"),
        "python": platform.python_version(), "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "inference.json").write_text(json.dumps(report, indent=1))
    (RESULTS / "inference.md").write_text(_markdown(report))
    _plot(report, RESULTS / "inference.png")
    print(f"wrote {RESULTS / 'inference.json'}, .md, .png")


if __name__ == "__main__":
    main()

"""Batched posterior inference on alarm: dpgm BatchedTree vs pgmpy VE and pyAgrum LazyPropagation.

Run: ``python -m benchmarks.posteriors [--quick] [--rows 1e4 1e5 1e6]`` (default 1e4, 1e5, 1e6;
1e6 is skipped if the estimated time would exceed ``--budget`` seconds, default 300).

Evidence: B complete rows forward-sampled from alarm (``dpgm.sample_bayesian_network``),
then per row 10 variables drawn at random (different ones per row) stay observed and
the other 27 are set to -1. Every engine answers the same query per row: log P(e) and the
posterior marginal of every variable (observed ones come back as indicators).

* **dpgm posteriors**: ``BatchedTree.posteriors(codes, variables)`` on the (B, 37) code
  array, one call for all rows (one process, one core);
* **dpgm expected_counts**: ``BatchedTree.expected_counts`` (the EM E-step: log-likelihood
  and sum over rows of every clique posterior) on the same codes;
* **pgmpy**: ``VariableElimination.query([v], evidence)`` for every unobserved ``v``, one
  row at a time (a few dozen rows; the per-row rate is extrapolated). ``query(unobserved,
  joint=False)`` is not usable here: pgmpy 1.x contracts the joint of all 27 first (TiB);
* **pyAgrum**: ``LazyPropagation`` one row at a time (a few hundred rows): erase evidence,
  set hard evidence, ``makeInference``, read every ``posterior`` (the timed rate; a second,
  single pass also calls ``evidenceProbability``, which costs about a third more, and is
  reported separately).

pgmpy and pyAgrum models are converted from dpgm's (renormalized) CPD arrays
(``BayesianNetwork.to_pgmpy`` / ``to_pyagrum``), so all three use the same doubles
(pyAgrum's BIF reader is single precision). Agreement = max abs
difference of the posteriors on the peer's rows (and of log P(e) against pyAgrum's
``evidenceProbability``). Timings are medians of 3 (B <= 1e6), after a warm-up call that
compiles dpgm's numba kernels; BLAS/numba threads are
pinned to 1. Also reported: the junction tree's width and total table size for every
shipped network (``dpgm.inference.triangulation.build_tree``).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from dpgm.inference import BatchedTree  # noqa: E402
from dpgm.inference.triangulation import build_tree  # noqa: E402
from dpgm.testing import observe_at_random  # noqa: E402

RESULTS = Path(__file__).parent / "results"
NETWORK, OBSERVED = "alarm", 10
TARGET = 1e5  # issue 3: evidence rows / s / core with every variable's posterior
PREVIOUS = {"pgmpy_ve": 37.0, "pyagrum": 520.0}  # rows/s measured on this machine before (issue 3)


from benchmarks.timing import timed as _timed  # noqa: E402


def _evidence_codes(model, n: int, seed: int) -> np.ndarray:
    """(n, 37) codes: a forward sample with all but OBSERVED random variables per row set to -1."""
    data = dpgm.sample_bayesian_network(model, n, None, seed=seed)
    codes = np.stack([data[v].values for v in model.variables], axis=1).astype(np.int64)
    return observe_at_random(codes, OBSERVED, np.random.default_rng(seed + 1000))


def _tree(model) -> BatchedTree:
    return BatchedTree(model.variables, {v: model.cardinality(v) for v in model.variables},
                       [(model.cpds[v].dims, model.cpds[v].values) for v in model.variables])


def _pgmpy(model, codes: np.ndarray, marginals: dict, repeats: int) -> dict:
    from pgmpy.inference import VariableElimination

    engine = VariableElimination(model.to_pgmpy())
    variables = model.variables

    def run():
        answers = []
        for row in codes:
            evidence = {v: model.states[v][c] for v, c in zip(variables, row, strict=True) if c >= 0}
            hidden = [v for v in variables if v not in evidence]
            # one query per variable: query(hidden, joint=False) builds the joint of all 27 first
            answers.append({v: engine.query([v], evidence=evidence, show_progress=False)
                            for v in hidden})
        return answers

    seconds, answers = _timed(run, repeats)
    diff = 0.0
    for b, answer in enumerate(answers):
        for v, factor in answer.items():
            order = [factor.state_names[v].index(s) for s in model.states[v]]
            diff = max(diff, float(np.max(np.abs(factor.values[order] - marginals[v][b]))))
    return {"rows": len(codes), "seconds": seconds, "rows_per_s": len(codes) / seconds,
            "posterior_max_abs_diff": diff}


def _pyagrum(model, codes: np.ndarray, log_evidence: np.ndarray, marginals: dict,
             repeats: int) -> dict:
    import pyagrum as gum

    bn = model.to_pyagrum()
    engine = gum.LazyPropagation(bn)
    variables = model.variables

    def run(with_evidence_probability: bool):
        out = []
        for row in codes:
            engine.eraseAllEvidence()
            engine.setEvidence({v: int(c) for v, c in zip(variables, row, strict=True) if c >= 0})
            engine.makeInference()
            posts = [engine.posterior(v).toarray() for v in variables]
            out.append((posts, engine.evidenceProbability() if with_evidence_probability else None))
        return out

    seconds, answers = _timed(lambda: run(False), repeats)
    seconds_pe, answers_pe = _timed(lambda: run(True), 1)
    diff = max(float(np.max(np.abs(p - marginals[v][b])))
               for b, (posts, _) in enumerate(answers) for v, p in zip(variables, posts, strict=True))
    log_diff = max(abs(float(np.log(pe)) - float(log_evidence[b]))
                   for b, (_, pe) in enumerate(answers_pe))
    return {"rows": len(codes), "seconds": seconds, "rows_per_s": len(codes) / seconds,
            "rows_per_s_with_evidence_probability": len(codes) / seconds_pe,
            "posterior_max_abs_diff": diff, "log_evidence_max_abs_diff": log_diff,
            "version": gum.__version__}


def _profile(tree: BatchedTree, codes: np.ndarray, variables: list[str], top: int = 12) -> list[dict]:
    """cProfile of one posteriors() call: the functions with the largest own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    tree.posteriors(codes, variables)
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = sum(s[2] for s in stats.values())
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return [{"function": f"{Path(f).name}:{line}({name})", "calls": s[1], "own_seconds": s[2],
             "own_share": s[2] / total, "cumulative_seconds": s[3]}
            for (f, line, name), s in rows]


def _source() -> dict:
    """The dpgm commit benchmarked, and any uncommitted changes under dpgm/ (shared working tree)."""
    import subprocess

    root = Path(__file__).parent.parent

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  check=True).stdout.rstrip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--", "dpgm").splitlines()]
    return {"commit": git("rev-parse", "HEAD").strip(), "uncommitted_dpgm_files": dirty}


def _widths() -> list[dict]:
    out = []
    for name in dpgm.available_networks():
        m = dpgm.load_network(name)
        t0 = time.perf_counter()
        tree = build_tree(m.variables, {v: m.cardinality(v) for v in m.variables}, m.families)
        seconds = time.perf_counter() - t0
        sizes = [int(np.prod([m.cardinality(v) for v in c])) for c in tree.cliques]
        out.append({"network": name, "variables": len(m.variables), "cliques": len(tree.cliques),
                    "width": int(tree.width), "total_table_size": int(tree.total_table_size),
                    "largest_clique_table": max(sizes), "build_seconds": seconds})
    return out


def run(sizes: list[int], peer_rows: dict, budget: float) -> dict:
    model = dpgm.load_network(NETWORK)
    variables = list(model.variables)
    t0 = time.perf_counter()
    tree = _tree(model)
    build = time.perf_counter() - t0
    tree.posteriors(_evidence_codes(model, 100, seed=99), variables)  # warm the plan/einsum caches
    rows, started, peers = [], time.perf_counter(), {}
    for n in sizes:
        if rows and n > rows[-1]["rows"]:
            last = rows[-1]
            estimate = (n / last["rows"]) * (last["posteriors"]["seconds"] + last["expected_counts"]["seconds"])
            if time.perf_counter() - started + estimate > budget:
                print(f"B={n:.0e}: skipped (estimated {estimate:.0f} s > budget)", flush=True)
                continue
        codes = _evidence_codes(model, n, seed=n % 9973)
        repeats = 3 if n <= 10**6 else 1
        seconds, (log_evidence, marginals) = _timed(lambda c=codes: tree.posteriors(c, variables), repeats)
        em_seconds, (loglik, _) = _timed(lambda c=codes: tree.expected_counts(c, variables), repeats)
        row = {"rows": n, "repeats": repeats,
               "posteriors": {"seconds": seconds, "rows_per_s": n / seconds, "cores": 1},
               "expected_counts": {"seconds": em_seconds, "rows_per_s": n / em_seconds, "cores": 1,
                                   "loglik_minus_sum_log_evidence": float(loglik - log_evidence.sum())},
               "impossible_rows": int(np.sum(~np.isfinite(log_evidence))),
               "process_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        print(f"B={n:.0e}: posteriors {n / seconds:,.0f} rows/s, expected_counts "
              f"{n / em_seconds:,.0f} rows/s", flush=True)
        if not peers:  # peers answer the first rows of the smallest batch, one row at a time
            first = {v: m[: peer_rows["pyagrum"]] for v, m in marginals.items()}
            peers["pgmpy_ve"] = _pgmpy(model, codes[: peer_rows["pgmpy"]], first, 3)
            print(f"pgmpy VE: {peers['pgmpy_ve']['rows_per_s']:.1f} rows/s, max abs diff "
                  f"{peers['pgmpy_ve']['posterior_max_abs_diff']:.1e}", flush=True)
            try:
                peers["pyagrum"] = _pyagrum(model, codes[: peer_rows["pyagrum"]],
                                            log_evidence[: peer_rows["pyagrum"]], first, 3)
                print(f"pyAgrum: {peers['pyagrum']['rows_per_s']:.1f} rows/s, max abs diff "
                      f"{peers['pyagrum']['posterior_max_abs_diff']:.1e}", flush=True)
            except ImportError:
                print("pyAgrum not installed: skipped", flush=True)
        rows.append(row)
    for row in rows:
        for key, peer in peers.items():
            row[f"posteriors_vs_{key}"] = row["posteriors"]["rows_per_s"] / peer["rows_per_s"]
        row["meets_target"] = row["posteriors"]["rows_per_s"] >= TARGET
    profile_codes = _evidence_codes(model, min(sizes[-1], 10**5), seed=7)
    return {"network": NETWORK, "observed_per_row": OBSERVED, "variables": len(variables),
            "tree": {"width": int(tree.width), "total_table_size": int(tree.total_table_size),
                     "cliques": len(tree.structure.cliques), "build_seconds": build},
            "rows": rows, "peers": peers, "profile_rows": len(profile_codes),
            "profile": _profile(tree, profile_codes, variables)}


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bars) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [r["rows"] for r in report["rows"]]
    for key, label in [("posteriors", "dpgm posteriors"), ("expected_counts", "dpgm expected_counts")]:
        ax.loglog(xs, [r[key]["rows_per_s"] for r in report["rows"]], "o-", label=label)
    for key, label in [("pgmpy_ve", "pgmpy VE (per row)"), ("pyagrum", "pyAgrum LazyPropagation")]:
        if key in report["peers"]:
            ax.axhline(report["peers"][key]["rows_per_s"], ls="--", color="C2" if key == "pyagrum" else "C3",
                       label=label)
    ax.axhline(TARGET, ls=":", color="k", label="target 1e5 rows/s/core")
    ax.set_xlabel(f"evidence rows B ({report['observed_per_row']} observed of {report['variables']})")
    ax.set_ylabel("rows / s / core (all posteriors)")
    ax.set_title(f"{report['network']}: batched posteriors")
    ax.legend(fontsize=8)
    widths = report["widths"]
    bars.bar([w["network"] for w in widths], [w["total_table_size"] for w in widths])
    bars.set_yscale("log")
    bars.set_ylabel("junction tree total table size")
    for i, w in enumerate(widths):
        bars.text(i, w["total_table_size"], f"w={w['width']}", ha="center", va="bottom", fontsize=7)
    bars.tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    peers = report["peers"]
    tree = report["tree"]
    lines = [f"# posteriors: batched posterior marginals on {report['network']}", "",
             f"{report['variables']} variables, evidence on {report['observed_per_row']} random variables "
             "per row (different per row), every variable's posterior per row; one process, one core, "
             "BLAS/numba threads pinned to 1; medians of 3 (dpgm, pgmpy, pyAgrum). Junction tree: width "
             f"{tree['width']}, {tree['cliques']} cliques, total table size {tree['total_table_size']:,}. "
             f"Target (issue 3): >= {TARGET:,.0f} rows/s/core.", "",
             "| B | dpgm posteriors s | rows/s/core | x pgmpy VE | x pyAgrum | expected_counts s | "
             "rows/s/core | target met | process peak RSS MB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        post, em = r["posteriors"], r["expected_counts"]
        ratio = [f"{r[f'posteriors_vs_{k}']:,.0f}" if f"posteriors_vs_{k}" in r else "-"
                 for k in ("pgmpy_ve", "pyagrum")]
        lines.append(f"| {r['rows']:.0e} | {post['seconds']:.3f} | {post['rows_per_s']:,.0f} | {ratio[0]} | "
                     f"{ratio[1]} | {em['seconds']:.3f} | {em['rows_per_s']:,.0f} | "
                     f"{'yes' if r['meets_target'] else 'no'} | {r['process_peak_rss_mb']:,.0f} |")
    lines += ["", "| peer (one row at a time) | rows timed | rows/s/core | with P(e) | before (issue 3) | "
              "posterior max abs diff vs dpgm | log P(e) max abs diff |", "|---|---|---|---|---|---|---|"]
    for key, label in [("pgmpy_ve", "pgmpy VariableElimination"), ("pyagrum", "pyAgrum LazyPropagation")]:
        if key in peers:
            p = peers[key]
            log_diff = f"{p['log_evidence_max_abs_diff']:.1e}" if "log_evidence_max_abs_diff" in p else "-"
            with_pe = p.get("rows_per_s_with_evidence_probability")
            with_pe = f"{with_pe:,.1f}" if with_pe else "-"
            lines.append(f"| {label} | {p['rows']} | {p['rows_per_s']:,.1f} | {with_pe} | "
                         f"{PREVIOUS[key]:.0f} | "
                         f"{p['posterior_max_abs_diff']:.1e} | {log_diff} |")
    lines += ["", "Junction trees of the shipped networks (`build_tree` on the families):", "",
              "| network | variables | cliques | width | largest clique table | total table size |",
              "|---|---|---|---|---|---|"]
    for w in report["widths"]:
        lines.append(f"| {w['network']} | {w['variables']} | {w['cliques']} | {w['width']} | "
                     f"{w['largest_clique_table']:,} | {w['total_table_size']:,} |")
    src, load = report["source"], report["load_average_1min"]
    lines += ["", f"dpgm at commit `{src['commit'][:10]}`" + (
        f" with uncommitted changes in {', '.join(src['uncommitted_dpgm_files'])}"
        if src["uncommitted_dpgm_files"] else "") + f". 1-minute load average {load['before']:.1f} "
        f"before, {load['after']:.1f} after the run (2 cores; above ~2 every rate here drops, "
        "dpgm's and the peers' alike)."]
    lines += ["", f"Where dpgm's time goes (cProfile of one `posteriors` call on {report['profile_rows']:,} "
              "rows; own time):", "", "| function | calls | own s | share |", "|---|---|---|---|"]
    for p in report["profile"][:8]:
        lines.append(f"| `{p['function']}` | {p['calls']} | {p['own_seconds']:.3f} | "
                     f"{100 * p['own_share']:.0f}% |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    parser.add_argument("--rows", type=float, nargs="*", help="batch sizes B")
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds for the dpgm runs; a larger B is skipped if it would exceed it")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or ([1e4, 1e5] if args.quick else [1e4, 1e5, 1e6]))]
    peer_rows = {"pgmpy": 10 if args.quick else 40, "pyagrum": 100 if args.quick else 400}
    warnings.filterwarnings("ignore")
    load_before = os.getloadavg()[0]
    report = run(sorted(sizes), peer_rows, 30.0 if args.quick else args.budget)
    report["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    report["widths"] = _widths()
    report.update({"benchmark": "posteriors", "quick": args.quick, "source": _source(), "target_rows_per_s": TARGET,
                   "previous_peer_rows_per_s": PREVIOUS,
                   "notes": "BLAS/numba threads pinned to 1; the machine's 2 cores are shared with "
                            "other sessions"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "posteriors.json").write_text(json.dumps(report, indent=2))
    _plot(report, RESULTS / "posteriors.png")
    (RESULTS / "posteriors.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

"""One long EM run, resumable: a case of :mod:`benchmarks.em` in memory, checkpointed after every pass.

Run: ``python -m benchmarks.em_long --case alarm2 --rows 1e6 --variant plain --folder /tmp/em_long``
(the same command again continues from the newest checkpoint).

For fits that need more passes than one sitting allows (alarm2's plain EM at 10⁶ rows
creeps along a ridge for thousands of passes): the store of :mod:`benchmarks.em` is
loaded into memory, the start is the one of :mod:`benchmarks.em_accel`
(``randomized(default_rng(0))``), ``dpgm.fit(..., tol=TOL, checkpoint=...)`` runs in
this process without a cluster, and every evaluated point is appended to
``<folder>/<case>_<rows>_<variant>.tsv`` (iteration, log-likelihood, step, accepted,
unix time). After a resume, iterations go on counting from the checkpoint, and for
plain EM the iteration is the pass. Plain EM resumes exactly (its state is its
parameters); SQUAREM resumes from its last accepted point with a fresh step-length
bound, so its passes across a resume are not those of one uninterrupted run. When
the fit returns, ``<folder>/<name>.json`` holds its outcome (converged, iteration,
log-likelihood).

``python -m benchmarks.em_long --summarize --case alarm2 --rows 1e6 --folder ...``
reads both variants' traces and outcomes and writes
``benchmarks/results/em_long_<case>_<rows>.json`` (every kept point with its time, and
each variant's seconds per pass while both ran side by side) and ``.png``
(distance to the best converged log-likelihood against passes).
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
from benchmarks.em import _cases, _store  # noqa: E402
from benchmarks.em_accel import VARIANTS  # noqa: E402
from dpgm.cli.outputs import write_text_atomically  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="alarm2", choices=["alarm2", "lcm20"])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--variant", default="plain", choices=list(VARIANTS))
    parser.add_argument("--tol", type=float, default=1e-12)
    parser.add_argument("--max-iter", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/em_long"))
    parser.add_argument("--summarize", action="store_true",
                        help="write results/em_long_<case>_<rows>.json and .png from the folder's runs")
    args = parser.parse_args(argv)
    if args.summarize:
        summarize(args.folder, args.case, int(args.rows), RESULTS)
        return
    case = _cases()[args.case]
    name = f"{args.case}_{int(args.rows)}_{args.variant}"
    checkpoint = args.folder / name
    checkpoint.mkdir(parents=True, exist_ok=True)
    with dpgm.connect(n_workers=1) as client:  # only to sample the store once, if it is missing
        path = _store(args.case, case, int(args.rows), client)
    data = dpgm.open_dataset(path).drop_vars(case["latent"]).load()
    start = case["model"].randomized(np.random.default_rng(0))
    resume = checkpoint if (checkpoint / "LATEST").exists() else None
    with (args.folder / f"{name}.tsv").open("a") as trace:

        def record(h: dict) -> None:
            trace.write(f"{h['iteration']}\t{h['loglik']!r}\t{h['step']}\t{h['accepted']}\t{time.time():.0f}\n")
            trace.flush()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
            result = dpgm.fit(start, data, method="em", init="model", tol=args.tol, max_iter=args.max_iter,
                              callback=record, checkpoint=checkpoint, resume=resume, **VARIANTS[args.variant])
    print(f"{name}: converged {result.converged}, iteration {result.n_iter} ({result.passes} passes in this run), "
          f"loglik {result.loglik!r}")
    outcome = {"converged": bool(result.converged), "iteration": int(result.n_iter), "loglik": float(result.loglik),
               "tol": args.tol}
    write_text_atomically(args.folder / f"{name}.json", json.dumps(outcome, indent=1) + "\n")


def _trace(path: Path) -> list[tuple[int, float, int]]:
    """(pass, log-likelihood, unix time) of the kept points; a point re-evaluated after a resume counts once."""
    kept: dict[int, tuple[float, int]] = {}
    for line in path.read_text().splitlines():
        iteration, loglik, _step, accepted, when = line.split("\t")[:5]
        if accepted == "True":
            kept[int(iteration)] = (float(loglik), int(when))
    return [(p, loglik, when) for p, (loglik, when) in sorted(kept.items())]


def _side_by_side(variants: dict) -> dict | None:
    """Seconds per pass of each variant over the time both were running (the same load on the machine)."""
    begin = max(v["times"][0] for v in variants.values())
    end = min(v["times"][-1] for v in variants.values())
    if end <= begin:
        return None
    rates = {}
    for name, v in variants.items():
        inside = [(p, t) for p, t in zip(v["passes"], v["times"], strict=True) if begin <= t <= end]
        passes = inside[-1][0] - inside[0][0]
        rates[name] = {"passes": passes, "seconds": inside[-1][1] - inside[0][1],
                       "seconds_per_pass": (inside[-1][1] - inside[0][1]) / passes if passes else None}
    return {"window_seconds": end - begin, **rates}


def summarize(folder: Path, case: str, rows: int, results: Path) -> dict:
    """Both variants' kept points and outcomes as JSON, and their distance to the best maximum as a plot."""
    summary: dict = {"case": case, "rows": rows, "variants": {}}
    for variant in ("plain", "squarem"):
        name = f"{case}_{rows}_{variant}"
        outcome = json.loads((folder / f"{name}.json").read_text())
        trace = _trace(folder / f"{name}.tsv")
        summary["variants"][variant] = {**outcome, "passes": [p for p, _, _ in trace],
                                        "logliks": [ll for _, ll, _ in trace], "times": [t for _, _, t in trace]}
    summary["side_by_side"] = _side_by_side(summary["variants"])
    finished = [v for v in summary["variants"].values() if v["converged"]]
    best = max(v["loglik"] for v in finished) if finished else None
    summary["best_loglik"] = best
    if best is not None:
        for v in summary["variants"].values():
            v["rel_to_best"] = abs(v["loglik"] - best) / abs(best)
    stem = results / f"em_long_{case}_{rows}"
    write_text_atomically(stem.with_suffix(".json"), json.dumps(summary, indent=1) + "\n")
    if best is not None:
        _plot(summary, stem.with_suffix(".png"))
    return summary


def _plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = summary["best_loglik"]
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for variant, v in summary["variants"].items():
        distance = np.maximum(best - np.asarray(v["logliks"]), 1e-6)
        state = f"converged at pass {v['iteration']:,}" if v["converged"] else f"stopped at {v['iteration']:,}"
        axis.semilogy(v["passes"], distance, label=f"{variant} ({state})", linewidth=1)
    squarem = summary["variants"]["squarem"]
    if squarem["converged"]:
        axis.axvline(3 * squarem["iteration"], color="grey", linestyle=":", label="3 x SQUAREM's passes")
    axis.axhline(1e-8 * abs(best), color="grey", linestyle="--", linewidth=0.8, label="rel 1e-8 of the maximum")
    axis.set_title(f"{summary['case']}, {summary['rows']:,} rows, in memory, tol {squarem['tol']:g} (kept points)")
    axis.set_ylim(1e-6, 1e2)  # the first passes (10⁷ below) are off the scale; 0 is drawn at 1e-6
    axis.set_xlabel("passes over the data")
    axis.set_ylabel("best final log-likelihood - log-likelihood")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

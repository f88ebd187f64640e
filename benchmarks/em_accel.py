"""EM in fewer passes: plain EM vs SQUAREM vs incremental EM, passes and seconds to the same optimum.

Run: ``python -m benchmarks.em_accel [--rows 1e6] [--tol 1e-10]`` (or one case per process,
``--cases alarm2 --output a.json`` and ``--cases lcm20 --output b.json``, then
``--combine a.json b.json`` for the table and the plot).

Cases (the stores of :mod:`benchmarks.em`, sampled once into Zarr under /tmp):

* **alarm2**: alarm with HYPOVOLEMIA and LVFAILURE latent (dropped) and 20% MCAR
  missing values in the 35 observed columns;
* **lcm20**: a latent class model, 20 items with 3-4 states, 3 classes (class
  dropped), 20% MCAR missing values.

From one random start per case (``model.randomized(default_rng(0))``, ``init="model"``),
``dpgm.fit(model, data, method="em", tol=TOL, max_iter=5000, client=client)`` on a
2-worker LocalCluster (2 processes x 1 thread) reading the store, for
``accelerate=None`` / ``"squarem"`` / ``incremental=True`` / both, one after the other in
the same run. Recorded: passes (``result.passes``, every pass over the data,
rejected extrapolations and the incremental blocks' fractions included), wall
seconds, final log-likelihood and its relative difference from plain EM's. The plot
shows log-likelihood (distance below the best final value) against passes.
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

RESULTS = Path(__file__).parent / "results"
VARIANTS = {"plain": {"accelerate": None}, "squarem": {"accelerate": "squarem"},
            "incremental": {"incremental": True, "accelerate": None},
            "incremental+squarem": {"incremental": True, "accelerate": "squarem"}}


def run(n: int, tol: float, cases: list[str], max_iter: int = 3000,
        variants: tuple[str, ...] = tuple(VARIANTS), trace: Path | None = None,
        output: Path | None = None) -> list[dict]:
    rows = []
    log = None if trace is None else trace.open("a")
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        for name, case in _cases().items():
            if name not in cases:
                continue
            path = _store(name, case, n, client)
            start = case["model"].randomized(np.random.default_rng(0))
            for variant, options in VARIANTS.items():
                if variant not in variants:
                    continue
                data = dpgm.open_dataset(path).drop_vars(case["latent"])
                began = time.perf_counter()

                def record(h: dict, name: str = name, variant: str = variant) -> None:
                    if log is not None:  # every evaluated point as it comes (long runs can be followed)
                        log.write(json.dumps([name, variant, h["passes"], h["loglik"], h["step"], h["accepted"]])
                                  + "\n")
                        log.flush()

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
                    result = dpgm.fit(start, data, method="em", init="model", tol=tol, max_iter=max_iter,
                                      client=client, callback=record, **options)
                seconds = time.perf_counter() - began
                rows.append({"case": name, "rows": n, "tol": tol, "variant": variant, "passes": result.passes,
                             "iterations": result.n_iter, "seconds": seconds, "loglik": result.loglik,
                             "converged": result.converged,
                             "trace": [(h["passes"], h["loglik"], h["step"], h["accepted"]) for h in result.history]})
                if output is not None:  # after every variant: a long run stopped later keeps what it finished
                    output.write_text(json.dumps(rows, indent=1))
                print(f"{name} {variant}: {result.passes} passes, {seconds:.1f} s, loglik {result.loglik!r}",
                      flush=True)
    return rows


def _markdown(rows: list[dict], tol: float) -> str:
    lines = [
        "## Fewer passes: plain EM vs SQUAREM vs incremental EM",
        "",
        f"Same start per case (`randomized(default_rng(0))`, `init=\"model\"`), `tol={tol:g}`, "
        f"{rows[0]['rows']:,} rows from Zarr on a 2-worker LocalCluster (2 processes x 1 thread), "
        "a case's variants one after the other in the same run, on a 2-core machine shared with other jobs "
        "(seconds are indicative; passes are exact). Passes count every pass over the data: rejected "
        "SQUAREM extrapolations included, each incremental block as its share of the rows. "
        "Target: the same final log-likelihood (rel 1e-8) in at most one third of plain EM's passes.",
        "",
        "| case | variant | converged | passes | passes / plain | seconds | seconds / plain | final loglik "
        "| rel diff vs plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        plain = next(r for r in rows if r["case"] == row["case"] and r["variant"] == "plain")
        rel = abs(row["loglik"] - plain["loglik"]) / abs(plain["loglik"])
        lines.append(f"| {row['case']} | {row['variant']} | {row['converged']} | {row['passes']:g} | {row['passes'] / plain['passes']:.2f} "
                     f"| {row['seconds']:.1f} | {row['seconds'] / plain['seconds']:.2f} | {row['loglik']:.6f} "
                     f"| {rel:.1e} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in rows})
    figure, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.5), squeeze=False)
    for axis, case in zip(axes[0], cases, strict=True):
        best_row = max((r for r in rows if r["case"] == case), key=lambda r: r["loglik"])
        best = best_row["loglik"]
        if not best_row["converged"]:  # no optimum to measure the distance to: the log-likelihood itself
            _plot_unfinished(axis, case, [r for r in rows if r["case"] == case], best)
            continue
        for row in (r for r in rows if r["case"] == case):
            # points the fit did not keep (an extrapolation below the last accepted point, a rejected
            # image) cost their pass (on the x axis) but are not drawn
            trace = _kept(row)
            axis.semilogy(trace[:, 0], np.maximum(best - trace[:, 1], 1e-9), label=row["variant"], marker=".",
                          markersize=3, linewidth=1)
        axis.set_title(f"{case}, {rows[0]['rows']:,} rows (points not kept are not drawn)")
        axis.set_xlabel("passes over the data")
        axis.set_ylabel("best final log-likelihood - log-likelihood")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _kept(row: dict) -> np.ndarray:
    """(passes, loglik) of the points a run kept (incremental passes' approximate ones included)."""
    return np.array([(p, ll) for p, ll, step, accepted in row["trace"] if accepted or step == "incremental"])


def _plot_unfinished(axis, case: str, rows: list[dict], best: float) -> None:
    for row in rows:
        trace = _kept(row)
        axis.plot(trace[:, 0], trace[:, 1], label=f"{row['variant']} ({'converged' if row['converged'] else 'stopped'})",
                  marker=".", markersize=2, linewidth=1)
    axis.set_ylim(best - 10, best + 1)
    axis.set_title(f"{case}, {rows[0]['rows']:,} rows: no run converged (log-likelihood itself)")
    axis.set_xlabel("passes over the data")
    axis.set_ylabel("log-likelihood")
    axis.legend()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--max-iter", type=int, default=5000)
    parser.add_argument("--cases", nargs="+", default=["alarm2", "lcm20"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="plain EM is every row's reference: without it, --output and --combine with a run "
                             "that has it")
    parser.add_argument("--trace", type=Path, default=None,
                        help="append every evaluated point here as it comes (JSON lines)")
    parser.add_argument("--output", type=Path, default=None,
                        help="write this run's rows here only (no table or plot; combine with --combine)")
    parser.add_argument("--name", default="em_accel", help="results/<name>.json and .png")
    parser.add_argument("--combine", type=Path, nargs="+", default=None,
                        help="build em_accel.json, the plot and the table from the rows of earlier --output runs")
    args = parser.parse_args(argv)
    if args.combine:
        rows = [row for path in args.combine for row in json.loads(path.read_text())]
    else:
        rows = run(int(args.rows), args.tol, args.cases, args.max_iter, tuple(args.variants), args.trace,
                   args.output)
        if args.output is not None:
            return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    _plot(rows, RESULTS / f"{args.name}.png")
    print(_markdown(rows, rows[0].get("tol", args.tol)))


if __name__ == "__main__":
    main()

"""EM's stopping rule and default on cases the EM benchmarks were not tuned on.

Run: ``python -m benchmarks.em_stopping [--cases alarm child ...] [--tol 1e-8]``.

Seven cases vary the network, the latent set, the missing fraction, the seed and N (none
of them is a case of :mod:`benchmarks.em`, :mod:`benchmarks.em_accel` or
:mod:`benchmarks.em_restarts`). Each is sampled in memory from its true network (seed
as listed), the latent variables dropped; the model to fit is the network's structure
with random tables (``random_state=0``, one start, the same for every run). Per case:

* **best known maximum**: the larger of SQUAREM run with ``tol=0`` until it stops moving
  (``max_iter`` 20,000) and plain EM's final log-likelihood below;
* **plain EM** (``accelerate=None``) and **the default** (SQUAREM, its estimate confirmed
  by 3 plain EM steps), both with ``tol`` (1e-8 by default, the API's default): passes
  to ``converged``, the final distance to the best known maximum in units of
  ``tol · |loglik|`` (the rule promises at most 1), and the last record's ``gap`` in
  the same units;
* **reach**: the passes each needs to come within 1e-6 per row of the best known
  maximum (rejected extrapolations counted; where the fit with ``tol`` stopped short,
  the same fit run on with ``tol=0``, whose iterates continue its own), and their
  ratio default / plain (the issue's goal: at most 1/3). A fit that stops short of the
  best known maximum by more than ``tol`` stopped near another stationary point (a
  saddle, which EM leaves after a plateau, or another local maximum): no rule that
  reads the iterates can see that.

Fits run in memory (one process): passes do not depend on where the rows are. Writes
``benchmarks/results/em_stopping.json`` (after each case) and ``.md``.
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

RESULTS = Path(__file__).parent / "results"
WITHIN = 1e-6  # per row: "reached the maximum"
MAX_ITER = 20_000
CASES = {
    "alarm": {"network": "alarm", "latent": ["HYPOVOLEMIA", "LVFAILURE"], "missing": 0.1, "seed": 11, "rows": 10_000},
    "alarm30": {"network": "alarm", "latent": ["LVFAILURE", "INTUBATION"], "missing": 0.3, "seed": 12,
                "rows": 30_000},
    "child": {"network": "child", "latent": ["Disease", "LungParench"], "missing": 0.2, "seed": 13, "rows": 10_000},
    "insurance": {"network": "insurance", "latent": ["Age", "RiskAversion"], "missing": 0.1, "seed": 14,
                  "rows": 20_000},
    "lcm12": {"network": "lcm", "latent": ["class"], "missing": 0.05, "seed": 15, "rows": 10_000},
    "lcm12_big": {"network": "lcm", "latent": ["class"], "missing": 0.3, "seed": 16, "rows": 100_000},
    "asia": {"network": "asia", "latent": ["either"], "missing": 0.2, "seed": 17, "rows": 50_000},
}


# what a run showed beyond its table row (checked by hand on the same data)
NOTES = {
    "alarm30": "alarm30: plain EM and the default both stop near a saddle (gains shrinking at rate 0.93, as near "
               "a maximum). Run on with `tol=0`, plain EM comes to rest (a step of exactly zero gain) at pass 776, "
               "1.37 below the best known maximum, so it never comes within 1e-6 per row of it; SQUAREM climbs "
               "to it, but only after resting there too: run on with `tol=0` from the same start, the default "
               "stays 1.3677-1.3679 below from pass 117 to pass 215 (gains of its EM steps 4e-9 to 4e-5), then its "
               "gains grow again and it comes within 1e-6 per row at pass 285.",
    "insurance": "insurance: plain EM's converged fit is 7.7 tol below the maximum the default reaches (0.017 "
                 "below it); its last estimate, 0.5 tol, was 15x short of that. Its whole path "
                 "(`results/em_trajectory_insurance.md`) shows why: it comes near two stationary points below the "
                 "maximum, gains shrinking geometrically (ratio 0.992-0.998) while the distance to the maximum "
                 "stays put; it leaves the first (0.085 below) after pass 2,750, gains growing again, and stops "
                 "near the second (0.017 below), where the estimate is that of the distance to the point it is "
                 "coming to: a saddle, as on alarm30, not an estimate of the rate gone wrong.",
    "alarm": "alarm: plain EM creeps along a ridge; it does not meet the rule in 20,000 passes (1.2 tol below the "
             "best known maximum when stopped).",
}


def _truth(name: str, seed: int):
    if name == "lcm":  # 12 items of 2-4 states, 4 classes
        model = dpgm.latent_class_model({f"q{i:02d}": [f"s{k}" for k in range(2 + i % 3)] for i in range(12)}, 4)
        return model.randomized(np.random.default_rng(seed), concentration=0.5), model
    truth = dpgm.load_network(name)
    return truth, dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)


def _fit(model, data, *, tol: float, accelerate, max_iter: int):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dpgm.fit(model, data, method="em", random_state=0, tol=tol, max_iter=max_iter,
                          accelerate=accelerate)
    return result, time.perf_counter() - start


class _Reached(Exception):
    pass


def _reach(result, target: float) -> float | None:
    """Passes done when the fit first evaluated a point at or above ``target`` (None: never)."""
    return next((r["passes"] for r in result.history if r["loglik"] >= target), None)


def _reach_beyond(model, data, accelerate, target: float, max_iter: int) -> float | None:
    """Passes the same fit run on (``tol=0``) needs to evaluate a point at or above ``target`` (None: not within
    ``max_iter``): its iterates are those of the fit with ``tol``, continued."""
    def watch(record):
        if record["loglik"] >= target:
            raise _Reached(record["passes"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            dpgm.fit(model, data, method="em", random_state=0, tol=0.0, max_iter=max_iter, accelerate=accelerate,
                     callback=watch)
        except _Reached as reached:
            return reached.args[0]
    return None


def run_case(name: str, tol: float) -> dict:
    case = CASES[name]
    truth, structure = _truth(case["network"], case["seed"])
    data = dpgm.sample_bayesian_network(truth, case["rows"], None, seed=case["seed"],
                                        missing=case["missing"]).drop_vars(case["latent"]).load()
    row = {"case": name, **{k: v for k, v in case.items()}, "tol": tol}
    runs = {}
    for label, accelerate in (("plain", None), ("default", "squarem")):
        result, seconds = _fit(structure, data, tol=tol, accelerate=accelerate, max_iter=MAX_ITER)
        runs[label] = result
        row[label] = {"passes": result.passes, "converged": bool(result.converged), "loglik": result.loglik,
                      "seconds": seconds, "last_gap": result.history[-1]["gap"]}
        print(f"{name} {label}: {result.passes} passes, converged={result.converged}, {seconds:.1f} s", flush=True)
    best, seconds = _fit(structure, data, tol=0.0, accelerate="squarem", max_iter=MAX_ITER)
    maximum = max(best.loglik, runs["plain"].loglik, runs["default"].loglik)
    row["best"] = {"loglik": maximum, "squarem_tol0_passes": best.passes, "squarem_tol0_loglik": best.loglik}
    target = maximum - WITHIN * case["rows"]
    for (label, result), accelerate in zip(runs.items(), (None, "squarem"), strict=True):
        scale = tol * abs(result.loglik)
        row[label]["distance_over_tol"] = (maximum - result.loglik) / scale
        gap = row[label]["last_gap"]
        row[label]["gap_over_tol"] = None if gap is None else gap / scale
        reach = _reach(result, target)
        row[label]["reach_passes"] = reach if reach is not None else _reach_beyond(structure, data, accelerate, target,
                                                                                   MAX_ITER)
    plain, default = row["plain"]["reach_passes"], row["default"]["reach_passes"]
    row["reach_ratio"] = None if not plain or default is None else default / plain
    print(f"{name}: reach default/plain {default}/{plain} = {row['reach_ratio']}; distance/tol "
          f"{row['plain']['distance_over_tol']:.3g} / {row['default']['distance_over_tol']:.3g}", flush=True)
    return row


def _markdown(rows: list[dict]) -> str:
    lines = [
        "# EM's stopping rule and default on cases not tuned on",
        "",
        "`python -m benchmarks.em_stopping` (in memory, one start `random_state=0`, `tol` as listed). "
        "*distance*: best known maximum minus the fit's final log-likelihood, in units of `tol·|loglik|` "
        "(`converged` promises at most 1); *gap*: the last record's estimated distance, same units; "
        f"*reach*: passes to come within {WITHIN:g} per row of the best known maximum.",
        "",
        "| case | latent | missing | seed | rows | plain: passes, distance, gap | default: passes, distance, gap "
        "| reach default / plain | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = []
        for label in ("plain", "default"):
            v = r[label]
            gap = "—" if v["gap_over_tol"] is None else f"{v['gap_over_tol']:.2g}"
            flag = "" if v["converged"] else " (not converged)"
            cells.append(f"{v['passes']:,}{flag}, {v['distance_over_tol']:.2g}, {gap}")
        reach = [r[label]["reach_passes"] for label in ("default", "plain")]
        ratio = ("—" if reach[0] is None else "0 (plain never)") if r["reach_ratio"] is None \
            else f"{r['reach_ratio']:.2f}"
        shown = [f"{int(x):,}" if x is not None else "never" for x in reach]
        lines.append(f"| {r['case']} ({r['network']}) | {', '.join(r['latent'])} | {r['missing']:.0%} | {r['seed']} "
                     f"| {r['rows']:,} | {cells[0]} | {cells[1]} | {shown[0]} / {shown[1]} | {ratio} |")
    lines += ["", *(f"* {NOTES[r['case']]}" for r in rows if r["case"] in NOTES),
              "* Each best known maximum is confirmed by SciPy's L-BFGS-B on the observed-data log-likelihood "
              "started at it (`python -m benchmarks.em_lbfgs`, `em_lbfgs.md`)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--name", default="em_stopping")
    parser.add_argument("--table-only", action="store_true", help="rewrite the .md table from the .json")
    args = parser.parse_args()
    if args.table_only:
        rows = json.loads(RESULTS.joinpath(f"{args.name}.json").read_text())
        RESULTS.joinpath(f"{args.name}.md").write_text(_markdown(rows))
        return
    rows = []
    for name in args.cases:
        rows.append(run_case(name, args.tol))
        RESULTS.joinpath(f"{args.name}.json").write_text(json.dumps(rows, indent=1, default=float))
        RESULTS.joinpath(f"{args.name}.md").write_text(_markdown(rows))


if __name__ == "__main__":
    main()

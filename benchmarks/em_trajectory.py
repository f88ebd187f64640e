"""Plain EM's whole path on one ``em_stopping`` case: where its stopping rule fires, and what the path does after.

Run: ``python -m benchmarks.em_trajectory [--case insurance] [--passes 4000]``.

Plain EM (``accelerate=None``) from the same start as ``benchmarks/em_stopping.py`` (same data,
``random_state=0``), run with ``tol=0`` for ``--passes`` passes, so that its path goes on past
the pass where the rule (``2 gap <= tol |loglik|``, ``tol = 1e-8``) stops it. Every record's
log-likelihood, gain, the ratio of two successive gains, and estimated gap are written, with the
distance to the best known maximum of ``results/em_stopping.json``, to
``results/em_trajectory_<case>.{json,md}`` (the table every 50 passes, and the JSON every 10th
record and the last 300).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.em_stopping import CASES, RESULTS, _truth  # noqa: E402

TOL = 1e-8


def run(case_name: str, passes: int) -> list[dict]:
    case = CASES[case_name]
    truth, structure = _truth(case["network"], case["seed"])
    data = dpgm.sample_bayesian_network(truth, case["rows"], None, seed=case["seed"],
                                        missing=case["missing"]).drop_vars(case["latent"]).load()
    records: list[dict] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dpgm.fit(structure, data, method="em", random_state=0, tol=0.0, max_iter=passes, accelerate=None,
                 callback=lambda r: records.append({"passes": r["passes"], "loglik": r["loglik"], "gap": r["gap"]}))
    return records


def write(case_name: str, records: list[dict]) -> None:
    best = next(c for c in json.loads((RESULTS / "em_stopping.json").read_text()) if c["case"] == case_name)
    maximum = best["best"]["loglik"]
    rows = []
    for k, record in enumerate(records):
        gain = record["loglik"] - records[k - 1]["loglik"] if k else None
        before = records[k - 1]["loglik"] - records[k - 2]["loglik"] if k > 1 else None
        rows.append({**record, "gain": gain, "gain_ratio": gain / before if gain is not None and before else None,
                     "distance": maximum - record["loglik"]})
    stop = next((r["passes"] for r in rows if r["gap"] is not None
                 and 2 * r["gap"] <= TOL * abs(r["loglik"])), None)
    kept = [r for k, r in enumerate(rows) if k % 10 == 0 or k >= len(rows) - 300]
    (RESULTS / f"em_trajectory_{case_name}.json").write_text(json.dumps(
        {"case": case_name, "tol": TOL, "best_known": maximum, "rule_stops_at": stop, "records": kept}, separators=(",", ":")))
    lines = [f"# Plain EM's path on the `{case_name}` case of em_stopping",
             "",
             "Written by `python -m benchmarks.em_trajectory --case " + case_name + "`: plain EM run with `tol=0` "
             f"from the same start; the rule (`tol = {TOL:g}`) stops it at pass {stop:.0f}. Distance: to the best "
             f"known maximum ({maximum:.6f}); gap: the record's estimate; gain ratio: of two successive gains.",
             "",
             "| pass | distance | estimated gap | distance / gap | gain | gain ratio |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows[50::50] + ([rows[-1]] if len(rows) % 50 != 1 else []):
        gap, ratio = r["gap"], r["gain_ratio"]
        cells = [f"{r['passes']:.0f}", f"{r['distance']:.6f}", "" if gap is None else f"{gap:.6f}",
                 f"{r['distance'] / gap:.2f}" if gap else "", f"{r['gain']:.3e}",
                 "" if ratio is None else f"{ratio:.5f}"]
        lines.append("| " + " | ".join(cells) + " |")
    (RESULTS / f"em_trajectory_{case_name}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="insurance", choices=list(CASES))
    parser.add_argument("--passes", type=int, default=4000)
    parser.add_argument("--from-json", help="records already run (a JSON list of records), instead of running")
    args = parser.parse_args()
    records = (json.loads(open(args.from_json).read()) if args.from_json else run(args.case, args.passes))
    write(args.case, records)


if __name__ == "__main__":
    main()

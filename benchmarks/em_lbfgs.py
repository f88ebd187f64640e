"""SciPy's L-BFGS-B on the observed-data log-likelihood: the second oracle of EM's maxima.

Run: ``python -m benchmarks.em_lbfgs [--cases alarm child ...] [--evaluations 100]``
(after :mod:`benchmarks.em_stopping`, whose cases and best known maxima it reads).

For each case of :mod:`benchmarks.em_stopping` the best known maximum is found again
(SQUAREM with ``tol=0`` from the same start, the same run as there) and L-BFGS-B
(``scipy.optimize.minimize``) climbs the observed-data log-likelihood from two points:

* **the best known maximum**: if it is a maximum, L-BFGS-B finds nothing higher
  (its gain within 1e-6 per row, the benchmark's "reached");
* **the default's converged point** (``tol=1e-8``): what a quasi-Newton method, which
  follows a ridge EM creeps along, adds to where the default stopped.

The objective is the log-likelihood of the table probabilities ``θ = softmax(u)``
(per parent configuration) as a function of the logits ``u``; its gradient, from
the E step's expected counts ``n`` by Fisher's identity, is ``n_jk - θ_jk Σ_k n_jk``
(one pass per evaluation, the pass an EM step takes). Probabilities at 0 stay 0
(their logits sit at :data:`dpgm.algorithms.squarem.LOG_FLOOR`, gradient 0).
Writes ``benchmarks/results/em_lbfgs.json`` and ``.md``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.em_stopping import CASES, MAX_ITER, RESULTS, WITHIN, _truth  # noqa: E402
from dpgm.algorithms.em import em  # noqa: E402
from dpgm.algorithms.squarem import LOG_FLOOR, group_log, group_softmax  # noqa: E402
from dpgm.api.bayesian import BayesianNetworkEM, _family_plan, _random_starts  # noqa: E402
from dpgm.api.labels import align  # noqa: E402
from dpgm.stats.source import DataSource  # noqa: E402


def _family(name: str):
    """The case's EM family (in memory) and its one start (``random_state=0``, as ``dpgm.fit`` draws it)."""
    case = CASES[name]
    truth, structure = _truth(case["network"], case["seed"])
    data = dpgm.sample_bayesian_network(truth, case["rows"], None, seed=case["seed"],
                                        missing=case["missing"]).drop_vars(case["latent"]).load()
    source = DataSource.of(data)
    observed = [v for v in structure.variables if v in source.states]
    model, order = align(structure, source.data, states=source.states, variables=observed)
    plan = _family_plan(model)
    return BayesianNetworkEM(model, plan, source, observed, None), _random_starts(structure, plan, 1, 0, order)


def _em_point(family, starts, tol: float) -> tuple[np.ndarray, float, float]:
    """The parameters, log-likelihood and passes of the EM default (SQUAREM) run with ``tol``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = em(family, starts, tol=tol, max_iter=MAX_ITER, accelerate="squarem")
    return family.from_model(state.models[0]), state.logliks[0], state.passes


def climb(family, theta: np.ndarray, evaluations: int) -> dict:
    """L-BFGS-B from ``theta`` for at most ``evaluations`` passes: the log-likelihoods it evaluated."""
    plan = family.plan
    rows = float(family.source.n_rows)
    seen: list[float] = []

    def objective(u: np.ndarray) -> tuple[float, np.ndarray]:
        point = group_softmax(u, plan.column, plan.n_columns)
        ((loglik, statistics),) = family.estep([point], len(seen) + 1)
        counts = statistics["counts"]
        totals = np.bincount(plan.column, weights=counts, minlength=plan.n_columns)
        seen.append(float(loglik))
        return -loglik / rows, -(counts - point * totals[plan.column]) / rows

    start = group_log(theta)
    result = minimize(objective, start, jac=True, method="L-BFGS-B",
                      options={"maxfun": evaluations, "maxiter": evaluations, "maxcor": 20, "ftol": 0.0,
                               "gtol": 0.0})
    _, gradient = objective(result.x)  # per row, at the end
    return {"start": seen[0], "best": max(seen), "evaluations": len(seen) - 1, "message": str(result.message),
            "gradient": float(np.max(np.abs(gradient))), "slope_error": _slope_error(objective, start)}


def _slope_error(objective, u: np.ndarray, step: float = 1e-5) -> float:
    """Relative error of the gradient's slope along a random direction against a central difference of the
    log-likelihood, at ``u`` moved by 0.3 along that direction (off the maximum: a slope to check; three passes)."""
    direction = np.random.default_rng(0).standard_normal(u.size)
    direction[u <= LOG_FLOOR] = 0.0  # zeros stay zeros
    u = u + 0.3 * direction
    _, gradient = objective(u)
    slope = float(gradient @ direction)
    difference = (objective(u + step * direction)[0] - objective(u - step * direction)[0]) / (2 * step)
    return abs(difference - slope) / max(abs(slope), abs(difference), 1e-300)


def run_case(name: str, known: dict, evaluations: int) -> dict:
    case = CASES[name]
    family, starts = _family(name)
    theta, loglik, passes = _em_point(family, starts, 0.0)
    row = {"case": name, "rows": case["rows"], "known": known["best"]["loglik"], "refound": loglik,
           "refound_passes": passes}
    row["from_best"] = climb(family, theta, evaluations)
    theta, loglik, passes = _em_point(family, starts, known["tol"])
    row["default"] = {"loglik": loglik, "passes": passes, **climb(family, theta, evaluations)}
    print(f"{name}: from best +{row['from_best']['best'] - row['from_best']['start']:.3g}, from the default's "
          f"stop +{row['default']['best'] - row['default']['start']:.3g}", flush=True)
    return row


def _markdown(rows: list[dict], evaluations: int) -> str:
    lines = [
        "# L-BFGS-B on the observed-data log-likelihood from EM's points",
        "",
        f"`python -m benchmarks.em_lbfgs --evaluations {evaluations}` (cases and best known maxima of "
        "`em_stopping.md`; one pass per evaluation; gradient from the E step's expected counts). "
        "*gain*: the highest log-likelihood L-BFGS-B evaluated minus its start's; "
        "*tol*: `tol·|loglik|` with the default's `tol` = 1e-8; *gradient*: largest entry of the "
        "gradient per row, in the logits, at L-BFGS-B's last point; *evaluations*: passes L-BFGS-B took "
        "(fewer than the limit where a line search found no increase above the log-likelihood's rounding).",
        "",
        "| case | rows | best known (refound) | from it: gain, per row, gradient, evaluations "
        "| default's stop: passes, below best in tol | from it: gain, in tol, evaluations "
        "| still below best, in tol |",
        "|---|---:|---|---|---|---|---|",
    ]
    for r in rows:
        known, b, d = r["known"], r["from_best"], r["default"]
        scale = 1e-8 * abs(known)
        gain_b, gain_d = b["best"] - b["start"], d["best"] - d["start"]
        lines.append(
            f"| {r['case']} | {r['rows']:,} | {known:.6f} ({r['refound'] - known:+.1e}) "
            f"| {gain_b:.2e}, {gain_b / r['rows']:.1e}, {b['gradient']:.1e}, {b['evaluations']} "
            f"| {d['passes']:,.0f}, {(known - d['loglik']) / scale:.3g} "
            f"| {gain_d:.2e}, {gain_d / scale:.2g}, {d['evaluations']} "
            f"| {(known - d['best']) / scale:.3g} |")
    confirmed = [r["case"] for r in rows if r["from_best"]["best"] - r["from_best"]["start"] <= WITHIN * r["rows"]]
    error = max(max(r["from_best"]["slope_error"], r["default"]["slope_error"]) for r in rows)
    lines += ["", f"* The gradient (expected counts, Fisher's identity) against a central difference of the "
              f"log-likelihood along a random direction, at each start moved off it: relative error at most "
              f"{error:.1e}.",
              f"* L-BFGS-B finds nothing more than {WITHIN:g} per row above the best known maximum of "
              f"{len(confirmed)} of {len(rows)} cases ({', '.join(confirmed)})."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--table-only", action="store_true", help="rewrite the .md table from the .json")
    args = parser.parse_args()
    if args.table_only:
        rows = json.loads(RESULTS.joinpath("em_lbfgs.json").read_text())
        RESULTS.joinpath("em_lbfgs.md").write_text(_markdown(rows, args.evaluations))
        return
    known = {r["case"]: r for r in json.loads(RESULTS.joinpath("em_stopping.json").read_text())}
    rows = []
    for name in args.cases:
        rows.append(run_case(name, known[name], args.evaluations))
        RESULTS.joinpath("em_lbfgs.json").write_text(json.dumps(rows, indent=1, default=float))
        RESULTS.joinpath("em_lbfgs.md").write_text(_markdown(rows, args.evaluations))


if __name__ == "__main__":
    main()

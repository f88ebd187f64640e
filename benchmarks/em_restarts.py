"""Restarts pruned early: ``n_init=10`` with and without ``prune_restarts=True``, the work each costs.

Run: ``python -m benchmarks.em_restarts [--rows 1e4] [--n-init 10]``.

Restarts share every pass over the data (one task per chunk evaluates every active
restart), so ``n_init`` restarts cost the passes of the longest one; what they multiply is
the E-step work of each pass: one evaluation per active restart and row. Pruning drops a
restart once it is hopelessly behind (:data:`dpgm.algorithms.em.PRUNE_HORIZON`: from
iteration :data:`~dpgm.algorithms.em.PRUNE_AFTER` on, a restart whose log-likelihood
plus 100 times its last gain is still below the best one's), which cuts that work and,
when the pruned restarts were the slow ones, the passes too.

For each case of :mod:`benchmarks.em` (alarm with 2 latent variables and 20% missing
values, a 20-item latent class model), the same ``random_state`` with and without
pruning, from Zarr on a 2-worker LocalCluster: passes, restart evaluations (the sum over
restarts of their evaluated points, i.e. E-step work in units of one restart's pass),
seconds, the best restart's log-likelihood and whether both runs end at the same one.
Writes ``benchmarks/results/em_restarts.json`` and ``.md``.
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

import dpgm  # noqa: E402
from benchmarks.em import _cases, _store  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def run(n: int, n_init: int, tol: float, max_iter: int, accelerate: str | None) -> list[dict]:
    rows = []
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        for name, case in _cases().items():
            path = _store(name, case, n, client)
            for prune in (False, True):
                data = dpgm.open_dataset(path).drop_vars(case["latent"])
                began = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
                    result = dpgm.fit(case["model"], data, method="em", n_init=n_init, random_state=0, tol=tol,
                                      max_iter=max_iter, prune_restarts=prune, accelerate=accelerate,
                                      client=client)
                seconds = time.perf_counter() - began
                histories = result.info["restart_histories"]
                rows.append({"case": name, "rows": n, "n_init": n_init, "tol": tol, "accelerate": accelerate,
                             "prune_restarts": prune,
                             "passes": result.passes, "restart_evaluations": sum(len(h) for h in histories),
                             "seconds": seconds, "loglik": result.loglik, "best_restart": result.info["restart"],
                             "restart_logliks": result.info["restart_logliks"],
                             "pruned": result.info["pruned_restarts"],
                             "pruned_at": {i: len(histories[i]) for i in result.info["pruned_restarts"]}})
                print(f"{name} prune={prune}: {result.passes} passes, {rows[-1]['restart_evaluations']} restart "
                      f"evaluations, {seconds:.1f} s, loglik {result.loglik!r}, pruned {rows[-1]['pruned_at']}",
                      flush=True)
    return rows


def _markdown(rows: list[dict]) -> str:
    first = rows[0]
    lines = ["# EM restarts pruned early", "",
             f"`python -m benchmarks.em_restarts`: `n_init={first['n_init']}`, `random_state=0`, `tol={first['tol']:g}`, "
             f"`accelerate={first['accelerate']!r}`, "
             f"{first['rows']:,} rows from Zarr on a 2-worker LocalCluster, each case with and without "
             "`prune_restarts=True` in the same run. Restart evaluations: the E-step work, one per active restart "
             "and pass. Passes and evaluations are exact; seconds depend on the machine's load.", "",
             "| case | prune_restarts | passes | restart evaluations | evaluations / unpruned | seconds | "
             "best log-likelihood | same best | pruned restarts (after n points) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        base = next(r for r in rows if r["case"] == row["case"] and not r["prune_restarts"])
        same = abs(row["loglik"] - base["loglik"]) <= 1e-8 * abs(base["loglik"])
        pruned = ", ".join(f"{i} ({k})" for i, k in row["pruned_at"].items()) or "-"
        lines.append(f"| {row['case']} | {row['prune_restarts']} | {row['passes']:g} | {row['restart_evaluations']} | "
                     f"{row['restart_evaluations'] / base['restart_evaluations']:.2f} | {row['seconds']:.1f} | "
                     f"{row['loglik']:.6f} | {same} | {pruned} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e4)
    parser.add_argument("--n-init", type=int, default=10)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--max-iter", type=int, default=2000)
    parser.add_argument("--accelerate", default="squarem", help="'none' for plain EM")
    args = parser.parse_args(argv)
    rows = run(int(args.rows), args.n_init, args.tol, args.max_iter,
               None if args.accelerate == "none" else args.accelerate)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "em_restarts.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "em_restarts.md").write_text(_markdown(rows))
    print(_markdown(rows))


if __name__ == "__main__":
    main()

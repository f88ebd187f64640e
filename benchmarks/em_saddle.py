"""Where EM stops short on alarm30: the local picture at the default's converged point.

Run: ``python -m benchmarks.em_saddle [--case alarm30] [--krylov 20]``.

On the ``alarm30`` case of :mod:`benchmarks.em_stopping` the default EM reports
``converged`` 610 ``tol`` below the best known maximum. This asks whether anything
*local* at that point could have told: every quantity below comes from passes of
public ``dpgm.fit`` calls at labelled models, in the unconstrained parametrisation
(the logs of the CPTs' positive entries):

* **EM's slowest rates.** Arnoldi's method on the Jacobian ``J`` of the EM map
  ``u -> log F(softmax(u))`` at the point, each product ``J v`` a finite difference of
  two EM steps (``dpgm.fit(..., init="model", accelerate=None, max_iter=2)``): its
  largest Ritz value. A rate above 1 is a saddle EM leaves; a rate at 1 a flat direction.
* **The log-likelihood along the slowest direction** ``y`` (its Ritz vector), at ``±s``:
  the gradient and curvature along ``y`` and the gain the quadratic model offers there,
  ``g² / 2c``, against ``tol · |loglik|``.
* **Perturbed restarts**: the default fit again from the point with every log-probability
  moved by ``eps`` times a standard normal, to convergence.

Writes ``benchmarks/results/em_saddle.md`` and ``.json``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.em_stopping import CASES, _truth  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOL = 1e-8
STEP = 1e-5  # finite-difference step in the log-probabilities


def _fit(model, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpgm.fit(model, data, method="em", progress=False, **options)


class _Coordinates:
    """The logs of a network's positive CPT entries as one vector, and back (renormalised per column)."""

    def __init__(self, network: dpgm.BayesianNetwork):
        self.template = network
        self.names = list(network.cpds)
        self.masks = {v: network.cpds[v].values > 0 for v in self.names}

    def vector(self, network) -> np.ndarray:
        return np.concatenate([np.log(network.cpds[v].transpose(*self.template.cpds[v].dims).values[self.masks[v]])
                               for v in self.names])

    def network(self, u: np.ndarray) -> dpgm.BayesianNetwork:
        cpds, at = {}, 0
        for v in self.names:
            table = self.template.cpds[v]
            mask = self.masks[v]
            logs = np.full(table.shape, -np.inf)
            logs[mask] = u[at: at + mask.sum()]
            at += int(mask.sum())
            axis = table.dims.index(v)
            p = np.exp(logs - logs.max(axis=axis, keepdims=True))
            cpds[v] = table.copy(data=p / p.sum(axis=axis, keepdims=True))
        return dpgm.BayesianNetwork(cpds)


def run(name: str, krylov: int) -> dict:
    case = CASES[name]
    truth, structure = _truth(case["network"], case["seed"])
    data = dpgm.sample_bayesian_network(truth, case["rows"], None, seed=case["seed"],
                                        missing=case["missing"]).drop_vars(case["latent"]).load()
    stopped = _fit(structure, data, random_state=0, tol=TOL, max_iter=20_000)
    point = stopped.model
    known = json.loads(RESULTS.joinpath("em_stopping.json").read_text())
    best = next(r["best"]["loglik"] for r in known if r["case"] == name)
    scale = TOL * abs(stopped.loglik)
    coordinates = _Coordinates(point)
    u0 = coordinates.vector(point)

    def em_step(u):  # F at the network of u, in the coordinates
        return coordinates.vector(_fit(coordinates.network(u), data, init="model", accelerate=None, max_iter=2,
                                       tol=0.0).model)

    def loglik(u):
        return _fit(coordinates.network(u), data, init="model", accelerate=None, max_iter=1, tol=0.0).loglik

    image = em_step(u0)
    n = len(u0)
    basis = np.zeros((n, krylov + 1))
    hessenberg = np.zeros((krylov + 1, krylov))
    start = np.random.default_rng(0).standard_normal(n)
    basis[:, 0] = start / np.linalg.norm(start)
    ritz = []
    for j in range(krylov):
        w = (em_step(u0 + STEP * basis[:, j]) - image) / STEP
        for _ in range(2):  # Gram-Schmidt, twice
            for i in range(j + 1):
                c = basis[:, i] @ w
                hessenberg[i, j] += c
                w -= c * basis[:, i]
        hessenberg[j + 1, j] = np.linalg.norm(w)
        basis[:, j + 1] = w / hessenberg[j + 1, j]
        ritz.append(float(np.max(np.linalg.eigvals(hessenberg[: j + 1, : j + 1]).real)))
    values, vectors = np.linalg.eig(hessenberg[:krylov, :krylov])
    top = int(np.argmax(values.real))
    y = np.real(basis[:, :krylov] @ vectors[:, top])
    y /= np.linalg.norm(y)
    here = loglik(u0)
    probes = {s: loglik(u0 + s * y) - here for s in (-1.0, 1.0, -3.0, 3.0)}
    gradient = (probes[1.0] - probes[-1.0]) / 2
    curvature = -(probes[1.0] + probes[-1.0])  # L(s) = L + g s - c s^2 / 2
    local_gain = gradient**2 / (2 * curvature) if curvature > 0 else float("inf")
    restarts = []
    for eps in (1e-3, 1e-2, 1e-1):
        for seed in (1, 2):
            rng = np.random.default_rng(seed)
            again = _fit(coordinates.network(u0 + eps * rng.standard_normal(n)), data, init="model", tol=TOL,
                         max_iter=20_000)
            restarts.append({"eps": eps, "seed": seed, "passes": again.passes, "gain": again.loglik - stopped.loglik,
                             "below_best": best - again.loglik})
            print(restarts[-1], flush=True)
    several = _fit(structure, data, random_state=0, n_init=4, tol=TOL, max_iter=20_000)
    starts = [best - x for x in several.info["restart_logliks"]]
    print("n_init=4:", starts, flush=True)
    return {"case": name, **case, "n_init_4": {"passes": several.passes, "below_best": starts}, "tol": TOL, "passes": stopped.passes, "loglik": stopped.loglik, "best": best,
            "below_best_over_tol": (best - stopped.loglik) / scale, "coordinates": n, "ritz": ritz,
            "probes": {str(k): v for k, v in probes.items()}, "gradient": gradient, "curvature": curvature,
            "local_gain": local_gain, "local_gain_over_tol": local_gain / scale, "tol_loglik": scale,
            "restarts": restarts}


def _markdown(r: dict) -> str:
    ritz = ", ".join(f"{x:.5f}" for x in r["ritz"][-5:])
    lines = [
        f"# Where EM stops short: the local picture at the default's converged point ({r['case']})",
        "",
        f"`python -m benchmarks.em_saddle --case {r['case']}`. The default fit (`tol={r['tol']:g}`, one start "
        f"`random_state=0`) converged after {r['passes']:,} passes {r['best'] - r['loglik']:.3f} below the best known "
        f"maximum ({r['below_best_over_tol']:.0f} `tol`; `tol·|loglik|` = {r['tol_loglik']:.2e}). At that point, in the "
        f"{r['coordinates']} log-probabilities:",
        "",
        f"* **EM's slowest rate** (largest Ritz value of the EM map's Jacobian, Arnoldi, last 5 of "
        f"{len(r['ritz'])} steps): {ritz}. EM's slowest direction is flat to within the finite differences: "
        "neither a clear saddle (a rate above 1) nor a maximum that would bound the gap.",
        "* **Along it** (`L(s) - L(0)` at s = -3, -1, 1, 3: "
        + ", ".join(f"{r['probes'][str(s)]:.3g}" for s in (-3.0, -1.0, 1.0, 3.0))
        + f"): gradient {r['gradient']:.3g}, curvature {r['curvature']:.3g}; the quadratic model offers "
        f"{r['local_gain']:.2e}, {r['local_gain_over_tol']:.2f} `tol`: locally, the point *is* within `tol`.",
        "* **Perturbed restarts** (the default fit from the point moved by `eps` per log-probability):",
        "",
        "| eps | seed | passes | gain over the stopped point | still below the best known maximum |",
        "|---:|---:|---:|---:|---:|",
        *(f"| {x['eps']:g} | {x['seed']} | {x['passes']:,} | {x['gain']:.4g} | {x['below_best']:.4g} |"
          for x in r["restarts"]),
        "",
        "The best known maximum from this start is reached only by going on far past this point (SQUAREM with "
        "`tol=0`: `results/em_stopping.md`): no local test at the stopped point sees it, and small perturbations "
        "lead to the next resting point, not to it.",
        "",
        f"* **Restarts** (`n_init=4`, the same seed, {r['n_init_4']['passes']:,} passes in all): each start's "
        "converged log-likelihood below that maximum: "
        + ", ".join(f"{x:.4g}" for x in r["n_init_4"]["below_best"])
        + " (negative: above it). The likelihood has maxima far above the one this start climbs to; what "
        "`converged` can promise is the distance to the maximum the fit is climbing, and restarts are what "
        "looks further.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="alarm30", choices=list(CASES))
    parser.add_argument("--krylov", type=int, default=20)
    args = parser.parse_args()
    row = run(args.case, args.krylov)
    RESULTS.joinpath("em_saddle.json").write_text(json.dumps(row, indent=1, default=float))
    RESULTS.joinpath("em_saddle.md").write_text(_markdown(row))
    print(_markdown(row))


if __name__ == "__main__":
    main()

"""EM's E step with and without reducing rows to their distinct patterns (:func:`dpgm.inference.families.few_patterns`).

Run: ``python -m benchmarks.em_patterns [--repeats 3] [--passes 200]``.

Each case is sampled in memory (seed 0), the latent variables dropped, and fitted by plain EM
(``accelerate=None``, ``tol=0``, a fixed number of passes, the same random start) in one process,
once with the reduction and once without it (the rule switched off in this process), the two
alternating ``--repeats`` times. Reported: seconds per pass (median), their ratio, and the final
log-likelihoods' relative difference (the same sums in another order). Cases where the rule does not
reduce (more possible patterns than a quarter of the rows) show what its test costs: nothing.
Writes ``benchmarks/results/em_patterns.json`` and ``.md``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dpgm  # noqa: E402
from dpgm.inference import families  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _lcm(items: int, classes: int, rows: int, missing: float):
    questions = {f"q{i}": ["a", "b"] for i in range(items)}
    truth = dpgm.latent_class_model(questions, classes).randomized(np.random.default_rng(1))
    data = dpgm.sample_bayesian_network(truth, rows, None, seed=0, missing=missing).drop_vars("class")
    return dpgm.latent_class_model(questions, classes), data


def _network(name: str, latent: list[str], rows: int, missing: float):
    network = dpgm.load_network(name)
    data = dpgm.sample_bayesian_network(network, rows, None, seed=0, missing=missing).drop_vars(latent)
    return network, data


CASES = {
    "lcm5 (5 items, 2 classes, 10% missing), 3e3 rows": lambda: _lcm(5, 2, 3_000, 0.1),
    "lcm5, 1e5 rows": lambda: _lcm(5, 2, 100_000, 0.1),
    "asia, `either` latent, 20% missing, 1e4 rows": lambda: _network("asia", ["either"], 10_000, 0.2),
    "asia, `either` latent, 20% missing, 1e5 rows": lambda: _network("asia", ["either"], 100_000, 0.2),
    "lcm12 (12 items, 3 classes, 5% missing), 1e4 rows: not reduced": lambda: _lcm(12, 3, 10_000, 0.05),
    "alarm, 2 latent, 20% missing, 1e4 rows: not reduced": lambda: _network(
        "alarm", ["HYPOVOLEMIA", "LVFAILURE"], 10_000, 0.2),
}


def _fit(model, data, passes: int) -> tuple[float, float]:
    start = model.randomized(np.random.default_rng(0))
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dpgm.fit(start, data, method="em", init="model", accelerate=None, tol=0.0, max_iter=passes,
                          progress=False)
    return (time.perf_counter() - began) / result.passes, result.loglik


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--passes", type=int, default=200)
    arguments = parser.parse_args()
    rule = families.few_patterns
    rows = []
    for name, make in CASES.items():
        model, data = make()
        data = data.load()
        columns = [v for v in data.data_vars]
        cards = np.array([len(data[v].attrs.get("states", [])) or int(data[v].max()) + 1 for v in columns])
        reduced = rule(cards, data.sizes["row"])
        seconds = {"with": [], "without": []}
        logliks = {}
        _fit(model, data, 3)  # compiled kernels loaded
        for _ in range(arguments.repeats):
            for variant in ("with", "without"):
                families.few_patterns = rule if variant == "with" else (lambda cards, n_rows: False)
                per_pass, logliks[variant] = _fit(model, data, arguments.passes)
                seconds[variant].append(per_pass)
        families.few_patterns = rule
        with_, without = statistics.median(seconds["with"]), statistics.median(seconds["without"])
        rows.append({"case": name, "rows": data.sizes["row"], "reduced": bool(reduced), "with_s": with_,
                     "without_s": without, "ratio": without / with_,
                     "loglik_rel_diff": abs(logliks["with"] - logliks["without"]) / abs(logliks["without"]),
                     "seconds": seconds})
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "em_patterns.json").write_text(json.dumps(rows, indent=1))
    lines = ["# EM's E step on distinct row patterns", "",
             f"`python -m benchmarks.em_patterns --repeats {arguments.repeats} --passes {arguments.passes}`: plain "
             "EM in memory, one process, the same start; with and without the reduction alternating, median "
             "seconds per pass. *reduced*: whether the rule reduces the case's rows (at most a quarter of the "
             "rows possible patterns).", "",
             "| case | rows | reduced | s/pass with | s/pass without | without / with | loglik rel diff |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['rows']:,} | {'yes' if r['reduced'] else 'no'} | {r['with_s']:.5f} | "
                     f"{r['without_s']:.5f} | {r['ratio']:.2f} | {r['loglik_rel_diff']:.1e} |")
    (RESULTS / "em_patterns.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

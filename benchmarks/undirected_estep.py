"""The E step of Markov-network EM: enumeration of each row's unobserved groups vs the junction tree.

Run: ``python -m benchmarks.undirected_estep [--quick]``.

One chunk's E step (``ScopeEnumeration.expected_counts`` on 5·10^4 rows in memory, as a chunk
task runs it) with ``enumeration_limit=0`` (every row through the batched junction tree),
with every pattern enumerated (limit 16x the tree's cost, no set-up rule) and with the
defaults, on:

* a latent class model as a Markov network (a latent ``z`` with 4 states joined to each of
  20 binary items), 0, 2 and 10 % of the item values missing (1 ... thousands of patterns);
* a 4 x 4 grid of ternary variables with one latent corner, 0, 2 and 10 % missing;
* the latent class model with k = 2, 16, 64 latent states and 10 items, nothing missing.

Times are CPU seconds of the process (single-threaded kernels), medians of 5, measured in the same run, BLAS threads pinned to 1; the results
(expected counts) of the three settings agree to 1e-9 relative.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from dpgm.inference.scope_enumeration import MASK_OVERHEAD, ScopeEnumeration  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _cpu_timed(run, repeats: int):
    """Median CPU seconds of this process (the kernel is single-threaded; on a machine shared with
    other jobs the wall clock mostly measures their load) and the last value."""
    times, value = [], None
    for _ in range(repeats):
        start = time.process_time()
        value = run()
        times.append(time.process_time() - start)
    return statistics.median(times), value


def _latent_class(k: int, items: int, rng):
    variables = ["z", *[f"x{i}" for i in range(items)]]
    cards = {"z": k, **{f"x{i}": 2 for i in range(items)}}
    factors = [(("z",), rng.gamma(2.0, 1.0, k))] + [(("z", f"x{i}"), rng.gamma(1.0, 1.0, (k, 2)))
                                                     for i in range(items)]
    return variables, cards, factors, variables[1:]


def _grid(size: int, rng):
    name = [[f"r{i}c{j}" for j in range(size)] for i in range(size)]
    variables = [v for row in name for v in row]
    cards = dict.fromkeys(variables, 3)
    pairs = [(name[i][j], name[i][j + 1]) for i in range(size) for j in range(size - 1)]
    pairs += [(name[i][j], name[i + 1][j]) for i in range(size - 1) for j in range(size)]
    factors = [(p, rng.gamma(2.0, 1.0, (3, 3))) for p in pairs]
    return variables, cards, factors, variables[1:]  # r0c0 latent


def _case(label, variables, cards, factors, observed, missing, n, rng, repeats) -> dict:
    codes = np.stack([rng.integers(0, cards[v], n) for v in observed], axis=1)
    codes[rng.random(codes.shape) < missing] = -1
    scopes = [s for s, _ in factors]
    row = {"case": label, "missing": missing, "rows": n}
    results = {}
    probe = ScopeEnumeration(variables, cards, factors, scopes, enumeration_limit=0)
    row["masks"] = int(len(np.unique(codes < 0, axis=0)))
    for setting, limit, overhead in (("tree", 0, 0), ("enumeration", 16 * probe.tree_cost, 0),
                                     ("default", None, MASK_OVERHEAD)):
        plan = ScopeEnumeration(variables, cards, factors, scopes, enumeration_limit=limit, mask_overhead=overhead)
        plan.expected_counts(codes[:100], observed)  # compile the tree / warm the caches
        seconds, value = _cpu_timed(lambda plan=plan: plan.expected_counts(codes, observed), repeats)
        row[setting] = seconds
        results[setting] = value
        if setting == "default":
            row["limit"] = plan.enumeration_limit
            row["tree_cells"] = plan.structure.total_table_size
    reference = results["tree"][1]
    row["max_rel_diff"] = max(float(np.abs(results[s][1][c] - reference[c]).max() / reference[c].max())
                              for s in ("enumeration", "default") for c in reference)
    print(json.dumps(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, repeats = (10**4, 1) if args.quick else (5 * 10**4, 5)
    rng = np.random.default_rng(0)
    rows = []
    for missing in (0.0, 0.02, 0.1):
        rows.append(_case("latent class k=4, 20 items", *_latent_class(4, 20, rng), missing, n, rng, repeats))
    for missing in (0.0, 0.02, 0.1):
        rows.append(_case("4x4 grid, ternary, 1 latent", *_grid(4, rng), missing, n, rng, repeats))
    for k in (2, 16, 64):
        rows.append(_case(f"latent class k={k}, 10 items", *_latent_class(k, 10, rng), 0.0, n, rng, repeats))
    if args.quick:
        return
    lines = ["# Markov-network E step: enumeration vs junction tree", "",
             "Produced by `python -m benchmarks.undirected_estep`: one chunk's E step "
             "(`ScopeEnumeration.expected_counts`, 5·10^4 rows in memory), CPU seconds of the process, medians of 5 in "
             "the same run on a shared machine (2 cores, load 10-20 from other jobs, so CPU time, not wall time): every row on the "
             "junction tree (`limit=0`), every "
             "pattern enumerated, and the defaults (limit half the tree's cost, a pattern enumerated only "
             "when its distinct rows repay its set-up). Expected counts agree across the three (max rel diff).", "",
             "| case | missing | patterns | tree s | enumeration s | default s | tree / enumeration | "
             "tree / default | default limit | tree cells | max rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['missing']:.0%} | {r['masks']} | {r['tree']:.3g} | {r['enumeration']:.3g} | "
              f"{r['default']:.3g} | {r['tree'] / r['enumeration']:.2f}x | {r['tree'] / r['default']:.2f}x | "
              f"{r['limit']} | {r['tree_cells']} | {r['max_rel_diff']:.1e} |" for r in rows]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "undirected_estep.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

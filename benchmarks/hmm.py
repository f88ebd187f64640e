"""HMM Baum-Welch seconds per iteration vs N sequences: dpgm (in memory / 2-worker cluster) vs hmmlearn.

Run: ``python -m benchmarks.hmm [--quick] [--sequences 1e3 1e4 1e5 1e6] [--emission gaussian]
[--states 4] [--dimension 2] [--seed 0] [--name NAME]``
(hmmlearn up to ``--hmmlearn-max``, default 1e5 sequences: it needs ~25 s per iteration there).
``--emission gaussian``: two continuous variables per step, a full-covariance Gaussian per state,
against hmmlearn's ``GaussianHMM(covariance_type="full", covars_prior=0)``
(``results/hmm_gaussian.md``). ``--states``, ``--dimension`` (Gaussian: variables per step)
and ``--seed`` choose another setting: the truth's means, covariances and the start drawn
from the seed (seed 0 with 4 states and 2 variables is the setting above); ``--name`` the
results' file name (default ``hmm`` / ``hmm_gaussian``).

Data: N sequences of length 50 from a 4-state, 6-symbol HMM (vectorized NumPy
sampler, seed fixed), written to Zarr under /tmp for the cluster runs. All three
implementations start from the same random parameters and run K iterations
with no early stop, in the same run:

* **dpgm in memory**: ``dpgm.fit(start, ds, init="model", tol=0, max_iter=K)`` on the
  in-memory dataset, no client (one process);
* **dpgm cluster**: the same from the Zarr store on a 2-worker LocalCluster
  (2 processes x 1 thread);
* **hmmlearn**: ``CategoricalHMM(init_params="", params="ste", tol=-inf)`` (one core).

Seconds per iteration = wall time of the whole fit / K (setup included), median
of 3 fits where cheap. Per-core throughput = observations / (seconds per
iteration x cores used). The log-likelihood of every iteration is compared with
hmmlearn's (max relative difference). BLAS/numba threads pinned to 1.
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
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402

RESULTS = Path(__file__).parent / "results"
EMISSION = "categorical"  # or "gaussian" (--emission)
MEANS = np.array([[0.0, 0.0], [3.0, 1.0], [-1.0, 4.0], [2.5, -2.5]])
COVARIANCES = np.array([[[1.0, 0.3], [0.3, 0.8]], [[0.6, -0.2], [-0.2, 1.1]], [[1.4, 0.0], [0.0, 0.5]],
                        [[0.7, 0.2], [0.2, 0.7]]])
STORE = Path("/tmp/dpgm-bench")
N_STATES, SYMBOLS, LENGTH = 4, list("abcdef"), 50
SEED = 0  # --seed: 0 is the setting above; another draws the Gaussian truth and the start from it


def _setting(n_states: int, dimension: int, seed: int) -> None:
    """Another setting: ``n_states`` states, ``dimension`` Gaussian variables, truth and start from ``seed``."""
    global N_STATES, MEANS, COVARIANCES, SEED
    N_STATES, SEED = n_states, seed
    if (n_states, dimension, seed) == (4, 2, 0):
        return
    rng = np.random.default_rng(1000 + seed)
    MEANS = rng.normal(0.0, 2.5, (n_states, dimension))
    factors = rng.normal(0.0, 1.0, (n_states, dimension, dimension)) / np.sqrt(dimension)
    COVARIANCES = factors @ factors.transpose(0, 2, 1) + 0.3 * np.eye(dimension)


def _variables() -> list[str]:
    return ["x", "y"] if MEANS.shape[1] == 2 else [f"x{i}" for i in range(MEANS.shape[1])]


def _truth(seed: int = 0):
    rng = np.random.default_rng(seed + SEED)
    n, m = N_STATES, len(SYMBOLS)
    start = rng.dirichlet(np.full(n, 3.0))
    transition = rng.dirichlet(np.ones(n), n) * 0.5 + np.eye(n) * 0.5
    emission = rng.dirichlet(np.ones(m) * 0.7, n)
    return start, transition, emission


def _sample(n_sequences: int, seed: int = 1) -> np.ndarray:
    """Vectorized forward sampling: all sequences one time step at a time."""
    start, transition, emission = _truth()
    rng = np.random.default_rng(seed + SEED)

    def draw(probabilities):  # one categorical draw per row of ``probabilities``
        return (rng.random((len(probabilities), 1)) > np.cumsum(probabilities, axis=1)).sum(axis=1)

    gaussian = EMISSION == "gaussian"
    dimension = MEANS.shape[1]
    codes = np.empty((n_sequences, LENGTH, dimension) if gaussian else (n_sequences, LENGTH),
                     dtype=np.float64 if gaussian else np.int8)
    factors = np.linalg.cholesky(COVARIANCES)
    state = draw(np.broadcast_to(start, (n_sequences, N_STATES)))
    for t in range(LENGTH):
        if gaussian:
            codes[:, t] = MEANS[state] + np.einsum("nij,nj->ni", factors[state], rng.standard_normal((n_sequences, dimension)))
        else:
            codes[:, t] = np.minimum(draw(emission[state]), len(SYMBOLS) - 1)
        state = np.minimum(draw(transition[state]), N_STATES - 1)
    return codes


def _dataset(codes: np.ndarray) -> xr.Dataset:
    if EMISSION == "gaussian":
        return xr.Dataset({v: (("row", "time"), codes[..., i]) for i, v in enumerate(_variables())})
    return xr.Dataset({"obs": (("row", "time"), codes, {"states": SYMBOLS})})


def _start():
    """The same random start for dpgm and hmmlearn."""
    rng = np.random.default_rng(7 + SEED)
    if EMISSION == "categorical":
        return dpgm.hmm(N_STATES, SYMBOLS).randomized(rng)
    variables = tuple(_variables())
    structure = dpgm.hmm(N_STATES, emissions={variables: {"family": "gaussian", "covariance_type": "full"}})
    family = structure.emissions[0].with_arrays(MEANS + rng.normal(0, 0.7, MEANS.shape),
                                                np.stack([np.eye(len(variables)) * 1.5] * N_STATES),
                                                structure.labels)
    return structure.with_parameters(rng.dirichlet(np.ones(N_STATES)), rng.dirichlet(np.ones(N_STATES), N_STATES),
                                     [family])


def _store(codes: np.ndarray) -> Path:
    n = codes.shape[0]
    setting = "" if SEED == 0 and MEANS.shape[1] == 2 else f"_d{MEANS.shape[1]}_seed{SEED}"
    path = STORE / f"hmm_{EMISSION}_{n:.0e}_L{LENGTH}_s{N_STATES}_m{len(SYMBOLS)}{setting}.zarr".replace("+", "")
    if not (path / ".done").exists():
        chunk_rows = int(min(max(n // 8, 1000), 200_000))
        dpgm.write_dataset(_dataset(codes), path, chunk_rows=chunk_rows)
        (path / ".done").write_text(str(chunk_rows))
    return path


from benchmarks.timing import timed as _timed  # noqa: E402


def _hmmlearn(start, codes: np.ndarray, iterations: int, repeats: int):
    from hmmlearn.hmm import CategoricalHMM, GaussianHMM

    lengths = [codes.shape[1]] * codes.shape[0]
    flat = codes.reshape(codes.shape[0] * codes.shape[1], -1)

    def run():
        if EMISSION == "gaussian":
            model = GaussianHMM(n_components=N_STATES, covariance_type="full", init_params="", params="stmc",
                                n_iter=iterations, tol=-np.inf, covars_prior=0.0, means_weight=0.0,
                                implementation="log")
            family = start.emissions[0]
            model.startprob_, model.transmat_ = start.start.values, start.transition.values
            model.means_, model.covars_ = family.means.values, family.covariances.values
        else:
            model = CategoricalHMM(n_components=N_STATES, n_features=len(SYMBOLS), init_params="", params="ste",
                                   n_iter=iterations, tol=-np.inf, implementation="log")
            model.startprob_, model.transmat_, model.emissionprob_ = start.arrays()
        model.fit(flat, lengths)
        return np.array(model.monitor_.history)

    seconds, history = _timed(run, repeats)
    return seconds / iterations, history


def _dpgm(start, data, iterations: int, repeats: int, client=None):
    def run():
        options = {"reg_covar": 0.0} if EMISSION == "gaussian" else {}
        result = dpgm.fit(start, data, init="model", tol=0, max_iter=iterations, client=client, **options)
        return np.array([h["loglik"] for h in result.history]), result.passes

    seconds, (history, passes) = _timed(run, repeats)
    return seconds / iterations, history, passes


def run(sizes: list[int], iterations: int, hmmlearn_max: int) -> list[dict]:
    start = _start()
    rows, data = [], {}
    for n in sizes:
        codes = _sample(n)
        data[n] = (codes, _store(codes))
    for n in sizes:
        codes, _ = data[n]
        observations = codes.size
        repeats = 3 if n <= 10**4 else 1
        row = {"n_sequences": n, "length": LENGTH, "observations": observations, "iterations": iterations}
        per_iter, history, passes = _dpgm(start, _dataset(codes), iterations, repeats)
        row["dpgm_in_memory"] = {"seconds_per_iter": per_iter, "cores": 1, "passes": passes}
        if n <= hmmlearn_max:
            per_iter, reference = _hmmlearn(start, codes, iterations, repeats)
            row["hmmlearn"] = {"seconds_per_iter": per_iter, "cores": 1}
            row["dpgm_in_memory"]["loglik_max_rel_diff"] = float(np.max(np.abs(history - reference)
                                                                       / np.abs(reference)))
        row["_history"] = history
        rows.append(row)
    with dpgm.connect(n_workers=2, dashboard_address=":0") as client:
        client.run(lambda: None)
        for row in rows:
            n = row["n_sequences"]
            per_iter, history, passes = _dpgm(start, dpgm.open_dataset(data[n][1]), iterations,
                                              3 if n <= 10**4 else 1, client=client)
            row["dpgm_cluster"] = {"seconds_per_iter": per_iter, "cores": 2, "passes": passes,
                                   "loglik_max_rel_diff_vs_in_memory": float(np.max(
                                       np.abs(history - row["_history"]) / np.abs(row["_history"])))}
    for row in rows:
        del row["_history"]
        for key in ("dpgm_in_memory", "dpgm_cluster", "hmmlearn"):
            if key in row:
                v = row[key]
                v["obs_per_s_per_core"] = row["observations"] / (v["seconds_per_iter"] * v["cores"])
        line = ", ".join(f"{k} {row[k]['seconds_per_iter']:.4f}s/it"
                         for k in ("dpgm_in_memory", "dpgm_cluster", "hmmlearn") if k in row)
        print(f"N={row['n_sequences']:.0e}: {line}", flush=True)
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, per_core) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in [("dpgm_in_memory", "dpgm in memory (1 core)"), ("dpgm_cluster", "dpgm Zarr, 2 workers"),
                       ("hmmlearn", f"hmmlearn {'GaussianHMM' if EMISSION == 'gaussian' else 'CategoricalHMM'} (1 core)")]:
        xs = [r["n_sequences"] for r in rows if key in r]
        ax.loglog(xs, [r[key]["seconds_per_iter"] for r in rows if key in r], "o-", label=label)
        per_core.semilogx(xs, [r[key]["obs_per_s_per_core"] / 1e6 for r in rows if key in r], "o-", label=label)
    ax.set_xlabel(f"sequences (length {LENGTH})")
    ax.set_ylabel("seconds per Baum-Welch iteration")
    ax.legend(fontsize=8)
    per_core.set_xlabel("sequences")
    per_core.set_ylabel("M observations / s / core")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _markdown(report: dict) -> str:
    what = (f"{MEANS.shape[1]} continuous variables per step (a full-covariance Gaussian per state; hmmlearn's "
            "GaussianHMM, covars_prior=0)" if EMISSION == "gaussian" else f"{len(SYMBOLS)} symbols")
    if SEED:
        what += f", truth and start drawn from seed {SEED}"
    lines = [f"# hmm: Baum-Welch, dpgm vs hmmlearn ({EMISSION} emissions)", "",
             f"{N_STATES} hidden states, {what}, sequences of length {LENGTH}, "
             f"{report['iterations']} iterations from the same start; BLAS/numba threads pinned to 1. "
             "Per-core ratio = dpgm obs/s/core / hmmlearn obs/s/core (target: >= 1/1.5 = 0.67).", "",
             "| N seq | dpgm mem s/it | dpgm cluster s/it | hmmlearn s/it | Mobs/s/core mem / cluster / hmmlearn | "
             "per-core ratio mem | per-core ratio cluster | wall ratio cluster | loglik max rel diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        mem, clu, ref = r["dpgm_in_memory"], r["dpgm_cluster"], r.get("hmmlearn")
        rate = (f"{mem['obs_per_s_per_core'] / 1e6:.2f} / {clu['obs_per_s_per_core'] / 1e6:.2f} / "
                + (f"{ref['obs_per_s_per_core'] / 1e6:.2f}" if ref else "-"))
        if ref:
            ratios = (f"{mem['obs_per_s_per_core'] / ref['obs_per_s_per_core']:.2f} | "
                      f"{clu['obs_per_s_per_core'] / ref['obs_per_s_per_core']:.2f} | "
                      f"{ref['seconds_per_iter'] / clu['seconds_per_iter']:.2f}x | "
                      f"{mem['loglik_max_rel_diff']:.1e}")
        else:
            ratios = "- | - | - | -"
        lines.append(f"| {r['n_sequences']:.0e} | {mem['seconds_per_iter']:.4f} | {clu['seconds_per_iter']:.4f} | "
                     + (f"{ref['seconds_per_iter']:.4f}" if ref else "-") + f" | {rate} | {ratios} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    parser.add_argument("--sequences", type=float, nargs="*", help="numbers of sequences")
    parser.add_argument("--iterations", type=int, help="Baum-Welch iterations (default 5; 3 with --quick)")
    parser.add_argument("--hmmlearn-max", type=float, default=1e5, help="largest N for hmmlearn")
    parser.add_argument("--emission", choices=["categorical", "gaussian"], default="categorical")
    parser.add_argument("--states", type=int, default=4, help="hidden states")
    parser.add_argument("--dimension", type=int, default=2, help="Gaussian variables per step")
    parser.add_argument("--seed", type=int, default=0, help="another setting's truth and start (0: the default)")
    parser.add_argument("--name", help="results/<name>.{json,md,png}")
    args = parser.parse_args(argv)
    global EMISSION
    EMISSION = args.emission
    _setting(args.states, args.dimension, args.seed)
    name = args.name or ("hmm" if EMISSION == "categorical" else f"hmm_{EMISSION}")
    sizes = [int(x) for x in (args.sequences or ([1e3, 1e4] if args.quick else [1e3, 1e4, 1e5, 1e6]))]
    iterations = args.iterations or (3 if args.quick else 5)
    warnings.filterwarnings("ignore")
    STORE.mkdir(parents=True, exist_ok=True)
    rows = run(sizes, iterations, int(args.hmmlearn_max))
    report = {"benchmark": "hmm", "quick": args.quick, "iterations": iterations, "n_states": N_STATES,
              "dimension": int(MEANS.shape[1]), "seed": SEED,
              "symbols": len(SYMBOLS), "length": LENGTH, "rows": rows,
              "notes": "BLAS/numba threads pinned to 1; the machine's 2 cores are shared with other sessions"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    report["emission"] = EMISSION
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    _plot(rows, RESULTS / f"{name}.png")
    (RESULTS / f"{name}.md").write_text(_markdown(report))
    print(_markdown(report))


if __name__ == "__main__":
    main()

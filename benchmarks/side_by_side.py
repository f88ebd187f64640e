"""Every benchmark's workload on two checkouts of dpgm, side by side in one run, alternating.

Run: ``python -m benchmarks.side_by_side --old /tmp/before --new . [--rounds 5] [--only em_alarm2 hmm]``.

For each workload of the benchmark scripts (at small sizes: seconds, not minutes) the harness starts
one fresh Python process per checkout and round, with ``PYTHONPATH`` pointing at that checkout, and
alternates the order (old first in even rounds, new first in odd ones). Inside that process the
workload is set up (data generated or written, a ``LocalCluster`` started where the benchmark uses one),
run once to warm up (numba compilation, workers' imports; discarded) and then timed ``--inner`` times.
Each timed run records wall seconds and CPU seconds: ``resource.getrusage`` of the process (and of its
waited-for children) plus, for cluster workloads, the CPU seconds of every worker process over the run
(``getrusage`` inside each worker, through ``Client.run``). A process reports the median of its inner
runs; each round gives one new/old ratio, and the table shows the median ratio with its min-max over
the rounds. CPU time is the primary figure: the machine is shared, and wall time follows the load.

Workloads call only the public API that both checkouts share (``dpgm.fit``, ``dpgm.counts``,
``dpgm.moments``, ``dpgm.convert``, ``JunctionTree`` methods, ...) and the data helpers of benchmark
scripts that did not change between the checkouts, so the same code runs on both.
With ``--profile`` a workload slower than the bound in CPU time is profiled once per checkout
(cProfile, top functions by internal time) and the profiles go into the results file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
DATA = Path(tempfile.gettempdir()) / "dpgm-side-by-side"
BOUND = 1.05
PROFILE_TOP = 20
SETTLE_SECONDS = 120.0
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}


# ------------------------------------------------------------------ workloads (run inside a worker)


def _alarm_codes(n: int, seed: int, observed: int = 10):
    import numpy as np

    import dpgm

    model = dpgm.load_network("alarm")
    data = dpgm.sample_bayesian_network(model, n, None, seed=seed)
    codes = np.stack([data[v].values for v in model.variables], axis=1).astype(np.int64)
    rng = np.random.default_rng(seed + 1000)
    keep = np.argpartition(rng.random(codes.shape), observed, axis=1)[:, :observed]
    mask = np.zeros(codes.shape, dtype=bool)
    np.put_along_axis(mask, keep, True, axis=1)
    codes[~mask] = -1
    return model, codes


def _side(label: str) -> Path:
    """The data folder of one side: ``label`` is ``old-<commit>`` or ``new-<commit>``, so a store written by
    one checkout's sampler is never read by another checkout's run."""
    path = DATA / label
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cluster():
    import dpgm

    return dpgm.connect(n_workers=2, dashboard_address=":0")


def w_counts(label: str):
    """benchmarks.counts: one counting pass (20-variable chain, the benchmark's scopes) over 3e6 rows
    from Zarr (8 chunks) on 2 workers."""
    import dpgm
    from benchmarks.counts import chain_network, workload_scopes

    path = _side(label) / "counts_chain20_3e6.zarr"
    if not (path / ".done").exists():
        dpgm.sample_bayesian_network(chain_network(), 3_000_000, path, seed=1, chunk_rows=375_000, mode="w")
        (path / ".done").write_text("ok")
    scopes = workload_scopes()
    return "cluster", lambda client: dpgm.counts(dpgm.open_dataset(path), scopes, client=client)


def w_integrity(label: str):
    """benchmarks.integrity: read every chunk of a checksummed (crc32c, dpgm's default) store of 3e6
    rows (4 chunks) and count 5 pair scopes on 2 workers."""
    import dpgm
    from benchmarks.counts import chain_network, workload_scopes

    path = _side(label) / "integrity_chain20_3e6.zarr"
    if not (path / ".done").exists():
        dpgm.sample_bayesian_network(chain_network(), 3_000_000, path, seed=2, chunk_rows=750_000, mode="w")
        (path / ".done").write_text("ok")
    scopes = workload_scopes()[:5]
    return "cluster", lambda client: dpgm.counts(dpgm.open_dataset(path), scopes, client=client)


def w_fit_bn(label: str):
    """benchmarks.fit_bn: complete-data BN fit of alarm's structure, 1e5 rows in memory."""
    import dpgm

    truth = dpgm.load_network("alarm")
    data = dpgm.sample_bayesian_network(truth, 100_000, None, seed=1)
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    return "local", lambda: dpgm.fit(structure, data)


def w_fit_bn_cluster(label: str):
    """benchmarks.fit_bn (cluster part): the same fit from a Zarr store of 2e6 rows (8 chunks) on 2 workers."""
    import dpgm

    truth = dpgm.load_network("alarm")
    path = _side(label) / "fit_bn_alarm_2e6.zarr"
    if not (path / ".done").exists():
        dpgm.sample_bayesian_network(truth, 2_000_000, path, seed=1, chunk_rows=250_000, mode="w")
        (path / ".done").write_text("ok")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges)
    return "cluster", lambda client: dpgm.fit(structure, dpgm.open_dataset(path), client=client)


def _random_table(k: int):
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(k)
    values = rng.poisson(rng.gamma(2.0, 20.0, (k, k, k))).astype(float)
    return xr.DataArray(values, dims=["v0", "v1", "v2"],
                        coords={v: [f"s{i}" for i in range(k)] for v in ["v0", "v1", "v2"]})


def _quiet(run: Callable[[], object]) -> Callable[[], object]:
    import warnings

    import dpgm

    def quiet():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
            return run()
    return quiet


def w_fit_loglinear(label: str):
    """benchmarks.fit_loglinear: no-three-way-interaction model on a 10x10x10 table, ipf + lbfgs + gis."""
    import dpgm

    table = _random_table(10)
    margins = [("v0", "v1"), ("v0", "v2"), ("v1", "v2")]
    states = {v: list(table.coords[v].values) for v in table.dims}
    markov = dpgm.MarkovNetwork.from_cliques(margins, states)
    loglinear = dpgm.LogLinearModel.from_margins(margins, states)

    def run():
        dpgm.fit(markov, table, method="ipf", tol=1e-8, max_iter=100_000)
        dpgm.fit(loglinear, table, method="lbfgs", tol=1e-8, max_iter=100_000)
        dpgm.fit(loglinear, table, method="gis", tol=1e-6, max_iter=2_000)
    return "local", _quiet(run)


def w_classical(label: str):
    """benchmarks.classical: quasi-independence (20x20, zero diagonal; ipf/gis/lbfgs/newton) and
    mutual independence of 6 binary variables from 1e5 rows (ipf)."""
    import numpy as np
    import xarray as xr

    import dpgm

    rng = np.random.default_rng(0)
    k = 20
    counts = rng.poisson(rng.gamma(2.0, 40.0, (k, k))).astype(float)
    np.fill_diagonal(counts, 0.0)
    labels = [f"s{i}" for i in range(k)]
    table = xr.DataArray(counts, dims=("origin", "destination"), coords={"origin": labels, "destination": labels})
    zeros = xr.DataArray(np.eye(k, dtype=bool), dims=table.dims, coords=table.coords)
    margins = [("origin",), ("destination",)]
    states = {v: labels for v in table.dims}
    markov = dpgm.MarkovNetwork.from_cliques(margins, states)
    loglinear = dpgm.LogLinearModel.from_margins(margins, states)
    variables = [f"b{i}" for i in range(6)]
    parents = dict.fromkeys(variables, [])
    bn = dpgm.BayesianNetwork.from_arrays(parents, dict.fromkeys(variables, ["0", "1"]),
                                          {v: np.array([0.3, 0.7]) for v in variables})
    data = dpgm.sample_bayesian_network(bn, 100_000, None, seed=3)
    independence = dpgm.MarkovNetwork.from_cliques([(v,) for v in variables], {v: ["0", "1"] for v in variables})

    def run():
        dpgm.fit(markov, table, method="ipf", structural_zeros=zeros, tol=1e-8, max_iter=100_000)
        for method in ("gis", "lbfgs", "newton"):
            dpgm.fit(loglinear, table, method=method, structural_zeros=zeros, tol=1e-8, max_iter=100_000)
        dpgm.fit(independence, data, method="ipf", tol=1e-8)
    return "local", _quiet(run)


def _em_case(name: str):
    import dpgm
    from benchmarks.em import MISSING, _cases

    case = _cases()[name]
    data = dpgm.sample_bayesian_network(case["truth"], 10_000, None, seed=1, missing=MISSING).drop_vars(case["latent"])
    model = case["model"]
    return "local", lambda: dpgm.fit(model, data, method="em", n_init=1, random_state=0, tol=0, max_iter=3,
                                     accelerate=None)


def w_em_alarm2(label: str):
    """benchmarks.em: alarm with 2 latent variables and 20 % missing values, 1e4 rows, 3 EM iterations."""
    return _em_case("alarm2")


def w_em_lcm20(label: str):
    """benchmarks.em: latent class model (20 items, 3 classes), 20 % missing, 1e4 rows, 3 EM iterations."""
    return _em_case("lcm20")


def w_em_cluster(label: str):
    """benchmarks.em (cluster part): alarm2 from a Zarr store of 2e4 rows on 2 workers, 2 EM iterations."""
    import dpgm
    from benchmarks.em import MISSING, _cases

    case = _cases()["alarm2"]
    path = _side(label) / "em_alarm2_2e4.zarr"
    if not (path / ".done").exists():
        dpgm.sample_bayesian_network(case["truth"], 20_000, path, seed=1, missing=MISSING, chunk_rows=5_000,
                                     mode="w")
        (path / ".done").write_text("ok")
    model = case["model"]

    def run(client):
        data = dpgm.open_dataset(path).drop_vars(case["latent"])
        return dpgm.fit(model, data, method="em", n_init=1, random_state=0, tol=0, max_iter=2, accelerate=None,
                        client=client)
    return "cluster", run


def w_hmm(label: str):
    """benchmarks.hmm: 4-state, 6-symbol HMM, 20,000 sequences of 50, 3 Baum-Welch iterations in memory."""
    import numpy as np

    import dpgm
    from benchmarks.hmm import N_STATES, SYMBOLS, _dataset, _sample

    start = dpgm.hmm(N_STATES, SYMBOLS).randomized(np.random.default_rng(7))
    data = _dataset(_sample(20_000))
    return "local", lambda: dpgm.fit(start, data, init="model", tol=0, max_iter=3,
                                     accelerate=None)


def w_inference(label: str):
    """benchmarks.inference: JunctionTree posteriors, expected_counts and map_batch, alarm 1e4 rows and
    hailfinder 2e3 rows, 10 observed variables per row."""
    import numpy as np

    import dpgm
    from dpgm.inference import JunctionTree

    cases = []
    for name, n in (("alarm", 10_000), ("hailfinder", 2_000)):
        model = dpgm.load_network(name)
        data = dpgm.sample_bayesian_network(model, n, None, seed=5)
        codes = np.stack([data[v].values for v in model.variables], axis=1).astype(np.int64)
        rng = np.random.default_rng(6)
        hide = np.argsort(rng.random(codes.shape), axis=1)[:, 10:]
        np.put_along_axis(codes, hide, -1, axis=1)
        cases.append((JunctionTree(model), codes, list(model.variables)))

    def run():
        for tree, codes, variables in cases:
            tree.posteriors(codes, variables)
            tree.expected_counts(codes, variables)
            tree.map_batch(codes, variables)
    return "local", run


def w_inference_build(label: str):
    """benchmarks.inference (build part): JunctionTree(model) and with_model for alarm, hailfinder, win95pts."""
    import dpgm
    from dpgm.inference import JunctionTree

    models = [dpgm.load_network(name) for name in ("alarm", "hailfinder", "win95pts")]

    def run():
        for model in models:
            JunctionTree(model).with_model(model)
    return "local", run


def w_posteriors(label: str):
    """benchmarks.posteriors: BatchedTree posteriors and expected_counts on alarm, 2e4 rows, 10 observed."""
    import dpgm
    from benchmarks.posteriors import _evidence_codes, _tree

    model = dpgm.load_network("alarm")
    tree = _tree(model)
    codes = _evidence_codes(model, 20_000, seed=1)
    variables = list(model.variables)

    def run():
        tree.posteriors(codes, variables)
        tree.expected_counts(codes, variables)
    return "local", run


def w_ipf_grid(label: str):
    """benchmarks.ipf_grid: MarkovNetwork IPF on a 6x6 binary grid's edges (tree IPF), 5e4 rows."""
    import numpy as np

    import dpgm

    rows = columns = 6
    name = [[f"r{i}c{j}" for j in range(columns)] for i in range(rows)]
    parents = {name[i][j]: ([name[i][j - 1]] if j else []) + ([name[i - 1][j]] if i else [])
               for i in range(rows) for j in range(columns)}
    rng = np.random.default_rng(0)
    tables = {v: rng.dirichlet([2, 2], 2 ** len(p)).T.reshape([2] + [2] * len(p)) for v, p in parents.items()}
    bn = dpgm.BayesianNetwork.from_arrays(parents, dict.fromkeys(parents, ["0", "1"]), tables)
    data = dpgm.sample_bayesian_network(bn, 50_000, None, seed=1)
    scopes = [(p, v) for v, ps in parents.items() for p in ps]
    model = dpgm.MarkovNetwork.from_cliques(scopes, {v: ["0", "1"] for v in parents})
    return "local", _quiet(lambda: dpgm.fit(model, data, method="ipf", tol=1e-8, max_iter=500))


def _gaussian_data(n: int, p: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(p, p)) / np.sqrt(p)
    return rng.normal(size=(n, p)) @ mixing + 100.0


def w_moments(label: str, part: str = "both"):
    """benchmarks.moments: dpgm.moments of 50 float32 columns x 2e5 rows in memory, and a Gaussian
    graphical model (30 variables, 60 edges) fitted by IPF."""
    import numpy as np
    import xarray as xr

    import dpgm

    values = _gaussian_data(200_000, 50, 0).astype(np.float32)
    names = [f"x{i}" for i in range(50)]
    ds = xr.Dataset({v: ("row", values[:, i]) for i, v in enumerate(names)})
    p = 30
    pairs, precision = _harness_module("graphs").ring_with_chords(p)
    rng = np.random.default_rng(3)
    gvalues = rng.multivariate_normal(np.zeros(p), np.linalg.inv(precision), 20_000)
    gnames = [f"v{i}" for i in range(p)]
    gds = xr.Dataset({v: ("row", gvalues[:, i]) for i, v in enumerate(gnames)})
    model = dpgm.GaussianGraphicalModel([(gnames[a], gnames[b]) for a, b in pairs], variables=gnames)

    def run():
        if part != "ggm":
            dpgm.moments(ds, names)
        if part != "moments":
            dpgm.fit(model, gds, method="ipf", tol=1e-10, max_iter=10_000)
    return "local", _quiet(run)


def w_moments_pass(label: str):
    """benchmarks.moments, first part alone: dpgm.moments of 50 float32 columns x 2e5 rows in memory."""
    return w_moments(label, part="moments")


def w_ggm_ipf(label: str):
    """benchmarks.moments, second part alone: the Gaussian graphical model (30 variables, 60 edges) by IPF."""
    return w_moments(label, part="ggm")


def w_gaussian(label: str):
    """benchmarks.gaussian: GaussianMixture(5 components, 8 variables, full) from a fixed start,
    5e4 rows in memory, 5 EM iterations."""
    import numpy as np
    import xarray as xr

    import dpgm

    k, p = 5, 8
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, (k, p))
    x = centres[rng.integers(0, k, 50_000)] + rng.normal(size=(50_000, p))
    names = [f"x{i}" for i in range(p)]
    ds = xr.Dataset({v: ("row", x[:, i]) for i, v in enumerate(names)})
    covariance = np.cov(x.T, bias=True)
    start = {"weights": np.full(k, 1 / k), "means": x[np.random.default_rng(3).choice(len(x), k, replace=False)],
             "covariances": np.stack([covariance] * k)}
    model = dpgm.GaussianMixture(k, names, "full")
    return "local", _quiet(lambda: dpgm.fit(model, ds, init=start, max_iter=5, tol=0))


def w_glm(label: str):
    """benchmarks.glm: Bernoulli GLMConditional with 8 continuous and 3 four-state parents, 1e5 rows
    in memory (IRLS to 1e-10)."""
    import numpy as np
    import pandas as pd

    import dpgm

    rng = np.random.default_rng(0)
    n = 100_000
    x = rng.normal(size=(n, 8))
    codes = rng.integers(0, 4, size=(n, 3))
    indicators = np.concatenate([(codes[:, [j]] == np.arange(1, 4)).astype(float) for j in range(3)], axis=1)
    design = np.column_stack([np.ones(n), x, indicators])
    y = (rng.random(n) < 1 / (1 + np.exp(-design @ rng.normal(0, 0.5, design.shape[1])))).astype(float)
    frame = pd.DataFrame({f"x{i}": x[:, i] for i in range(8)})
    for j in range(3):
        frame[f"c{j}"] = pd.Categorical.from_codes(codes[:, j], ["a", "b", "c", "d"])
    frame["y"] = y
    data = dpgm.from_pandas(frame)
    model = dpgm.GLMConditional("y", [f"x{i}" for i in range(8)] + [f"c{j}" for j in range(3)], family="bernoulli")
    return "local", lambda: dpgm.fit(model, data, tol=1e-10)


def w_convert(label: str):
    """benchmarks.convert: dpgm.convert of a 5e4-row alarm CSV to Zarr on 2 workers."""
    import shutil

    import dpgm

    folder = _side(label)
    csv = folder / "alarm-50000.csv"
    if not csv.exists():
        frame = dpgm.to_pandas(dpgm.sample_bayesian_network(dpgm.load_network("alarm"), 50_000, seed=0))
        frame.astype(str).to_csv(csv, index=False)
    target = folder / "convert.zarr"

    def run(client):
        shutil.rmtree(target, ignore_errors=True)
        return dpgm.convert(csv, target, client=client)
    return "cluster", run


WORKLOADS = {name[2:]: f for name, f in dict(globals()).items() if name.startswith("w_")}
GROUPS = {"em": ["em_alarm2", "em_lcm20", "em_cluster", "hmm"]}


# ------------------------------------------------------------------ the worker process


def _cpu_self() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _worker_cpu() -> float:
    import resource as r

    use = r.getrusage(r.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _scheduler_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def _settle(client, seconds: float = SETTLE_SECONDS) -> None:
    """Wait until the scheduler holds no task of the previous run (its keys released by the client).

    The cyclic garbage collector runs first: a ``Future`` caught in a reference cycle keeps its key in
    memory on the scheduler until the collector frees it (``Future.result(timeout=...)`` that times out
    inside distributed's ``sync()`` leaves such a cycle: exception, traceback, frame), and a wait loop
    that allocates little may not trigger a full collection for hours. A key still held after
    ``seconds`` is an error naming it, not an endless wait.
    """
    gc.collect()
    end = time.monotonic() + seconds
    while left := client.run_on_scheduler(_scheduler_tasks):
        if time.monotonic() > end:
            keys = client.run_on_scheduler(_scheduler_keys)
            raise RuntimeError(f"{left} tasks still on the scheduler {seconds:.0f} s after the previous run: {keys}")
        time.sleep(0.01)


def _scheduler_keys(dask_scheduler) -> list[str]:
    return [f"{key} ({ts.state})" for key, ts in list(dask_scheduler.tasks.items())[:5]]


def _measure(kind: str, run, client) -> tuple[float, float]:
    if client is not None:
        _settle(client)
        before = sum(client.run(_worker_cpu).values())
    cpu, wall = _cpu_self(), time.perf_counter()
    run(client) if kind == "cluster" else run()
    wall, cpu = time.perf_counter() - wall, _cpu_self() - cpu
    if client is not None:
        cpu += sum(client.run(_worker_cpu).values()) - before
    return wall, cpu


def worker(name: str, label: str, inner: int, profile: bool) -> dict:
    kind, run = WORKLOADS[name](label)
    if kind == "cluster":
        with _cluster() as client:
            return _timed(kind, run, client, inner, profile)
    return _timed(kind, run, None, inner, profile)


def _timed(kind, run, client, inner: int, profile: bool) -> dict:
    _measure(kind, run, client)  # warm-up: numba compilation, workers' imports
    if profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        _measure(kind, run, client)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(PROFILE_TOP)
        return {"profile": out.getvalue()}
    walls, cpus = zip(*(_measure(kind, run, client) for _ in range(inner)), strict=True)
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus)}


# ------------------------------------------------------------------ the harness


def _harness_module(name: str):
    """``benchmarks/<name>.py`` next to this file: the checkout measured (on PYTHONPATH) may predate it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_harness_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spawn(checkout: Path, label: str, name: str, inner: int, profile: bool = False, retries: int = 0) -> dict:
    """One worker process's result; a process that fails is started again up to ``retries`` times (each
    failure printed), and the result says how many failed before it (``"failed"``)."""
    env = dict(os.environ, PYTHONPATH=str(checkout), **THREAD_ENV)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--label", f"{label}-{_commit(checkout)}",
               "--inner", str(inner)] + (["--profile"] if profile else [])
    for failed in range(retries + 1):
        done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True, check=False)
        if not done.returncode:
            return {**json.loads(done.stdout.strip().splitlines()[-1]), "failed": failed}
        error = f"{name} on {label} failed:\n{done.stderr[-3000:]}"
        if failed < retries:
            print(f"{error}\n(started again)", file=sys.stderr, flush=True)
    raise RuntimeError(error)


def _ratios(old: list[float], new: list[float]) -> dict:
    ratios = [b / a for a, b in zip(old, new, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def compare(name: str, checkouts: dict[str, Path], rounds: int, inner: int, retries: int = 0) -> dict:
    runs = {"old": [], "new": []}
    for r in range(rounds):
        for label in (("old", "new") if r % 2 == 0 else ("new", "old")):
            runs[label].append(_spawn(checkouts[label], label, name, inner, retries=retries))
    row = {"workload": name, "description": " ".join(WORKLOADS[name].__doc__.split()), "runs": runs,
           "load": os.getloadavg()[0]}
    for key in ("cpu", "wall"):
        old, new = [x[key] for x in runs["old"]], [x[key] for x in runs["new"]]
        row[key] = {"old": statistics.median(old), "new": statistics.median(new), **_ratios(old, new)}
    print(f"{name:18s} cpu {row['cpu']['old']:7.3f} -> {row['cpu']['new']:7.3f}  x{row['cpu']['median']:.3f} "
          f"({row['cpu']['min']:.2f}-{row['cpu']['max']:.2f})  wall x{row['wall']['median']:.3f}  "
          f"load {row['load']:.1f}", flush=True)
    return row


def verdict(row: dict) -> str:
    cpu = row["cpu"]
    if cpu["median"] <= BOUND:
        return "within 5 %" if cpu["median"] >= 0.95 else "faster"
    if cpu["min"] <= 1.0:
        return "over 5 % at the median, rounds on both sides of 1 (noise?)"
    return "**slower by more than 5 %**"


def _commit(checkout: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True,
                          text=True, check=False).stdout.strip()


def markdown(report: dict) -> str:
    lines = [
        f"# {report.get('title', 'side by side')}",
        "",
        f"**old** = {report['old']} (the commit before the refactor); **new** = {report['new']}. "
        f"Written by `python -m benchmarks.side_by_side`; {report['rounds']} rounds, each a fresh process per "
        f"checkout (`PYTHONPATH` picks the checkout), the order alternating between rounds; inside a process "
        f"one warm-up run is discarded and {report['inner']} timed runs give the median. CPU seconds = "
        "`getrusage` of the process and its children plus, for cluster workloads (2 LocalCluster worker "
        "processes), each worker's `getrusage` over the run. Ratios are new/old per round: median (min-max).",
        "",
        f"Machine: {report['machine']}, **shared** with other engineers' test runs; load average "
        f"{report['load_min']:.1f}-{report['load_max']:.1f} during the run. CPU time is the primary figure; "
        "wall time follows the load and is shown for reference only. Verdict: the median CPU ratio against "
        "the 5 % bound. A cluster workload's CPU includes what the workers and the client spend beside the "
        "tasks (heartbeats, the event loop) over the run's wall time, so it grows with the load; its ratios "
        "scatter more than the in-memory ones.",
        "",
        "| workload | new commit | old CPU s | new CPU s | new/old CPU, median (min-max) "
        "| new/old wall, median (min-max) | load | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        c, w = row["cpu"], row["wall"]
        lines.append(f"| {row['workload']} | {row.get('new_commit', '')} | {c['old']:.3f} | {c['new']:.3f} | {c['median']:.3f} "
                     f"({c['min']:.2f}-{c['max']:.2f}) | {w['median']:.3f} ({w['min']:.2f}-{w['max']:.2f}) "
                     f"| {row['load']:.1f} | {verdict(row)} |")
    lines += [""] + [note + "\n" for note in report.get("notes", [])]
    lines += ["## Workloads", ""]
    lines += [f"* **{row['workload']}** ({row.get('when', '')}): {row['description']}" for row in report["rows"]]
    slow = [row for row in report["rows"] if row["cpu"]["median"] > BOUND]
    lines += ["", "## Over the bound", ""]
    if not slow:
        lines.append("No workload is slower by more than 5 % in CPU time (median over the rounds).")
    for row in slow:
        lines += [f"### {row['workload']}: new/old CPU {row['cpu']['median']:.3f}", ""]
        for label in ("old", "new"):
            if row.get("profile", {}).get(label):
                lines += [f"cProfile, {label} (one run after the warm-up, top functions by internal time; the "
                          "calling thread only: work on threads shows as waiting on a lock):", "", "```",
                          row["profile"][label].strip(), "```", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, default=Path("/tmp/before"))
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--only", nargs="*", help=f"workloads or groups {sorted(GROUPS)}")
    parser.add_argument("--profile", action="store_true", help="profile workloads over the bound")
    parser.add_argument("--retries", type=int, default=0, help="start a failed worker process again this often")
    parser.add_argument("--out", type=Path, default=RESULTS / "refactor")
    parser.add_argument("--merge", nargs="*", type=Path, help="combine these reports' rows into --out")
    parser.add_argument("--note", action="append", default=[], help="a paragraph for the results file")
    parser.add_argument("--title", default="every benchmark's workload on two checkouts, side by side",
                        help="the results file's heading")
    parser.add_argument("--worker")
    parser.add_argument("--label")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.label, args.inner, args.profile)))
        return
    if args.merge is not None:
        reports = [json.loads(p.read_text()) for p in [args.out.with_suffix(".json"), *args.merge]
                   if p.exists()]
        rows = {row["workload"]: row for report in reports for row in report["rows"]}
        report = {**reports[-1], "title": args.title if "--title" in (argv or sys.argv) else reports[0].get("title"),
                  "load_min": min(r["load_min"] for r in reports),
                  "load_max": max(r["load_max"] for r in reports),
                  "notes": reports[0].get("notes", []) + args.note, "rows": [rows[n] for n in WORKLOADS if n in rows]}
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
        args.out.with_suffix(".md").write_text(markdown(report))
        return
    names = [n for item in (args.only or WORKLOADS) for n in GROUPS.get(item, [item])]
    checkouts = {"old": args.old.resolve(), "new": args.new.resolve()}
    previous = json.loads(args.out.with_suffix(".json").read_text()) if args.out.with_suffix(".json").exists() else {}
    rows = {row["workload"]: row for row in previous.get("rows", [])}
    loads = []
    for name in names:
        try:
            row = compare(name, checkouts, args.rounds, args.inner, args.retries)
        except RuntimeError as error:
            print(error, file=sys.stderr, flush=True)
            continue
        row["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        row["new_commit"] = _commit(checkouts["new"])
        loads.append(row["load"])
        if args.profile and row["cpu"]["median"] > BOUND:
            row["profile"] = {label: _spawn(checkouts[label], label, name, 1, profile=True, retries=args.retries)["profile"]
                              for label in ("old", "new")}
        rows[name] = row
    report = {"title": args.title, "old": _commit(checkouts["old"]), "new": _commit(checkouts["new"]), "rounds": args.rounds,
              "inner": args.inner, "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
              "load_min": min(loads + [previous.get("load_min", 1e9)]),
              "load_max": max(loads + [previous.get("load_max", 0.0)]),
              "rows": [rows[n] for n in WORKLOADS if n in rows]}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(markdown(report))


if __name__ == "__main__":
    main()

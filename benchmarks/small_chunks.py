"""Passes over small stores written with the default ``chunk_rows`` (10⁶), chunk cut to the rows or not.

Run: ``python -m benchmarks.small_chunks [--repeats 3] [--passes 40]``.

Zarr stores and decodes whole chunks: a store of 2,000 rows written with ``chunk_rows=1_000_000``
used to hold one chunk of 10⁶ rows per variable (the rest fill values), decoded in full on every
read. :func:`dpgm.data.encoding.stored_chunk_rows` now cuts the stored chunk to the rows. Each case writes
its data twice with :func:`dpgm.write_dataset` (default ``chunk_rows``): once as now, once with the
cut switched off in this process (the layout written before), then runs the same fit on each, the
two alternating ``--repeats`` times. Reported: seconds per pass (median), their ratio, and whether
the two fits' log-likelihoods are equal. Cases in this process (``client=None``) and on a 2-worker
``LocalCluster`` of processes; sizes from 100 rows to 10⁶ (where the chunk is the rows either way:
nothing changes). Writes ``benchmarks/results/small_chunks.json`` and ``.md``.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import dpgm  # noqa: E402
from dpgm.data import io as data_io  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def _hmm_case():
    """The HMM of docs/hmm.md: 100 sequences of 20 symbols, 3 states, 4 restarts sharing each pass."""
    rng = np.random.default_rng(0)
    transition = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    emission = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.4, 0.4]])
    hidden = np.zeros((100, 20), dtype=int)
    for t in range(1, 20):
        hidden[:, t] = [rng.choice(3, p=transition[h]) for h in hidden[:, t - 1]]
    symbols = np.array([[rng.choice(4, p=emission[h]) for h in row] for row in hidden], dtype=np.int8)
    data = xr.Dataset({"obs": (("row", "time"), symbols, {"states": ["a", "b", "c", "d"]})})
    model = dpgm.hmm(3, ["a", "b", "c", "d"], variable="obs")
    return model, data, {"n_init": 4, "random_state": 0}


def _asia_case(rows: int):
    """asia with ``either`` latent, 10 % missing; plain EM from one random start."""
    network = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(network, rows, None, seed=0, missing=0.1).drop_vars("either")
    return network, data, {"init": "model", "start": network.randomized(np.random.default_rng(0))}


CASES = [
    ("HMM of docs/hmm.md, 100 x 20 steps, 4 restarts", "memory", _hmm_case),
    ("asia, `either` latent, 2e3 rows", "memory", lambda: _asia_case(2_000)),
    ("asia, `either` latent, 2e3 rows", "cluster", lambda: _asia_case(2_000)),
    ("asia, `either` latent, 1e5 rows", "cluster", lambda: _asia_case(100_000)),
    ("asia, `either` latent, 1e6 rows (chunk = rows either way)", "cluster", lambda: _asia_case(1_000_000)),
]


def _write(data: xr.Dataset, path: Path, cut: bool) -> None:
    rule = data_io.stored_chunk_rows
    if not cut:
        data_io.stored_chunk_rows = lambda chunk_rows, n_rows: int(chunk_rows)
    try:
        dpgm.write_dataset(data, path)
    finally:
        data_io.stored_chunk_rows = rule


def _fit(model, path: Path, options: dict, passes: int, client) -> tuple[float, float]:
    options = dict(options)
    model = options.pop("start", model)
    ds = dpgm.open_dataset(path)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dpgm.fit(model, ds, method="em", accelerate=None, tol=0.0, max_iter=passes, progress=False,
                          client=client, **options)
    return (time.perf_counter() - began) / result.passes, float(result.loglik)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--passes", type=int, default=40)
    arguments = parser.parse_args()
    from distributed import Client, LocalCluster

    folder = Path(tempfile.mkdtemp(prefix="dpgm-small-chunks-"))
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        for name, where, make in CASES:
            model, data, options = make()
            paths = {"cut": folder / f"{len(rows)}-cut.zarr", "uncut": folder / f"{len(rows)}-uncut.zarr"}
            for variant, path in paths.items():
                _write(data, path, variant == "cut")
            stored = {v: int(dpgm.open_dataset(p)[next(iter(data.data_vars))].encoding["chunks"][0])
                      for v, p in paths.items()}
            on = client if where == "cluster" else None
            seconds = {"cut": [], "uncut": []}
            logliks = {}
            _fit(model, paths["cut"], options, 2, on)  # compiled kernels loaded, workers warm
            for _ in range(arguments.repeats):
                for variant in ("cut", "uncut"):
                    per_pass, logliks[variant] = _fit(model, paths[variant], options, arguments.passes, on)
                    seconds[variant].append(per_pass)
            cut, uncut = statistics.median(seconds["cut"]), statistics.median(seconds["uncut"])
            rows.append({"case": name, "where": where, "rows": data.sizes["row"], "stored_chunk": stored,
                         "cut_s": cut, "uncut_s": uncut, "ratio": uncut / cut,
                         "same_loglik": logliks["cut"] == logliks["uncut"], "seconds": seconds})
            print(rows[-1], flush=True)
            for path in paths.values():
                shutil.rmtree(path)
    shutil.rmtree(folder, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "small_chunks.json").write_text(json.dumps(rows, indent=1))
    lines = ["# Passes over small stores: the chunk cut to the rows, or 10⁶ rows long", "",
             f"`python -m benchmarks.small_chunks --repeats {arguments.repeats} --passes {arguments.passes}`: "
             "each store written by `dpgm.write_dataset` with its default `chunk_rows` (10⁶), with the stored "
             "chunk cut to the rows (now) and not (before); plain EM, the same start, a fixed number of "
             "passes; the two alternating, median seconds per pass.", "",
             "| case | where | rows | stored chunk rows (cut / uncut) | s/pass cut | s/pass uncut | uncut / cut "
             "| same log-likelihood |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['where']} | {r['rows']:,} | {r['stored_chunk']['cut']:,} / "
                     f"{r['stored_chunk']['uncut']:,} | {r['cut_s']:.4f} | {r['uncut_s']:.4f} | {r['ratio']:.2f} | "
                     f"{'yes' if r['same_loglik'] else 'no'} |")
    (RESULTS / "small_chunks.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

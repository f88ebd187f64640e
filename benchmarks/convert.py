"""CSV / Parquet -> Zarr conversion: dpgm on 1 and 2 workers vs the previous streaming converter and pandas.

Run: ``python -m benchmarks.convert [--quick] [--rows 1e6]``.

Rows are forward-sampled from alarm (37 categorical columns) and written as one
CSV file and as a folder of 8 Parquet files (row groups of 62,500 rows). Timed
side by side in one run, each the median of 3:

* ``dpgm`` on a fresh LocalCluster of 1 and of 2 worker processes (one thread each);
* ``streaming``: the single-process chunk-by-chunk converter dpgm shipped before
  (loaded from git, commit ``STREAMING_COMMIT``), for the CSV;
* ``pandas``: ``read_csv`` / ``read_parquet`` + ``dpgm.from_pandas`` + ``dpgm.write_dataset``
  (everything in memory: the peer that does not scale past one machine's RAM).

Every store is checked equal (codes and labels) to the pandas one. Cost grows with
N linearly (two reads of the input: discovery and encoding) and falls with workers
while reading dominates.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import dpgm  # noqa: E402
from benchmarks.timing import timed, timed_on_cluster  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WORK = Path("/tmp/dpgm-bench/convert")
STREAMING_COMMIT = "6aa85e9"


def _streaming_converter():
    source = subprocess.run(["git", "show", f"{STREAMING_COMMIT}:dpgm/data/convert.py"], check=True,
                            capture_output=True, text=True, cwd=Path(__file__).parent.parent).stdout
    path = WORK / "streaming_convert.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("streaming_convert", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["streaming_convert"] = module
    spec.loader.exec_module(module)
    return module.convert


def _inputs(rows: int) -> tuple[Path, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    csv, folder = WORK / f"alarm-{rows}.csv", WORK / f"alarm-{rows}-parquet"
    if not csv.exists() or not folder.exists():
        frame = dpgm.to_pandas(dpgm.sample_bayesian_network(dpgm.load_network("alarm"), rows, seed=0))
        frame = frame.astype(str)
        frame.to_csv(csv, index=False)
        folder.mkdir(exist_ok=True)
        bounds = np.linspace(0, rows, 9).astype(int)
        for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            frame.iloc[start:stop].to_parquet(folder / f"part-{i}.parquet", row_group_size=62_500, index=False)
    return csv, folder


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def _pandas(source: Path, target: Path):
    frame = pd.read_csv(source, dtype=str) if source.suffix == ".csv" else pd.read_parquet(source)
    frame = frame.astype("category")
    return dpgm.write_dataset(dpgm.from_pandas(frame), _fresh(target))


def _same(a: Path, b: Path) -> bool:
    x, y = dpgm.open_dataset(a).load(), dpgm.open_dataset(b).load()
    decoded = [dpgm.to_pandas(d).astype(str) for d in (x, y)]
    return bool(decoded[0].equals(decoded[1][decoded[0].columns]))


def run(rows: int, repeats: int) -> list[dict]:
    from distributed import Client, LocalCluster

    csv, folder = _inputs(rows)
    streaming = _streaming_converter()
    out = []
    for source, name in ((csv, "csv"), (folder, "parquet")):
        reference = WORK / f"pandas-{name}.zarr"
        pandas_seconds, _ = timed(lambda source=source, reference=reference: _pandas(source, reference), repeats)
        row = {"rows": rows, "input": name, "pandas_seconds": pandas_seconds}
        if name == "csv":
            target = WORK / "streaming.zarr"
            row["streaming_seconds"], _ = timed(
                lambda target=target: streaming(csv, _fresh(target), chunk_rows=62_500), repeats)
        for workers in (1, 2):
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                              env={"MALLOC_MMAP_THRESHOLD_": "268435456"}) as cluster, Client(cluster) as client:
                target = WORK / f"dpgm-{name}-{workers}.zarr"
                seconds, _ = timed_on_cluster(client, lambda source=source, target=target, client=client: dpgm.convert(
                    source, _fresh(target), client=client), repeats)
                row[f"dpgm_{workers}w_seconds"] = seconds
                row[f"dpgm_{workers}w_equal"] = _same(target, reference)
        print(json.dumps(row))
        out.append(row)
    return out


def _markdown(rows: list[dict]) -> str:
    lines = ["# Conversion to Zarr (alarm, 37 categorical columns)", "",
             "`python -m benchmarks.convert`; medians of 3, side by side in one run on 2 shared cores.", "",
             "| rows | input | dpgm 1 worker s | dpgm 2 workers s | 2 vs 1 worker | streaming (previous) s | "
             "dpgm 2w vs streaming | pandas in memory s | equal to pandas |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        streaming = r.get("streaming_seconds")
        versus = "" if streaming is None else f"{streaming / r['dpgm_2w_seconds']:.1f}x"
        lines.append(
            f"| {r['rows']:.0e} | {r['input']} | {r['dpgm_1w_seconds']:.2f} | {r['dpgm_2w_seconds']:.2f} | "
            f"{r['dpgm_1w_seconds'] / r['dpgm_2w_seconds']:.2f}x | "
            f"{'' if streaming is None else f'{streaming:.2f}'} | "
            f"{versus} | "
            f"{r['pandas_seconds']:.2f} | {r['dpgm_1w_equal'] and r['dpgm_2w_equal']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=float, nargs="+", default=[2.5e5, 1e6])
    args = parser.parse_args()
    sizes = [50_000] if args.quick else [int(r) for r in args.rows]
    rows = [r for n in sizes for r in run(n, 1 if args.quick else 3)]
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "convert.json").write_text(json.dumps(rows, indent=1))
    (RESULTS / "convert.md").write_text(_markdown(rows))


if __name__ == "__main__":
    main()

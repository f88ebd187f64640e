"""What a process pays when Python may not cache bytecode (``PYTHONDONTWRITEBYTECODE`` set).

``make`` installs with ``pip --no-compile``: the bytecode of each module is written by its first
import. With ``PYTHONDONTWRITEBYTECODE`` set (some CI images and containers set it), nothing is
written and every process compiles what it imports from source again. Two settings, alternating,
in one run:

* ``cached``: the ``.venv`` as the Makefile's recipes leave it, bytecode written on first use;
* ``not written``: ``PYTHONDONTWRITEBYTECODE=1`` and an empty ``PYTHONPYCACHEPREFIX``, so no cached
  bytecode is found and none is written (what a fresh ``--no-compile`` install sees with the
  variable set).

Each is timed on two commands, CPU seconds of the command and every process it started
(``getrusage(RUSAGE_CHILDREN)``) and wall seconds:

* ``imports``: ``python -c "import numpy, pandas, xarray, zarr, dask.array, distributed"``;
* ``counts``: ``dpgm -q counts STORE --scope smoke,lung`` on a 2,000-row asia store, starting its
  own 2-worker ``LocalCluster`` (what a CLI test that tests the cluster's life does).

``python -m benchmarks.bytecode [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMPORTS = "import numpy, pandas, xarray, zarr, dask.array, distributed"


def _environment(setting: str, empty_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "DASK_SCHEDULER_ADDRESS")}
    if setting == "not written":
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(empty_cache))
    return env


def _measure(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": round(wall, 2), "cpu": round(cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = ("cached", "not written")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        store = scratch / "a.zarr"
        cached = _environment("cached", scratch / "unused")
        dpgm = [sys.executable, "-m", "dpgm.cli", "-q"]
        subprocess.run([*dpgm, "generate", "asia", str(store), "--rows", "2000"], env=cached, check=True,
                       capture_output=True)
        commands = {"imports": [sys.executable, "-c", IMPORTS],
                    "counts": [*dpgm, "counts", str(store), "--scope", "smoke,lung"]}
        for argv in commands.values():  # the cached setting's first use writes its bytecode
            subprocess.run(argv, env=cached, check=True, capture_output=True)
        runs: dict[str, dict[str, list[dict[str, float]]]] = {c: {s: [] for s in settings} for c in commands}
        for _ in range(args.repeats):
            for name, argv in commands.items():
                for setting in settings:
                    empty = Path(tempfile.mkdtemp(dir=scratch))
                    runs[name][setting].append(_measure(argv, _environment(setting, empty)))
    load = os.getloadavg()[0]
    (RESULTS / "bytecode.json").write_text(json.dumps({"runs": runs, "load_average": load}, indent=1) + "\n")
    lines = ["| command | setting | CPU s | wall s | CPU ratio (median) |", "|---|---|---|---|---:|"]
    for name, by_setting in runs.items():
        medians = {s: sorted(r["cpu"] for r in by_setting[s])[len(by_setting[s]) // 2] for s in settings}
        for setting in settings:
            cpu = ", ".join(str(r["cpu"]) for r in by_setting[setting])
            wall = ", ".join(str(r["wall"]) for r in by_setting[setting])
            ratio = f"{medians[setting] / medians['cached']:.1f}x"
            lines.append(f"| `{name}` | {setting} | {cpu} | {wall} | {ratio} |")
    print("\n".join(lines))
    print(f"load average at the end: {load:.1f}")


if __name__ == "__main__":
    main()

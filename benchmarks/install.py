"""Installing dpgm on a fresh machine, and how fast the ``dpgm`` command answers.

Every install runs in a fresh ``python -m venv`` (with the pip that venv comes with) and an
empty pip cache, so every wheel is downloaded again, side by side in one run:

* ``locked runtime``: ``make demo``'s install, ``requirements/runtime.txt`` with ``--no-deps``
  (and ``--no-compile``) then ``-e .``;
* ``locked test``: ``make test``'s addition on top of it, ``requirements/test.txt``;
* the same two with byte-compilation (pip's default), to show what ``--no-compile`` saves;
* ``unlocked`` (``--unlocked``): the former Makefile, ``pip install --upgrade pip`` then
  ``pip install -e '.[test]'`` resolving the ranges of ``pyproject.toml`` (with the venv's own
  pip 23.2 it backtracks for many minutes: see ECOSYSTEM.md), stopped after ``--limit`` seconds.

Then the start-up of ``dpgm --help`` and of ``import dpgm`` (median of 10 runs each, in the
project's ``.venv``) against the bare interpreter.

``python -m benchmarks.install [--unlocked] [--limit 900]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _run(argv: list[str], env: dict[str, str], limit: float) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        subprocess.run(argv, env=env, cwd=ROOT, check=True, timeout=limit,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start, True
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, False


def _fresh(workdir: Path, name: str) -> tuple[str, dict[str, str]]:
    venv = workdir / name
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cache = workdir / f"{name}-cache"
    env = {**os.environ, "PIP_CACHE_DIR": str(cache)}
    env.pop("PIP_NO_CACHE_DIR", None)
    return str(venv / "bin" / "python"), env


def _pip_version(python: str) -> str:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]


def locked(workdir: Path, compile_: bool, limit: float) -> dict:
    python, env = _fresh(workdir, f"locked-{'compile' if compile_ else 'nocompile'}")
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", *([] if compile_ else ["--no-compile"])]
    record = {"pip": _pip_version(python)}
    runtime, ok = _run([*pip, "-r", "requirements/runtime.txt"], env, limit)
    editable, ok2 = _run([*pip, "-e", "."], env, limit)
    record["runtime_seconds"], record["runtime_finished"] = runtime + editable, ok and ok2
    record["test_seconds"], record["test_finished"] = _run([*pip, "-r", "requirements/test.txt"], env, limit)
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    record["pip_check"] = check.stdout.strip()
    return record


def unlocked(workdir: Path, limit: float) -> dict:
    python, env = _fresh(workdir, "unlocked")
    record = {"pip": _pip_version(python)}
    seconds, ok = _run([python, "-m", "pip", "install", "--quiet", "-e", ".[test]"], env, limit)
    record["venv_pip_seconds"], record["venv_pip_finished"] = seconds, ok
    python, env = _fresh(workdir, "unlocked-new-pip")
    upgrade, _ = _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], env, limit)
    seconds, ok = _run([python, "-m", "pip", "install", "--quiet", "-e", ".[test]"], env, limit)
    record["new_pip_seconds"], record["new_pip_finished"] = upgrade + seconds, ok
    return record


def startup(repeats: int = 10) -> dict:
    dpgm = str(ROOT / ".venv" / "bin" / "dpgm")
    cases = {
        "python -c pass": [str(VENV_PYTHON), "-c", "pass"],
        "dpgm --help": [dpgm, "--help"],
        "dpgm fit --help": [dpgm, "fit", "--help"],
        "import dpgm": [str(VENV_PYTHON), "-c", "import dpgm"],
        "import dpgm; dpgm.fit (everything)": [str(VENV_PYTHON), "-c", "import dpgm; dpgm.fit"],
    }
    record = {}
    for name, argv in cases.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        record[name] = statistics.median(times)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unlocked", action="store_true", help="also time the unlocked install")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds before an install is stopped")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dpgm-install-"))
    load_before = os.getloadavg()
    try:
        results = {"load_average_before": load_before,
                   "locked_no_compile": locked(workdir, False, args.limit),
                   "locked_compile": locked(workdir, True, args.limit)}
        if args.unlocked:
            results["unlocked"] = unlocked(workdir, args.limit)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_average_after"] = os.getloadavg()
    results["startup_seconds"] = startup()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "install.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

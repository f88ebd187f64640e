"""What a checkpointed EM iteration costs on an object store: requests and seconds, two checkouts side by side.

Run: ``python -m benchmarks.checkpoints --old /tmp/before --new . [--rounds 3]``.

An S3-compatible server (moto) runs on loopback in this process. For each case (a network, its latent
variables, the rows) and round, one fresh process per checkout (``PYTHONPATH`` pointing at it, the order
alternating between rounds) fits EM in memory, the data sampled with a fixed seed, four times: 2 and 6
iterations, each without and with ``checkpoint=`` an ``s3://`` mapper. The requests are those s3fs makes
(it logs each as ``CALL: <operation>`` at DEBUG); per iteration = (6-iteration run - 2-iteration run) / 4,
which leaves out the run's first write (fingerprint, folder) and its reads. Seconds per iteration the same
way, with and without the checkpoint: the difference is what the checkpoint adds to an iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
CASES = {
    "asia-1-latent-2e3": ("asia", ["either"], 2_000),
    "alarm-2-latent-1e4": ("alarm", ["LVFAILURE", "HYPOVOLEMIA"], 10_000),
    "child-1-latent-5e3": ("child", ["Disease"], 5_000),
}

WORKLOAD = r"""
import json, logging, sys, time, uuid, warnings
import fsspec
import dpgm

network, latent, rows, options = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
truth = dpgm.load_network(network)
ds = dpgm.sample_bayesian_network(truth, rows, None, seed=7, missing=0.1).drop_vars(latent)
structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
calls = []

class Calls(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("CALL: "):
            calls.append(record.getMessage().split()[1])

with warnings.catch_warnings():  # warm-up (imports, compilation): not measured
    warnings.simplefilter("ignore")
    dpgm.fit(structure, ds, method="em", max_iter=2, tol=0, random_state=0)
logger = logging.getLogger("s3fs")
logger.addHandler(Calls())
logger.setLevel(logging.DEBUG)
out = {}
for checkpoint in (False, True):
    for iterations in (2, 6):
        mapper = fsspec.get_mapper(f"s3://bench/{uuid.uuid4().hex}", **options) if checkpoint else None
        calls.clear()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dpgm.fit(structure, ds, method="em", max_iter=iterations, tol=0, random_state=0,
                     **({"checkpoint": mapper} if checkpoint else {}))
        out[f"{'with' if checkpoint else 'without'}-{iterations}"] = {"seconds": time.perf_counter() - start,
                                                                       "requests": len(calls)}
        if checkpoint:
            fs = mapper.fs
            out[f"objects-{iterations}"] = len(fs.find(mapper.root))
print(json.dumps(out | {"dpgm": dpgm.__file__}))
"""


def _run(checkout: str, case: tuple, options: dict) -> dict:
    network, latent, rows = case
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", WORKLOAD, network, json.dumps(latent), str(rows),
                             json.dumps(options)], capture_output=True, text=True, env=env, timeout=3600,
                            cwd=tempfile.gettempdir())  # not this checkout's folder: `python -c` imports from the cwd
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _per_iteration(out: dict) -> dict:
    requests = (out["with-6"]["requests"] - out["with-2"]["requests"]) / 4
    with_s = (out["with-6"]["seconds"] - out["with-2"]["seconds"]) / 4
    without_s = (out["without-6"]["seconds"] - out["without-2"]["seconds"]) / 4
    return {"requests": requests, "iteration_s": without_s, "checkpoint_s": with_s - without_s,
            "objects": out["objects-6"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(CASES))
    parser.add_argument("--out", default=str(RESULTS / "checkpoints.md"))
    args = parser.parse_args()
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                 aws_secret_access_key="s").create_bucket(Bucket="bench")
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    commits = {side: subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip() for side, path in (("old", args.old), ("new", args.new))}
    rows = []
    try:
        for name in args.only or list(CASES):
            measured = {"old": [], "new": []}
            for round_ in range(args.rounds):
                order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
                for side in order:
                    measured[side].append(_per_iteration(_run(getattr(args, side), CASES[name], options)))
            rows.append((name, measured))
            print(name, {s: [round(m["requests"], 1) for m in v] for s, v in measured.items()}, flush=True)
    finally:
        server.stop()
    load = os.getloadavg()[0]
    lines = [
        "# Checkpoints on an object store: requests and seconds per EM iteration, before and after",
        "",
        f"**old** = {commits['old']}, **new** = {commits['new']}. Written by `python -m benchmarks.checkpoints` "
        f"on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.rounds} rounds, one fresh process per "
        "checkout and round, alternating. An S3-compatible server (moto) on loopback; EM in memory (no cluster), "
        "so the seconds are the driver's. Requests: the calls s3fs logs; per iteration = (6 iterations - 2) / 4. "
        "Checkpoint seconds per iteration = the same difference with the checkpoint minus without it.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at the end (shared).",
        "",
        "| case | objects (old, new) | requests / iteration (old, new) | checkpoint s / iteration, median "
        "(old, new) | EM s / iteration without checkpoint (old, new) | new/old checkpoint seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name, measured in rows:
        med = {s: {k: statistics.median(m[k] for m in v) for k in v[0]} for s, v in measured.items()}
        ratio = med["new"]["checkpoint_s"] / med["old"]["checkpoint_s"] if med["old"]["checkpoint_s"] > 0 else float("nan")
        lines.append(f"| {name} | {med['old']['objects']:.0f}, {med['new']['objects']:.0f} | "
                     f"{med['old']['requests']:.1f}, {med['new']['requests']:.1f} | "
                     f"{med['old']['checkpoint_s']:.3f}, {med['new']['checkpoint_s']:.3f} | "
                     f"{med['old']['iteration_s']:.3f}, {med['new']['iteration_s']:.3f} | {ratio:.3f} |")
    lines += ["", "Cases: " + "; ".join(f"**{n}**: {c[0]}, latent {c[1]}, {c[2]:,} rows, 10 % missing"
                                       for n, c in CASES.items() if n in dict(rows)) + ".", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

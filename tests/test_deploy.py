"""deploy/: the launchers use the current dask commands, and the local one really runs a fit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import dpgm

DEPLOY = Path(__file__).parent.parent / "deploy"


def test_launchers_use_current_dask_commands():
    scripts = [p for p in DEPLOY.rglob("*") if p.suffix in {".sh", ".sbatch", ".yaml", ".yml"}]
    assert scripts
    for path in scripts:
        text = path.read_text()
        assert not re.search(r"dask-(scheduler|worker)\b", text), path
        assert re.search(r"\bdask (scheduler|worker)\b", text) or "dask" not in text, path


def test_local_cluster_scripts_run_a_real_fit(tmp_path):
    env = {**os.environ, "DPGM_CLUSTER_DIR": str(tmp_path / "cluster"), "DPGM_SCHEDULER_PORT": "0",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run([DEPLOY / "local" / "start-cluster.sh", "2"], env=env, check=True, timeout=120,
                   capture_output=True)
    try:
        truth = dpgm.load_network("asia")
        ds = dpgm.sample_bayesian_network(truth, 4000, tmp_path / "a.zarr", seed=3, chunk_rows=1000)
        spec = tmp_path / "spec.yaml"
        spec.write_text("model: bayesian_network\nnetwork: asia\n")
        from distributed import Client

        scheduler_file = tmp_path / "cluster" / "scheduler.json"
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        subprocess.run([sys.executable, "-m", "dpgm.cli", "fit", spec, tmp_path / "a.zarr", "--out",
                        tmp_path / "m.zarr", "--scheduler-file", scheduler_file], env=env, check=True,
                       timeout=180, capture_output=True)
        fitted = dpgm.load(tmp_path / "m.zarr")
        expected = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds).model
        for v in truth.variables:
            np.testing.assert_array_equal(fitted.cpds[v].values, expected.cpds[v].values)
    finally:
        subprocess.run([DEPLOY / "local" / "stop-cluster.sh"], env=env, timeout=60)

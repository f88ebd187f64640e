"""Fits that checkpoint into an object store (an S3-compatible server, moto, on loopback): few objects per
iteration, the same refusals and exit codes as a local folder, data paths beside ``--storage-options``.

Oracles: the bucket's listing through boto3 (not dpgm's reader), the requests s3fs logs, the exit codes of
``docs/exit-codes.md``, and an uninterrupted fit (bit for bit).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings

import fsspec
import numpy as np
import pytest
from cli_runs import DPGM, cli_environment, error_line, run_dpgm, s3_server

import dpgm
from dpgm.io.checkpoint import latest_iteration, read_checkpoint

pytestmark = pytest.mark.usefixtures("shared_cluster")


@pytest.fixture(scope="module")
def s3():
    with s3_server("dpgm-ck") as options:
        yield options


def _problem(rows: int = 2000):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, rows, None, seed=3, missing=0.2).drop_vars("either")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    return truth, ds, structure, {"method": "em", "random_state": 4, "n_init": 2, "tol": 0}


def _objects(s3: dict, prefix: str) -> list[str]:
    """Every object under ``prefix``, listed by boto3 itself."""
    import boto3

    kwargs = s3["client_kwargs"]
    client = boto3.client("s3", endpoint_url=kwargs["endpoint_url"], region_name=kwargs["region_name"],
                          aws_access_key_id=s3["key"], aws_secret_access_key=s3["secret"])
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="dpgm-ck", Prefix=prefix + "/")
    return sorted(item["Key"].removeprefix(prefix + "/") for page in pages for item in page.get("Contents", []))


class _Calls(logging.Handler):
    """The S3 requests s3fs makes (it logs each as ``CALL: <operation> ...`` at DEBUG)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.calls: list[str] = []

    def emit(self, record):
        text = record.getMessage()
        if text.startswith("CALL: "):
            self.calls.append(text.split()[1])


def test_an_iteration_is_two_objects_and_a_pointer(s3):
    """The checkpoint of an iteration is ``arrays.npz`` and ``state.json`` plus ``LATEST`` (and the run's
    ``FINGERPRINT.json``), whatever the model; its restarts' models read back equal the fit's."""
    prefix = f"runs/{uuid.uuid4().hex}"
    mapper = fsspec.get_mapper(f"s3://dpgm-ck/{prefix}", **s3)
    truth, ds, structure, options = _problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        fitted = dpgm.fit(structure, ds, max_iter=3, checkpoint=mapper, **{**options, "n_init": 1})
    assert _objects(s3, prefix) == ["FINGERPRINT.json", "LATEST", "iteration-000003/arrays.npz",
                                    "iteration-000003/state.json"]
    iteration, models, _ = read_checkpoint(mapper)
    assert iteration == 3 and len(models) == 1
    for v in truth.variables:
        np.testing.assert_array_equal(models[0].cpds[v].values, fitted.model.cpds[v].values)


def test_an_iteration_costs_a_bounded_number_of_requests(s3):
    """Requests per checkpointed iteration do not grow with the model: at most 16 (they were about 620)."""
    logger = logging.getLogger("s3fs")
    handler, level = _Calls(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        counts = {}
        for iterations in (2, 4):
            mapper = fsspec.get_mapper(f"s3://dpgm-ck/runs/{uuid.uuid4().hex}", **s3)
            truth, ds, structure, options = _problem()
            handler.calls.clear()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
                dpgm.fit(structure, ds, max_iter=iterations, checkpoint=mapper, **options)
            counts[iterations] = len(handler.calls)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    per_iteration = (counts[4] - counts[2]) / 2
    assert 0 < per_iteration <= 16, (counts, handler.calls[-40:])


def _spec(tmp_path, truth, **changes):
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"model": "bayesian_network", "edges": [list(e) for e in truth.edges],
                                "latent": {"either": ["yes", "no"]}, "random_state": 4, "tol": 0,
                                "max_iter": 3} | changes))
    return spec


def test_a_rerun_without_resume_never_writes_into_an_object_store_checkpoint(s3, tmp_path):
    """Exit 73 before any work, the checkpoint untouched; ``--overwrite`` starts afresh; --resume continues."""
    truth, ds, _, _ = _problem()
    data = tmp_path / "data.zarr"
    dpgm.write_dataset(ds, data, chunk_rows=500)
    spec = _spec(tmp_path, truth)
    prefix = f"runs/{uuid.uuid4().hex}"
    checkpoint, options = f"s3://dpgm-ck/{prefix}", ["--storage-options", json.dumps(s3)]
    first = run_dpgm("fit", spec, data, "--out", tmp_path / "m1.zarr", "--checkpoint", checkpoint, *options)
    assert first.returncode == 3, first.stderr
    fs = fsspec.filesystem("s3", **s3)
    before = {key: fs.cat_file(f"dpgm-ck/{prefix}/{key}") for key in _objects(s3, prefix)}
    again = run_dpgm("fit", spec, data, "--out", tmp_path / "m2.zarr", "--checkpoint", checkpoint, *options)
    line = error_line(again, 73)
    assert checkpoint in line and "--resume" in line
    assert {key: fs.cat_file(f"dpgm-ck/{prefix}/{key}") for key in _objects(s3, prefix)} == before
    assert not (tmp_path / "m2.zarr").exists()
    fresh = run_dpgm("fit", _spec(tmp_path, truth, max_iter=2), data, "--out", tmp_path / "m3.zarr",
                     "--checkpoint", checkpoint, "--overwrite", *options)
    assert fresh.returncode == 3, fresh.stderr
    assert latest_iteration(fsspec.get_mapper(checkpoint, **s3)) == 2


def test_sigterm_of_a_fit_checkpointing_into_an_object_store_exits_75(s3, tmp_path):
    """A batch system's time limit: exit 75 naming the last complete iteration; --resume then continues."""
    truth, ds, _, _ = _problem(4000)
    data = tmp_path / "data.zarr"
    dpgm.write_dataset(ds, data, chunk_rows=500)
    spec = _spec(tmp_path, truth, max_iter=100_000)
    checkpoint = f"s3://dpgm-ck/runs/{uuid.uuid4().hex}"
    mapper = fsspec.get_mapper(checkpoint, **s3)
    job = subprocess.Popen([*DPGM, "fit", str(spec), str(data), "--out", str(tmp_path / "m.zarr"), "--checkpoint",
                            checkpoint, "--storage-options", json.dumps(s3)], env=cli_environment(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while (latest_iteration(mapper) or 0) < 2 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        assert job.poll() is None and (latest_iteration(mapper) or 0) >= 2
        job.send_signal(signal.SIGTERM)
        _, stderr = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    done = latest_iteration(mapper)
    result = subprocess.CompletedProcess(job.args, job.returncode, "", stderr)
    line = error_line(result, 75)
    assert f"iteration {done}" in line and "--resume" in line and checkpoint in line
    assert not (tmp_path / "m.zarr").exists()


def test_storage_options_leave_local_paths_alone(s3, tmp_path):
    """``--storage-options`` are for URLs: a local dataset path beside them is read as a path."""
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 1000, None, seed=1)
    dpgm.write_dataset(ds, tmp_path / "local.zarr", chunk_rows=250)
    counted = run_dpgm("counts", tmp_path / "local.zarr", "--scope", "smoke,lung", "--json",
                       "--storage-options", json.dumps(s3))
    assert counted.returncode == 0, counted.stderr
    table = json.loads(counted.stdout)["tables"]["smoke,lung"]
    smoke, lung = ds["smoke"].values, ds["lung"].values  # codes: a NumPy cross-tabulation is the oracle
    expected = [[int(np.sum((smoke == i) & (lung == j))) for j in range(2)] for i in range(2)]
    assert table["dims"] == ["smoke", "lung"] and table["counts"] == expected


def test_an_unreachable_object_store_is_one_line_and_exit_69(tmp_path):
    """Nothing listens at the endpoint: exit 69 (a service unavailable, retry helps), one line naming the
    URL, no traceback, and quickly."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}",
                                                             "region_name": "us-east-1"},
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}
    url = "s3://nowhere/data.zarr"
    result = run_dpgm("counts", url, "--scope", "smoke,lung", "--storage-options", json.dumps(options),
                      timeout=120)
    line = error_line(result, 69)
    assert url in line


def test_sbatch_has_checkpoint_reads_an_object_store_with_the_jobs_storage_options(s3, tmp_path):
    """The sbatch script decides to resume from a requeue by ``has_checkpoint``: with an ``s3://`` checkpoint
    it must use the job's ``--storage-options`` (the endpoint, the keys) and find the iteration."""
    import re
    from pathlib import Path

    script = Path(__file__).parents[2] / "deploy" / "slurm" / "dpgm-fit.sbatch"
    function = re.search(r"^has_checkpoint\(\) \{.*?^\}", script.read_text(), flags=re.M | re.S).group(0)
    truth, ds, structure, options = _problem()
    written = f"s3://dpgm-ck/runs/{uuid.uuid4().hex}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        dpgm.fit(structure, ds, max_iter=2, checkpoint=fsspec.get_mapper(written, **s3), **options)
    environment = cli_environment() | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    codes = {}
    for name, url in {"written": written, "empty": f"s3://dpgm-ck/runs/{uuid.uuid4().hex}"}.items():
        codes[name] = subprocess.run(
            ["bash", "-c", f'{function}\nhas_checkpoint "$@"', "-", url, "--workers", "2",
             "--storage-options", json.dumps(s3)], env=environment, timeout=120).returncode
    assert codes == {"written": 0, "empty": 1}

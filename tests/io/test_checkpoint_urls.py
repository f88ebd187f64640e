"""Checkpoints anywhere fsspec reaches: memory://, an S3-compatible server (moto), a mapper with options."""

from __future__ import annotations

import uuid
import warnings

import fsspec
import numpy as np
import pytest
from cli_runs import run_dpgm, s3_server

import dpgm


def _problem():
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 2000, None, seed=3, missing=0.2).drop_vars("either")
    structure = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    return truth, ds, structure, {"method": "em", "random_state": 4, "n_init": 2, "tol": 0}


def _resumed_equals_uninterrupted(checkpoint, resume) -> None:
    truth, ds, structure, options = _problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        full = dpgm.fit(structure, ds, max_iter=7, **options)
        dpgm.fit(structure, ds, max_iter=3, checkpoint=checkpoint, **options)
        resumed = dpgm.fit(structure, ds, max_iter=7, resume=resume, **options)
    assert [h["loglik"] for h in resumed.history] == [h["loglik"] for h in full.history]
    for v in truth.variables:
        np.testing.assert_array_equal(resumed.model.cpds[v].values, full.model.cpds[v].values)


def test_memory_url_checkpoint_resumes_bit_identically():
    url = f"memory://dpgm-{uuid.uuid4().hex}/run"
    _resumed_equals_uninterrupted(url, url)
    files = fsspec.filesystem("memory").ls(url.removeprefix("memory://"), detail=False)
    assert sorted(f.rsplit("/", 1)[-1] for f in files) == ["FINGERPRINT.json", "LATEST", "iteration-000003"]


def test_a_checkpoint_url_never_becomes_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"memory://dpgm-{uuid.uuid4().hex}/run"
    _resumed_equals_uninterrupted(url, url)
    assert list(tmp_path.iterdir()) == []  # no folder named "memory:" (or "s3:") appeared

@pytest.fixture(scope="module")
def s3():
    """An S3-compatible server (moto) on loopback, with a bucket."""
    with s3_server("dpgm-runs") as options:
        yield options


def test_s3_checkpoint_through_a_mapper_with_storage_options(s3):
    mapper = fsspec.get_mapper("s3://dpgm-runs/asia-em", **s3)
    _resumed_equals_uninterrupted(mapper, mapper)
    fs = fsspec.filesystem("s3", **s3)
    assert fs.cat_file("dpgm-runs/asia-em/LATEST").decode().splitlines()[0] == "iteration-000003"


def test_a_mismatched_s3_checkpoint_is_refused(s3):
    mapper = fsspec.get_mapper(f"s3://dpgm-runs/{uuid.uuid4().hex}", **s3)
    truth, ds, structure, options = _problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        dpgm.fit(structure, ds, max_iter=2, checkpoint=mapper, **options)
        other = dpgm.sample_bayesian_network(truth, 1500, None, seed=9).drop_vars("either")
        with pytest.raises(ValueError, match="written for other data"):
            dpgm.fit(structure, other, max_iter=4, resume=mapper, **options)


def test_data_on_s3_counted_on_the_cluster_equal_memory(s3, client):
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 5000, None, seed=5)
    url = f"s3://dpgm-runs/{uuid.uuid4().hex}.zarr"
    dpgm.write_dataset(ds, url, chunk_rows=1000, storage_options=s3)
    remote = dpgm.open_dataset(url, storage_options=s3)
    scopes = [("smoke", "lung"), ("either", "xray", "dysp")]
    on_cluster, in_memory = dpgm.counts(remote, scopes, client=client), dpgm.counts(ds, scopes)
    for scope in scopes:
        np.testing.assert_array_equal(on_cluster[scope].values, in_memory[scope].values)


@pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)
def test_cli_reads_data_and_checkpoints_on_s3_with_storage_options(s3, tmp_path):
    """`dpgm counts` and `dpgm fit --checkpoint s3://... --storage-options JSON`, then --resume."""
    import json
    from pathlib import Path

    truth, ds, structure, _ = _problem()
    data = f"s3://dpgm-runs/{uuid.uuid4().hex}.zarr"
    dpgm.write_dataset(ds, data, chunk_rows=500, storage_options=s3)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"model": "bayesian_network", "edges": [list(e) for e in truth.edges],
                                "latent": {"either": ["yes", "no"]}, "random_state": 4, "tol": 0,
                                "max_iter": 3}))
    options = ["--storage-options", json.dumps(s3)]
    checkpoint = f"s3://dpgm-runs/{uuid.uuid4().hex}"

    def run(*args):
        return run_dpgm(*args, timeout=300)

    counted = run("counts", data, "--scope", "smoke,lung", "--json", *options)
    assert counted.returncode == 0, counted.stderr
    first = run("fit", spec, data, "--out", tmp_path / "m1.zarr", "--checkpoint", checkpoint, *options)
    assert first.returncode == 3, first.stderr  # tol 0: stopped at max_iter, checkpoint written
    fs = fsspec.filesystem("s3", **s3)
    assert fs.cat_file(f"{checkpoint.removeprefix('s3://')}/LATEST").decode().splitlines()[0] == "iteration-000003"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "max_iter": 5}))
    second = run("fit", spec, data, "--out", tmp_path / "m2.zarr", "--checkpoint", checkpoint, "--resume", *options)
    assert second.returncode == 3, second.stderr
    assert fs.cat_file(f"{checkpoint.removeprefix('s3://')}/LATEST").decode().splitlines()[0] == "iteration-000005"
    assert not Path("s3:").exists()
    bad = run("fit", spec, data, "--out", tmp_path / "m3.zarr", "--storage-options", "[1, 2]")
    assert bad.returncode == 2 and "--storage-options" in bad.stderr

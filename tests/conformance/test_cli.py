"""Every kind through a real ``dpgm fit`` subprocess: its specification gives the model the API gives.

The CLI builds the model from the case's specification (:mod:`dpgm.spec`), fits it on
the session's 2-worker LocalCluster (``--scheduler``; the ten subprocesses run at
once) and saves it; the API fits the case's model, built by hand, on the same store
in this process. Parameters agree to ``rtol=1e-6, atol=1e-9`` (the
same statistics summed by other workers in another order; see ``test_paths``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import yaml

import dpgm

from .builders import CASE_IDS, assert_same_parameters, case_named

RTOL, ATOL = 1e-6, 1e-9
EX_CONFIG = 78


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}


def _dpgm(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpgm.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(), timeout=300)


@pytest.fixture(scope="module")
def cli_fits(tmp_path_factory, client):
    """Every case's ``dpgm fit`` subprocess, started at once on the session's 2-worker cluster
    (``--scheduler``): case -> (folder, process)."""
    started = {}
    for spec_name in CASE_IDS:
        case, folder = case_named(spec_name), tmp_path_factory.mktemp(spec_name)
        dpgm.write_dataset(case.data(), folder / "data.zarr", chunk_rows=case.chunk_rows)
        (folder / "spec.yaml").write_text(yaml.safe_dump(case.spec))
        command = [sys.executable, "-m", "dpgm.cli", "-v", "fit", "spec.yaml", "data.zarr", "--out", "model.zarr",
                   "--scheduler", client.scheduler.address]
        started[spec_name] = folder, subprocess.Popen(command, cwd=folder, env=_env(), stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True)
    yield started
    for _, process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_specification_fitted_by_the_cli_equals_the_api_fit(spec_name, cli_fits):
    case = case_named(spec_name)
    folder, process = cli_fits[spec_name]
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        api = dpgm.fit(case.model(), dpgm.open_dataset(folder / "data.zarr"), **case.options)
    assert_same_parameters(api.model, dpgm.load(folder / "model.zarr"), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_a_specification_whose_model_is_a_list_exits_78_naming_the_key(tmp_path):
    """``model: [glm]`` once ended in ``TypeError: unhashable type: 'list'`` (exit 70, an internal error)."""
    case = case_named("glm")
    dpgm.write_dataset(case.data(), tmp_path / "data.zarr")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**case.spec, "model": ["glm"]}))
    done = _dpgm("fit", str(tmp_path / "spec.yaml"), str(tmp_path / "data.zarr"), "--out",
                 str(tmp_path / "model.zarr"), cwd=tmp_path)
    assert done.returncode == EX_CONFIG, done.stderr[-3000:]
    assert "'model' must be the name of a model kind" in done.stderr
    assert not (tmp_path / "model.zarr").exists()


@pytest.mark.slow
def test_an_em_option_the_method_does_not_take_exits_78_naming_it(tmp_path):
    """``incremental`` on a hybrid network's EM: exit 78 naming it, before any pass (``accelerate`` and
    ``prune_restarts`` run: ``test_registry``)."""
    case = case_named("hybrid_network")
    dpgm.write_dataset(case.data(), tmp_path / "data.zarr")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**case.spec, "incremental": True}))
    done = _dpgm("fit", str(tmp_path / "spec.yaml"), str(tmp_path / "data.zarr"), "--out",
                 str(tmp_path / "model.zarr"), cwd=tmp_path)
    assert done.returncode == EX_CONFIG, done.stderr[-3000:]
    assert "incremental" in done.stderr

"""Every kind scores rows: the registry declares ``score``, and the scores from a chunked Zarr store on the
session's two worker processes equal the scores in memory; ``write=True`` adds them to the store.

dpgm is compared with itself along two paths (the per-kind oracle tests in ``tests/api/test_score_*.py`` say
the common answer is right). Each row's score is computed by the same block on the same values whichever path
reads them, so the per-row values agree to ``rtol=1e-12``; the totals add the rows in another order
(``rel=1e-12``).
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import dpgm
from dpgm.api.kinds import kind_of, kinds

from .builders import CASE_IDS, CASES, case_named


def _fitted(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(case.model(), case.data(), **case.options).model


def test_every_kind_declares_a_score():
    assert all(kind.score is not None and "score" in kind.passes for kind in kinds())
    assert {kind_of(case.model()).name for case in CASES} == {kind.name for kind in kinds()}


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_score_from_zarr_on_two_worker_processes_equals_score_in_memory_and_writes(spec_name, tmp_path, client):
    case = case_named(spec_name)
    model, data = _fitted(case), case.data()
    memory = dpgm.score(model, data).compute()
    path = tmp_path / "data.zarr"
    dpgm.write_dataset(data, path, chunk_rows=case.chunk_rows)
    stored = dpgm.open_dataset(path)
    assert len(stored.chunks["row"]) >= 2
    cluster = dpgm.score(model, stored, client=client, write=True, name="loglik", progress=False)
    assert np.isfinite(memory.values).all() and memory.sizes["row"] == data.sizes["row"]
    np.testing.assert_allclose(cluster.values, memory.values, rtol=1e-12)
    for coordinate in ("total", "mean_per_row", "rows"):
        assert float(cluster[coordinate]) == pytest.approx(float(memory[coordinate]), rel=1e-12)
    assert float(memory.total) == pytest.approx(float(memory.values.sum()), rel=1e-12)
    written = dpgm.open_dataset(path)
    np.testing.assert_array_equal(written["loglik"].values, cluster.values)
    assert dpgm.verify(path).ok


@pytest.mark.slow
def test_cli_score_prints_and_reports_the_total_and_writes_the_variable(tmp_path):
    import json

    case = case_named("bayesian_network")
    model, data = _fitted(case), case.data()
    model.save(str(tmp_path / "model.zarr"))
    dpgm.write_dataset(data, tmp_path / "data.zarr", chunk_rows=case.chunk_rows)
    run = subprocess.run([sys.executable, "-m", "dpgm.cli", "score", str(tmp_path / "model.zarr"),
                          str(tmp_path / "data.zarr"), "--write", "ll", "--report", str(tmp_path / "report.json"),
                          "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    expected = dpgm.score(model, data)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["total"] == pytest.approx(float(expected.total), rel=1e-12)
    assert report["rows"] == data.sizes["row"] and report["written"] == "ll"
    assert f"total {float(expected.total):.6f}" in run.stdout
    np.testing.assert_allclose(dpgm.open_dataset(tmp_path / "data.zarr")["ll"].values, expected.values,
                               rtol=1e-12)
    missing = subprocess.run([sys.executable, "-m", "dpgm.cli", "score", str(tmp_path / "model.zarr"),
                              str(tmp_path / "absent.zarr")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 66 and "absent.zarr" in missing.stderr


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_variable_absent_or_of_the_wrong_kind_is_a_data_error_naming_it(spec_name):
    case = case_named(spec_name)
    model, data = _fitted(case), case.data()
    bad = data.assign({case.variable: data[case.variable].astype(str)})
    with pytest.raises(dpgm.DataError, match=case.variable):
        dpgm.score(model, bad).compute()
    if not case.absent_is_latent and kind_of(model).name not in ("BayesianNetwork", "MarkovNetwork",
                                                                    "LogLinearModel"):
        with pytest.raises(dpgm.DataError, match=case.variable):
            dpgm.score(model, data.rename({case.variable: f"{case.variable}_renamed"}))

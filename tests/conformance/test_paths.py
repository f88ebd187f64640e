"""Every kind along different paths to the same model: memory vs a Zarr store on two worker processes,
save vs load, checkpointed and resumed vs uninterrupted; and bad input refused naming the variable.

dpgm is compared with itself along two paths; the per-kind oracle tests (brute force,
statsmodels, scikit-learn, hmmlearn, SciPy) say the common answer is right.

Tolerances: a store read in chunks by two workers sums the same statistics in
another order, so parameters agree to ``rtol=1e-6, atol=1e-9`` (EM fits stop at a
relative log-likelihood change of 1e-8 or below, where rounding differences of
~1e-15 per statistic have moved the parameters far less). Save/load and resume are
bit for bit (``np.array_equal``).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

import dpgm
from dpgm.api.kinds import kind_of
from dpgm.errors import DataError
from dpgm.models.description import describe
from dpgm.models.store import _kinds

from .builders import CASE_IDS, CASES, assert_same_parameters, case_named

RTOL, ATOL = 1e-6, 1e-9
EM_CASES = [c.spec_name for c in CASES if c.method in kind_of(c.model()).em_methods]


def _quiet_fit(model, data, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(model, data, **options)


def _store(case, tmp_path):
    path = tmp_path / f"{case.spec_name}.zarr"
    dpgm.write_dataset(case.data(), path, chunk_rows=case.chunk_rows)
    return dpgm.open_dataset(path)


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_zarr_on_two_worker_processes_equals_memory_and_the_dashboard_follows_iterative_methods(
        spec_name, tmp_path, client):
    """The same fit from an in-memory dataset and from a chunked Zarr store on a 2-process LocalCluster; the fit
    on the cluster logs ``dpgm.fit`` events for the dashboard exactly when its method iterates (the default
    method where the case's is the default: GaussianGraphicalModel's and GLMConditional's once logged nothing)."""
    case = case_named(spec_name)
    kind = kind_of(case.model())
    memory = _quiet_fit(case.model(), case.data(), **case.options)
    stored = _store(case, tmp_path)
    assert len(stored.chunks["row"]) >= 2
    options = dict(case.options)
    if options.get("method") == kind.default_method:
        options.pop("method")
    before = time.time()  # the scheduler keeps the newest 1,000 events of a topic: a count would go stale
    cluster = _quiet_fit(case.model(), stored, client=client, **options)
    assert_same_parameters(memory.model, cluster.model, rtol=RTOL, atol=ATOL)
    assert cluster.loglik == pytest.approx(memory.loglik, rel=1e-9)
    events = [e for stamp, e in client.get_events("dpgm.fit") if stamp >= before]
    mine = [e for e in events if e.get("model") == kind.name and e.get("method") == case.method]
    if kind.methods[case.method].iterative:
        assert any(e.get("status") in ("converged", "stopped") for e in mine), events
    else:
        assert mine == []


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_save_then_load_gives_the_same_parameters_bit_for_bit(spec_name, tmp_path):
    """``save`` then ``dpgm.load`` (and the registry's ``Kind.load``): every table and number exactly; ``dpgm
    info``'s description names the kind and its free parameters."""
    case = case_named(spec_name)
    fitted = _quiet_fit(case.model(), case.data(), **case.options).model
    fitted.save(str(tmp_path / "model.zarr"))
    loaded = dpgm.load(tmp_path / "model.zarr")
    assert type(loaded) is type(fitted)
    assert_same_parameters(fitted, loaded, rtol=0, atol=0)
    kind = kind_of(fitted)
    assert kind.name in _kinds()  # dpgm.load knows every registered kind
    assert_same_parameters(fitted, kind.load(*_tables(tmp_path / "model.zarr")), rtol=0, atol=0)
    described = describe(loaded)  # what `dpgm info` shows of the saved model
    assert described["kind"] == kind.name and described["fitted"]
    assert described["n_params"] == fitted.n_free_parameters()


def _tables(path):
    from dpgm.data.table_store import read_tables

    attrs, tables = read_tables(path, what="model store")
    return tables, attrs.get("extra", {})


@pytest.mark.parametrize("spec_name", EM_CASES)
def test_em_checkpointed_then_resumed_equals_uninterrupted_bit_for_bit(spec_name, tmp_path):
    """Stop after 3 iterations with a checkpoint, resume to the end: every parameter and every restart's
    log-likelihood equal the uninterrupted fit's exactly."""
    case = case_named(spec_name)
    data = case.data()
    whole = _quiet_fit(case.model(), data, **case.options)
    assert whole.n_iter > 3
    _quiet_fit(case.model(), data, **(case.options | {"max_iter": 3}), checkpoint=str(tmp_path / "ck"))
    resumed = _quiet_fit(case.model(), data, **case.options, resume=str(tmp_path / "ck"))
    assert_same_parameters(whole.model, resumed.model, rtol=0, atol=0)
    assert np.array_equal(whole.info["restart_logliks"], resumed.info["restart_logliks"])
    assert resumed.n_iter == whole.n_iter and resumed.loglik == whole.loglik


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_variable_of_the_wrong_dtype_is_a_data_error_naming_it(spec_name):
    """The case's observed variable as text (neither codes nor numbers) is refused before any fit."""
    case = case_named(spec_name)
    data = case.data()
    bad = data.assign({case.variable: data[case.variable].astype(str)})
    with pytest.raises(DataError, match=case.variable):
        dpgm.fit(case.model(), bad, **case.options)


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_model_variable_absent_from_the_data_is_a_data_error_naming_it(spec_name):
    """The case's observed variable renamed in the data (the model names a variable the data lack)."""
    case = case_named(spec_name)
    if case.absent_is_latent:
        pytest.skip("a variable absent from the data is latent for this kind: EM fits it")
    data = case.data().rename({case.variable: f"{case.variable}_renamed"})
    with pytest.raises(DataError, match=case.variable):
        dpgm.fit(case.model(), data, **case.options)

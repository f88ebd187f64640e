"""Refusals of ``dpgm.fit`` from Python, before any pass over the data: bad options for every kind, an
object that is no model, spec keys of another kind, a table too large to allocate, and a resume from a
checkpoint of another fit. Each asserts that no pass ran (:func:`cli_runs.no_pass`).
"""

from __future__ import annotations

import time
import warnings

import pandas as pd
import pytest
from cli_runs import no_pass

import dpgm
from dpgm.errors import ConfigError, ConvergenceWarning, TableTooLarge

# ---------------------------------------------------------------- dpgm.fit's options, before any pass


@pytest.fixture(scope="module")
def asia():
    return dpgm.sample_bayesian_network(dpgm.load_network("asia"), 500, None, seed=1, chunk_rows=100)


def _models():
    truth = dpgm.load_network("asia")
    states = truth.states
    scopes = [("smoke", "lung"), ("lung", "either")]
    return {
        "bn": dpgm.BayesianNetwork.from_edges(truth.edges),
        "lca": dpgm.latent_class_model({v: states[v] for v in ("xray", "dysp", "tub")}, 2),
        "markov": dpgm.MarkovNetwork.from_cliques(scopes, states),
        "loglinear": dpgm.LogLinearModel.from_margins(scopes, states),
        "hmm": dpgm.hmm(2, ["a", "b"]),
    }


OPTIONS = [
    # (model, method, options, error type, name the message must hold)
    ("bn", None, {"max_iter": 0}, ValueError, "max_iter"),
    ("lca", "em", {"max_iter": "ten"}, TypeError, "max_iter"),
    ("lca", "em", {"n_init": 0}, ValueError, "n_init"),
    ("lca", "em", {"n_init": 2.5}, TypeError, "n_init"),
    ("lca", "em", {"tol": -1.0}, ValueError, "tol"),
    ("lca", "em", {"tol": float("nan")}, ValueError, "tol"),
    ("lca", "em", {"random_state": -3}, ValueError, "random_state"),
    ("lca", "em", {"init": "kmeans"}, ValueError, "init"),
    ("lca", "em", {"init": "model", "n_init": 3}, ValueError, "n_init"),
    ("lca", "em", {"persist": "yes"}, TypeError, "persist"),
    ("lca", "em", {"checkpoint": 3}, TypeError, "checkpoint"),
    ("bn", "magic", {}, ValueError, "'magic'"),
    ("bn", 3, {}, TypeError, "method"),
    ("bn", "bayes", {"prior": "bdeu"}, ValueError, "prior"),
    ("bn", "bayes", {"equivalent_sample_size": -1}, ValueError, "equivalent_sample_size"),
    ("bn", "mle", {"tolerance": 1e-3}, ValueError, "tolerance"),
    ("markov", "ipf", {"l1": 0.1}, ValueError, "l1"),
    ("markov", "ipf", {"loglik_tol": -1}, ValueError, "loglik_tol"),
    ("markov", "em", {"m_step": "gis"}, ValueError, "m_step"),
    ("markov", "em", {"inner_iter": 0}, ValueError, "inner_iter"),
    ("loglinear", "lbfgs", {"l2": -1.0}, ValueError, "l2"),
    ("loglinear", "newton", {"l1": 0.5}, ValueError, "l1"),
    ("hmm", "ipf", {}, ValueError, "'ipf'"),
    ("hmm", "em", {"n_init": True}, TypeError, "n_init"),
]


@pytest.mark.parametrize("kind, method, options, error, name", OPTIONS,
                         ids=[f"{o[0]}-{o[1]}-{'-'.join(o[2]) or 'method'}" for o in OPTIONS])
def test_fit_options_are_checked_before_any_pass(asia, kind, method, options, error, name):
    model = _models()[kind]
    with no_pass(), pytest.raises(error, match=name) as info:
        dpgm.fit(model, asia, method=method, **options)
    assert isinstance(info.value, ConfigError)


def test_fit_refuses_an_object_that_is_no_model(asia):
    with no_pass(), pytest.raises(TypeError, match="cannot fit a dict"):
        dpgm.fit({}, asia)


@pytest.mark.parametrize("spec, key", [
    ({"model": "hmm", "n_states": 0, "symbols": ["a"]}, "n_states"),
    ({"model": "hmm", "n_states": 2, "symbols": "ab"}, "symbols"),
    ({"model": "bayesian_network", "edges": [["a", "b"]], "latent": ["H"]}, "latent"),
    ({"model": "latent_class", "n_classes": 2, "cliques": [["a"]]}, "cliques"),
    ({"model": "latent_class", "n_classes": 2, "checkpoint": "ck"}, "--checkpoint"),
    ({"model": "bayesian_network", "network": "asia", "edges": [["a", "b"]]}, "network"),
], ids=["n_states", "symbols", "latent", "misplaced-key", "checkpoint-key", "network-and-edges"])
def test_spec_keys_are_checked_by_kind(spec, key):
    from dpgm.spec import SpecError, build_model

    with pytest.raises(SpecError, match=key):
        build_model(spec, {"a": ("x", "y"), "b": ("u", "v")})


def test_counts_refuses_a_table_it_cannot_allocate_before_any_pass():
    wide = dpgm.from_pandas(pd.DataFrame({f"v{i:02d}": ["a", "b"] for i in range(37)}))
    start = time.perf_counter()
    with no_pass(), pytest.raises(TableTooLarge, match=r"37 variables\) needs a table of 450,283,905,890,997,363"):
        dpgm.counts(wide, [tuple(wide.data_vars)])
    assert time.perf_counter() - start < 1.0
    with no_pass(), pytest.raises(ValueError, match="v00"):
        dpgm.counts(wide, [("v00",), tuple(wide.data_vars)[:30]])


# ---------------------------------------------------------------- checkpoints resumed from Python


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 1000, root / "d.zarr", seed=0, chunk_rows=250)
    dpgm.sample_bayesian_network(truth, 1000, root / "other.zarr", seed=1, chunk_rows=250)
    model = _models()["lca"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dpgm.fit(model, ds, method="em", max_iter=2, tol=0.0, random_state=0, checkpoint=str(root / "ck"))
    return root, model


@pytest.mark.parametrize("change, words", [
    ("data", ["other data", "other.zarr"]),
    ("model", ["other model", "states.class"]),
    ("options", ["other model", "n_init"]),
])
def test_python_resume_refuses_a_checkpoint_of_another_fit(checkpointed, change, words):
    from dpgm.io.checkpoint import CheckpointMismatch

    root, model = checkpointed
    data = dpgm.open_dataset(root / ("other.zarr" if change == "data" else "d.zarr"))
    options = {"random_state": 0} | ({"n_init": 2} if change == "options" else {})
    if change == "model":
        states = dpgm.load_network("asia").states
        model = dpgm.latent_class_model({v: states[v] for v in ("xray", "dysp", "tub")}, 3)
    with no_pass(), pytest.raises(CheckpointMismatch) as info:
        dpgm.fit(model, data, method="em", max_iter=4, tol=0.0, resume=str(root / "ck"), **options)
    for word in [str(root / "ck"), *words]:
        assert word in str(info.value)


def test_python_resume_of_the_same_fit_runs_longer(checkpointed):
    root, model = checkpointed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = dpgm.fit(model, dpgm.open_dataset(root / "d.zarr"), method="em", max_iter=4, tol=0.0,
                          random_state=0, resume=str(root / "ck"))
    assert result.n_iter == 4

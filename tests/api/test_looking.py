"""Looking at a fit: ``summary()`` of every model kind, ``dpgm info MODEL`` in a real subprocess, and
``dpgm.fit`` on a path (CSV, Parquet, a glob, a Zarr store, a saved model) with real files.

Oracles: the model's own labelled arrays read through pandas/xarray (every printed parameter equals
the array's value at the printed labels, to half a unit of the last printed digit); the fit's
``n_params`` and the data's states (``dpgm info``), and closed forms of the free parameters
(``sum (k - 1) q`` for tables, ``n (n + m - 1) - 1`` for an HMM); pandas' normalized crosstabs for a
network fitted from converted CSV/Parquet files.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cli_runs import run_dpgm

import dpgm
from dpgm.api.sources import converted_path
from dpgm.errors import ConvergenceWarning, DataError

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

DPGM = [sys.executable, "-m", "dpgm.cli"]
EDGES = [("region", "smoker"), ("smoker", "cough")]
HYBRID_EDGES = [("region", "income"), ("age", "income"), ("income", "default"), ("smoker", "default"),
                ("region", "smoker")]
HYBRID_FAMILIES = {"age": "gaussian", "income": "gaussian", "default": "bernoulli"}
KINDS = ["BayesianNetwork", "MarkovNetwork", "LogLinearModel", "HiddenMarkovModel", "GaussianGraphicalModel",
         "LinearGaussianNetwork", "GaussianMixture", "GLMConditional", "HybridNetwork"]


def _frame(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(3, n, p=[0.5, 0.3, 0.2])
    smoker = (rng.random(n) < np.array([0.2, 0.35, 0.5])[region]).astype(int)
    cough = (rng.random(n) < np.where(smoker == 1, 0.6, 0.2)).astype(int)
    age = rng.normal(45, 12, n)
    income = 20 + 0.5 * age + np.array([0.0, 5.0, -3.0])[region] + rng.normal(0, 6, n)
    default = (rng.random(n) < 1 / (1 + np.exp(-(-4 + 0.08 * income + 0.7 * smoker)))).astype(int)
    return pd.DataFrame({
        "region": pd.Categorical.from_codes(region, ["north", "south", "west"]),
        "smoker": pd.Categorical.from_codes(smoker, ["no", "yes"]),
        "cough": pd.Categorical.from_codes(cough, ["no", "yes"]),
        "age": age, "income": income,
        "default": pd.Categorical.from_codes(default, ["no", "yes"]),
    })


def _sequences(seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    transition, emission = np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    hidden = np.zeros((200, 30), dtype=int)
    hidden[:, 0] = rng.random(200) < 0.5
    for t in range(1, 30):
        hidden[:, t] = rng.random(200) < transition[hidden[:, t - 1], 1]
    symbols = (rng.random((200, 30))[..., None] > np.cumsum(emission[hidden], axis=-1)).sum(axis=-1)
    return xr.Dataset({"obs": (("row", "time"), symbols.astype(np.int8), {"states": ["a", "b", "c"]})})


def _latent_class_data(n: int = 800, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    z = rng.random(n) < 0.4
    x = rng.normal(0, 1, n)
    y = np.where(z, 2 + 3 * x, -1 - 2 * x) + rng.normal(0, 0.5, n)
    return dpgm.from_pandas(pd.DataFrame({"x": x, "y": y}))


@pytest.fixture(scope="module")
def fits() -> dict[str, dpgm.FitResult]:
    """One fitted model of every kind (and a latent class regression), in memory."""
    data = dpgm.from_pandas(_frame())
    discrete = data[["region", "smoker", "cough"]]
    states = dpgm.Schema.from_dataset(data).states
    continuous = data[["age", "income"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # EM starts: a few iterations are enough here
        return {
            "BayesianNetwork": dpgm.fit(dpgm.BayesianNetwork.from_edges(EDGES), discrete),
            "MarkovNetwork": dpgm.fit(dpgm.MarkovNetwork.from_cliques(EDGES, states), discrete),
            "LogLinearModel": dpgm.fit(dpgm.LogLinearModel.from_margins(EDGES, states), discrete),
            "HiddenMarkovModel": dpgm.fit(dpgm.hmm(2, ["a", "b", "c"]), _sequences(), n_init=2, random_state=0,
                                          max_iter=30),
            "GaussianGraphicalModel": dpgm.fit(dpgm.GaussianGraphicalModel([("age", "income")]), continuous),
            "LinearGaussianNetwork": dpgm.fit(dpgm.LinearGaussianNetwork([("age", "income")]), continuous),
            "GaussianMixture": dpgm.fit(dpgm.GaussianMixture(2, ["age", "income"]), continuous, n_init=1,
                                        random_state=0, max_iter=30),
            "GLMConditional": dpgm.fit(dpgm.GLMConditional("default", ["income", "smoker"], "bernoulli"), data),
            "HybridNetwork": dpgm.fit(dpgm.HybridNetwork(HYBRID_EDGES, HYBRID_FAMILIES),
                                      data[["region", "smoker", "age", "income", "default"]]),
            "latent class regression": dpgm.fit(
                dpgm.HybridNetwork([("z", "y"), ("x", "y")], {"x": "gaussian", "y": "gaussian"},
                                   states={"z": ["a", "b"]}),
                _latent_class_data(), method="em", n_init=2, random_state=0, max_iter=40),
        }


# ------------------------------------------------------------------ reading a summary back


def _grid(text: str) -> tuple[str, dict]:
    """A summary block: its title and ``{(row labels, column label): value}``."""
    title, header, *rows = text.split("\n")
    columns = header.split("|", 1)[1].split()
    cells = {}
    for row in rows:
        left, right = row.split("|", 1)
        values = right.split()
        assert len(values) == len(columns), row
        for column, value in zip(columns, values, strict=True):
            cells[(tuple(left.split()), column)] = float(value)
    return title, cells


def _glm_block(text: str) -> tuple[str, dict]:
    """A GLMConditional summary: its first line and ``{(state, term): (coef, std err)}``."""
    lines = text.split("\n")
    cells, state, inside = {}, None, False
    for i, line in enumerate(lines):
        if line.startswith("-"):
            label = lines[i - 1].split()[0]
            state, inside = (label.split("=", 1)[1] if "=" in label else None), True
        elif line.startswith("="):
            inside = False
        elif inside:
            term, coef, error, *_ = line.split()
            cells[(state, term)] = (float(coef), float(error))
    return lines[0], cells


def _blocks(summary: str) -> tuple[str, dict]:
    if summary.startswith("GLMConditional"):  # one conditional: its coefficient table alone
        title, cells = _glm_block(summary)
        return title, {title: cells}
    header, *blocks = summary.split("\n\n")
    parsed = {}
    for text in blocks:
        title, cells = _glm_block(text) if text.startswith("GLMConditional") else _grid(text)
        assert title not in parsed, f"two blocks titled {title!r}"
        parsed[title] = cells
    return header, parsed


def _cells(table: xr.DataArray, columns: str | None = None) -> dict:
    """The expected cells of a labelled table: rows the other dims' labels, columns ``columns``' labels."""
    columns = columns or str(table.dims[-1])
    rows = [str(d) for d in table.dims if d != columns]
    series = table.transpose(*rows, columns).to_series()
    cells = {}
    for key, value in series.items():
        key = key if isinstance(key, tuple) else (key,)
        cells[(tuple(map(str, key[:-1])), str(key[-1]))] = float(value)
    return cells


def _row(values: dict[str, float]) -> dict:
    return {((), name): float(v) for name, v in values.items()}


def _glm_cells(glm) -> dict:
    coefficients, errors = glm.coefficients, glm.standard_errors
    if "state" not in coefficients.dims:
        return {(None, str(t)): (float(b), float(s)) for t, b, s in
                zip(coefficients.coords["term"].values, coefficients.values, errors.values, strict=True)}
    return {(str(k), str(t)): (float(coefficients.sel(term=t, state=k)), float(errors.sel(term=t, state=k)))
            for k in coefficients.coords["state"].values for t in coefficients.coords["term"].values}


def _given(v: str, parents) -> str:
    return f"P({v} | {', '.join(parents)})" if parents else f"P({v})"


def _expected(kind: str, model) -> dict[str, dict]:
    """Title -> cells of every block the summary must print, from the model's arrays."""
    if kind == "BayesianNetwork":
        return {_given(v, model.parents(v)): _cells(model.cpds[v], v) for v in model.variables}
    if kind == "MarkovNetwork":
        return {f"potential on ({', '.join(s)})": _cells(t) for s, t in model.potentials.items()}
    if kind == "LogLinearModel":
        scope = {n: ",".join(sorted(map(str, t.dims), key=model.variables.index)) for n, t in model.features.items()}
        return {"weights": {((n, scope[n]), "weight"): w for n, w in model.weights.items()}}
    if kind == "HiddenMarkovModel":
        return {"start P(state_1)": _cells(model.start),
                "transition P(state_t+1 | state_t)": _cells(model.transition),
                "emission P(obs_t | state_t)": _cells(model.emission)}
    if kind == "GaussianGraphicalModel":
        precision = model.covariance.copy(data=np.linalg.inv(model.covariance.values))
        return {"mean": _cells(model.mean), "covariance": _cells(model.covariance), "precision": _cells(precision)}
    if kind == "LinearGaussianNetwork":
        expected = {}
        for v in model.variables:
            p = model.parameters[v]
            coefficients = {str(k): float(b) for k, b in zip(p["coefficients"].coords["parent"].values,
                                                              p["coefficients"].values, strict=True)}
            title = f"{v} | {', '.join(model.parents(v))}" if model.parents(v) else v
            expected[title] = _row({"Intercept": p["intercept"], **coefficients, "variance": p["variance"]})
        return expected
    if kind == "GaussianMixture":
        return {"weights": _cells(model.weights), "means": _cells(model.means),
                **{f"covariance of component {k}": _cells(model.covariances.isel(component=k))
                   for k in range(model.n_components)}}
    if kind == "GLMConditional":
        return {f"GLMConditional {model.child!r} | {list(model.parents)}: family {model.family}, "
                f"link {model.link}": _glm_cells(model)}
    if kind in ("HybridNetwork", "latent class regression"):
        expected = {}
        for v in model.variables:
            parents = model.parents(v)
            if v in model.tables:
                expected[_given(v, parents)] = _cells(model.tables[v], v)
                continue
            glm = model.conditionals[v]
            if glm.coefficients.ndim == 1:
                expected[f"GLMConditional {v!r} | {list(parents)}: family {glm.family}, link {glm.link}"] = \
                    _glm_cells(glm)
            else:
                latent = glm.coefficients.dims[-1]
                expected[f"{v} | {', '.join(parents)}: {glm.family}, coefficients by {latent}"] = \
                    _cells(glm.coefficients)
                expected[f"{v}: residual variance by {latent}"] = _cells(glm.scale_by_state)
        return expected
    raise AssertionError(kind)


def _close(printed: float, value: float, digits: int) -> bool:
    """``printed`` is ``value`` to ``digits`` significant digits: within half a unit of the last one."""
    if not math.isfinite(value):
        return printed == value
    if value == 0:
        return printed == 0
    unit = 10.0 ** (math.floor(math.log10(abs(value))) - digits + 1)
    return abs(printed - value) <= 0.5 * unit * (1 + 1e-9)


@pytest.mark.parametrize("kind", [*KINDS, "latent class regression"])
@pytest.mark.parametrize("digits", [6, 12])
def test_summary_prints_every_parameter_to_the_printed_precision(fits, kind, digits):
    model = fits[kind].model
    summary = model.summary() if kind == "GLMConditional" else model.summary(digits=digits)
    header, blocks = _blocks(summary)
    expected = _expected(kind, model)
    assert sorted(blocks) == sorted(expected), summary
    for title, cells in expected.items():
        printed = blocks[title]
        assert sorted(printed) == sorted(cells), (title, summary)
        for key, value in cells.items():
            if isinstance(value, tuple):  # a GLM's coefficient (4 decimals) and standard error (3 decimals)
                (coef, error), (true_coef, true_error) = printed[key], value
                assert abs(coef - true_coef) <= 0.5e-4 * (1 + 1e-9) and abs(error - true_error) <= 0.5e-3 * (1 + 1e-9)
            else:
                assert _close(printed[key], value, digits), (title, key, printed[key], value)
    if kind not in ("GLMConditional", "latent class regression"):
        assert f"{fits[kind].n_params} free parameters" in header


def test_summary_of_structures_and_structural_zeros():
    structure = dpgm.BayesianNetwork.from_edges([("a", "b")])
    assert "a structure" in structure.summary() and "a -> b" in structure.summary()
    assert "(not fitted)" in dpgm.GaussianMixture(2, ["x", "y"]).summary()
    assert "(not fitted)" in dpgm.HybridNetwork([("a", "b")], {"b": "gaussian"}).summary()
    states = {"a": ["0", "1"], "b": ["0", "1"]}
    zeros = xr.DataArray([[False, True], [False, False]], dims=["a", "b"], coords=states)
    model = dpgm.MarkovNetwork.from_cliques([("a", "b")], states).with_structural_zeros(zeros)
    _, blocks = _blocks(model.summary())
    assert blocks["structural zeros on (a, b): 1 cells fixed at zero"] == _cells(zeros.astype(float))


# ------------------------------------------------------------------ dpgm info MODEL


def run(*args, check: bool = True) -> subprocess.CompletedProcess:
    return run_dpgm(*args, check=check, timeout=180)


def _closed_form_n_params(kind: str, model) -> int | None:
    if kind == "BayesianNetwork":
        return sum((t.shape[0] - 1) * math.prod(t.shape[1:]) for t in model.cpds.values())
    if kind == "HiddenMarkovModel":
        n, m = model.emission.shape
        return (n - 1) + n * (n - 1) + n * (m - 1)
    if kind == "GaussianGraphicalModel":
        return 2 * len(model.variables) + len(model.edges)
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_dpgm_info_describes_a_saved_model_of_every_kind(fits, kind, tmp_path):
    result = fits[kind]
    model = result.model
    model.save(str(tmp_path / "model.zarr"))
    described = json.loads(run("info", tmp_path / "model.zarr", "--json").stdout)
    assert described["kind"] == kind and described["fitted"] is True
    assert described["n_params"] == result.n_params
    if _closed_form_n_params(kind, model) is not None:
        assert described["n_params"] == _closed_form_n_params(kind, model)
    assert described["fit"] is None  # model.save() keeps no fit record
    data_states = (dpgm.Schema.from_dataset(_sequences()).states if kind == "HiddenMarkovModel"
                   else dpgm.Schema.from_dataset(dpgm.from_pandas(_frame())).states)
    for name, states in described["variables"].items():
        if states == "categorical":  # a GLM's categorical parent: its reference state is not in the model
            assert kind == "GLMConditional" and name in data_states
        elif name in data_states:
            assert states == list(data_states[name]), name
        elif kind == "HiddenMarkovModel":
            assert states == ["0", "1"]
        else:
            assert states == "continuous", (name, states)
    text = run("info", tmp_path / "model.zarr").stdout
    head, *lines = text.splitlines()
    assert head.startswith(f"{tmp_path / 'model.zarr'}: {kind}, {len(described['variables'])} variables")
    assert f", {result.n_params:,} free parameters" in head
    for name, states in described["variables"].items():
        line = next(line for line in lines if line.split()[:1] == [name])
        if isinstance(states, list):
            assert line.split()[1:3] == [str(len(states)), "states:"] and line.endswith(", ".join(states))
    if kind == "GLMConditional":
        assert described["structure"]["edges"] == [["income", "default"], ["smoker", "default"]]
        assert described["structure"]["terms"] == list(model.terms)
    elif hasattr(model, "edges"):
        assert described["structure"]["edges"] == [list(e) for e in model.edges]
    if kind == "MarkovNetwork":
        assert described["structure"]["cliques"] == [list(e) for e in EDGES]
    if kind == "GaussianMixture":
        assert described["structure"] == {"n_components": 2, "covariance_type": "full"}


def test_dpgm_fit_out_keeps_the_fit_record_and_info_shows_it(tmp_path):
    data = tmp_path / "data.zarr"
    dpgm.write_dataset(dpgm.from_pandas(_frame(n=2000)), data, chunk_rows=700)
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: bayesian_network\nedges: [[region, smoker], [smoker, cough]]\n")
    run("fit", spec, data, "--out", tmp_path / "model.zarr", "--report", tmp_path / "report.json", "--workers", "1")
    report = json.loads((tmp_path / "report.json").read_text())
    described = json.loads(run("info", tmp_path / "model.zarr", "--json").stdout)
    record = described["fit"]
    for key in ("method", "converged", "n_iter", "loglik", "n_rows", "n_params", "g2", "df", "aic", "bic", "passes"):
        assert record[key] == report[key], key
    assert record["data"] == str(data) and described["n_params"] == report["n_params"] == 2 + 3 + 2
    text = run("info", tmp_path / "model.zarr").stdout
    assert f"log-likelihood {report['loglik']:.6f}" in text and "mle, converged" in text
    assert "2,000 rows" in text
    dataset = json.loads(run("info", data, "--json").stdout)  # the same command on the dataset
    schema = dpgm.Schema.from_dataset(dpgm.open_dataset(data))
    assert dataset["kind"] == "dataset" and dataset["n_rows"] == 2000 and dataset["chunks"] == [700, 700, 600]
    assert dataset["variables"] == {v: list(schema.states[v]) if v in schema.states else "continuous"
                                    for v in ["region", "smoker", "cough", "age", "income", "default"]}


def test_dpgm_info_refuses_an_unfinished_model_store(tmp_path):
    store = tmp_path / "model.zarr"
    dpgm.load_network("asia").save(str(store))
    document = json.loads((store / "zarr.json").read_text())
    document["attributes"]["dpgm_complete"] = False
    (store / "zarr.json").write_text(json.dumps(document))
    result = run("info", store, check=False)
    assert result.returncode == 65 and "incomplete" in result.stderr


# ------------------------------------------------------------------ dpgm.fit on a path


def _crosstab(frame: pd.DataFrame, child: str, parent: str) -> pd.DataFrame:
    return pd.crosstab(frame[child], frame[parent], normalize="columns")


def _check_network(model: dpgm.BayesianNetwork, frame: pd.DataFrame) -> None:
    """The fitted tables are pandas' normalized crosstabs, matched by label."""
    for parent, child in EDGES:
        expected = _crosstab(frame, child, parent)
        table = model.cpds[child].transpose(child, parent)
        for c in expected.index:
            for p in expected.columns:
                assert float(table.sel({child: str(c), parent: str(p)})) == pytest.approx(expected.loc[c, p],
                                                                                          rel=1e-12)


def test_fit_on_a_csv_path_says_how_to_convert_it_and_converts_when_asked(tmp_path, client):
    frame = _frame(n=1500, seed=3)[["region", "smoker", "cough"]]
    frame.to_csv(tmp_path / "survey.csv", index=False)
    structure = dpgm.BayesianNetwork.from_edges(EDGES)
    with pytest.raises(DataError, match=r"survey\.csv.*dpgm convert .*survey\.csv .*survey\.zarr.*convert=True"):
        dpgm.fit(structure, str(tmp_path / "survey.csv"))
    assert not (tmp_path / "survey.zarr").exists()  # nothing written unless asked
    result = dpgm.fit(structure, tmp_path / "survey.csv", convert=True, client=client)
    assert (tmp_path / "survey.zarr").is_dir()
    _check_network(result.model, frame)
    with pytest.raises(DataError, match=r"survey\.zarr.*already exists"):
        dpgm.fit(structure, tmp_path / "survey.csv", convert=True, client=client)
    again = dpgm.fit(structure, str(tmp_path / "survey.zarr"))  # a Zarr store path is opened
    assert again.loglik == result.loglik


def test_fit_on_parquet_and_a_glob_of_csv_files(tmp_path, client):
    frame = _frame(n=2400, seed=4)[["region", "smoker", "cough"]]
    frame.to_parquet(tmp_path / "survey.parquet")
    structure = dpgm.BayesianNetwork.from_edges(EDGES)
    with pytest.raises(DataError, match="convert=True"):
        dpgm.fit(structure, tmp_path / "survey.parquet")
    _check_network(dpgm.fit(structure, tmp_path / "survey.parquet", convert=True, client=client).model, frame)
    (tmp_path / "parts").mkdir()
    for i, start in enumerate(range(0, len(frame), 800)):
        frame.iloc[start:start + 800].to_csv(tmp_path / "parts" / f"2026-{i}.csv", index=False)
    pattern = str(tmp_path / "parts" / "2026-*.csv")
    with pytest.raises(DataError, match=r"2026\.zarr"):
        dpgm.fit(structure, pattern)
    _check_network(dpgm.fit(structure, pattern, convert=True, client=client).model, frame)
    assert (tmp_path / "parts" / "2026.zarr").is_dir()
    with pytest.raises(DataError, match=r"parts\.zarr"):  # a folder of parts
        dpgm.fit(structure, tmp_path / "parts")


def test_fit_on_other_paths_and_objects(tmp_path):
    structure = dpgm.BayesianNetwork.from_edges(EDGES)
    dpgm.load_network("asia").save(str(tmp_path / "asia.zarr"))
    with pytest.raises(DataError, match=r"saved BayesianNetwork, not data: dpgm\.load"):
        dpgm.fit(structure, tmp_path / "asia.zarr")
    with pytest.raises(FileNotFoundError, match="no dataset"):
        dpgm.fit(structure, tmp_path / "absent.zarr")
    with pytest.raises(TypeError, match="from_pandas"):
        dpgm.fit(structure, _frame(n=10))
    with pytest.raises(TypeError, match="convert must be True or False"):
        dpgm.fit(structure, tmp_path / "asia.zarr", convert="yes")


def test_converted_path_is_next_to_the_input():
    assert converted_path("data/survey.csv.gz") == "data/survey.zarr"
    assert converted_path("data/survey.TSV") == "data/survey.zarr"
    assert converted_path("data/parts/") == "data/parts.zarr"
    assert converted_path("exports/2026-*.csv") == "exports/2026.zarr"
    assert converted_path("exports/*.parquet") == "exports/exports.zarr"
    assert converted_path("s3://bucket/x/y.parquet") == "s3://bucket/x/y.zarr"


# ------------------------------------------------------------------ the documented section runs as written


def test_docs_looking_at_a_fit_runs_as_written(tmp_path):
    """The section's Python blocks as one script (``python script.py``) in an empty folder: it converts,
    fits, prints, saves, and checks pgmpy's answer against dpgm's itself; ``dpgm info`` reads its store."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "fits.md").read_text()
    start = text.index("## Looking at a fit")
    section = text[start:text.index("\n## ", start + 1)]  # up to the next section
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    (tmp_path / "script.py").write_text("\n".join(blocks))
    environment = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    environment.pop("DASK_SCHEDULER_ADDRESS", None)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=environment, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "P(dysp | bronc, either)" in done.stdout and (tmp_path / "survey.zarr").is_dir()
    model = dpgm.load(str(tmp_path / "asia-model.zarr"))
    described = json.loads(run("info", tmp_path / "asia-model.zarr", "--json").stdout)
    assert described["n_params"] == 18 and described["variables"] == {v: list(s) for v, s in model.states.items()}


@pytest.mark.parametrize("module", ["dpgm.models.bayesian_network", "dpgm.api.sources", "dpgm.io.peers"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0

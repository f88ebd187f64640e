"""Column kinds that say what they did, and one label order, for ``dpgm convert`` and ``dpgm.from_pandas``.

Oracles: pandas' own readers (``read_csv`` with ``na_values``, ``read_parquet``) for values and
missing cells, Python's ``sorted`` for label order, pgmpy's ``MaximumLikelihoodEstimator`` on
the pandas frame for a network fitted on the converted stores.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from cli_runs import error_line, run_dpgm

import dpgm
from dpgm.data import ConversionReport
from dpgm.errors import ConfigError, DataError

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

DPGM = [sys.executable, "-m", "dpgm.cli"]


def run(*args) -> subprocess.CompletedProcess:
    return run_dpgm(*args)


def kind_line(stdout: str, column: str) -> str:
    """The report line of one column, its blanks collapsed."""
    lines = [" ".join(line.split()) for line in stdout.splitlines() if line.split()[:1] == [column]]
    assert len(lines) == 1, stdout
    return lines[0]


def _survey(n: int, seed: int) -> pd.DataFrame:
    """A table as a newcomer has it: text, a wide integer, a narrow integer, a float with gaps."""
    rng = np.random.default_rng(seed)
    bmi = np.round(rng.normal(26, 4, n), 2)
    bmi[rng.random(n) < 0.03] = np.nan
    return pd.DataFrame({
        "smoker": rng.choice(["yes", "no"], n),
        "age": rng.integers(18, 90, n),  # 72 distinct values
        "kids": rng.choice([0, 1, 2, 3, 10], n),  # "10" sorts after "3"
        "region": rng.choice(["south", "north", "east", "west"], n),
        "bmi": bmi,
    })


# ---------------------------------------------------------------------------------------------
# the reproduced items, through the real command


def test_a_float_column_with_one_stray_token_is_refused_then_read_with_na_values(tmp_path):
    """One ``NA?`` among 10,000 floats used to give a 4,835-state categorical silently."""
    rng = np.random.default_rng(3)
    height = np.round(rng.normal(170, 10, 10_000), 1).astype(object)
    height[4835] = "NA?"
    pd.DataFrame({"height": height, "smoker": rng.choice(["yes", "no"], 10_000)}).to_csv(
        tmp_path / "in.csv", index=False)
    out = tmp_path / "out.zarr"
    refused = run("convert", tmp_path / "in.csv", out, "--workers", "1")
    line = error_line(refused, 65)
    assert "'height'" in line and "at row 4835" in line and "'NA?'" in line, line
    assert "--na-values 'NA?'" in line and "--categorical height" in line, line
    assert not out.exists()  # refused before anything was written

    done = run("convert", tmp_path / "in.csv", out, "--workers", "1", "--na-values", "NA?")
    assert done.returncode == 0, done.stderr
    assert kind_line(done.stdout, "height") == "height continuous float, 1 missing"
    assert kind_line(done.stdout, "smoker") == "smoker categorical text, 2 labels"
    expected = pd.read_csv(tmp_path / "in.csv", na_values=["NA?"])
    ds = dpgm.open_dataset(out)
    assert ds.height.dtype == np.float64 and "states" not in ds.height.attrs
    np.testing.assert_array_equal(ds.height.values, expected["height"].to_numpy())  # NaN where pandas has NaN
    assert ds.smoker.attrs["states"] == ["no", "yes"]


def test_an_integer_age_is_continuous_by_default_and_categorical_when_named(tmp_path):
    frame = _survey(3000, 1)
    frame.to_csv(tmp_path / "in.csv", index=False)
    done = run("convert", tmp_path / "in.csv", tmp_path / "a.zarr", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert kind_line(done.stdout, "age") == "age continuous integer, 72 distinct values (> 50)"
    assert kind_line(done.stdout, "kids") == "kids categorical integer, 5 distinct values (<= 50)"
    assert kind_line(done.stdout, "bmi").startswith("bmi continuous float, ")
    expected = pd.read_csv(tmp_path / "in.csv")
    ds = dpgm.open_dataset(tmp_path / "a.zarr")
    assert ds.age.dtype == np.float64
    np.testing.assert_array_equal(ds.age.values, expected["age"].to_numpy(dtype=np.float64))
    assert ds.kids.attrs["states"] == ["0", "1", "2", "3", "10"]  # numbers sort as numbers

    named = run("convert", tmp_path / "in.csv", tmp_path / "b.zarr", "--workers", "1", "--categorical", "age")
    assert named.returncode == 0, named.stderr
    assert kind_line(named.stdout, "age") == "age categorical integer, 72 distinct values, named categorical"
    ds = dpgm.open_dataset(tmp_path / "b.zarr")
    states = [str(v) for v in sorted(expected["age"].unique())]
    assert ds.age.attrs["states"] == states
    np.testing.assert_array_equal(np.asarray(states)[ds.age.values], expected["age"].astype(str).to_numpy())


def test_label_order_is_sorted_unless_appearance_is_asked_for(tmp_path):
    pd.DataFrame({"grade": ["10", "9", "2", "9", "10", None], "town": ["b", "C", "a", "b", "a", "b"]}).to_csv(
        tmp_path / "in.csv", index=False)
    sorted_run = run("convert", tmp_path / "in.csv", tmp_path / "s.zarr", "--workers", "1")
    appearance = run("convert", tmp_path / "in.csv", tmp_path / "a.zarr", "--workers", "1",
                     "--label-order", "appearance")
    assert sorted_run.returncode == 0 and appearance.returncode == 0, sorted_run.stderr + appearance.stderr
    ds, first = dpgm.open_dataset(tmp_path / "s.zarr"), dpgm.open_dataset(tmp_path / "a.zarr")
    assert ds.grade.attrs["states"] == sorted(["10", "9", "2"], key=int) == ["2", "9", "10"]
    assert ds.town.attrs["states"] == sorted(["b", "C", "a"]) == ["C", "a", "b"]
    assert first.grade.attrs["states"] == ["10", "9", "2"] and first.town.attrs["states"] == ["b", "C", "a"]
    for store in (ds, first):  # the same rows either way
        for name, column in [("grade", ["10", "9", "2", "9", "10", None]), ("town", ["b", "C", "a", "b", "a", "b"])]:
            labels = np.asarray([*store[name].attrs["states"], None], dtype=object)
            assert labels[store[name].values].tolist() == column, name
    bad = run("convert", tmp_path / "in.csv", tmp_path / "x.zarr", "--label-order", "alphabetical")
    assert bad.returncode == 2 and "--label-order" in bad.stderr


def test_several_tokens_are_all_named_with_their_first_rows(tmp_path):
    values = [f"{i}.25" for i in range(200)]
    for row, token in [(7, "-"), (40, "NA?"), (41, "-"), (90, "-"), (120, "-"), (150, "-"), (170, "-")]:
        values[row] = token
    pd.DataFrame({"dose": values}).to_csv(tmp_path / "in.csv", index=False)
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "o.zarr", "--workers", "1",
                          "--chunk-rows", "50"), 65)
    assert "variable 'dose', chunk 0" in line
    assert "7 rows of text" in line and "'-', 'NA?'" in line and "at rows 7, 40, 41, 90, 120, ..." in line
    assert "--na-values - --na-values 'NA?'" in line
    assert not (tmp_path / "o.zarr").exists()


def test_text_in_a_column_named_continuous_names_column_row_and_chunk(tmp_path):
    values = ["a", "b"] * 20
    pd.DataFrame({"code": values, "other": ["x"] * 40}).to_csv(tmp_path / "in.csv", index=False)
    line = error_line(run("convert", tmp_path / "in.csv", tmp_path / "o.zarr", "--workers", "1",
                          "--chunk-rows", "10", "--continuous", "code"), 65)
    assert "variable 'code', chunk 0" in line and "named continuous" in line and "at rows 0, 1, 2, 3, 4, ..." in line
    both = run("convert", tmp_path / "in.csv", tmp_path / "o.zarr", "--continuous", "code", "--categorical", "code",
               "--scheduler", "tcp://127.0.0.1:9")  # refused before any cluster is reached
    assert "'code'" in error_line(both, 78)


# ---------------------------------------------------------------------------------------------
# the decision is made from the whole first pass, never from the first block


@pytest.mark.parametrize("blocksize", [None, 4096])
def test_the_kind_does_not_depend_on_how_the_input_is_cut(tmp_path, blocksize):
    """Integers for the first 10,000 rows, then one non-integer: the column is a float column
    (the first pass sees every block); a token far after the first chunk is still refused."""
    n = 12_000
    x = np.arange(n) % 40  # 40 distinct integers: categorical if it were an integer column
    values = x.astype(object)
    values[11_500] = "0.5"
    pd.DataFrame({"x": values, "y": x % 3}).to_csv(tmp_path / "in.csv", index=False)
    ds = dpgm.convert(tmp_path / "in.csv", tmp_path / "o.zarr", blocksize=blocksize)
    assert ds.x.dtype == np.float64
    np.testing.assert_array_equal(ds.x.values, pd.read_csv(tmp_path / "in.csv")["x"].to_numpy())
    report = ConversionReport.from_dataset(ds)
    assert report["x"].kind == "continuous" and report["x"].reason == "float"
    assert report["y"].kind == "categorical" and report["y"].reason == "integer, 3 distinct values (<= 50)"

    values[11_700] = "NA?"
    pd.DataFrame({"x": values}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match=r"variable 'x', chunk 1: .*1 row of text 'NA\?' .*at row 11700"):
        dpgm.convert(tmp_path / "bad.csv", tmp_path / "bad.zarr", blocksize=blocksize, chunk_rows=10_000)
    assert not (tmp_path / "bad.zarr").exists()


# ---------------------------------------------------------------------------------------------
# one rule and one order for convert and from_pandas


def _assert_same_store(a: Path, b: Path) -> None:
    left, right = dpgm.open_dataset(a), dpgm.open_dataset(b)
    assert list(left.data_vars) == list(right.data_vars)
    for name in left.data_vars:
        assert left[name].dtype == right[name].dtype, name
        assert left[name].attrs == right[name].attrs, name
        assert left[name].chunks == right[name].chunks, name
        np.testing.assert_array_equal(left[name].values, right[name].values, err_msg=name)
    assert left.attrs["dpgm_conversion"] == right.attrs["dpgm_conversion"]


def _pgmpy_cpds(frame: pd.DataFrame, edges: list[tuple[str, str]]) -> dict:
    from pgmpy.estimators import MaximumLikelihoodEstimator
    from pgmpy.models import DiscreteBayesianNetwork

    model = DiscreteBayesianNetwork(edges)
    estimator = MaximumLikelihoodEstimator(model, frame[list(model.nodes)].astype(str))
    return {v: estimator.estimate_cpd(v) for v in model.nodes}


def _assert_cpds_equal_pgmpy(model, cpds: dict) -> None:
    for variable, cpd in cpds.items():
        table = model.cpds[variable].transpose(*cpd.variables)
        theirs = cpd.values
        for axis, d in enumerate(cpd.variables):  # by label: pgmpy's own order of states
            theirs = np.take(theirs, [cpd.state_names[d].index(s) for s in table.coords[d].values], axis=axis)
        np.testing.assert_array_equal(table.values, theirs, err_msg=variable)


def test_csv_on_the_cluster_and_from_pandas_give_the_same_store_and_the_same_fit(tmp_path, client):
    parts = [_survey(1500, seed) for seed in (11, 12, 13)]
    parts[1].loc[parts[1].index[::37], "kids"] = np.nan  # an integer column with gaps
    for i, part in enumerate(parts):
        part.to_csv(tmp_path / f"part-{i}.csv", index=False, float_format="%.15g")
    converted = dpgm.convert(str(tmp_path / "part-*.csv"), tmp_path / "csv.zarr", chunk_rows=1000,
                             blocksize=8192, client=client)  # several blocks per file, two workers
    # pandas keeps an integer column with gaps as integers with its nullable dtypes
    frame = pd.concat([pd.read_csv(tmp_path / f"part-{i}.csv", dtype_backend="numpy_nullable") for i in range(3)],
                      ignore_index=True)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "pandas.zarr", chunk_rows=1000)
    _assert_same_store(tmp_path / "csv.zarr", tmp_path / "pandas.zarr")

    report = ConversionReport.from_dataset(converted)
    assert [(c.column, c.kind) for c in report] == [("smoker", "categorical"), ("age", "continuous"),
                                                    ("kids", "categorical"), ("region", "categorical"),
                                                    ("bmi", "continuous")]
    n_gaps = int(frame["kids"].isna().sum())
    assert report["kids"].reason == f"integer, 5 distinct values (<= 50), {n_gaps} missing"
    assert converted.kids.attrs["states"] == ["0", "1", "2", "3", "10"]
    assert converted.region.attrs["states"] == ["east", "north", "south", "west"]

    edges = [("smoker", "region"), ("region", "kids"), ("smoker", "kids")]
    complete = frame.dropna(subset=["kids"])
    structure = dpgm.BayesianNetwork.from_edges(edges)
    on_csv = dpgm.fit(structure, dpgm.open_dataset(tmp_path / "csv.zarr").isel(
        row=np.flatnonzero(frame["kids"].notna().to_numpy())), client=client).model
    on_pandas = dpgm.fit(structure, dpgm.from_pandas(complete)).model
    for variable in ("smoker", "region", "kids"):
        assert on_csv.cpds[variable].equals(on_pandas.cpds[variable]), variable
    _assert_cpds_equal_pgmpy(on_csv, _pgmpy_cpds(complete.astype({"kids": int}), edges))


def test_parquet_and_from_pandas_give_the_same_store(tmp_path):
    frame = _survey(2000, 21)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "in.parquet", row_group_size=300)
    dpgm.convert(tmp_path / "in.parquet", tmp_path / "pq.zarr", chunk_rows=500)
    dpgm.write_dataset(dpgm.from_pandas(pd.read_parquet(tmp_path / "in.parquet")), tmp_path / "pd.zarr",
                       chunk_rows=500)
    _assert_same_store(tmp_path / "pq.zarr", tmp_path / "pd.zarr")
    ds = dpgm.open_dataset(tmp_path / "pq.zarr")
    np.testing.assert_array_equal(ds.bmi.values, frame["bmi"].to_numpy())
    np.testing.assert_array_equal(ds.age.values, frame["age"].to_numpy(dtype=np.float64))


def test_from_pandas_applies_the_same_rule_and_says_so():
    frame = pd.DataFrame({
        "age": np.arange(100) % 60 + 20,  # 60 distinct integers
        "dose": ["1.5"] * 97 + ["NA?", "2.5", "3"],
        "flag": [True, False] * 50,
        "level": pd.Categorical(["hi", "lo"] * 50, categories=["lo", "hi"]),  # declared order kept
    })
    with pytest.raises(DataError, match=r"variable 'dose': .*1 row of text 'NA\?' .*at row 97.*na_values"):
        dpgm.from_pandas(frame)
    ds = dpgm.from_pandas(frame, na_values=["NA?"], categorical=["age"], label_order="appearance")
    assert ds.age.attrs["states"] == [str(v) for v in pd.unique(frame["age"])]
    np.testing.assert_array_equal(ds.dose.values, pd.to_numeric(frame["dose"], errors="coerce").to_numpy())
    assert ds.flag.attrs["states"] == ["True", "False"] and ds.level.attrs["states"] == ["lo", "hi"]
    report = ConversionReport.from_dataset(ds)
    assert str(report).splitlines() == [
        "age    categorical  integer, 60 distinct values, named categorical",
        "dose   continuous   float, 1 missing",
        "flag   categorical  boolean, 2 labels",
        "level  categorical  pandas categorical, 2 categories (their order)",
    ]
    assert dpgm.from_pandas(frame.drop(columns="dose")).age.dtype == np.float64
    with pytest.raises(ConfigError, match="label_order"):
        dpgm.from_pandas(frame, label_order="alphabetical")
    with pytest.raises(DataError, match=r"\['nope'\]"):
        dpgm.from_pandas(frame, na_values=["NA?"], continuous=["nope"])


def test_the_report_survives_the_store(tmp_path):
    frame = _survey(2000, 4)
    assert frame["age"].nunique() == 72
    ds = dpgm.from_pandas(frame)
    dpgm.write_dataset(ds, tmp_path / "d.zarr", chunk_rows=100)
    stored = json.loads((tmp_path / "d.zarr" / "zarr.json").read_text())["attributes"]["dpgm_conversion"]
    assert stored == ds.attrs["dpgm_conversion"]
    assert ConversionReport.from_dataset(dpgm.open_dataset(tmp_path / "d.zarr")) == ConversionReport.from_dataset(ds)
    assert zarr.open_group(tmp_path / "d.zarr", mode="r")["age"].dtype == np.float64
    assert re.search(r"^age +continuous +integer, 72 distinct values \(> 50\)$", str(ConversionReport.from_dataset(ds)),
                     re.M)


def test_a_value_the_first_pass_did_not_see_names_column_row_and_chunk(tmp_path):
    """The second pass re-reads the input: a file changed in between is refused, never coded as missing."""
    from dpgm.data.convert import _blocks, _discover, _encode, _files
    from dpgm.data.kinds import Missing, Summary, decide

    pd.DataFrame({"v": ["a", "b"] * 50, "x": np.arange(100) + 0.5}).to_csv(tmp_path / "seen.csv", index=False)
    changed = pd.DataFrame({"v": ["a", "b"] * 50, "x": (np.arange(100) + 0.5).astype(object)})
    changed.loc[63, "v"], changed.loc[71, "x"] = "c", "oops"
    changed.to_csv(tmp_path / "changed.csv", index=False)
    seen, = _blocks(_files(str(tmp_path / "seen.csv"), None), None, None)
    found = _discover(seen, None, Missing(), frozenset())
    plan = {name: decide(name, Summary.merge([found["columns"][name]], [0], name)) for name in ("v", "x")}
    assert plan["v"].labels == ["a", "b"] and plan["x"].labels is None
    block, = _blocks(_files(str(tmp_path / "changed.csv"), None), None, None)
    with pytest.raises(DataError, match=r"variable 'v', chunk 5: holds 'c' at row 1063, a label the first pass"):
        _encode(block, None, {"v": plan["v"]}, Missing(), 1000, 200)
    with pytest.raises(DataError, match=r"variable 'x', chunk 5: holds text 'oops' at row 1071"):
        _encode(block, None, {"x": plan["x"]}, Missing(), 1000, 200)


def test_values_that_print_alike_are_one_label_in_from_pandas():
    frame = pd.DataFrame({"v": pd.Series([1, "1", "b", None, "b"], dtype=object)})
    ds = dpgm.from_pandas(frame)
    assert ds.v.attrs["states"] == ["1", "b"] and ds.v.values.tolist() == [0, 0, 1, -1, 1]

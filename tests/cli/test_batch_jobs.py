"""What a batch job sees (stderr a pipe, not a terminal): one-line warnings, plain progress lines from
`dpgm convert`, and default chunks that give every worker several — all in real CLI subprocesses (the
first two on the session's cluster, ``cli_runs``; the last starts its own two workers, its subject)."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import zarr
from cli_runs import run_dpgm

import dpgm
from dpgm.spec import build_model, read_spec


def run(*args, own_cluster: bool = False):
    return run_dpgm(*args, timeout=300, own_cluster=own_cluster)


@pytest.mark.usefixtures("shared_cluster")
def test_a_fit_that_does_not_converge_prints_its_warning_as_one_line(tmp_path):
    store = tmp_path / "asia.zarr"
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, store, seed=0, chunk_rows=500)
    (tmp_path / "lca.yaml").write_text("model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub]\n"
                                       "random_state: 0\ntol: 0.0\nmax_iter: 4\n")
    result = run("fit", tmp_path / "lca.yaml", store, "--out", tmp_path / "m.zarr")
    assert result.returncode == 3, result.stderr  # stopped at max_iter: the documented exit code
    lines = result.stderr.splitlines()
    warned = [line for line in lines if "warn" in line.lower() or "tol" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: "), result.stderr  # no source excerpt
    assert "after 4 iterations" in warned[0] and "tol" in warned[0], warned  # names the limit it stopped at
    # the model written is the Python fit's after the same 4 iterations (EM on the same data and seed)
    model, method, options = build_model(read_spec(tmp_path / "lca.yaml"),
                                         dpgm.Schema.from_dataset(dpgm.open_dataset(store)).states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        expected = dpgm.fit(model, dpgm.open_dataset(store), method=method, **options)
    fitted = dpgm.load(tmp_path / "m.zarr")
    for variable, cpd in expected.model.cpds.items():
        np.testing.assert_allclose(fitted.cpds[variable].values, cpd.values, rtol=1e-12, err_msg=variable)


@pytest.mark.usefixtures("shared_cluster")
def test_convert_in_a_batch_job_logs_plain_progress_lines_and_matches_pandas(tmp_path):
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"colour": rng.choice(["red", "green", "blue"], 30_000),
                          "size": rng.integers(1, 4, 30_000).astype(str)})
    frame.to_csv(tmp_path / "in.csv", index=False)
    result = run("convert", tmp_path / "in.csv", tmp_path / "out.zarr")
    assert result.returncode == 0, result.stderr
    passes = re.findall(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d dpgm: pass (\S+) finished [\d.]+ s$", result.stderr)
    assert passes == ["dpgm-convert-discover", "dpgm-convert-encode"], result.stderr  # timestamped, named
    assert "\r" not in result.stderr  # no terminal progress bar in a log file
    back = dpgm.to_pandas(dpgm.open_dataset(tmp_path / "out.zarr").load()).astype(str)
    pd.testing.assert_frame_equal(back[["colour", "size"]], frame)


def test_generate_default_chunks_give_two_workers_several_chunks_each(tmp_path):
    rows = 200_000
    result = run("generate", "asia", tmp_path / "g.zarr", "--rows", rows, "--workers", "2", "--seed", "1",
                 own_cluster=True)
    assert result.returncode == 0, result.stderr
    chunk = zarr.open_array(str(tmp_path / "g.zarr" / "smoke"), mode="r").chunks[0]
    n_chunks = math.ceil(rows / chunk)
    assert n_chunks >= 2 * 2, (chunk, n_chunks)  # at least two chunks for each of the two workers
    data = dpgm.open_dataset(tmp_path / "g.zarr")
    assert data.sizes["row"] == rows and len(data.smoke.chunks[0]) == n_chunks

"""What a fit says while it runs: real `dpgm fit` subprocesses (stderr a pipe, as in a batch job, and a
pseudo-terminal), and `dpgm.fit(progress=...)` in Python. Every printed log-likelihood is checked against the
fit's own history (to the printed precision, 0.005), the mixture's final one against scikit-learn's
GaussianMixture scoring the saved parameters (rel 1e-9) and the latent class model's against a NumPy sum over
the hidden class (rel 1e-9)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
from cli_runs import DPGM, cli_environment, run_dpgm
from sklearn.mixture import GaussianMixture as SklearnGaussianMixture
from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

import dpgm
from dpgm.errors import ConfigTypeError

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
ITERATION = re.compile(r"dpgm: iteration (?P<iteration>\d+)  loglik (?P<loglik>-?[\d,]+\.\d\d)(?:  change \S+)?"
                       r"(?:  \(extrapolated\))?"
                       r"  (?P<rate>\S+) s/pass(?:  restart #(?P<restart>\d+))?$")
OUTCOME = re.compile(r"dpgm: (?P<state>converged|stopped without converging) after (?P<n_iter>\d+) iterations, "
                     r"(?P<passes>\d+) passes over the data, \S+ s; loglik (?P<loglik>-?[\d,]+\.\d\d)"
                     r"(?:; best restart #(?P<best>\d+) of (?P<restarts>\d+)(?: \((?P<dropped>\d+) dropped\))?)?$")
LATENT_CLASS = ("model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub, smoke]\nn_init: 3\n"
                "random_state: 0\ntol: 1e-6\nmax_iter: 300\n")
OBSERVED = ["xray", "dysp", "tub", "smoke"]


def run(*args, check: bool = True) -> subprocess.CompletedProcess:
    """``dpgm ARGS``; on the session's cluster in the tests that ask for it (``shared_cluster``)."""
    return run_dpgm(*args, check=check, timeout=300)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _mixture_store(tmp_path):
    """3,000 rows from three overlapping normals in 3 dimensions, in three chunks."""
    rng = np.random.default_rng(4)
    means = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, -2.0], [0.0, 3.0, 2.0]])
    x = np.concatenate([rng.multivariate_normal(m, np.eye(3) * (1 + i), 1000) for i, m in enumerate(means)])
    x = x[rng.permutation(len(x))]
    path = tmp_path / "gmm.zarr"
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["x0", "x1", "x2"])), path, chunk_rows=1000,
                       mode="w")
    return path, x


def _asia_store(tmp_path, rows: int = 5000):
    path = tmp_path / "asia.zarr"
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), rows, path, seed=0, chunk_rows=1250)
    return path


def _check_iteration_lines(lines: list[str], report: dict) -> list[re.Match]:
    """One line per iteration, of the best restart still running: iterations 1..n_iter, each log-likelihood the
    history's value of the restart the line names (to the printed 0.005)."""
    found = [ITERATION.search(line) for line in lines if "dpgm: iteration " in line]
    assert all(found), [line for line, m in zip(lines, found, strict=True) if m is None]
    assert [int(m["iteration"]) for m in found] == list(range(1, report["n_iter"] + 1)), lines
    histories = report["info"].get("restart_histories") or [report["history"]]
    for m in found:
        history = histories[int(m["restart"] or 0)]
        record = next(h for h in history if h["iteration"] == int(m["iteration"]))
        assert abs(_number(m["loglik"]) - record["loglik"]) <= 0.005 + 1e-12 * abs(record["loglik"]), (m[0], record)
        assert float(m["rate"]) > 0
    # once the best restart has stopped, the lines follow the best one still running; the best one's last line
    # is its final log-likelihood
    best = [m for m in found if int(m["restart"] or 0) == report["info"].get("restart", 0)]
    assert best and abs(_number(best[-1]["loglik"]) - report["loglik"]) <= 0.005 + 1e-12 * abs(report["loglik"])
    return found


def _check_outcome(line: str, report: dict) -> re.Match:
    m = OUTCOME.search(line)
    assert m, line
    assert (m["state"] == "converged") == report["converged"]
    assert int(m["n_iter"]) == report["n_iter"] and int(m["passes"]) == report["passes"], (line, report["passes"])
    assert abs(_number(m["loglik"]) - report["loglik"]) <= 0.005 + 1e-12 * abs(report["loglik"])
    if report["info"].get("restart_logliks"):
        assert int(m["best"]) == report["info"]["restart"]
        assert int(m["restarts"]) == len(report["info"]["restart_logliks"])
        assert int(m["dropped"] or 0) == len(report["info"]["pruned_restarts"])
    return m


def _check_batch_log(stderr: str) -> list[str]:
    """A batch log: no carriage return, every line timestamped (warnings and the dashboard's address aside)."""
    assert "\r" not in stderr  # no bar redrawn in a log file
    lines = [line for line in stderr.splitlines() if not line.startswith("dashboard: ")]
    assert all(re.match(f"{STAMP} dpgm: ", line) or line.startswith("warning: ") for line in lines), stderr
    return lines


@pytest.mark.usefixtures("shared_cluster")
def test_cli_mixture_says_one_line_per_iteration_of_the_best_restart(tmp_path):
    """4 components to 3 clusters, 4 restarts, pruning: three restarts are dropped, the best converges. The
    log has n_iter iteration lines (not restarts x iterations) plus a few summaries; the final log-likelihood
    equals scikit-learn's score of the saved parameters."""
    store, x = _mixture_store(tmp_path)
    spec = tmp_path / "gmm.yaml"
    spec.write_text("model: gaussian_mixture\nn_components: 4\ncovariance_type: full\nn_init: 4\nrandom_state: 0\n"
                    "tol: 1e-7\nmax_iter: 300\nprune_restarts: true\n")
    result = run("fit", spec, store, "--out", tmp_path / "m.zarr", "--report", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    lines = _check_batch_log(result.stderr)
    n_init = len(report["info"]["restart_histories"])
    assert n_init == 4 and report["converged"] and report["info"]["pruned_restarts"], report["info"]
    found = _check_iteration_lines(lines, report)
    summaries = [line for line in lines if "dpgm: restarts: " in line]
    assert summaries and "4 running" in summaries[0]
    assert f"{len(report['info']['pruned_restarts'])} dropped" in summaries[-1], summaries
    others = [line for line in lines if "dpgm: iteration " not in line]
    assert len(others) <= n_init + 6, others  # passes before the first iteration, summaries, the outcome
    assert len(lines) < sum(len(h) for h in report["info"]["restart_histories"])
    _check_outcome(lines[-1], report)
    # the oracle: scikit-learn's GaussianMixture scoring the saved parameters on the same rows
    model = dpgm.load(tmp_path / "m.zarr")
    reference = SklearnGaussianMixture(4, covariance_type="full")
    reference.weights_ = model.weights.values
    reference.means_ = model.means.values
    reference.covariances_ = model.covariances.transpose("component", "variable", "variable_").values
    reference.precisions_cholesky_ = _compute_precision_cholesky(reference.covariances_, "full")
    expected = reference.score(x) * len(x)
    assert report["loglik"] == pytest.approx(expected, rel=1e-9)
    assert _number(found[-1]["loglik"]) == pytest.approx(expected, abs=0.005 + 1e-9 * abs(expected))


def _latent_class_loglik(model, store) -> float:
    """Log-likelihood of the observed rows summed over the hidden class, from the saved tables (NumPy)."""
    data = dpgm.open_dataset(store)
    schema = dpgm.Schema.from_dataset(data)
    classes = model.cpds["class"].values
    joint = np.tile(np.log(classes), (data.sizes["row"], 1))
    for v in OBSERVED:
        table = model.cpds[v].transpose("class", v)
        # the data's codes index the data's labels; take the table's columns in that order
        columns = [list(table[v].values).index(label) for label in schema.states[v]]
        joint += np.log(table.values[:, columns])[:, data[v].values.astype(int)].T
    top = joint.max(axis=1, keepdims=True)
    return float((top[:, 0] + np.log(np.exp(joint - top).sum(axis=1))).sum())


@pytest.mark.slow
@pytest.mark.usefixtures("shared_cluster")
def test_cli_discrete_em_batch_log_quiet_and_verbose(tmp_path):
    """A latent class model with 3 restarts on a Zarr store: one timestamped line per iteration; -q says
    nothing; -v adds one line per restart per iteration (the restarts' own records)."""
    store = _asia_store(tmp_path)
    spec = tmp_path / "lca.yaml"
    spec.write_text(LATENT_CLASS)
    result = run("fit", spec, store, "--out", tmp_path / "m.zarr", "--report", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    lines = _check_batch_log(result.stderr)
    _check_iteration_lines(lines, report)
    assert any(re.search(r"dpgm: pass dpgm-estep finished \d+\.\d s$", line) for line in lines), lines
    others = [line for line in lines if "dpgm: iteration " not in line]
    assert len(others) <= 3 + 6, others
    _check_outcome(lines[-1], report)
    assert report["loglik"] == pytest.approx(_latent_class_loglik(dpgm.load(tmp_path / "m.zarr"), store), rel=1e-9)

    quiet = run("-q", "fit", spec, store, "--out", tmp_path / "q.zarr")
    assert quiet.stderr == "", quiet.stderr
    assert quiet.stdout.splitlines()[:3] == result.stdout.splitlines()[:3]  # the same fit

    verbose = run("-v", "fit", spec, store, "--out", tmp_path / "v.zarr")
    detail = [line for line in verbose.stderr.splitlines() if re.search(r"dpgm: restart #\d+: iteration ", line)]
    assert len(detail) == sum(len(h) for h in report["info"]["restart_histories"])
    for line in detail:
        restart, iteration, loglik = re.search(r"restart #(\d+): iteration (\d+)  loglik (\S+)", line).groups()
        record = report["info"]["restart_histories"][int(restart)][int(iteration) - 1]
        assert abs(_number(loglik) - record["loglik"]) <= 0.005 + 1e-12 * abs(record["loglik"])


@pytest.mark.usefixtures("shared_cluster")
def test_cli_in_a_terminal_shows_one_fit_level_display_and_no_dask_bar(tmp_path):
    """stderr a pseudo-terminal: a counter of iterations (tqdm) with the iteration lines above it, no
    timestamps, and never Dask's per-pass bar."""
    store = _asia_store(tmp_path)
    spec = tmp_path / "lca.yaml"
    spec.write_text(LATENT_CLASS)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal has a size
    process = subprocess.Popen([*DPGM, "fit", str(spec), str(store), "--out", str(tmp_path / "m.zarr"), "--report",
                                str(tmp_path / "r.json")], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=terminal, env=cli_environment())
    os.close(terminal)
    chunks, deadline = [], time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif process.poll() is not None:
            break
    os.close(controller)
    assert process.wait(timeout=60) == 0
    shown = b"".join(chunks).decode()
    report = json.loads((tmp_path / "r.json").read_text())
    assert re.search(r"dpgm em: \d+ iterations \[", shown), shown[-2000:]  # the fit-level counter
    assert "% Completed" not in shown and "[####" not in shown  # no Dask per-pass bar
    assert not re.search(STAMP, shown)  # a terminal gets no timestamps
    lines = [line.strip("\r") for text in shown.split("\n") for line in text.split("\r") if line.strip()]
    _check_iteration_lines([line for line in lines if line.startswith("dpgm: iteration ")], report)
    _check_outcome(next(line for line in lines if OUTCOME.search(line)), report)


def test_python_fit_with_progress_writes_iteration_lines_to_stderr(tmp_path, capfd):
    store = _asia_store(tmp_path)
    model = dpgm.latent_class_model({v: dpgm.Schema.from_dataset(dpgm.open_dataset(store)).states[v]
                                     for v in OBSERVED}, 2)
    result = dpgm.fit(model, dpgm.open_dataset(store), method="em", n_init=3, random_state=0, tol=1e-7,
                      max_iter=300, progress=True)
    out, err = capfd.readouterr()
    assert out == ""
    lines = _check_batch_log(err)  # stderr is not a terminal here: timestamped lines
    report = result.to_dict()
    _check_iteration_lines(lines, report)
    _check_outcome(lines[-1], report)
    assert any(re.search(r"dpgm: pass dpgm-estep finished", line) for line in lines)  # without a client too


def test_progress_reaches_stderr_when_other_handlers_log_elsewhere(tmp_path, capfd):
    """An earlier in-process CLI call (its handler on that call's stderr) and a file handler on the
    ``dpgm`` logger at INFO must not swallow the fit's lines on this stderr; the file gets them too."""
    from click.testing import CliRunner

    from dpgm.cli.entry import cli

    store = _asia_store(tmp_path)
    assert CliRunner().invoke(cli, ["info", str(store)]).exit_code == 0
    capfd.readouterr()
    log = logging.getLogger("dpgm")
    to_file = logging.FileHandler(tmp_path / "fit.log")
    log.addHandler(to_file)
    try:
        data = dpgm.open_dataset(store)
        model = dpgm.latent_class_model({v: dpgm.Schema.from_dataset(data).states[v] for v in OBSERVED}, 2)
        result = dpgm.fit(model, data, method="em", n_init=2, random_state=0, tol=1e-6, max_iter=100,
                          progress=True)
    finally:
        log.removeHandler(to_file)
        to_file.close()
    report = result.to_dict()
    _check_iteration_lines(_check_batch_log(capfd.readouterr().err), report)
    logged = [line for line in (tmp_path / "fit.log").read_text().splitlines() if line.startswith("iteration ")]
    assert len(logged) == report["n_iter"]


def test_python_fit_logs_one_info_record_per_iteration_and_each_restart_at_debug(tmp_path, caplog, capfd):
    store = _asia_store(tmp_path)
    data = dpgm.open_dataset(store)
    model = dpgm.latent_class_model({v: dpgm.Schema.from_dataset(data).states[v] for v in OBSERVED}, 2)
    with caplog.at_level(logging.DEBUG, logger="dpgm"):
        result = dpgm.fit(model, data, method="em", n_init=3, random_state=0, tol=1e-7, max_iter=300,
                          progress=False)
    assert capfd.readouterr().err == ""  # progress=False: nothing written, only logged
    messages = [r.getMessage() for r in caplog.records if r.name == "dpgm"]
    iterations = [m for r, m in zip(caplog.records, messages, strict=False)
                  if r.levelno == logging.INFO and m.startswith("iteration ")]
    assert len(iterations) == result.n_iter
    _check_iteration_lines([f"dpgm: {m}" for m in iterations], result.to_dict())
    detail = [r for r in caplog.records if r.levelno == logging.DEBUG and r.getMessage().startswith("restart #")]
    assert len(detail) == sum(len(h) for h in result.info["restart_histories"])


SCRIPT = """
import logging
import sys

import dpgm

if __name__ == "__main__":
    if sys.argv[2] == "info":
        logging.basicConfig(level=logging.INFO)
    data = dpgm.open_dataset(sys.argv[1])
    states = dpgm.Schema.from_dataset(data).states
    model = dpgm.latent_class_model({v: states[v] for v in ["xray", "dysp", "tub", "smoke"]}, 2)
    with dpgm.connect(n_workers=1) as client:
        result = dpgm.fit(model, data, method="em", random_state=0, tol=1e-7, max_iter=300, client=client)
    print(result.n_iter)
"""


@pytest.mark.slow
def test_a_script_without_a_terminal_is_quiet_unless_logging_says_info(tmp_path):
    store = _asia_store(tmp_path)
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    quiet = subprocess.run([sys.executable, str(script), str(store), "default"], capture_output=True, text=True,
                           env=cli_environment(own_cluster=True), timeout=300)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    n_iter = int(quiet.stdout.split()[-1])
    logged = subprocess.run([sys.executable, str(script), str(store), "info"], capture_output=True, text=True,
                            env=cli_environment(own_cluster=True), timeout=300)
    assert logged.returncode == 0, logged.stderr
    assert len(re.findall(r"(?m)^INFO:dpgm:iteration \d+  loglik ", logged.stderr)) == n_iter, logged.stderr
    assert len(re.findall(r"(?m)^INFO:dpgm:converged after ", logged.stderr)) == 1


def test_progress_takes_none_true_or_false():
    model = dpgm.latent_class_model({"a": ["x", "y"]}, 2)
    data = dpgm.from_pandas(pd.DataFrame({"a": ["x", "y", "x"]}))
    with pytest.raises(ConfigTypeError, match="progress must be None"):
        dpgm.fit(model, data, method="em", progress="yes")

"""Checkpoints verified and resumable bit for bit, a full disk classified, sizes refused up front, collinear GLM
terms refused: real ``dpgm`` CLI subprocesses, real Zarr stores, a real tmpfs for the full disk.

The oracle of every resume is the uninterrupted run (``np.array_equal`` on every table); a Gaussian mixture
resumed from a checkpoint is also compared with scikit-learn's EM from the same start (rel 1e-8), the
collinear design with NumPy's ``matrix_rank`` and statsmodels' rank of the design.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cli_runs import cli_environment, error_line, no_pass, run_dpgm

import dpgm
from dpgm.errors import ConvergenceWarning, DataError, TableTooLarge
from dpgm.io.checkpoint import CheckpointDamaged, CheckpointMismatch, CheckpointWriteError

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)

LCA = "model: latent_class\nn_classes: 2\nobserved: [xray, dysp, tub, smoke]\nrandom_state: 0\ntol: 0.0\n"
ASIA_LATENT = ("model: bayesian_network\nnetwork: asia\ndrop: [either]\nlatent: {either: ['yes', 'no']}\n"
               "random_state: 3\n")


def environment() -> dict[str, str]:
    return cli_environment()


def run(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_dpgm(*args, timeout=timeout)


def tables(model) -> dict[str, np.ndarray]:
    """Every array a model is saved as (its labelled tables), for exact comparison."""
    stored = dict(model._to_store())
    attrs = stored.pop("__attrs__", {})
    out = {str(k): np.asarray(v.values) for k, v in stored.items()}
    out |= {f"attr:{k}": np.asarray(v) for k, v in attrs.items() if isinstance(v, int | float)}
    return out


def assert_same_model(a, b) -> None:
    first, second = tables(a), tables(b)
    assert sorted(first) == sorted(second)
    for key in first:
        assert np.array_equal(first[key], second[key], equal_nan=True), (key, np.abs(first[key] - second[key]).max())


# ---------------------------------------------------------------- a checkpoint, then damaged copies of it


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """A latent class fit on a Zarr store stopped at max_iter 3 with --checkpoint (exit 3)."""
    root = tmp_path_factory.mktemp("checkpointed")
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, root / "d.zarr", seed=0, chunk_rows=500)
    (root / "lca.yaml").write_text(LCA + "max_iter: 3\n")
    (root / "more.yaml").write_text(LCA + "max_iter: 5\n")
    result = run("fit", root / "lca.yaml", root / "d.zarr", "--out", root / "m.zarr", "--workers", "1",
                 "--checkpoint", root / "ck")
    assert result.returncode == 3, result.stderr
    assert (root / "ck" / "LATEST").read_text().splitlines()[0] == "iteration-000003"
    return root


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _resign(checkpoint: Path, state: dict) -> None:
    """Rewrite ``state.json`` with a correct own digest and LATEST with its digest (a consistent forgery)."""
    state = {k: v for k, v in state.items() if k != "sha256"}
    state["sha256"] = _sha(json.dumps(state, sort_keys=True, separators=(",", ":")).encode())
    text = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    name = (checkpoint / "LATEST").read_text().splitlines()[0]
    (checkpoint / name / "state.json").write_bytes(text)
    (checkpoint / "LATEST").write_text(f"{name}\nsha256:{_sha(text)}\n")


def _invalid_json(ck: Path) -> str:
    state = ck / "iteration-000003" / "state.json"
    state.write_text(state.read_text().replace('"histories":', '"histories"', 1))
    return "iteration-000003/state.json"


def _truncated(ck: Path) -> str:
    state = ck / "iteration-000003" / "state.json"
    state.write_bytes(state.read_bytes()[: len(state.read_bytes()) // 2])
    return "iteration-000003/state.json"


def _all_converged(ck: Path) -> str:
    state = ck / "iteration-000003" / "state.json"
    edited = json.loads(state.read_text())
    edited["converged"] = edited["done"] = [True] * len(edited["converged"])
    state.write_text(json.dumps(edited))
    return "iteration-000003/state.json"


def _resigned_state_only(ck: Path) -> str:
    state = ck / "iteration-000003" / "state.json"
    edited = json.loads(state.read_text())
    edited["histories"][0][-1]["loglik"] += 1.0
    edited.pop("sha256")
    edited["sha256"] = _sha(json.dumps(edited, sort_keys=True, separators=(",", ":")).encode())
    state.write_text(json.dumps(edited, sort_keys=True, separators=(",", ":")))
    return "iteration-000003/state.json"


def _latest_escapes(ck: Path) -> str:
    other = ck.parent / "other"
    shutil.copytree(ck, other)  # a complete, valid checkpoint outside this one
    (other / "iteration-000003").rename(other / "iteration-000050")
    digest = _sha((other / "iteration-000050" / "state.json").read_bytes())
    (ck / "LATEST").write_text(f"../other/iteration-000050\nsha256:{digest}\n")
    return "LATEST"


def _latest_without_digest(ck: Path) -> str:
    (ck / "LATEST").write_text("iteration-000003")
    return "LATEST"


def _latest_to_a_missing_iteration(ck: Path) -> str:
    digest = (ck / "LATEST").read_text().splitlines()[1]
    (ck / "LATEST").write_text(f"iteration-000099\n{digest}\n")
    return "LATEST"


def _arrays_flipped(ck: Path) -> str:
    arrays = ck / "iteration-000003" / "arrays.npz"
    data = bytearray(arrays.read_bytes())
    data[len(data) // 2] ^= 0x01
    arrays.write_bytes(bytes(data))
    return "iteration-000003/arrays.npz"


def _fingerprint_edited(ck: Path) -> str:
    """The fingerprint an iteration records (in its state.json) pointed at other data."""
    state = ck / "iteration-000003" / "state.json"
    assert "d.zarr" in json.loads(state.read_text())["fingerprint"]["data"]["path"]
    state.write_text(state.read_text().replace("d.zarr", "x.zarr"))
    return "iteration-000003/state.json"


DAMAGES = {
    "state-invalid-json": (_invalid_json, "not valid JSON"),
    "state-truncated": (_truncated, "not valid JSON"),
    "state-marked-converged": (_all_converged, "own digest"),
    "state-replaced": (_resigned_state_only, "vouches for"),
    "latest-outside-the-checkpoint": (_latest_escapes, "not an iteration folder"),
    "latest-without-digest": (_latest_without_digest, "no digest"),
    "latest-names-a-missing-iteration": (_latest_to_a_missing_iteration, "missing"),
    "arrays-bit-flipped": (_arrays_flipped, "digest"),
    "fingerprint-edited": (_fingerprint_edited, "own digest"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_checkpoint_is_exit_65_naming_the_file(checkpointed, tmp_path, damage):
    edit, words = DAMAGES[damage]
    checkpoint = tmp_path / "ck"
    shutil.copytree(checkpointed / "ck", checkpoint)
    culprit = edit(checkpoint)
    line = error_line(run("fit", checkpointed / "more.yaml", checkpointed / "d.zarr", "--out", tmp_path / "r.zarr",
                          "--workers", "1", "--checkpoint", checkpoint, "--resume"), 65)
    assert str(checkpoint / culprit) in line and words in line, line
    assert not (tmp_path / "r.zarr").exists()


def test_the_undamaged_copy_resumes(checkpointed, tmp_path):
    """The control of the cases above: the same copy, unedited, resumes (exit 3 at the longer max_iter)."""
    shutil.copytree(checkpointed / "ck", tmp_path / "ck")
    result = run("fit", checkpointed / "more.yaml", checkpointed / "d.zarr", "--out", tmp_path / "r.zarr",
                 "--workers", "1", "--checkpoint", tmp_path / "ck", "--resume")
    assert result.returncode == 3, result.stderr
    assert (tmp_path / "ck" / "LATEST").read_text().splitlines()[0] == "iteration-000005"


def _lca(root: Path):
    """The latent class model of ``LCA``, with the data's labels (as the CLI builds it)."""
    states = dpgm.Schema.from_dataset(dpgm.open_dataset(root / "d.zarr")).states
    return dpgm.latent_class_model({v: states[v] for v in ("xray", "dysp", "tub", "smoke")}, 2)


def test_python_resume_of_a_damaged_checkpoint_raises_checkpoint_damaged(checkpointed, tmp_path):
    shutil.copytree(checkpointed / "ck", tmp_path / "ck")
    _all_converged(tmp_path / "ck")
    model = _lca(checkpointed)
    with no_pass(), pytest.raises(CheckpointDamaged) as info:
        dpgm.fit(model, dpgm.open_dataset(checkpointed / "d.zarr"), method="em", random_state=0, tol=0.0,
                 max_iter=5, resume=str(tmp_path / "ck"))
    assert isinstance(info.value, DataError)
    assert info.value.path == str(tmp_path / "ck" / "iteration-000003" / "state.json")


def test_parameters_of_another_shape_are_refused_even_with_valid_digests(checkpointed, tmp_path):
    """A consistent forgery (digests recomputed) whose parameter vector has another length: CheckpointMismatch."""
    checkpoint = tmp_path / "ck"
    shutil.copytree(checkpointed / "ck", checkpoint)
    folder = checkpoint / "iteration-000003"
    with np.load(folder / "arrays.npz") as stored:
        arrays = {k: stored[k] for k in stored.files}
    arrays["a0"] = np.concatenate([arrays["a0"], [0.5, 0.5]])  # restart 0's point: two parameters more
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    (folder / "arrays.npz").write_bytes(buffer.getvalue())
    state = json.loads((folder / "state.json").read_text())
    state["files"]["arrays.npz"] = _sha(buffer.getvalue())
    _resign(checkpoint, state)
    model = _lca(checkpointed)
    with no_pass(), pytest.raises(CheckpointMismatch, match="restart 0 do not have the shapes"):
        dpgm.fit(model, dpgm.open_dataset(checkpointed / "d.zarr"), method="em", random_state=0, tol=0.0,
                 max_iter=5, resume=str(checkpoint))


# ---------------------------------------------------------------- resume from the last iteration (the CLI)


@pytest.mark.parametrize("stop", ["max_iter", "converged"])
def test_cli_resume_of_a_checkpoint_written_at_the_last_iteration_returns_the_same_model(tmp_path, stop):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 4000, tmp_path / "d.zarr", seed=1, chunk_rows=1000,
                                 missing=0.05)
    rule = "tol: 0.0\nmax_iter: 6\n" if stop == "max_iter" else "tol: 1.0e-4\nmax_iter: 200\n"
    (tmp_path / "spec.yaml").write_text(ASIA_LATENT + rule)
    code = 3 if stop == "max_iter" else 0
    first = run("fit", tmp_path / "spec.yaml", tmp_path / "d.zarr", "--out", tmp_path / "a.zarr", "--workers", "1",
                "--checkpoint", tmp_path / "ck", "--report", tmp_path / "a.json")
    assert first.returncode == code, first.stderr
    second = run("fit", tmp_path / "spec.yaml", tmp_path / "d.zarr", "--out", tmp_path / "b.zarr", "--workers",
                 "1", "--checkpoint", tmp_path / "ck", "--resume", "--report", tmp_path / "b.json")
    assert second.returncode == code, second.stderr
    a, b = dpgm.load(tmp_path / "a.zarr"), dpgm.load(tmp_path / "b.zarr")
    for v in a.variables:
        assert np.array_equal(a.cpds[v].values, b.cpds[v].values), (v, np.abs(a.cpds[v].values - b.cpds[v].values).max())
    reports = [json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab"]
    assert reports[0]["loglik"] == reports[1]["loglik"] and reports[0]["passes"] == reports[1]["passes"]
    assert [h["loglik"] for h in reports[0]["history"]] == [h["loglik"] for h in reports[1]["history"]]


# ---------------------------------------------------------------- every EM kind, resumed from any iteration


def _problem(kind: str, folder: Path):
    """(model, dataset on a Zarr store, fit options) of one EM kind."""
    rng = np.random.default_rng(11)
    if kind in ("bn", "bn-squarem", "lca-pruned", "lca-incremental"):
        truth = dpgm.load_network("asia")
        dpgm.sample_bayesian_network(truth, 3000, folder / "d.zarr", seed=4, chunk_rows=500, missing=0.1)
        if kind.startswith("lca"):
            model = dpgm.latent_class_model({v: truth.states[v] for v in ("xray", "dysp", "tub", "smoke")}, 3)
        else:
            model = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
        options = {"n_init": 3, "prune_restarts": True} if kind == "lca-pruned" else {}
        options |= {"incremental": True} if kind == "lca-incremental" else {}
        options |= {"accelerate": "squarem"} if kind == "bn-squarem" else {}
        data = dpgm.open_dataset(folder / "d.zarr")
        return model, data.drop_vars("either") if kind.startswith("bn") else data, options
    if kind == "markov":
        states = {v: ["0", "1"] for v in "abch"}
        model = dpgm.MarkovNetwork.from_cliques([("a", "b"), ("b", "c"), ("c", "h"), ("h", "a")], states)
        codes = rng.integers(0, 2, (3000, 3)).astype(np.int8)
        codes[:, 1] = np.where(rng.random(3000) < 0.8, codes[:, 0], codes[:, 1])
        ds = xr.Dataset({v: ("row", codes[:, i], {"states": ["0", "1"]}) for i, v in enumerate("abc")})
        dpgm.write_dataset(ds, folder / "d.zarr", chunk_rows=700)
        return model, dpgm.open_dataset(folder / "d.zarr"), {}
    if kind in ("hmm", "hmm-squarem"):
        truth = dpgm.hmm(3, list("abcd")).with_arrays(
            np.array([0.5, 0.3, 0.2]), np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7]]),
            np.array([[0.6, 0.2, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.2, 0.6]]))
        hidden = np.zeros((200, 25), dtype=int)
        hidden[:, 0] = rng.choice(3, 200, p=truth.arrays()[0])
        for t in range(1, 25):
            hidden[:, t] = [rng.choice(3, p=truth.arrays()[1][h]) for h in hidden[:, t - 1]]
        symbols = np.array([[rng.choice(4, p=truth.arrays()[2][h]) for h in row] for row in hidden], dtype=np.int8)
        ds = xr.Dataset({"obs": (("row", "time"), symbols, {"states": list("abcd")})})
        dpgm.write_dataset(ds, folder / "d.zarr", chunk_rows=60)
        options = {"n_init": 2} | ({"accelerate": "squarem"} if kind == "hmm-squarem" else {})
        return dpgm.hmm(3, list("abcd")), dpgm.open_dataset(folder / "d.zarr"), options
    if kind == "gmm":
        x = np.concatenate([rng.normal([0, 0], 1, (300, 2)), rng.normal([3, 4], 0.7, (200, 2))])
        dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v"])), folder / "d.zarr", chunk_rows=150)
        return dpgm.GaussianMixture(2, ["u", "v"]), dpgm.open_dataset(folder / "d.zarr"), {"n_init": 2}
    assert kind == "hybrid"
    x = rng.normal(0, 1, 600)
    z = rng.random(600) < 0.4
    y = np.where(z, 1.0 + 2.0 * x, -0.5 - x) + rng.normal(0, np.where(z, 0.7, 1.0))
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame({"x": x, "y": y})), folder / "d.zarr", chunk_rows=200)
    model = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                               states={"z": ["a", "b"]})
    return model, dpgm.open_dataset(folder / "d.zarr"), {"n_init": 2}


EM_KINDS = ["bn", "bn-squarem", "lca-pruned", "lca-incremental", "markov", "hmm", "hmm-squarem", "gmm", "hybrid"]


@pytest.mark.parametrize("kind", EM_KINDS)
def test_resume_from_any_iteration_equals_the_uninterrupted_fit_bit_for_bit(tmp_path, kind):
    """Checkpoints at iteration 1, 4 and the last (8) each resume to exactly the uninterrupted model: every
    table ``np.array_equal``, the same history of log-likelihoods, the same restart chosen."""
    model, data, options = _problem(kind, tmp_path)
    options |= {"method": "em", "random_state": 5, "tol": 0.0}
    total = 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        whole = dpgm.fit(model, data, max_iter=total, checkpoint=str(tmp_path / "at-8"), **options)
        resumed = {}
        for stop in (1, 4):
            dpgm.fit(model, data, max_iter=stop, checkpoint=str(tmp_path / f"at-{stop}"), **options)
            resumed[stop] = dpgm.fit(model, data, max_iter=total, resume=str(tmp_path / f"at-{stop}"), **options)
        resumed[total] = dpgm.fit(model, data, max_iter=total, resume=str(tmp_path / "at-8"), **options)
    for stop, result in resumed.items():
        assert_same_model(result.model, whole.model)
        assert [h["loglik"] for h in result.history] == [h["loglik"] for h in whole.history], stop
        assert result.info["restart"] == whole.info["restart"] and result.loglik == whole.loglik
        assert result.passes == whole.passes and result.n_iter == whole.n_iter


def test_resumed_gaussian_mixture_equals_scikit_learn_from_the_same_start(tmp_path):
    """Outside oracle: a mixture stopped after 5 iterations and resumed to 20 has scikit-learn's parameters after
    19 M steps from the same start (dpgm returns the parameters its last E step evaluated), rel 1e-8."""
    from sklearn.exceptions import ConvergenceWarning as SklearnConvergenceWarning
    from sklearn.mixture import GaussianMixture as SklearnMixture

    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal([0, 0, 1], 1, (400, 3)), rng.normal([3, 4, 0], 0.7, (300, 3))]) + 20.0
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["a", "b", "c"])), tmp_path / "d.zarr",
                       chunk_rows=128)
    start = {"weights": np.array([0.5, 0.5]), "means": x[[0, 1]] + 0.1, "covariances": np.stack([np.eye(3)] * 2)}
    model = dpgm.GaussianMixture(2, ["a", "b", "c"])
    data = dpgm.open_dataset(tmp_path / "d.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dpgm.fit(model, data, init=start, max_iter=5, tol=0.0, accelerate=None, checkpoint=str(tmp_path / "ck"))
        resumed = dpgm.fit(model, data, init=start, max_iter=20, tol=0.0, accelerate=None, resume=str(tmp_path / "ck"))
        warnings.simplefilter("ignore", SklearnConvergenceWarning)  # tol 0: stops at max_iter by design
        reference = SklearnMixture(2, weights_init=start["weights"], means_init=start["means"],
                                   precisions_init=np.stack([np.eye(3)] * 2), max_iter=19, tol=0.0).fit(x)
    np.testing.assert_allclose(resumed.model.weights.values, reference.weights_, rtol=1e-8)
    np.testing.assert_allclose(resumed.model.means.values, reference.means_, rtol=1e-8)
    np.testing.assert_allclose(resumed.model.covariances.values, reference.covariances_, rtol=1e-8)


# ---------------------------------------------------------------- a full disk, a read-only disk


def _mount_tmpfs(folder: Path, size: str) -> str | None:
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                            capture_output=True, text=True)
    return None if result.returncode == 0 else f"cannot mount a tmpfs: {result.stderr.strip() or 'not permitted'}"


def _remount(folder: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], check=True, capture_output=True)


@pytest.fixture
def disk(tmp_path):
    folder = tmp_path / "disk"
    reason = _mount_tmpfs(folder, "64m")
    if reason:
        pytest.skip(reason)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_while_checkpointing_is_exit_74_naming_the_file_and_resumes_bit_for_bit(tmp_path, disk):
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 4000, tmp_path / "d.zarr", seed=1, chunk_rows=1000,
                                 missing=0.05)
    (tmp_path / "one.yaml").write_text(ASIA_LATENT + "tol: 0.0\nmax_iter: 1\n")
    (tmp_path / "six.yaml").write_text(ASIA_LATENT + "tol: 0.0\nmax_iter: 6\n")
    # the disk is sized for one iteration of the checkpoint, not two (the older goes once the newer is complete)
    probe = run("fit", tmp_path / "one.yaml", tmp_path / "d.zarr", "--out", tmp_path / "p.zarr", "--workers", "1",
                "--checkpoint", disk / "probe")
    assert probe.returncode == 3, probe.stderr
    used = shutil.disk_usage(disk).used
    shutil.rmtree(disk / "probe")
    _remount(disk, f"size={(used * 3 // 2) // 4096 * 4096 + 4096}")
    full = run("fit", tmp_path / "six.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr", "--workers", "1",
               "--checkpoint", disk / "ck")
    line = error_line(full, 74)
    # the file being written when the disk filled: one of the second iteration's, or the pointer to it
    assert "No space left on device" in line, line
    assert str(disk / "ck" / "iteration-000002") in line or f"'{disk / 'ck' / 'LATEST'}'" in line, line
    assert "iteration-000001 is complete" in line and "--resume" in line, line
    assert not (tmp_path / "m.zarr").exists()
    assert (disk / "ck" / "LATEST").read_text().splitlines()[0] == "iteration-000001"
    assert sorted(p.name for p in (disk / "ck").iterdir()) == ["FINGERPRINT.json", "LATEST", "iteration-000001"]
    _remount(disk, "size=64m")  # space freed: the previous iteration resumes
    resumed = run("fit", tmp_path / "six.yaml", tmp_path / "d.zarr", "--out", tmp_path / "m.zarr", "--workers",
                  "1", "--checkpoint", disk / "ck", "--resume")
    assert resumed.returncode == 3, resumed.stderr
    whole = run("fit", tmp_path / "six.yaml", tmp_path / "d.zarr", "--out", tmp_path / "u.zarr", "--workers", "1")
    assert whole.returncode == 3, whole.stderr
    a, b = dpgm.load(tmp_path / "m.zarr"), dpgm.load(tmp_path / "u.zarr")
    for v in a.variables:
        assert np.array_equal(a.cpds[v].values, b.cpds[v].values), v


def test_python_checkpoint_write_errors_are_os_errors_naming_the_file(tmp_path, disk):
    """ENOSPC and EROFS reach Python as CheckpointWriteError (an OSError with the errno and the file), never as a
    fit that stopped without converging."""
    truth = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(truth, 2000, tmp_path / "d.zarr", seed=1, chunk_rows=500,
                                        missing=0.05).drop_vars("either")
    model = dpgm.BayesianNetwork.from_edges(truth.edges, truth.states)
    options = {"method": "em", "random_state": 0, "tol": 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dpgm.fit(model, data, max_iter=2, checkpoint=str(disk / "ck"), **options)
        used = shutil.disk_usage(disk).used
        _remount(disk, f"size={used + 4096}")  # one page more than one iteration: the next cannot be written
        with pytest.raises(CheckpointWriteError) as full:
            dpgm.fit(model, data, max_iter=6, resume=str(disk / "ck"), checkpoint=str(disk / "ck"), **options)
        assert isinstance(full.value, OSError) and full.value.errno == errno.ENOSPC
        assert full.value.filename.startswith(str(disk / "ck" / "iteration-000003"))
        assert (disk / "ck" / "LATEST").read_text().splitlines()[0] == "iteration-000002"
        _remount(disk, "size=64m,ro")
        with pytest.raises(CheckpointWriteError) as readonly:
            dpgm.fit(model, data, max_iter=6, resume=str(disk / "ck"), checkpoint=str(disk / "ck"), **options)
        assert readonly.value.errno == errno.EROFS and str(disk / "ck") in readonly.value.filename


# ---------------------------------------------------------------- sizes refused before any allocation


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizes")
    codes = np.random.default_rng(0).integers(0, 4, (600, 20)).astype(np.int8)
    dpgm.write_dataset(xr.Dataset({"obs": (("row", "time"), codes, {"states": list("abcd")})}), root / "seq.zarr",
                       chunk_rows=500)
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, root / "asia.zarr", seed=0, chunk_rows=500)
    x = np.random.default_rng(1).normal(size=(2000, 3))
    dpgm.write_dataset(dpgm.from_pandas(pd.DataFrame(x, columns=["u", "v", "w"])), root / "x.zarr", chunk_rows=500)
    return root


@pytest.mark.parametrize("spec, data, words", [
    ("model: hmm\nn_states: 1000000\nsymbols: [a, b, c, d]\nvariable: obs\n", "seq.zarr",
     ["'state'", "1,000,000 states", "n_states", "TiB"]),
    ("model: latent_class\nn_classes: 1000000\nobserved: [xray, dysp, tub]\n", "asia.zarr",
     ["'class'", "1,000,000 states", "chunk of 500 rows"]),
    ("model: gaussian_mixture\nn_components: 1000000\nvariables: [u, v, w]\n", "x.zarr",
     ["1,000,000 components", "chunk of 500 rows"]),
], ids=["hmm-hidden-states", "latent-classes", "mixture-components"])
def test_cli_refuses_hidden_and_latent_states_that_cannot_be_held(sequences, tmp_path, spec, data, words):
    (tmp_path / "spec.yaml").write_text(spec)
    started = time.perf_counter()
    line = error_line(run("fit", tmp_path / "spec.yaml", sequences / data, "--out", tmp_path / "m.zarr",
                          "--workers", "1", timeout=120), 78)
    assert time.perf_counter() - started < 60
    for word in words:
        assert word in line, (word, line)
    assert not (tmp_path / "m.zarr").exists()


def test_python_hybrid_em_with_a_million_latent_states_is_refused_before_any_pass(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=2000), "y": rng.normal(size=2000)})
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=500)
    network = dpgm.HybridNetwork([("z", "y"), ("x", "y")], families={"x": "gaussian", "y": "gaussian"},
                                 states={"z": [str(i) for i in range(10**6)]})
    with no_pass(), pytest.raises(TableTooLarge, match=r"latent variable 'z' has 1,000,000 states"):
        dpgm.fit(network, dpgm.open_dataset(tmp_path / "d.zarr"), method="em")


def test_a_specification_whose_model_is_a_list_is_exit_78_naming_the_key(sequences, tmp_path):
    (tmp_path / "spec.yaml").write_text("model: [glm]\nchild: xray\nparents: [smoke]\n")
    line = error_line(run("fit", tmp_path / "spec.yaml", sequences / "asia.zarr", "--out", tmp_path / "m.zarr"), 78)
    assert "'model'" in line and "['glm']" in line and "a string" in line


# ---------------------------------------------------------------- collinear GLM terms


@pytest.fixture(scope="module")
def collinear(tmp_path_factory):
    root = tmp_path_factory.mktemp("collinear")
    rng = np.random.default_rng(3)
    n = 3000
    w = rng.normal(size=n)
    frame = pd.DataFrame({"x": np.full(n, 5.0), "w": w, "v": 2.0 * w - 1.0,
                          "y": 1.0 + 0.5 * w + rng.normal(size=n),
                          "b": pd.Categorical(np.where(rng.random(n) < 1 / (1 + np.exp(-w)), "yes", "no"))})
    dpgm.write_dataset(dpgm.from_pandas(frame), root / "d.zarr", chunk_rows=1000)
    return root, frame


def _design(frame: pd.DataFrame, parents: list[str]) -> np.ndarray:
    return np.column_stack([np.ones(len(frame)), *(frame[p].to_numpy() for p in parents)])


@pytest.mark.parametrize("family, child, parents, named", [
    ("gaussian", "y", ["x", "w"], ["Intercept", "x"]),
    ("bernoulli", "b", ["w", "x"], ["Intercept", "x"]),
    ("gaussian", "y", ["w", "v"], ["Intercept", "w", "v"]),
], ids=["constant-gaussian", "constant-logistic", "linear-combination"])
def test_collinear_glm_terms_are_exit_65_naming_them(collinear, tmp_path, family, child, parents, named):
    import statsmodels.api as sm

    root, frame = collinear
    design = _design(frame, parents)
    assert np.linalg.matrix_rank(design) < design.shape[1]  # the oracles: the design is singular
    assert sm.GLM(np.zeros(len(frame)), design).df_model + 1 < design.shape[1]  # statsmodels: rank - 1
    (tmp_path / "glm.yaml").write_text(json.dumps({"model": "glm", "child": child, "parents": parents,
                                                   "family": family}))
    line = error_line(run("fit", tmp_path / "glm.yaml", root / "d.zarr", "--out", tmp_path / "m.zarr",
                          "--workers", "1"), 65)
    assert f"the terms {named} are collinear" in line and "l2" in line, line
    assert not (tmp_path / "m.zarr").exists()


def test_an_l2_penalty_fits_a_collinear_design_as_ridge_regression(collinear, tmp_path):
    """The documented way to proceed: l2 > 0. Oracle: the penalized normal equations solved by NumPy, rel 1e-8
    (the constant's coefficient is 0 in exact arithmetic, the unpenalized intercept taking its part: atol 1e-9)."""
    root, frame = collinear
    (tmp_path / "glm.yaml").write_text(json.dumps({"model": "glm", "child": "y", "parents": ["x", "w"],
                                                   "family": "gaussian", "l2": 2.0}))
    result = run("fit", tmp_path / "glm.yaml", root / "d.zarr", "--out", tmp_path / "m.zarr", "--workers", "1")
    assert result.returncode == 0, result.stderr
    design = _design(frame, ["x", "w"])
    expected = np.linalg.solve(design.T @ design + np.diag([0.0, 2.0, 2.0]), design.T @ frame["y"].to_numpy())
    fitted = dpgm.load(tmp_path / "m.zarr").coefficients
    np.testing.assert_allclose(fitted.sel(term=["Intercept", "x", "w"]).values, expected, rtol=1e-8, atol=1e-9)


def test_a_well_conditioned_design_is_not_refused(collinear):
    """The rank check is no false alarm: a parent with an offset (mean 1e3, sd 1) fits as statsmodels does."""
    import statsmodels.api as sm

    _, frame = collinear
    data = frame.assign(o=1e3 + frame["w"])
    fitted = dpgm.fit(dpgm.GLMConditional("y", ["o"], "gaussian"), dpgm.from_pandas(data[["o", "y"]]))
    reference = sm.GLM(data["y"], sm.add_constant(data["o"])).fit()
    np.testing.assert_allclose(fitted.model.coefficients.values, reference.params.values, rtol=1e-8)

"""``dpgm.fit(hmm, data, sequence=...)``: the long layout (one row per step), sequences crossing chunks.

Oracle: the same sequences as rows of (``row``, ``time``) arrays, fitted by the same Baum-Welch
(itself equal to hmmlearn iteration by iteration: tests/api/test_hmm*.py), and hmmlearn's
``score`` / ``decode`` / ``predict_proba`` directly: every iteration's log-likelihood rel 1e-9,
posteriors rel 1e-9, Viterbi states equal (continuous emissions: no ties); ``dpgm.score`` per
sequence against hmmlearn's ``score`` of each sequence and dpgm's score of the rows layout, rel 1e-9.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from hmmlearn.hmm import CategoricalHMM, GaussianHMM

import dpgm
from dpgm.data.schema import state_attrs

LENGTHS = [37, 5, 120, 1, 64, 90]  # sequence 2 crosses two chunks of 40 rows


def _truth() -> GaussianHMM:
    truth = GaussianHMM(n_components=2, covariance_type="diag", init_params="")
    truth.startprob_, truth.transmat_ = np.array([0.6, 0.4]), np.array([[0.85, 0.15], [0.25, 0.75]])
    truth.means_, truth.covars_ = np.array([[0.0, 1.0], [3.0, -1.0]]), np.array([[1.0, 0.5], [0.7, 1.2]])
    return truth


def _layouts(tmp_path):
    truth = _truth()
    pieces = [truth.sample(n, random_state=i)[0] for i, n in enumerate(LENGTHS)]
    steps = np.concatenate(pieces)
    ids = np.repeat(np.arange(len(LENGTHS)), LENGTHS).astype(float)
    long = xr.Dataset({"sequence": ("row", ids), "x": ("row", steps[:, 0]), "y": ("row", steps[:, 1])})
    dpgm.write_dataset(long, tmp_path / "long.zarr", chunk_rows=40)
    wide = np.full((len(LENGTHS), max(LENGTHS), 2), np.nan)
    for i, piece in enumerate(pieces):
        wide[i, :len(piece)] = piece
    rows = xr.Dataset({"x": (("row", "time"), wide[..., 0]), "y": (("row", "time"), wide[..., 1])})
    return truth, steps, dpgm.open_dataset(tmp_path / "long.zarr"), rows


def _start() -> dpgm.HiddenMarkovModel:
    structure = dpgm.hmm(2, emissions={("x", "y"): "gaussian"})
    family = structure.emissions[0].with_arrays(np.array([[0.5, 0.5], [2.0, 0.0]]), np.ones((2, 2)),
                                                structure.labels)
    return structure.with_parameters(np.array([0.5, 0.5]), np.array([[0.7, 0.3], [0.3, 0.7]]), [family])


def test_the_long_layout_fits_as_the_same_sequences_stored_as_rows(tmp_path, client):
    truth, steps, long, rows = _layouts(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        split = dpgm.fit(_start(), long, sequence="sequence", init="model", tol=0, max_iter=8, reg_covar=0.0,
                         client=client)
        whole = dpgm.fit(_start(), rows, init="model", tol=0, max_iter=8, reg_covar=0.0)
    np.testing.assert_allclose([h["loglik"] for h in split.history], [h["loglik"] for h in whole.history],
                               rtol=1e-9)
    assert split.passes == 2 * 8  # two passes per E step (segments, then forward-backward), whatever the lengths
    assert split.info["sequences"] == len(LENGTHS)
    np.testing.assert_allclose(split.model.emissions[0].means.values, whole.model.emissions[0].means.values,
                               rtol=1e-8)
    assert split.model.sequence == "sequence"

    # decoding the long layout: hmmlearn's on each whole sequence, from the split model's parameters
    reference = GaussianHMM(n_components=2, covariance_type="diag", init_params="")
    reference.startprob_, reference.transmat_ = split.model.start.values, split.model.transition.values
    reference.means_ = split.model.emissions[0].means.values
    reference.covars_ = split.model.emissions[0].covariances.values
    posteriors = dpgm.predict_proba(split.model, long, "state").values
    paths = dpgm.predict(split.model, long).values
    np.testing.assert_allclose(posteriors, reference.predict_proba(steps, LENGTHS), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(paths, reference.decode(steps, LENGTHS)[1])
    assert reference.score(steps, LENGTHS) == pytest.approx(split.history[-1]["loglik"], rel=1e-3)


def test_the_long_layout_refuses_rows_that_are_not_one_step_each(tmp_path):
    _, _, _, rows = _layouts(tmp_path)
    with pytest.raises(dpgm.DataError, match="long layout"):
        dpgm.fit(_start(), rows.assign(sequence=("row", np.arange(len(LENGTHS), dtype=float))), sequence="sequence",
                 init="model")


# ---------------------------------------------------------------- per-sequence scores of the long layout

SCORED = [37, 5, 120, 1, 64, 90, 3, 200]  # lengths of the sequences scored below


def _categorical() -> tuple[dpgm.HiddenMarkovModel, CategoricalHMM]:
    rng = np.random.default_rng(5)
    model = dpgm.hmm(3, list("abcd"), variable="obs").with_arrays(
        rng.dirichlet(np.full(3, 3.0)), rng.dirichlet(np.ones(3), 3) * 0.5 + np.eye(3) * 0.5,
        rng.dirichlet(np.ones(4) * 0.7, 3))
    reference = CategoricalHMM(n_components=3, n_features=4, init_params="")
    reference.startprob_, reference.transmat_, reference.emissionprob_ = model.arrays()
    return model, reference


def _scored_layouts(reference: CategoricalHMM, lengths: list[int], missing: float = 0.0):
    """The sequences one row per step (ids labelled ``s0, s3, ...``), and as rows of ``(row, time)``."""
    pieces = [reference.sample(n, random_state=10 + i)[0][:, 0].astype(np.int8) for i, n in enumerate(lengths)]
    rng = np.random.default_rng(1)
    pieces = [np.where(rng.random(len(p)) < missing, np.int8(-1), p) for p in pieces]
    labels = [f"s{i}" for i in range(3 * len(lengths))]
    ids = np.repeat(np.arange(len(lengths)) * 3, lengths).astype(np.int16)
    long = xr.Dataset({"sequence": ("row", ids, state_attrs(labels, "int16")),
                       "obs": ("row", np.concatenate(pieces), state_attrs(list("abcd")))})
    wide = np.full((len(lengths), max(lengths)), -1, dtype=np.int8)
    for i, piece in enumerate(pieces):
        wide[i, :len(piece)] = piece
    rows = xr.Dataset({"obs": (("row", "time"), wide, state_attrs(list("abcd")))})
    return pieces, long, rows, [labels[3 * i] for i in range(len(lengths))]


@pytest.mark.parametrize("chunk_rows", [1, 7, 40, 119, 519, 10_000])
def test_the_long_layout_scores_each_sequence_as_hmmlearn_and_as_rows(tmp_path, client, chunk_rows):
    """One value per sequence, labelled by its id, equal to hmmlearn's ``score`` of the sequence alone and to
    dpgm's score of the same sequences stored as rows (rel 1e-9), for chunks that cut sequences anywhere (one
    row per chunk; a sequence over many chunks; all in one chunk). Their total is the fit's log-likelihood."""
    model, reference = _categorical()
    pieces, long, rows, labels = _scored_layouts(reference, SCORED)
    dpgm.write_dataset(long, tmp_path / "long.zarr", chunk_rows=chunk_rows)
    stored = dpgm.open_dataset(tmp_path / "long.zarr")
    scores = dpgm.score(model.with_sequence("sequence"), stored, client=client).compute()
    assert scores.dims == ("sequence",) and list(scores.coords["sequence"].values) == labels
    expected = [reference.score(piece.reshape(-1, 1)) for piece in pieces]
    np.testing.assert_allclose(scores.values, expected, rtol=1e-9)
    np.testing.assert_allclose(scores.values, dpgm.score(model, rows).values, rtol=1e-9)
    assert float(scores.total) == pytest.approx(sum(expected), rel=1e-9)
    assert float(scores.rows) == len(SCORED)


def test_missing_steps_score_as_the_same_sequences_stored_as_rows(tmp_path, client):
    """Missing steps (-1) are summed out: the same values as the rows layout's forward algorithm (rel 1e-9)."""
    model, reference = _categorical()
    _, long, rows, _ = _scored_layouts(reference, SCORED, missing=0.3)
    dpgm.write_dataset(long, tmp_path / "long.zarr", chunk_rows=23)
    scores = dpgm.score(model.with_sequence("sequence"), dpgm.open_dataset(tmp_path / "long.zarr"), client=client)
    np.testing.assert_allclose(scores.values, dpgm.score(model, rows).values, rtol=1e-9)


@pytest.mark.parametrize("chunk_rows", [250, 2999])
def test_one_long_sequence_over_many_chunks_scores_as_hmmlearn(tmp_path, client, chunk_rows):
    model, reference = _categorical()
    pieces, long, _, labels = _scored_layouts(reference, [3000])
    dpgm.write_dataset(long, tmp_path / "long.zarr", chunk_rows=chunk_rows)
    scores = dpgm.score(model.with_sequence("sequence"), dpgm.open_dataset(tmp_path / "long.zarr"), client=client)
    assert list(scores.coords["sequence"].values) == labels
    np.testing.assert_allclose(scores.values, [reference.score(pieces[0].reshape(-1, 1))], rtol=1e-9)


def test_gaussian_long_layout_scores_as_hmmlearn_and_refuses_to_write(tmp_path):
    """Sequences over ``float`` ids, in memory (the default scheduler): hmmlearn's ``GaussianHMM.score`` per
    sequence (rel 1e-9). Scores per sequence do not fit the rows of the store: ``write=True`` is refused."""
    truth, steps, long, _ = _layouts(tmp_path)
    model = _start().with_sequence("sequence")
    reference = GaussianHMM(n_components=2, covariance_type="diag", init_params="")
    reference.startprob_, reference.transmat_ = model.start.values, model.transition.values
    reference.means_, reference.covars_ = model.emissions[0].means.values, model.emissions[0].covariances.values
    edges = np.cumsum([0, *LENGTHS])
    scores = dpgm.score(model, long.load())
    np.testing.assert_allclose(scores.coords["sequence"].values, np.arange(len(LENGTHS)))
    np.testing.assert_allclose(scores.values, [reference.score(steps[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)],
                               rtol=1e-9)
    with pytest.raises(ValueError, match="one per sequence"):
        dpgm.score(model, long, write=True)

"""``dpgm.fit(hmm, data, sequence=...)``: the long layout (one row per step), sequences crossing chunks.

Oracle: the same sequences as rows of (``row``, ``time``) arrays, fitted by the same Baum-Welch
(itself equal to hmmlearn iteration by iteration: tests/api/test_hmm*.py), and hmmlearn's
``score`` / ``decode`` / ``predict_proba`` directly: every iteration's log-likelihood rel 1e-9,
posteriors rel 1e-9, Viterbi states equal (continuous emissions: no ties).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from hmmlearn.hmm import GaussianHMM

import dpgm

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

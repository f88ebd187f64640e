"""Every kind cross-validates: the held-out log-likelihood of each fold from a chunked Zarr store on the
session's two worker processes, every fold fitted in shared passes, equals a separate in-memory fit on the
fold's training rows (``data.isel(row=...)``, no weights) scored on its held-out rows.

The per-kind oracle tests (``tests/api/test_score_*.py``, ``tests/api/test_cross_validation.py``) say the
fits and scores are right; here the folds' fits on weighted rows are compared with fits on the subsets
themselves. Closed-form fits agree to rounding; iterative fits stop at their tolerance from the same start on
the same rows, so their logliks agree to ``rel=1e-6``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dpgm
from dpgm.stats.folds import fold_of

from .builders import CASE_IDS, case_named

FOLDS = 3


def _separately(candidate: dpgm.Candidate, data, folds: int) -> list[float]:
    """Each fold's held-out log-likelihood from a fit on the other folds' rows alone."""
    fold = fold_of(np.arange(data.sizes["row"]), folds, 0)
    totals = []
    for k in range(folds):
        train, test = data.isel(row=np.flatnonzero(fold != k)), data.isel(row=np.flatnonzero(fold == k))
        options = dict(candidate.options)
        fitted = dpgm.fit(candidate.model, train, candidate.method, **options).model
        totals.append(float(dpgm.score(fitted, test).total))
    return totals


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_folds_from_zarr_on_two_workers_equal_separate_fits_on_the_training_rows(spec_name, tmp_path, client):
    case = case_named(spec_name)
    options = {k: v for k, v in case.options.items() if k != "method"}
    candidate = dpgm.Candidate(case.model(), case.method, options)
    data = case.data()
    path = tmp_path / "data.zarr"
    dpgm.write_dataset(data, path, chunk_rows=case.chunk_rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.cross_validate([candidate], dpgm.open_dataset(path), folds=FOLDS, client=client,
                                     progress=False)
        expected = _separately(candidate, data, FOLDS)
    np.testing.assert_allclose(result.loglik.values[0], expected, rtol=1e-6)
    fold = fold_of(np.arange(data.sizes["row"]), FOLDS, 0)
    np.testing.assert_array_equal(result.rows.values[0], np.bincount(fold, minlength=FOLDS))
    assert float(result.mean_loglik_per_row[0]) == pytest.approx(sum(expected) / data.sizes["row"], rel=1e-6)

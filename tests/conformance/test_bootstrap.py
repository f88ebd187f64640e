"""Every kind bootstraps: each replicate fitted from a chunked Zarr store on the session's two worker processes,
all replicates in shared passes, equals a separate in-memory fit of the same kind on the data weighted by the
replicate's Poisson weights (:func:`dpgm.stats.resample.poisson_weights`, whose values
``tests/api/test_bootstrap.py`` checks against an independent implementation).

EM replicates of methods that take ``init`` start from the fit on the data (``init="model"``, one start), and so
does the separate fit; the others start as the fit on the data does (the same ``random_state``). Closed-form fits
agree to rounding; iterative fits stop at their tolerance from the same start on the same weights (rtol 1e-6).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

import dpgm
from dpgm.api.kinds import kind_of
from dpgm.models.parameters import parameter_tables
from dpgm.stats.resample import poisson_weights

from .builders import CASE_IDS, case_named

REPLICATES = 3


@pytest.mark.slow
@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_replicates_from_zarr_on_two_workers_equal_separate_weighted_fits(spec_name, tmp_path, client):
    case = case_named(spec_name)
    options = {k: v for k, v in case.options.items() if k != "method"}
    data = case.data()
    path = tmp_path / "data.zarr"
    dpgm.write_dataset(data, path, chunk_rows=case.chunk_rows)
    model = case.model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.bootstrap(model, dpgm.open_dataset(path), replicates=REPLICATES, random_state=5,
                                method=case.method, options=options, client=client, progress=False)
        kind = kind_of(model)
        method = result.estimate.method
        from_estimate = method in kind.em_methods and "init" in kind.methods[method].options
        for b in range(REPLICATES):
            weights = poisson_weights(np.arange(data.sizes["row"]), b, 5).astype(np.float64)
            weighted = data.assign(weight=xr.DataArray(weights, dims=("row",)))
            if from_estimate:
                separate = dpgm.fit(result.estimate.model, weighted, method, **{**options, "init": "model",
                                                                                  "n_init": 1})
            else:
                separate = dpgm.fit(model, weighted, method, **options)
            expected = parameter_tables(separate.model)
            for name, table in expected.items():
                np.testing.assert_allclose(result.replicates[name].isel(replicate=b).values, table.values,
                                           rtol=1e-6, atol=1e-9, err_msg=f"{spec_name} replicate {b} {name}")
            assert float(result.replicates.loglik[b]) == pytest.approx(separate.loglik, rel=1e-6)
    assert set(result.standard_errors.data_vars) == set(result.parameters)

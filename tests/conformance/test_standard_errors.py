"""Every kind's fits have asymptotic standard errors exactly where the registry declares them
(``Method.standard_errors``, what ``dpgm fit --standard-errors`` checks before any pass): labelled like
the parameters they belong to, nonnegative, and positive somewhere (NaN where the features identify no weight, as a
log-linear model's one indicator per margin cell). Elsewhere ``standard_errors``
raises ``NotImplementedError`` naming :func:`dpgm.bootstrap`. The values are checked against outside
oracles in ``tests/api/test_standard_errors.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dpgm
from dpgm.api.kinds import kind_of
from dpgm.models.parameters import parameter_tables

from .builders import CASE_IDS, case_named


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_standard_errors_exist_where_declared_and_are_labelled_like_the_parameters(spec_name):
    case = case_named(spec_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(case.model(), case.data(), **case.options)
    declared = kind_of(result.model).methods[result.method].standard_errors
    if not declared:
        with pytest.raises(NotImplementedError, match="dpgm.bootstrap"):
            _ = result.standard_errors
        return
    errors = result.standard_errors
    parameters = parameter_tables(result.model)
    assert set(errors.data_vars) <= set(parameters)
    for name, error in errors.data_vars.items():
        assert error.dims == parameters[name].dims, name
        for dim in error.dims:
            if dim in parameters[name].coords:
                assert list(error[dim].values) == list(parameters[name][dim].values), (name, dim)
        finite = error.values[np.isfinite(error.values)]
        assert (finite >= 0).all(), name  # 0 where the estimate is 0 or 1 (asia's 'either' is an OR)
    values = np.concatenate([e.values.ravel() for e in errors.data_vars.values()])
    if kind_of(result.model).name == "LogLinearModel" and result.model.margins is not None:
        assert np.isnan(values).all()  # one indicator per margin cell: no single weight is identified
    else:
        assert np.nanmax(values) > 0
    interval = result.confidence_interval(0.9)
    for name in errors.data_vars:
        low, high = interval[name].sel(bound="lower"), interval[name].sel(bound="upper")
        assert bool(((low <= parameters[name]) & (parameters[name] <= high)).where(errors[name].notnull(), True).all())

"""Every kind's fits have asymptotic standard errors exactly where the registry declares them
(``Method.standard_errors``, what ``dpgm fit --standard-errors`` checks before any pass): labelled like
the parameters they belong to, nonnegative, and positive somewhere (NaN where the features identify no weight, as a
log-linear model's one indicator per margin cell). Elsewhere ``standard_errors``
raises ``NotImplementedError`` naming :func:`dpgm.bootstrap`. The values are checked against outside
oracles in ``tests/api/test_standard_errors.py``.

The same holds for every (kind, method) pair of the registry (each with its case in ``METHOD_CASES``), and
methods that reach the same maximum-likelihood estimate on the same data have the same standard errors
(``SAME_ERRORS_AS``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.stats
import xarray as xr

import dpgm
from dpgm.api.kinds import kind_named, kind_of, kinds
from dpgm.models.parameters import parameter_tables

from .builders import CASE_IDS, METHOD_CASES, MethodCase, case_named


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


PAIRS = [pytest.param(kind.name, method, id=f"{kind.name}-{method}") for kind in kinds() for method in kind.methods]

# pair -> (the kind's reference method, rtol): fitted to the pair's own model and data (METHOD_CASES) with the
# reference pair's options, the two fits reach the same maximum-likelihood estimate, so their standard errors
# are equal. The references' values are checked against outside oracles: ipf's and newton's against statsmodels'
# Poisson GLM (tests/api/test_markov_standard_errors.py, tests/api/test_standard_errors.py), mle's against
# statsmodels' proportion_confint, ipf's for a Gaussian graphical model against a numerical Hessian of SciPy's
# log-likelihood (tests/api/test_standard_errors.py).
SAME_ERRORS_AS: dict[tuple[str, str], tuple[str, float]] = {
    # the same junction-tree formula (inverse of n Cov(F)) at estimates converged to tol 1e-12, which differ from
    # ipf's by ~1e-10 relative: rel 1e-8
    ("MarkovNetwork", "lbfgs"): ("ipf", 1e-8),
    ("MarkovNetwork", "newton"): ("ipf", 1e-8),
    ("MarkovNetwork", "gis"): ("ipf", 1e-8),
    # a decomposable model: closed_form's estimate is exact, ipf's after one sweep; the same formula: rel 1e-10
    ("MarkovNetwork", "closed_form"): ("ipf", 1e-10),
    # EM on complete data: its observed information equals the complete-data (Fisher) information, but is formed
    # by finite differences (dpgm.api.observed_information, accurate to ~1e-6 here): rel 1e-4, as the finite
    # difference oracles of tests/api/test_em_standard_errors.py
    ("MarkovNetwork", "em"): ("ipf", 1e-4),
    ("LogLinearModel", "lbfgs"): ("newton", 1e-8),  # as the Markov network's lbfgs and gis
    ("LogLinearModel", "gis"): ("newton", 1e-8),
    ("LogLinearModel", "em"): ("newton", 1e-4),  # as the Markov network's em
    ("BayesianNetwork", "em"): ("mle", 1e-4),  # as the Markov network's em
    # a decomposable model: the same formula (the inverse Fisher information of the free precision entries) at the
    # same estimate (ipf converges in one sweep): rel 1e-10
    ("GaussianGraphicalModel", "closed_form"): ("ipf", 1e-10),
}


def _fit(case: MethodCase, options: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        return dpgm.fit(case.model(), case.data(), **options)


def _assert_labelled_like_the_parameters(errors, model) -> None:
    """Each table of standard errors is one of the model's parameters, over its dims and labels; every value is
    finite and nonnegative, 0 only where the estimate is pinned at 0 or 1 (a deterministic CPT entry, a canonical
    potential's reference cell) and positive somewhere."""
    parameters = parameter_tables(model)
    assert errors.data_vars, "no standard errors"
    assert set(errors.data_vars) <= set(parameters), sorted(set(errors.data_vars) - set(parameters))
    for name, error in errors.data_vars.items():
        parameter = parameters[name]
        assert error.dims == parameter.dims, name
        for dim in error.dims:
            if dim in parameter.coords:
                assert list(error[dim].values) == list(parameter[dim].values), (name, dim)
        assert np.isfinite(error.values).all(), (name, error.values)
        assert (error.values >= 0).all(), (name, error.values)
        pinned = np.isin(parameter.values, [0.0, 1.0])
        assert (error.values[~pinned] > 0).all(), (name, error.values, parameter.values)
    assert max(float(e.max()) for e in errors.data_vars.values()) > 0


def _dirichlet_posterior_deviations(data, errors, equivalent_sample_size: float) -> dict:
    """Each CPT's posterior standard deviations under BDeu: per parent configuration, SciPy's ``dirichlet.var`` of
    the counts (pandas) plus ``ess / (q r)``, labelled like ``errors``."""
    frame = dpgm.to_pandas(data)
    expected = {}
    for name, error in errors.data_vars.items():
        child, parents = name[len("table:"):], [d for d in error.dims if d != name[len("table:"):]]
        counts = frame.groupby([child, *parents], observed=False).size().to_xarray()
        counts = counts.sel({d: [str(x) for x in error[d].values] for d in error.dims}).transpose(child, *parents)
        alpha = counts.values.reshape(counts.shape[0], -1).astype(float) + equivalent_sample_size / counts.size
        deviations = np.stack([np.sqrt(scipy.stats.dirichlet.var(alpha[:, j])) for j in range(alpha.shape[1])], 1)
        expected[name] = xr.DataArray(deviations.reshape(counts.shape), dims=counts.dims,
                                      coords={d: error[d].values for d in counts.dims}).transpose(*error.dims)
    return expected


@pytest.mark.parametrize(("kind_name", "method"), PAIRS)
def test_every_registered_method_has_standard_errors_exactly_where_declared_and_they_equal_the_reference_methods(
        kind_name, method):
    """Every (kind, method) pair of the registry, read from ``kinds()``: a fit of the pair's case
    (``METHOD_CASES``) has standard errors if and only if ``Method.standard_errors`` declares them, labelled like the
    parameters, finite and positive (else ``NotImplementedError`` naming ``dpgm.bootstrap``). Oracle: methods that
    reach the same maximum-likelihood estimate on the same complete data have the standard errors of their kind's
    reference method (``SAME_ERRORS_AS``), whose values are checked against outside oracles (statsmodels, SciPy) in
    tests/api; ``bayes``'s are SciPy's Dirichlet posterior standard deviations (rel 1e-10: the same closed form).
    The single-method kinds' values (and a hybrid network's, whose ``mle`` and ``em`` fit different data) are
    checked in tests/api (test_standard_errors.py, test_em_standard_errors.py, test_hybrid.py)."""
    case = METHOD_CASES.get((kind_name, method))
    if case is None:
        pytest.fail(f"the registry declares method {method!r} of {kind_name} but tests/conformance/builders.py's "
                    "METHOD_CASES has no case for it: add a small model and data it fits")
    assert case.method == method
    declared = kind_named(kind_name).methods[method].standard_errors
    result = _fit(case, case.options)
    assert kind_of(result.model).name == kind_name
    assert result.method == method
    if not declared:
        with pytest.raises(NotImplementedError, match="dpgm.bootstrap"):
            _ = result.standard_errors
        return
    errors = result.standard_errors
    _assert_labelled_like_the_parameters(errors, result.model)
    if (kind_name, method) in SAME_ERRORS_AS:
        reference, rtol = SAME_ERRORS_AS[kind_name, method]
        expected = _fit(case, METHOD_CASES[kind_name, reference].options).standard_errors
        assert sorted(errors.data_vars) == sorted(expected.data_vars)
        for name, error in errors.data_vars.items():
            aligned = expected[name].transpose(*error.dims).sel({d: error[d].values for d in error.dims
                                                                  if d in error.coords})
            np.testing.assert_allclose(error.values, aligned.values, rtol=rtol, atol=0, err_msg=name)
    elif (kind_name, method) == ("BayesianNetwork", "bayes"):
        expected = _dirichlet_posterior_deviations(case.data(), errors, case.options["equivalent_sample_size"])
        for name, error in errors.data_vars.items():
            np.testing.assert_allclose(error.values, expected[name].values, rtol=1e-10, err_msg=name)

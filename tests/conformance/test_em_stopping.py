"""EM's stopping rule for every EM method of the registry: ``converged`` means within ``tol`` of the maximum.

Parametrised over the registry's EM methods, so a new one is checked at once. The oracle is the
maximum each run heads to, taken by a long run of the same method from the same start (``tol=1e-14``,
up to 20,000 iterations): plain EM's fixed point for plain EM, SQUAREM's for the default. The rule is
checked against an enumerated likelihood's L-BFGS-B maximum in ``tests/algorithms/test_stopping.py``.
"""

from __future__ import annotations

import pytest

import dpgm

from .test_registry import EM_PAIRS, _em_case

TOL = 1e-8
LONG = 1e-14


@pytest.mark.parametrize(("kind", "method"), EM_PAIRS, ids=[f"{k.name}-{m}" for k, m in EM_PAIRS])
@pytest.mark.parametrize("accelerate", ["default", None])
def test_a_converged_em_fit_is_within_tol_of_its_maximum(kind, method, accelerate):
    case = _em_case(kind, method)
    model, data = case.model(), case.data()
    options = {k: v for k, v in case.options.items() if k in kind.methods[method].options}
    options = {k: v for k, v in options.items() if k not in ("tol", "max_iter")}
    options |= {"method": method, "n_init": 1, "random_state": 0}
    if accelerate is None:
        options["accelerate"] = None
    fitted = dpgm.fit(model, data, tol=TOL, max_iter=5_000, **options)
    assert fitted.converged
    assert fitted.history[-1]["converged"] and 2 * fitted.history[-1]["gap"] <= TOL * abs(fitted.loglik)
    long = dpgm.fit(model, data, tol=LONG, max_iter=20_000, **options)
    assert long.loglik - fitted.loglik <= TOL * abs(long.loglik), (long.loglik - fitted.loglik) / abs(long.loglik)
    if accelerate == "default":  # SQUAREM by default: its records carry extrapolations, unless EM is done at once
        assert any(r["step"] == "extrapolated" for r in long.history) or long.n_iter <= 4

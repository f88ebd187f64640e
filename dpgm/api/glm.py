"""GLM conditionals: IRLS, one pass over the data per iteration, the small solve on the driver."""

from __future__ import annotations

from dpgm.algorithms.irls import irls
from dpgm.algorithms.result import FitResult
from dpgm.api.glm_node import check_first_pass, glm_result, plan_glm
from dpgm.api.spec_checks import spec_errors
from dpgm.errors import SpecError
from dpgm.models.glm import GLMConditional
from dpgm.stats.source import DataSource

__all__ = ["fit_glm"]


def fit_glm(model: GLMConditional, source: DataSource, method: str | None, *, tol, max_iter, callback,
            missing: str = "refuse") -> FitResult:
    """Fit a GLM conditional by IRLS (gaussian: least squares in two passes): see :func:`dpgm.fit`."""
    from dpgm.stats.irls import irls_pass

    if method not in (None, "irls"):
        raise ValueError(f"a GLMConditional is fitted by method='irls', not {method!r}")
    if missing not in ("refuse", "listwise"):
        raise ValueError(f"missing={missing!r}: expected 'refuse' or 'listwise'")
    if source.is_table:
        raise TypeError(f"a GLMConditional is fitted to a dataset of rows, got a {type(source.data).__name__}")
    plan = plan_glm(model, source.schema)

    def step(beta):
        statistics = irls_pass(source, plan.design, beta)
        if beta is None:
            check_first_pass(plan, statistics, missing)
        return statistics

    run = irls(step, labels=plan.labels, penalty=plan.penalty, tol=tol, max_iter=max_iter,
               closed_form=plan.design.glm.closed_form, callback=callback)
    return glm_result(plan, run, tol=tol)


def glm_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                  ) -> tuple[GLMConditional, None]:
    """A ``model: glm`` specification: ``child``, ``parents``, ``family`` and the ridge penalty ``l2``."""
    parents = spec.get("parents", [])
    if not isinstance(spec.get("child"), str) or not isinstance(parents, list):
        raise SpecError("a glm needs 'child' (a variable name) and 'parents' (a list of names)")
    with spec_errors("glm"):
        return GLMConditional(spec["child"], parents, spec.get("family", "gaussian"), spec.get("l2", 0.0)), None

"""The one place a :class:`~dpgm.FitResult` is built and a :class:`~dpgm.ConvergenceWarning` raised."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

from dpgm.algorithms.goodness import GoodnessOfFit
from dpgm.algorithms.result import FitResult
from dpgm.errors import ConvergenceWarning

__all__ = ["fit_result", "warn_convergence"]

_PACKAGE = str(Path(__file__).resolve().parents[1])


def fit_result(model: Any, method: str, *, loglik: float, n_rows: float, n_params: int, converged: bool = True,
               n_iter: int = 0, history: list | None = None, passes: int = 1, info: dict | None = None,
               log_marginal_likelihood: float | None = None, g2: float | None = None,
               pearson: float | None = None, df: int | None = None, goodness: GoodnessOfFit | None = None,
               warn: bool = True) -> FitResult:
    """A fit's :class:`~dpgm.FitResult`; warns (:func:`warn_convergence`) when it stopped at ``max_iter``
    (``warn=False``: the caller words the warning itself). ``goodness`` (from the saturated table) sets
    ``g2``, ``pearson``, ``df`` and the identified ``n_params``."""
    info = dict(info or {})
    if goodness is not None:
        g2, pearson, df, n_params = goodness.g2, goodness.pearson, goodness.df, goodness.n_params
        info.update(goodness.info)
    result = FitResult(model=model, method=method, loglik=loglik, converged=converged, n_iter=n_iter, n_rows=n_rows,
                       n_params=n_params, history=list(history or []), g2=g2, pearson=pearson, df=df, passes=passes,
                       info=info, log_marginal_likelihood=log_marginal_likelihood)
    if warn and not converged:
        name = "EM" if method == "em" else method
        warn_convergence(f"{name} stopped after {n_iter} iterations without meeting tol")
    return result


def warn_convergence(message: str) -> None:
    """A :class:`~dpgm.ConvergenceWarning` attributed to the caller's line outside dpgm (``dpgm.fit(...)``)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, ConvergenceWarning, stacklevel=level)

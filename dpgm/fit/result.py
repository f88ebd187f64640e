"""The result of a fit: the fitted model, its history and goodness of fit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FitResult", "information_criteria", "log_iteration"]


@dataclass
class FitResult:
    """What :func:`dpgm.fit` returns.

    Attributes
    ----------
    model
        The fitted model (labelled parameters).
    method
        The algorithm that produced it.
    loglik
        Log-likelihood of the data under the fitted model (natural log).
    converged
        Whether the stopping rule was met before ``max_iter``.
    n_iter
        Iterations run (0 for closed forms).
    history
        One record per iteration: ``iteration``, ``loglik``, ``max_error`` (largest
        absolute difference between model and empirical marginals, where it
        applies), ``objective`` (penalized objective, where it applies) and
        ``seconds`` since the start.
    n_rows
        Rows (or total weight) the statistics came from.
    n_params
        Free parameters of the model (structural zeros excluded).
    g2, pearson, df
        Deviance and Pearson X^2 against the saturated model, and their degrees of
        freedom; ``None`` where the saturated table is too large to form.
    aic, bic
        ``-2 loglik + 2 n_params`` and ``-2 loglik + n_params log n_rows``.
    passes
        Passes over the data.
    info
        Method-specific extras (e.g. empty parent configurations).
    """

    model: Any
    method: str
    loglik: float
    converged: bool
    n_iter: int
    n_rows: float
    n_params: int
    history: list[dict[str, float]] = field(default_factory=list)
    g2: float | None = None
    pearson: float | None = None
    df: int | None = None
    passes: int = 1
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def aic(self) -> float:
        """Akaike information criterion."""
        return -2 * self.loglik + 2 * self.n_params

    @property
    def bic(self) -> float:
        """Bayesian information criterion."""
        return -2 * self.loglik + self.n_params * math.log(max(self.n_rows, 1.0))

    def to_dict(self) -> dict[str, Any]:
        """The result without the model, as plain JSON-able values."""
        return {
            "method": self.method,
            "converged": self.converged,
            "n_iter": self.n_iter,
            "loglik": self.loglik,
            "n_rows": self.n_rows,
            "n_params": self.n_params,
            "g2": self.g2,
            "pearson": self.pearson,
            "df": self.df,
            "aic": self.aic,
            "bic": self.bic,
            "passes": self.passes,
            "history": self.history,
            "info": {k: v for k, v in self.info.items() if isinstance(v, int | float | str | bool | list | dict)},
        }

    def summary(self) -> str:
        """A readable summary."""
        name = type(self.model).__name__
        lines = [
            f"{name} fitted by {self.method}: "
            + ("converged" if self.converged else "NOT converged")
            + f" after {self.n_iter} iterations, {self.passes} pass(es) over {self.n_rows:,.0f} rows",
            f"  log-likelihood {self.loglik:.6f}   parameters {self.n_params}",
            f"  AIC {self.aic:.3f}   BIC {self.bic:.3f}",
        ]
        if self.g2 is not None:
            lines.append(f"  G^2 {self.g2:.6g}   Pearson X^2 {self.pearson:.6g}   df {self.df}")
        if self.history:
            last = self.history[-1]
            if last.get("max_error") is not None:
                lines.append(f"  final max marginal error {last['max_error']:.3g}")
        for key, value in self.info.items():
            if isinstance(value, int | float | str):
                lines.append(f"  {key}: {value}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<FitResult {self.method} loglik={self.loglik:.6g} converged={self.converged} n_iter={self.n_iter}>"


def information_criteria(loglik: float, n_params: int, n_rows: float) -> tuple[float, float]:
    """AIC and BIC."""
    return -2 * loglik + 2 * n_params, -2 * loglik + n_params * math.log(max(n_rows, 1.0))


def log_iteration(history: list[dict], callback, record: dict) -> dict:
    """Append an iteration's record to the history and hand it to the callback."""
    history.append(record)
    if callback is not None:
        callback(record)
    return record

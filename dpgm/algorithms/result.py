"""The result of a fit: the fitted model, its history and goodness of fit."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from dpgm.algorithms.stopping import MARGIN

__all__ = ["Estimate", "FitResult", "information_criteria", "log_iteration", "log_step", "parameter_change"]


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
        applies), ``objective`` (penalized objective, where it applies),
        ``param_change`` (largest absolute change of a parameter since the previous
        record, on the scale the algorithm iterates: log potentials, weights,
        probabilities, precision entries, coefficients; None where there is no
        previous one) and ``seconds`` since the start.
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
    log_marginal_likelihood
        Bayesian (Dirichlet) score ``log P(data | structure)`` of a Bayesian network
        fitted with ``method="bayes"`` (BDeu, K2 or Dirichlet prior; natural log);
        ``None`` for other methods.
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
    log_marginal_likelihood: float | None = None

    @property
    def aic(self) -> float:
        """Akaike information criterion."""
        return -2 * self.loglik + 2 * self.n_params

    @property
    def bic(self) -> float:
        """Bayesian information criterion."""
        return -2 * self.loglik + self.n_params * math.log(max(self.n_rows, 1.0))

    @property
    def standard_errors(self) -> Any:
        """Asymptotic standard errors of the parameters, labelled like them (an ``xarray.Dataset`` named as
        :func:`dpgm.models.parameters.parameter_tables` names the parameters).

        A Bayesian network's CPT entries: ``sqrt(p (1 - p) / n_u)`` for the MLE, with ``n_u`` the
        rows (weight) of the entry's parent configuration (NaN where it has none); under a
        Dirichlet prior (``method="bayes"``), the posterior standard deviation ``sqrt(p (1 - p) /
        (n_u + a_u + 1))``, ``a_u`` the configuration's pseudo-counts. A GLM's (and a hybrid
        network's GLM nodes') coefficients: the inverse Fisher information's (statsmodels'
        ``bse``). A linear-Gaussian network's slopes and intercepts: each node's least-squares
        (statsmodels' OLS ``bse``); its residual variances: ``sqrt(2 / n) sigma^2``. A Gaussian
        graphical model's mean and covariance (``closed_form``, ``ipf``): the inverse Fisher
        information of the free precision entries, by the delta method
        (:mod:`dpgm.algorithms.information`). A log-linear model's weights and a Markov network's
        potentials in canonical form (unpenalised): the inverse of ``n Cov(F)`` from the junction
        tree (statsmodels' Poisson GLM ``bse`` with treatment-coded features), a potential's by the
        delta method ``phi se(log phi)``, NaN where the features do not identify it. An EM fit's (a
        Bayesian network's, hidden Markov model's, Gaussian mixture's, hybrid network's, log-linear
        model's or Markov network's, the latter's potentials in canonical form; up to 40 free parameters): the inverse observed information, by finite differences
        of the observed-data log-likelihood, formed when first asked for in two passes over the fit's
        data (:mod:`dpgm.api.observed_information`).

        Raises
        ------
        NotImplementedError
            The kind or method has no asymptotic standard errors yet (:func:`dpgm.bootstrap`
            gives bootstrap standard errors for every kind).
        """
        import xarray as xr

        tables = self.info.get("standard_errors") or {}
        if callable(tables):  # formed when asked for (an information matrix)
            try:
                tables = tables()
            except ValueError as error:
                raise NotImplementedError(f"{error}") from None
            self.info["standard_errors"] = tables
        tables = dict(tables)
        # a GLM's coefficients carry their own; an EM fit's M step's are those of complete data, too small
        saved = dict(self.model._to_store()) if hasattr(self.model, "_to_store") and self.method != "em" else {}
        for key, table in saved.items():
            if isinstance(key, str) and key.startswith("standard_errors"):
                tables["coefficients" + key[len("standard_errors"):]] = table
        if not tables:
            raise NotImplementedError(
                f"a {type(self.model).__name__} fitted by {self.method} has no asymptotic standard errors yet; "
                "dpgm.bootstrap(model, data) gives bootstrap standard errors for every kind")
        return xr.Dataset({name: table.rename(None) for name, table in tables.items()})

    def confidence_interval(self, level: float = 0.95) -> Any:
        """Wald intervals ``estimate -/+ z se`` (``z`` the standard normal's ``(1 + level) / 2`` quantile)
        of the parameters that have :attr:`standard_errors`, over ``bound`` (``lower``, ``upper``).

        Raises
        ------
        ValueError
            ``level`` not strictly between 0 and 1.
        NotImplementedError
            As :attr:`standard_errors`.
        """
        import xarray as xr
        from scipy.stats import norm

        from dpgm.models.parameters import parameter_tables

        if isinstance(level, bool) or not isinstance(level, float | int) or not 0 < level < 1:
            raise ValueError(f"level must be a number strictly between 0 and 1, got {level!r}")
        errors = self.standard_errors
        estimates = parameter_tables(self.model)
        z = float(norm.ppf((1 + level) / 2))
        bounds = {}
        for name in errors.data_vars:
            estimate, error = xr.align(estimates[name], errors[name], join="left")
            bounds[name] = xr.concat([estimate - z * error, estimate + z * error], dim="bound")
        return xr.Dataset(bounds).assign_coords(bound=["lower", "upper"]).assign_attrs(level=level)

    def to_dict(self) -> dict[str, Any]:
        """The result without the model, as plain JSON-able values (``log_marginal_likelihood``
        only where there is one)."""
        scores = {} if self.log_marginal_likelihood is None else {
            "log_marginal_likelihood": self.log_marginal_likelihood}
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
            **scores,
            "passes": self.passes,
            "history": self.history,
            "info": {k: v for k, v in self.info.items()
                     if isinstance(v, int | float | str | bool | list | dict) and k != "standard_errors"},
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
        if self.log_marginal_likelihood is not None:
            lines.append(f"  log marginal likelihood (Bayesian score) {self.log_marginal_likelihood:.6f}")
        if self.g2 is not None:
            pearson = f"   Pearson X^2 {self.pearson:.6g}" if self.pearson is not None else ""
            lines.append(f"  G^2 {self.g2:.6g}{pearson}   df {self.df}")
        if self.history:
            last = self.history[-1]
            if last.get("max_error") is not None:
                lines.append(f"  final max marginal error {last['max_error']:.3g}")
            if last.get("gap") is not None:  # EM: converged once MARGIN x gap <= tol |loglik|
                tol = self.info.get("tol")
                rule = "" if tol is None else f" (EM stops below tol·|loglik|/{MARGIN:g} = {tol * abs(self.loglik) / MARGIN:.3g})"
                lines.append(f"  estimated distance to the maximum {last['gap']:.3g}{rule}")
        for key, value in self.info.items():
            if isinstance(value, int | float | str):
                lines.append(f"  {key}: {value}")
        return "\n".join(lines)

    def plot(self, path: str | None = None):
        """Convergence plot: log-likelihood per iteration (every restart's, for EM), and
        the largest marginal error, the penalized objective, or else the distance to the
        final log-likelihood (log scale).

        Parameters
        ----------
        path
            Also save the figure there (PNG, SVG or PDF, by the file's suffix).

        Returns
        -------
        matplotlib.figure.Figure

        Raises
        ------
        ImportError
            matplotlib is not installed (``pip install 'dpgm[plot]'``).
        ValueError
            The fit has no iterations to plot (a closed form).
        """
        try:
            import matplotlib

            if path is not None:
                matplotlib.use("Agg", force=False)
            from matplotlib.figure import Figure
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("FitResult.plot needs matplotlib: pip install 'dpgm[plot]'") from error
        if not self.history:
            raise ValueError(f"a {self.method} fit has no iterations to plot (n_iter={self.n_iter})")
        histories = self.info.get("restart_histories") or [self.history]
        second = next((k for k in ("max_error", "objective") if self.history[-1].get(k) is not None), "gap")
        estimated = [(r["iteration"], r["gap"]) for r in self.history
                     if second == "gap" and r.get("gap") is not None and r["gap"] > 0]
        figure = Figure(figsize=(11, 4), layout="constrained")
        axes = figure.subplots(1, 2)
        for k, history in enumerate(histories):
            best = history is self.history or k == self.info.get("restart")
            axes[0].plot([r["iteration"] for r in history], [r["loglik"] for r in history],
                         "o-" if best else "-", color="C0" if best else "0.6", lw=2 if best else 1,
                         ms=3, label=f"restart {k} (best)" if best and len(histories) > 1 else None,
                         zorder=3 if best else 2)
        axes[0].set(xlabel="iteration", ylabel="log-likelihood",
                    title=f"{type(self.model).__name__} by {self.method}: "
                          + ("converged" if self.converged else "not converged"))
        if len(histories) > 1:
            axes[0].legend(title=f"{len(histories)} restarts")
        iterations = [r["iteration"] for r in self.history]
        if second == "gap":  # how far each iteration is from where the fit ended
            gaps = [(r["iteration"], self.history[-1]["loglik"] - r["loglik"]) for r in self.history]
            iterations, values = [i for i, g in gaps if g > 0], [g for _, g in gaps if g > 0]
        else:
            values = [r[second] for r in self.history]
        axes[1].plot(iterations, values, "o-", ms=3, color="C1",
                     label="final minus each log-likelihood" if estimated else None)
        if estimated:  # EM: each record's estimated distance to the maximum
            axes[1].plot([k for k, _ in estimated], [g for _, g in estimated], "s--", ms=3, color="C2",
                         label="estimated distance to the maximum")
            tol = self.info.get("tol")
            if tol:  # the rule: converged once the estimate is below this line (tol |loglik| / MARGIN)
                axes[1].axhline(tol * abs(self.loglik) / MARGIN, color="0.4", lw=1, ls=":",
                                label=f"where EM stops (tol = {tol:g})")
            axes[1].legend(fontsize=8)
        if second != "objective" and (values or estimated) and all(v > 0 for v in values):
            axes[1].set_yscale("log")
        axes[1].set(xlabel="iteration", title={"max_error": "largest |model - data| marginal",
                                               "objective": "penalized objective",
                                               "gap": "distance to the maximum (log scale)" if estimated
                                               else "final log-likelihood minus log-likelihood"}[second])
        if path is not None:
            figure.savefig(path, dpi=100)
        return figure

    def __repr__(self) -> str:
        return f"<FitResult {self.method} loglik={self.loglik:.6g} converged={self.converged} n_iter={self.n_iter}>"


@dataclass(frozen=True)
class Estimate:
    """What an iterative estimator on plain arrays returns (GIS, L-BFGS, Newton, proximal gradient,
    Gaussian IPS, graphical lasso): its parameters and the run.

    Attributes
    ----------
    parameters
        The estimate: feature weights (``-inf`` for a feature never seen) or a precision matrix.
    history
        One record per iteration (see :class:`FitResult`).
    converged
        Whether the stopping rule was met before ``max_iter``.
    n_iter
        Iterations run.
    loglik
        Log-likelihood at ``parameters``, where the caller asked for it (else ``None``).
    """

    parameters: np.ndarray
    history: list = field(default_factory=list)
    converged: bool = False
    n_iter: int = 0
    loglik: float | None = None


def information_criteria(loglik: float, n_params: int, n_rows: float) -> tuple[float, float]:
    """AIC and BIC."""
    return -2 * loglik + 2 * n_params, -2 * loglik + n_params * math.log(max(n_rows, 1.0))


def parameter_change(before, after) -> float:
    """Largest absolute change between two sets of parameters (arrays, or mappings of arrays).

    A parameter equal in both (``-inf`` for a structural or fitted zero included)
    changed by 0; one that became infinite changed by ``inf``.
    """
    if not isinstance(before, np.ndarray) and isinstance(before, Mapping):  # ndarray first: an ABC check is slow
        return max((parameter_change(before[k], after[k]) for k in before), default=0.0)
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape:
        raise ValueError(f"parameters of shapes {before.shape} and {after.shape} cannot be compared")
    return _max_change(before.reshape(-1), after.reshape(-1))


@numba.njit(cache=True, nogil=True)
def _max_change(before: np.ndarray, after: np.ndarray) -> float:
    """One loop (the fixed-point loops call this every step, on a few dozen weights)."""
    largest = 0.0
    for i in range(before.size):
        if before[i] != after[i]:
            change = abs(after[i] - before[i])
            if change != change:  # a weight became NaN
                return change
            if change > largest:
                largest = change
    return largest


def log_iteration(history: list[dict], callback, record: dict) -> dict:
    """Append an iteration's record to the history and hand it to the callback."""
    history.append(record)
    if callback is not None:
        callback(record)
    return record


def log_step(history: list[dict], callback, start: float, iteration: int, loglik: float, max_error: float,
             param_change: float | None) -> dict:
    """:func:`log_iteration` of a fixed-point step's record: ``iteration``, ``loglik``, ``max_error``,
    ``param_change`` and ``seconds`` since ``start`` (a ``time.perf_counter()`` reading)."""
    return log_iteration(history, callback, {"iteration": iteration, "loglik": loglik, "max_error": max_error,
                                             "param_change": param_change, "seconds": time.perf_counter() - start})

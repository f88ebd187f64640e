"""``dpgm.cross_validate``: held-out log-likelihood of candidate models, every fold and candidate in shared passes.

Each row's fold comes from a hash of its position (:mod:`dpgm.stats.folds`). The fit of
candidate ``m`` without fold ``k`` is the candidate's own fit on the data weighted by
``weight * (fold != k)``: the same estimator, on exactly the rows of the other folds. All
``K x M`` fits (and, with ``refit=True``, each candidate's fit on every row, for its AIC and
BIC) run side by side (:class:`~dpgm.api.shared_passes.SharedPasses`): their passes are
merged, so a complete-data kind's fits take **one** pass together and EM fits advance in
the same passes. One more pass scores every held-out fold under every fitted candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from dpgm.api.sources import open_source
from dpgm.data.schema import WEIGHT
from dpgm.errors import ConfigError, ConfigTypeError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["Candidate", "cross_validate"]

@dataclass(frozen=True)
class Candidate:
    """One candidate of :func:`dpgm.cross_validate`: a model, how it is fitted, and its name.

    Attributes
    ----------
    model
        A model of any kind (its structure; parameters, where the method starts from them).
    method
        The fit method (None: the kind's default), as for :func:`dpgm.fit`.
    options
        Options of :func:`dpgm.fit` (``tol``, ``max_iter`` and the method's options, e.g. a
        glasso's ``alpha`` or an EM fit's ``random_state``).
    name
        The candidate's label in the result (default: its kind, method and options).

    Examples
    --------
    >>> import dpgm
    >>> dpgm.Candidate(dpgm.GaussianGraphicalModel(["x", "y"]), "glasso", {"alpha": 0.1}).label
    'GaussianGraphicalModel glasso alpha=0.1'
    """

    model: Any
    method: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    @property
    def label(self) -> str:
        """The name, or one made of the kind, the method and the options."""
        if self.name is not None:
            return str(self.name)
        parts = [type(self.model).__name__, *([self.method] if self.method else []),
                 *(f"{k}={v}" for k, v in self.options.items())]
        return " ".join(parts)


def _candidates(candidates: Any) -> list[Candidate]:
    """Candidates as :class:`Candidate` s with distinct labels (a mapping's keys name them)."""
    if isinstance(candidates, Mapping):
        items = [(c if isinstance(c, Candidate) else Candidate(c)) for c in candidates.values()]
        items = [Candidate(c.model, c.method, c.options, str(name)) for name, c in zip(candidates, items, strict=True)]
    elif isinstance(candidates, Sequence) and not isinstance(candidates, str):
        items = [c if isinstance(c, Candidate) else Candidate(c) for c in candidates]
    else:
        raise ConfigTypeError(f"candidates must be a list of models or Candidates (or a dict of them), "
                              f"got {type(candidates).__name__}")
    if not items:
        raise ConfigError("cross_validate needs at least one candidate")
    labels = [c.label for c in items]
    if len(set(labels)) != len(labels):
        labels = [f"{i}: {label}" for i, label in enumerate(labels)]
    return [Candidate(c.model, c.method, dict(c.options), label) for c, label in zip(items, labels, strict=True)]


def _check(candidate: Candidate) -> tuple[str, dict, float, int]:
    """The candidate's method and options, checked before any pass (ConfigError naming the candidate)."""
    from dpgm.api.shared_passes import check_fit

    return check_fit(candidate.model, candidate.method, candidate.options, f"candidate {candidate.label!r}")


def scored_variables(model: Any, data: xr.Dataset) -> str:
    """What a model's score is the log-likelihood of: its variables in ``data`` (``child | parents`` for a GLM)."""
    if hasattr(model, "child"):
        return f"{model.child} | {', '.join(sorted(model.parents))}"
    variables = getattr(model, "variables", None)
    if variables is None:
        variables = [model.variable]
    return ", ".join(sorted(v for v in variables if v in data.data_vars))


def _check_comparable(chosen: list[Candidate], data: xr.Dataset) -> None:
    """Refuse candidates whose scores are log-likelihoods of different variables (not comparable)."""
    seen = {c.label: scored_variables(c.model, data) for c in chosen}
    first, *others = seen.items()
    for label, variables in others:
        if variables != first[1]:
            raise ConfigError(f"candidate {label!r} models [{variables}] of the data but {first[0]!r} models "
                              f"[{first[1]}]: their held-out log-likelihoods are not comparable; give every "
                              "candidate the same variables (a variable without edges is independent)")


def _fold_data(data: xr.Dataset, folds: Any, k: int | None) -> xr.Dataset:
    """``data`` with the weight of the rows of fold ``k`` set to 0 (``k=None``: ``data`` itself)."""
    if k is None:
        return data
    base = data[WEIGHT].data if WEIGHT in data.data_vars else 1.0
    weight = (folds != k) * base
    weight = weight.astype(np.float64)
    return data.assign({WEIGHT: xr.DataArray(weight, dims=("row",))})


def cross_validate(
    candidates: Sequence[Any] | Mapping[str, Any],
    data: xr.Dataset | str,
    *,
    folds: int = 5,
    random_state: int = 0,
    refit: bool = True,
    client: Client | None = None,
    progress: bool | None = None,
) -> xr.Dataset:
    """Held-out log-likelihood of each candidate model on each of ``folds`` folds, and the candidate it chooses.

    Parameters
    ----------
    candidates
        Models (fitted with their kind's default method), :class:`Candidate` s (a method and
        options each), or a dict name -> either. Any kinds, mixed.
    data
        A dataset over ``row`` (opened with :func:`dpgm.open_dataset`, or in memory), or a Zarr
        store's path. Its ``weight`` variable, if any, weighs both the fits and the scores.
    folds
        Number of folds ``K``. Row ``i`` is in fold :func:`dpgm.stats.folds.fold_of` ``(i, K,
        random_state)``: a hash of its position, the same whatever the chunking and the workers.
    random_state
        Seed of the fold assignment (not of the fits: a candidate's own ``random_state`` option
        seeds its EM starts).
    refit
        Also fit each candidate on every row, in the same passes, for its log-likelihood, number
        of parameters, AIC and BIC.
    client
        Dask client of the passes.
    progress
        Show each pass's progress. None (default): a bar where stderr is a terminal or in
        Jupyter, nothing in a script.

    Returns
    -------
    xarray.Dataset
        Over ``(candidate, fold)``: ``loglik`` (the held-out fold's total log-likelihood under
        the candidate fitted on the other folds), ``rows`` (its rows, or their total weight),
        ``loglik_per_row``. Over ``candidate``: ``mean_loglik_per_row`` (all held-out
        log-likelihood over all rows), ``standard_error`` (the standard deviation of the folds'
        ``loglik_per_row`` over ``sqrt(K)``), ``converged`` (every fold fit converged), ``fit_passes`` (over both: the passes each fold fit
        asked for; they ran merged with the other fits') and, with
        ``refit``, ``fit_loglik``, ``n_params``, ``aic``, ``bic``. ``chosen`` (a scalar) is the
        candidate with the highest ``mean_loglik_per_row``. ``attrs["passes"]`` counts the passes
        over the data (fits and the scoring pass).

    Raises
    ------
    ConfigError
        No candidate, ``folds`` below 2, a method or option a candidate's kind does not take
        (naming the candidate), ``checkpoint`` / ``resume`` options; candidates that model
        different variables of the data (their log-likelihoods are not comparable).
    DataError
        As for :func:`dpgm.fit` and :func:`dpgm.score`; a fold fit's error is raised naming the
        candidate and the fold.

    Examples
    --------
    >>> import dpgm
    >>> truth = dpgm.load_network("asia")
    >>> rows = dpgm.sample_bayesian_network(truth, 2000, seed=0)
    >>> chain = dpgm.BayesianNetwork.from_edges([("smoke", "lung"), ("lung", "either")],
    ...                                         variables=truth.variables)
    >>> cv = dpgm.cross_validate({"truth": dpgm.Candidate(truth, "bayes"),
    ...                           "chain": dpgm.Candidate(chain, "bayes")}, rows, folds=3)
    >>> str(cv.chosen.values), cv.loglik.dims
    ('truth', ('candidate', 'fold'))
    """
    from dpgm.stats.folds import check_folds

    folds, random_state = check_folds(folds, random_state)
    data = open_source(data, client=client)
    if isinstance(data, xr.DataArray):
        raise TypeError("cross_validate reads rows: expected an xarray.Dataset, got a table of counts (a DataArray); "
                        "dpgm.from_table makes weighted rows of it")
    chosen = _candidates(candidates)
    checked = [_check(c) for c in chosen]
    _check_comparable(chosen, data)
    data = data.copy()
    data.encoding = {}  # the passes read the chunks through the dataset's arrays: merged passes share those reads
    fold_of_row = _fold_codes(data, folds, random_state)
    plans = [(m, k) for m in range(len(chosen)) for k in [*range(folds), *([None] if refit else [])]]
    fits, passes = _fit_all(chosen, checked, data, fold_of_row, plans, client, progress)
    scores, score_passes = _held_out(chosen, fits, data, fold_of_row, folds, client, progress)
    return _result(chosen, fits, scores, folds, random_state, refit, passes + score_passes)


def _fold_codes(data: xr.Dataset, folds: int, random_state: int) -> Any:
    from dpgm.stats.folds import fold_codes

    chunks = data.chunks.get("row") if data.chunks else None
    return fold_codes(int(data.sizes["row"]), chunks, folds, random_state)


def _fit_all(chosen, checked, data, fold_of_row, plans, client, progress) -> tuple[dict, int]:
    """Every (candidate, fold) fit, their passes merged: ``{(m, k): FitResult}`` and the passes run."""
    from dpgm.api.shared_passes import FitJob, fit_together
    from dpgm.stats.source import DataSource

    bases = {k: DataSource.of(_fold_data(data, fold_of_row, k)) for k in dict.fromkeys(k for _, k in plans)}
    jobs = [FitJob(chosen[m].model, *checked[m], bases[k], k) for m, k in plans]
    outcomes, passes = fit_together(jobs, client, progress)
    fits = {}
    for (m, k), (ok, value) in zip(plans, outcomes, strict=True):
        if not ok:
            where = "every row" if k is None else f"fold {k} held out"
            note = f"candidate {chosen[m].label!r} ({where})"
            if isinstance(value, Exception):
                value.add_note(note)
            raise value
        fits[m, k] = value
    return fits, passes


def _held_out(chosen, fits, data, fold_of_row, folds, client, progress) -> tuple[dict, int]:
    """Each held-out fold's total log-likelihood and rows under its fold fit, in one pass."""
    from dpgm.api.kinds import kind_of
    from dpgm.cluster import compute
    from dpgm.stats.folds import held_out, is_lazy
    from dpgm.stats.scores import together

    weights = data[WEIGHT].data if WEIGHT in data.data_vars else None
    in_memory = isinstance(fold_of_row, np.ndarray)
    # in memory, each fold's rows are scored alone; chunked data is scored whole and masked (one read per chunk)
    rows = {k: np.flatnonzero(fold_of_row == k) for k in range(folds)} if in_memory else None
    flat = []
    for m in range(len(chosen)):
        for k in range(folds):
            model = fits[m, k].model
            if in_memory:
                subset = data.isel(row=rows[k])
                values, _ = kind_of(model).score(model, subset)
                held = subset[WEIGHT].data if weights is not None else None
                flat.extend(held_out(values, np.full(len(rows[k]), k), k, held))
            else:
                values, _ = kind_of(model).score(model, data)
                flat.extend(held_out(values, fold_of_row, k, weights))
    passes = 0
    if any(is_lazy(x) for x in flat):
        flat, passes = compute(together(*flat), client=client, progress=progress), 1
    totals = iter(float(x) for x in flat)
    scores = {(m, k): (next(totals), next(totals)) for m in range(len(chosen)) for k in range(folds)}
    return scores, passes


def _result(chosen, fits, scores, folds: int, random_state: int, refit: bool, passes: int) -> xr.Dataset:
    labels = [c.label for c in chosen]
    loglik = np.array([[scores[m, k][0] for k in range(folds)] for m in range(len(chosen))])
    rows = np.array([[scores[m, k][1] for k in range(folds)] for m in range(len(chosen))])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_row = loglik / rows
        mean = loglik.sum(axis=1) / rows.sum(axis=1)
        spread = per_row.std(axis=1, ddof=1) / math.sqrt(folds)
    coords = {"candidate": labels, "fold": np.arange(folds)}
    both = ("candidate", "fold")
    variables = {
        "loglik": (both, loglik, {"long_name": "held-out log-likelihood of the fold"}),
        "rows": (both, rows, {"long_name": "rows of the fold (their total weight)"}),
        "loglik_per_row": (both, per_row, {"long_name": "held-out log-likelihood per row"}),
        "mean_loglik_per_row": ("candidate", mean, {"long_name": "held-out log-likelihood per row, all folds"}),
        "standard_error": ("candidate", spread, {"long_name": "standard error of mean_loglik_per_row over folds"}),
        "converged": ("candidate", np.array([all(fits[m, k].converged for k in range(folds))
                                              for m in range(len(chosen))])),
        "fit_passes": (both, np.array([[fits[m, k].passes for k in range(folds)] for m in range(len(chosen))]),
                       {"long_name": "passes the fold's fit asked for (shared with the other fits)"}),
    }
    if refit:
        full = [fits[m, None] for m in range(len(chosen))]
        variables.update({
            "fit_loglik": ("candidate", np.array([r.loglik for r in full]), {"long_name": "log-likelihood, every row"}),
            "n_params": ("candidate", np.array([r.n_params for r in full])),
            "aic": ("candidate", np.array([r.aic for r in full])),
            "bic": ("candidate", np.array([r.bic for r in full])),
        })
    result = xr.Dataset({name: xr.Variable(*spec) for name, spec in variables.items()}, coords=coords)
    best = int(np.nanargmax(mean)) if np.isfinite(mean).any() else 0
    result["chosen"] = xr.DataArray(labels[best], attrs={"long_name": "the candidate of highest mean_loglik_per_row"})
    result.attrs.update({"folds": folds, "random_state": random_state, "passes": passes,
                         "methods": [fits[m, 0].method for m in range(len(chosen))]})
    return result

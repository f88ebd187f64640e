"""Gaussian mixtures: EM with one pass per iteration for every restart, k-means++ starts from a one-pass sample."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.mixture import (
    MixtureParameters,
    from_unconstrained,
    initial_parameters,
    m_step,
    parameters_from_init,
    recentre,
    unconstrained_vector,
)
from dpgm.algorithms.result import FitResult
from dpgm.api.checks import check_continuous
from dpgm.api.em_control import em_result, maybe_persist, run_em, total_rows
from dpgm.api.spec_checks import continuous_variables, spec_errors
from dpgm.errors import DataError, SpecError
from dpgm.models.mixture import GaussianMixture, full_covariances
from dpgm.stats.source import DataSource

INIT_SAMPLE_ROWS = 10_000  # rows drawn (in one pass) for the k-means++ starts
_STARTS = (None, "k-means++", "random", "model")


def _check_data(model: GaussianMixture, source: DataSource) -> None:
    """Refuses data without the model's continuous variables."""
    if source.is_table:
        raise TypeError(f"a GaussianMixture is fitted to a dataset of continuous variables, got "
                        f"{type(source.data).__name__}")
    check_continuous(model.variables, source.schema, "GaussianMixture")


def _component_parameters(parameters: MixtureParameters, covariance_type: str):
    from dpgm.stats.mixture import ComponentParameters

    k, p = parameters.means.shape
    return ComponentParameters.build(parameters.weights, parameters.means,
                                     full_covariances(parameters.covariances, covariance_type, k, p))


def _starts(model, source: DataSource, n_init, random_state, init, reg_covar) -> tuple[list, dict]:
    """Starting parameters of every restart (and the row counts of the sample pass, if one ran)."""
    from dpgm.stats.mixture import sample_pass

    k, p = model.n_components, len(model.variables)
    if isinstance(init, dict):
        if n_init != 1:
            raise ValueError(f"explicit initial parameters are one start: n_init must be 1, got {n_init!r}")
        return [parameters_from_init(init, k, p, model.covariance_type, model.variables)], {}
    if init not in _STARTS:
        raise ValueError(f"init must be one of {list(_STARTS)} or a dict of initial parameters, got {init!r}")
    if init == "model":
        if not model.is_fitted:
            raise ValueError("init='model' starts from the model's parameters, but it has none")
        if n_init != 1:
            raise ValueError(f"init='model' starts from the given parameters: n_init must be 1, got {n_init!r}")
        return [MixtureParameters(model.weights.values, model.means.values, model.covariances.values)], {}
    rng = np.random.default_rng(random_state)
    seed = int(rng.integers(1 << 62))
    size = max(INIT_SAMPLE_ROWS, 50 * k)
    drawn = sample_pass(source, model.variables, size, seed)
    sample = drawn["sample"].ordered()
    if len(np.unique(sample, axis=0)) < k:
        raise DataError(f"{len(np.unique(sample, axis=0))} distinct rows with an observed value in "
                        f"{list(model.variables)}: too few for n_components={k}")
    method = "random" if init == "random" else "k-means++"
    return [initial_parameters(sample, k, model.covariance_type, reg_covar, rng, method)
            for _ in range(n_init)], drawn["counts"]


class MixtureEM(EMFamily):
    """EM for a Gaussian mixture as an EM family (:func:`dpgm.stats.mixture.estep_pass`, then
    :func:`dpgm.algorithms.mixture.m_step`).

    The E step's statistics carry the means they are centred on (``centre``) and are
    moved to one centre before they are added or used (:func:`dpgm.algorithms.mixture.recentre`).
    SQUAREM works on log weights (softmax), means and Cholesky factors with log diagonals.
    """

    def __init__(self, model: GaussianMixture, source: DataSource, counts: dict, reg_covar: float):
        self.model, self.source, self.counts, self.reg_covar = model, source, counts, reg_covar
        self.covariance_type = model.covariance_type
        self.structure = model.structure()

    def estep(self, parameters: list[MixtureParameters], iteration: int, rows=None):
        from dpgm.cluster import iteration_span
        from dpgm.stats.mixture import estep_pass

        diagonal = self.covariance_type in ("diag", "spherical")
        restarts = [(_component_parameters(p, self.covariance_type), diagonal) for p in parameters]
        with iteration_span("dpgm-em", iteration):
            total = estep_pass(self.source, self.model.variables, restarts, rows=rows)
        if rows is None:
            self.counts.update(total["counts"])
        return [(s["loglik"], {**s, "centre": p.means}) for s, p in zip(total["restarts"], parameters, strict=True)]

    def mstep(self, current: MixtureParameters, statistics) -> MixtureParameters:
        return m_step(recentre(statistics, current.means), current, self.covariance_type, self.reg_covar,
                      self.model.variables)

    def vector(self, parameters: MixtureParameters) -> np.ndarray:
        return np.concatenate([parameters.weights.ravel(), parameters.means.ravel(), parameters.covariances.ravel()])

    def unconstrained(self, parameters: MixtureParameters) -> np.ndarray:
        return unconstrained_vector(parameters, self.covariance_type)

    def constrained(self, vector: np.ndarray, like: MixtureParameters) -> MixtureParameters:
        return from_unconstrained(vector, like, self.covariance_type)

    def to_model(self, parameters: MixtureParameters) -> GaussianMixture:
        return self.structure.with_parameters(parameters.weights, parameters.means, parameters.covariances)

    def from_model(self, mixture: GaussianMixture) -> MixtureParameters:
        return MixtureParameters(mixture.weights.values, mixture.means.values, mixture.covariances.values)

    def add(self, first: dict, second: dict) -> dict:
        second = recentre(second, first["centre"])
        return {**first, **{k: first[k] + second[k] for k in ("loglik", "nk", "s1", "s2")}}

    def subtract(self, total: dict, part: dict) -> dict:
        part = recentre(part, total["centre"])
        return {**total, **{k: total[k] - part[k] for k in ("loglik", "nk", "s1", "s2")}}

    def row_blocks(self, n_blocks: int):
        from dpgm.stats.expected import row_blocks

        return row_blocks(self.source, list(self.model.variables), n_blocks)


def fit_gaussian_mixture(model: GaussianMixture, source: DataSource, *, tol, max_iter, callback,
                         n_init: int = 1, random_state=None, init=None, reg_covar: float = 1e-6,
                         checkpoint=None, resume=None, persist: bool = False, accelerate="squarem",
                         incremental=False, prune_restarts=False) -> FitResult:
    """EM for a Gaussian mixture: see :func:`dpgm.fit`.

    Each iteration is one pass (:func:`dpgm.stats.mixture.estep_pass`) computing the
    statistics and log-likelihood of every active restart; the M step runs on the
    driver (:func:`dpgm.algorithms.mixture.m_step`). Starts: k-means++ on a row sample drawn
    in one pass (``init=None`` or ``"k-means++"``), random sample rows as centres
    (``"random"``), the model's parameters (``"model"``) or a dict of ``weights``,
    ``means`` and ``covariances`` or ``precisions``.
    """
    from dpgm.cluster import current_client

    _check_data(model, source)
    source = source.with_client(source.client or current_client())
    covariance_type = model.covariance_type
    starts, counts = ([], {}) if resume is not None else _starts(model, source, n_init, random_state, init, reg_covar)
    source = maybe_persist(source, model.variables, persist)
    family = MixtureEM(model, source, counts, reg_covar)
    state = run_em(family, starts, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, incremental=incremental,
                   prune_restarts=prune_restarts)
    rows = counts["rows"] if "rows" in counts else total_rows(source)
    empty = counts.get("empty", 0.0)
    result = em_result(state, "em", n_params=model.n_free_parameters(), n_rows=rows - empty)
    result.info.update({"covariance_type": covariance_type, "reg_covar": float(reg_covar),
                        "n_incomplete": counts.get("incomplete"), "n_empty": empty,
                        "init": init if isinstance(init, str | type(None)) else "parameters"})
    return result


def component_posteriors(model: GaussianMixture, data, variable: str) -> tuple:
    """Lazy ``(row, component)`` posteriors of a fitted mixture's components, and the component labels."""
    from dpgm.stats.mixture import responsibility_map

    if not model.is_fitted:
        raise TypeError("predict_proba needs a fitted GaussianMixture (a structure has no parameters)")
    if variable != "component":
        raise ValueError(f"a GaussianMixture's posterior is over 'component', not {variable!r}")
    _check_data(model, DataSource.of(data))
    parameters = from_fitted(model)
    return (responsibility_map(data, model.variables, _component_parameters(parameters, model.covariance_type)),
            list(range(model.n_components)))


def from_fitted(model: GaussianMixture) -> MixtureParameters:
    return MixtureParameters(model.weights.values, model.means.values, model.covariances.values)


def gaussian_mixture_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                               ) -> tuple[GaussianMixture, None]:
    """A ``model: gaussian_mixture`` specification: ``n_components``, ``variables`` (default: every continuous
    variable of the data) and ``covariance_type``."""
    if "n_components" not in spec:
        raise SpecError("a gaussian_mixture needs 'n_components' (an integer >= 1)")
    variables = spec.get("variables")
    if variables is None:
        if continuous is None:
            raise SpecError("a gaussian_mixture needs 'variables' (its continuous variables)")
        variables = list(continuous)
        if not variables:
            raise SpecError(f"the data have no continuous variable for a gaussian_mixture; categorical: {sorted(states)}")
    continuous_variables(list(variables), "gaussian_mixture", states, continuous)
    with spec_errors("gaussian_mixture"):
        return GaussianMixture(spec["n_components"], variables, spec.get("covariance_type", "full")), None

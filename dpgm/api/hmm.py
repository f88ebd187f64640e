"""Hidden Markov models by distributed Baum-Welch, with categorical, Gaussian, Gaussian-mixture and Poisson
emissions."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.result import FitResult
from dpgm.api.checks import check_continuous
from dpgm.api.em_control import em_result, initial_models, maybe_persist, run_em, total_rows
from dpgm.api.labels import align
from dpgm.errors import ConfigError, DataError, SpecError
from dpgm.models.emissions import (
    CategoricalEmission,
    Emission,
    GaussianEmission,
    GaussianMixtureEmission,
)
from dpgm.models.hmm import HiddenMarkovModel
from dpgm.stats.source import DataSource

# steps sampled (by a hash of their values) for the k-means++ starts of continuous emissions
INIT_SAMPLE_STEPS = 10_000


def emission_plan(family: Emission) -> Any:
    """The plain-array form of an emission family the workers use (:mod:`dpgm.stats.emissions`)."""
    from dpgm.models.covariances import full_covariances
    from dpgm.stats.emissions import CategoricalPlan, GaussianPlan, MixturePlan, PoissonPlan
    from dpgm.stats.mixture import ComponentParameters

    if isinstance(family, CategoricalEmission):
        return CategoricalPlan(family.variables[0], np.asarray(family.table.values, dtype=float))
    if isinstance(family, GaussianEmission):
        n, p = family.n_states, len(family.variables)
        full = full_covariances(family.covariances.values, family.covariance_type, n, p)
        params = ComponentParameters.build(np.ones(n), np.asarray(family.means.values, dtype=float), full)
        return GaussianPlan(tuple(family.variables), params, family.covariance_type in ("diag", "spherical"))
    if isinstance(family, GaussianMixtureEmission):
        n, m, p = family.n_states, family.n_mix, len(family.variables)
        params = ComponentParameters.build(np.asarray(family.weights.values, dtype=float).ravel(),
                                           np.asarray(family.means.values, dtype=float).reshape(n * m, p),
                                           family.full().reshape(n * m, p, p))
        return MixturePlan(tuple(family.variables), params, m, family.covariance_type in ("diag", "spherical"))
    return PoissonPlan(tuple(family.variables), np.asarray(family.rates.values, dtype=float))


def restart_arrays(model: HiddenMarkovModel) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """``(start, transition, emission plans)`` of a model, as a pass takes them."""
    return (np.asarray(model.start.values, dtype=float), np.asarray(model.transition.values, dtype=float),
            [emission_plan(f) for f in model.emissions])


class HiddenMarkovEM(EMFamily):
    """Baum-Welch as an EM family: forward-backward E step; the M step normalises the start and transition
    counts and maximises each emission family (:mod:`dpgm.algorithms.emissions`).

    SQUAREM works on the logs of the start and transition probabilities (renormalised per
    distribution) and on each family's unconstrained vector.
    """

    def __init__(self, model: HiddenMarkovModel, source: DataSource, reg_covar: float = 0.0,
                 sequence: str | None = None, layout: Any = None):
        self.model, self.source, self.reg_covar = model, source, reg_covar
        self.sequence, self.layout = sequence, layout
        self.passes_per_estep = 1 if sequence is None else 2
        n = model.n_states
        self.groups = np.concatenate([np.zeros(n, dtype=np.int64), np.repeat(np.arange(1, n + 1), n)])
        self.n_groups = n + 1

    def estep(self, models, iteration, rows=None):
        from dpgm.cluster import iteration_span
        from dpgm.inference.chain import forward_backward
        from dpgm.stats.sequences import sequence_estep

        with iteration_span("dpgm-em", iteration):
            if self.sequence is not None:
                return long_estep(self.source, self.sequence, self.layout, models, rows)
            return sequence_estep(self.source, [restart_arrays(m) for m in models], forward_backward, rows=rows)

    def mstep(self, current: HiddenMarkovModel, statistics: dict) -> HiddenMarkovModel:
        from dpgm.algorithms.emissions import maximise

        families = [maximise(f, s, current.labels, self.reg_covar)
                    for f, s in zip(current.emissions, statistics["emissions"], strict=True)]
        return current.with_parameters(_normalize(statistics["start"], current.start.values),
                                       _normalize(statistics["transition"], current.transition.values), families)

    def vector(self, model: HiddenMarkovModel) -> np.ndarray:
        from dpgm.algorithms.emissions import vector

        return np.concatenate([model.start.values.ravel(), model.transition.values.ravel(),
                               *[vector(f) for f in model.emissions]])

    def unconstrained(self, model: HiddenMarkovModel) -> np.ndarray:
        from dpgm.algorithms.emissions import unconstrained
        from dpgm.algorithms.squarem import group_log

        return np.concatenate([group_log(model.start.values.ravel()), group_log(model.transition.values.ravel()),
                               *[unconstrained(f) for f in model.emissions]])

    def constrained(self, vector: np.ndarray, like: HiddenMarkovModel) -> HiddenMarkovModel:
        from dpgm.algorithms.emissions import constrained, sizes, split
        from dpgm.algorithms.squarem import group_softmax

        n = like.n_states
        flat = group_softmax(vector[:n + n * n], self.groups, self.n_groups)
        parts = split(vector[n + n * n:], sizes(like.emissions))
        families = [constrained(f, part, like.labels) for f, part in zip(like.emissions, parts, strict=True)]
        return like.with_parameters(flat[:n], flat[n:].reshape(n, n), families)

    def add(self, first: dict, second: dict) -> dict:
        from dpgm.stats.engine import add_partials

        return add_partials(first, second)

    def subtract(self, total: dict, part: dict) -> dict:
        return {"start": total["start"] - part["start"], "transition": total["transition"] - part["transition"],
                "emissions": [{k: t[k] - p[k] for k in t} for t, p in zip(total["emissions"], part["emissions"],
                                                                          strict=True)]}

    def row_blocks(self, n_blocks: int):
        from dpgm.stats.expected import row_blocks

        return row_blocks(self.source, list(self.model.variables), n_blocks)


def long_log_emission(chunk: int, columns: dict[str, np.ndarray], plans: list[Any]) -> np.ndarray:
    """The long layout's ``log p(x_t | z_t = s)`` per row and state (0 for a step with nothing observed)."""
    from dpgm.stats.sequences import emission_factors

    values = [plan.values(columns, chunk) for plan in plans]
    factors, shift = emission_factors(plans, values, (1, len(values[0])))
    with np.errstate(divide="ignore"):
        return np.log(factors[0]) + shift[0][:, None]


def long_accumulate(chunk: int, columns: dict[str, np.ndarray], gamma: np.ndarray, plans: list[Any]) -> list:
    """The long layout's emission statistics of a chunk from its rows' state posteriors."""
    out = []
    for plan in plans:
        stats = plan.zero()
        plan.statistics(plan.values(columns, chunk), np.nan_to_num(gamma), stats)
        out.append(stats)
    return out


def long_estep(source: DataSource, sequence: str, layout: Any, models: list[HiddenMarkovModel], rows=None
               ) -> list[tuple[float, dict]]:
    """One E step over the long layout (two passes: :func:`dpgm.stats.long_sequences.long_expected_stats`)."""
    from dpgm.inference import FORWARD_BACKWARD
    from dpgm.stats.long_sequences import long_expected_stats

    variables = list(models[0].variables)
    results = long_expected_stats(source, variables, sequence, [restart_arrays(m) for m in models],
                                  long_log_emission, long_accumulate, segments=FORWARD_BACKWARD, layout=layout,
                                  rows=rows)
    return [(loglik, {"start": stats["start"], "transition": stats["transition"], "emissions": stats["emission"]})
            for loglik, stats in results]


def _check_data(model: HiddenMarkovModel, source: DataSource, sequence: str | None = None) -> None:
    data = source.data
    for family in model.emissions:
        for v in family.variables:
            if v not in getattr(data, "data_vars", ()):
                raise DataError(f"the sequence variable {v!r} is not in the data; known: {sorted(source.schema)}",
                                variable=v)
            wanted = ("row",) if sequence is not None else ("row", "time")
            if data[v].dims != wanted:
                layout = (f"the long layout (sequence={sequence!r}: one row per step)" if sequence is not None
                          else "sequences as rows (give sequence= for one row per step)")
                raise DataError(f"must have dims {wanted!r} in {layout}, has {data[v].dims!r}", variable=v)
        if not isinstance(family, CategoricalEmission):
            check_continuous(family.variables, source.schema, f"{family.family} emission")


def _continuous_starts(model: HiddenMarkovModel, source: DataSource, models: list[HiddenMarkovModel],
                       random_state: Any, init: Any, reg_covar: float) -> list[HiddenMarkovModel]:
    """Every restart's continuous families from k-means++ (``init=None``) or random steps (``"random"``) of a
    hashed sample of the data's steps (the Gaussian mixtures' starts; a Gaussian mixture family: the sample's
    steps clustered into the hidden states, then each state's cluster into its mixes)."""
    from dpgm.algorithms.mixture import initial_parameters
    from dpgm.stats.sequences import step_sample

    rng = np.random.default_rng(random_state)
    out = [m for m in models]
    for index, family in enumerate(model.emissions):
        if isinstance(family, CategoricalEmission):
            continue
        clusters = model.n_states * (family.n_mix if isinstance(family, GaussianMixtureEmission) else 1)
        sample = step_sample(source, family.variables, max(INIT_SAMPLE_STEPS, 50 * clusters),
                             int(rng.integers(1 << 62)))
        if len(np.unique(sample, axis=0)) < clusters:
            what = (f"{model.n_states} hidden states x {clusters // model.n_states} mixes" if clusters
                    > model.n_states else f"{model.n_states} hidden states")
            raise DataError(f"{len(np.unique(sample, axis=0))} distinct steps with every value of "
                            f"{list(family.variables)} observed: too few for {what}", variable=family.variables[0])
        for r, start in enumerate(out):
            how = "random" if init == "random" else "k-means++"
            if isinstance(family, GaussianMixtureEmission):
                chosen = _mixture_start(family, sample, model.labels, reg_covar, rng, how)
            elif isinstance(family, GaussianEmission):
                first = initial_parameters(sample, model.n_states, family.covariance_type, reg_covar, rng, how)
                chosen = family.with_arrays(first.means, first.covariances, model.labels)
            else:
                first = initial_parameters(sample, model.n_states, "diag", 0.0, rng, how)
                chosen = family.with_arrays(np.maximum(first.means, 1e-3), model.labels)
            families = list(start.emissions)
            families[index] = chosen
            out[r] = start.with_parameters(start.start.values, start.transition.values, families)
    return out


def _mixture_start(family: GaussianMixtureEmission, sample: np.ndarray, labels: tuple[str, ...], reg_covar: float,
                   rng: np.random.Generator, how: str) -> GaussianMixtureEmission:
    """The sample's steps clustered into the hidden states (k-means++ seeds and Lloyd's iterations, or random
    centres), then each state's steps into its mixes: the clusters' proportions, means and covariances (a
    state with fewer distinct steps than mixes takes its mixes from the whole sample)."""
    from dpgm.algorithms.mixture import _lloyd, initial_parameters, kmeans_plus_plus

    n, m = family.n_states, family.n_mix
    centres = (sample[rng.choice(len(sample), size=n, replace=False)].copy() if how == "random"
               else kmeans_plus_plus(sample, n, rng))
    states = _lloyd(sample, centres)
    mixes = []
    for s in range(n):
        steps = sample[states == s]
        if len(np.unique(steps, axis=0)) < m:
            steps = sample
        mixes.append(initial_parameters(steps, m, family.covariance_type, reg_covar, rng, how))
    return family.with_arrays(np.stack([x.weights for x in mixes]), np.stack([x.means for x in mixes]),
                              np.stack([x.covariances for x in mixes]), labels)


def fit_hmm(model: HiddenMarkovModel, source: DataSource, *, tol, max_iter, callback, n_init: int = 1,
            random_state=None, init=None, checkpoint=None, resume=None, persist: bool = False,
            accelerate="squarem", incremental=False, prune_restarts=False, reg_covar: float = 0.0,
            sequence: str | None = None) -> FitResult:
    from dpgm.cluster import current_client

    _check_data(model, source, sequence)
    continuous = any(not isinstance(f, CategoricalEmission) for f in model.emissions)
    if incremental and any(isinstance(f, GaussianEmission | GaussianMixtureEmission) for f in model.emissions):
        raise ConfigError("incremental EM adds statistics of blocks computed at different parameters: not for "
                          "Gaussian or Gaussian-mixture emissions (their statistics are centred on the means); use "
                          "incremental=False")
    if init == "model" and not model.is_fitted:
        raise ConfigError("init='model' starts from the model's parameters, but its continuous emissions have none")
    mine = model  # random starts are drawn in the model's own order of its labels
    model, order = align(model, source.data, states=source.states, variables=list(model.categorical_variables))
    source = maybe_persist(source.with_client(source.client or current_client()), list(model.variables), persist)
    layout = None
    if sequence is not None:
        from dpgm.stats.long_sequences import sequence_layout

        layout = sequence_layout(source, sequence)  # the ids checked once per fit
    family = HiddenMarkovEM(model, source, reg_covar, sequence, layout)
    starts = initial_models(mine, n_init, random_state, init)
    if continuous and init != "model":
        starts = _continuous_starts(mine, source, starts, random_state, init, reg_covar)
    starts = [order.to_data(m) for m in starts]
    state = run_em(family, starts, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, incremental=incremental,
                   prune_restarts=prune_restarts)
    result = order.restore(em_result(state, "em", n_params=model.n_free_parameters(), n_rows=total_rows(source)))
    if sequence is not None:
        result.model = result.model.with_sequence(sequence)
        result.info["sequences"] = layout.n_sequences
    return result


def _normalize(counts: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Rows of expected counts as distributions; a row with no expected count keeps its values."""
    totals = counts.sum(axis=-1, keepdims=True)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), previous)


def hmm_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                  ) -> tuple[HiddenMarkovModel, None]:
    """A ``model: hmm`` specification: ``n_states`` and either the observed ``symbols`` of one categorical
    ``variable``, or ``emissions:`` (variable, or comma-separated variables -> family)."""
    from dpgm.api.checks import check_hidden_states
    from dpgm.models.hmm import hmm

    if not isinstance(spec.get("n_states"), int):
        raise SpecError("an hmm needs 'n_states' (an integer)")
    if "emissions" in spec:
        emissions = spec["emissions"]
        if not isinstance(emissions, dict) or not emissions:
            raise SpecError("'emissions' maps each observed variable (or 'x, y' for several) to its family: a list "
                            "of labels, gaussian, poisson, {family: gaussian, covariance_type: full} or {family: "
                            "gmm, n_mix: 2, covariance_type: diag}")
        keyed = {(tuple(v.strip() for v in key.split(",")) if "," in str(key) else str(key)): how
                 for key, how in emissions.items()}
        try:
            model = hmm(spec["n_states"], emissions=keyed, hidden=spec.get("hidden", "state"))
        except ValueError as error:
            raise SpecError(f"emissions: {error}") from None
        check_hidden_states(spec["n_states"], 1)
        return model, None
    if not isinstance(spec.get("symbols"), list):
        raise SpecError("an hmm needs 'symbols' (the observed labels of 'variable') or 'emissions'")
    check_hidden_states(spec["n_states"], len(spec["symbols"]))  # before its tables exist
    return hmm(spec["n_states"], spec["symbols"], variable=spec.get("variable", "obs")), None

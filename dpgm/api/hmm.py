"""Hidden Markov models by distributed Baum-Welch."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.em import EMFamily
from dpgm.algorithms.result import FitResult
from dpgm.api.em_control import em_result, initial_models, maybe_persist, run_em, total_rows
from dpgm.api.labels import align
from dpgm.errors import DataError, SpecError
from dpgm.models.hmm import HiddenMarkovModel
from dpgm.stats.source import DataSource


class HiddenMarkovEM(EMFamily):
    """Baum-Welch as an EM family: forward-backward E step, row normalisation M step (the parameters are the
    model itself: ``to_model`` and ``from_model`` are the identity).

    The parameter vector is ``start``, ``transition`` and ``emission`` flattened; SQUAREM
    works on their logs, renormalised per distribution (the start, each row).
    """

    def __init__(self, model: HiddenMarkovModel, source: DataSource):
        self.model, self.source = model, source
        n, m = model.n_states, model.emission.shape[1]
        self.groups = np.concatenate([np.zeros(n, dtype=np.int64), np.repeat(np.arange(1, n + 1), n),
                                      np.repeat(np.arange(n + 1, 2 * n + 1), m)])
        self.n_groups = 2 * n + 1

    def estep(self, models, iteration, rows=None):
        from dpgm.cluster import iteration_span
        from dpgm.inference.chain import forward_backward_counts
        from dpgm.stats.expected import sequence_expected_counts

        with iteration_span("dpgm-em", iteration):
            return sequence_expected_counts(self.source, [m.arrays() for m in models], self.model.variable,
                                            forward_backward_counts, rows=rows)

    def mstep(self, current: HiddenMarkovModel, counts: dict) -> HiddenMarkovModel:
        return current.with_arrays(_normalize(counts["start"], current.start.values),
                                   _normalize(counts["transition"], current.transition.values),
                                   _normalize(counts["emission"], current.emission.values))

    def vector(self, model: HiddenMarkovModel) -> np.ndarray:
        return np.concatenate([np.asarray(a, dtype=float).ravel() for a in model.arrays()])

    def unconstrained(self, model: HiddenMarkovModel) -> np.ndarray:
        from dpgm.algorithms.squarem import group_log

        return group_log(self.vector(model))

    def constrained(self, vector: np.ndarray, like: HiddenMarkovModel) -> HiddenMarkovModel:
        from dpgm.algorithms.squarem import group_softmax

        flat = group_softmax(vector, self.groups, self.n_groups)
        n, m = like.n_states, like.emission.shape[1]
        return like.with_arrays(flat[:n], flat[n:n + n * n].reshape(n, n), flat[n + n * n:].reshape(n, m))

    def add(self, first: dict, second: dict) -> dict:
        return {k: first[k] + second[k] for k in first}

    def subtract(self, total: dict, part: dict) -> dict:
        return {k: total[k] - part[k] for k in total}

    def row_blocks(self, n_blocks: int):
        from dpgm.stats.expected import row_blocks

        return row_blocks(self.source, [self.model.variable], n_blocks)


def fit_hmm(model: HiddenMarkovModel, source: DataSource, *, tol, max_iter, callback, n_init: int = 1,
             random_state=None, init=None, checkpoint=None, resume=None, persist: bool = False,
             accelerate=None, incremental=False, prune_restarts=False) -> FitResult:
    from dpgm.cluster import current_client

    states, data = source.states, source.data
    if model.variable not in states and model.variable not in getattr(data, "data_vars", ()):  # continuous: align
        raise DataError(f"the sequence variable {model.variable!r} is not in the data; known: {sorted(states)}")
    mine = model  # random starts are drawn in the model's own order of its labels
    model, order = align(model, data, states=states, variables=[model.variable])
    source = maybe_persist(source.with_client(source.client or current_client()), [model.variable], persist)
    family = HiddenMarkovEM(model, source)
    starts = [order.to_data(m) for m in initial_models(mine, n_init, random_state, init)]
    state = run_em(family, starts, tol=tol, max_iter=max_iter, callback=callback, client=source.client,
                   checkpoint=checkpoint, resume=resume, accelerate=accelerate, incremental=incremental,
                   prune_restarts=prune_restarts)
    n_params = model.n_states * (model.n_states + model.emission.shape[1] - 1) - 1
    return order.restore(em_result(state, "em", n_params=n_params, n_rows=total_rows(source)))


def _normalize(counts: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Rows of expected counts as distributions; a row with no expected count keeps its values."""
    totals = counts.sum(axis=-1, keepdims=True)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), previous)


def hmm_from_spec(spec: dict, states: dict[str, tuple[str, ...]], continuous: list[str] | None
                  ) -> tuple[HiddenMarkovModel, None]:
    """A ``model: hmm`` specification: ``n_states``, the observed ``symbols`` and the ``variable``."""
    from dpgm.api.checks import check_hidden_states
    from dpgm.models.hmm import hmm

    if not isinstance(spec.get("n_states"), int) or not isinstance(spec.get("symbols"), list):
        raise SpecError("an hmm needs 'n_states' (an integer) and 'symbols' (the observed labels)")
    check_hidden_states(spec["n_states"], len(spec["symbols"]))  # before its tables exist
    return hmm(spec["n_states"], spec["symbols"], variable=spec.get("variable", "obs")), None

"""Hidden Markov models by distributed Baum-Welch."""

from __future__ import annotations

import numpy as np

from dpgm.algorithms.result import FitResult
from dpgm.api.checks import data_states
from dpgm.api.em_control import em_result, event_callback, initial_models, maybe_persist, total_rows
from dpgm.errors import DataError
from dpgm.models.hmm import HiddenMarkovModel


def fit_hmm(model: HiddenMarkovModel, data, *, tol, max_iter, client, progress, callback, n_init: int = 1,
             random_state=None, init=None, checkpoint=None, resume=None, persist: bool = False) -> FitResult:
    from dpgm.algorithms.em import em
    from dpgm.cluster import current_client, iteration_span
    from dpgm.inference.chain import forward_backward_counts
    from dpgm.stats.expected import sequence_expected_counts

    states = data_states(data)
    if model.variable not in states:
        raise DataError(f"the sequence variable {model.variable!r} is not in the data; known: {sorted(states)}")
    if tuple(states[model.variable]) != model.states[model.variable]:
        raise DataError(f"the model's symbols {model.states[model.variable]!r} differ from the data's "
                        f"{tuple(states[model.variable])!r}", variable=model.variable)
    client = client or current_client()
    data = maybe_persist(data, [model.variable], persist, client)

    def estep(models, iteration):
        with iteration_span("dpgm-em", iteration):
            return sequence_expected_counts(data, [m.arrays() for m in models], model.variable,
                                            forward_backward_counts, client=client, progress=progress)

    def mstep(current: HiddenMarkovModel, counts: dict) -> HiddenMarkovModel:
        return current.with_arrays(_normalize(counts["start"], current.start.values),
                                   _normalize(counts["transition"], current.transition.values),
                                   _normalize(counts["emission"], current.emission.values))

    starts = initial_models(model, n_init, random_state, init)
    state = em(starts, estep, mstep, max_iter=max_iter, tol=tol, callback=event_callback(client, callback),
               checkpoint=checkpoint, resume=resume)
    n_params = model.n_states * (model.n_states + model.emission.shape[1] - 1) - 1
    return em_result(state, "em", n_params=n_params, n_rows=total_rows(data, client))


def _normalize(counts: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Rows of expected counts as distributions; a row with no expected count keeps its values."""
    totals = counts.sum(axis=-1, keepdims=True)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), previous)

"""The EM loop's hooks without any storage: snapshots taken in memory resume exactly.

The family is a fixed-point map ``F(x) = Λ x`` with log-likelihood ``-1 - Σ w_i x_i²``
(optimum 0), so plain EM's points are known in closed form: the point evaluated at
iteration ``t`` is ``Λ^(t-1) x_0`` (the same products NumPy computes). The loop's
``on_iteration`` hook hands over everything a checkpoint holds; ``resume_from`` takes it
back (here a deep copy kept in memory: no file is written, which is the point).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from dpgm.algorithms.em import EMFamily, LoopSnapshot, SavedLoop, em
from dpgm.errors import CheckpointMismatch

LAM, WEIGHTS = np.array([0.5, 0.9, 0.97]), np.array([3.0, 1.0, 0.5])


class _LinearEM(EMFamily):
    def estep(self, parameters, iteration, rows=None):
        return [(-1.0 - float(WEIGHTS @ (x * x)), x) for x in parameters]

    def mstep(self, parameters, statistics):
        return LAM * statistics

    def vector(self, parameters):
        return parameters

    def constrained(self, vector, like):
        return vector


def _starts():
    return [np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, -4.0])]


def _saved(snapshot: LoopSnapshot) -> SavedLoop:
    return SavedLoop(snapshot.iteration, snapshot.loop, snapshot.state["histories"], "the test's snapshot")


def test_snapshots_report_every_iteration_and_plain_em_follows_the_closed_form():
    snapshots = []
    state = em(_LinearEM(), _starts(), tol=0.0, max_iter=6, on_iteration=lambda s: snapshots.append(copy.deepcopy(s)))
    assert [s.iteration for s in snapshots] == list(range(1, 7))
    last = snapshots[-1]
    assert sorted(last.state) == ["converged", "done", "histories"] and last.loop["version"] == 3
    assert [len(h) for h in last.state["histories"]] == [6, 6]
    for start, model, saved in zip(_starts(), state.models, last.models, strict=True):
        expected = start
        for _ in range(5):  # the best point after 6 iterations: the one evaluated at iteration 6
            expected = LAM * expected
        np.testing.assert_array_equal(model, expected)
        np.testing.assert_array_equal(saved, expected)


@pytest.mark.parametrize("accelerate", [None, "squarem"])
def test_a_loop_resumed_from_an_in_memory_snapshot_equals_the_uninterrupted_one_bit_for_bit(accelerate):
    whole = em(_LinearEM(), _starts(), tol=1e-12, max_iter=2000, accelerate=accelerate)
    assert all(whole.converged) and whole.n_iter > 8
    snapshots = []
    em(_LinearEM(), _starts(), tol=1e-12, max_iter=7, accelerate=accelerate,
       on_iteration=lambda s: snapshots.append(copy.deepcopy(s)))
    resumed = em(_LinearEM(), _starts(), tol=1e-12, max_iter=2000, accelerate=accelerate,
                 resume_from=_saved(snapshots[-1]))
    assert resumed.n_iter == whole.n_iter and resumed.passes == whole.passes
    assert resumed.logliks == whole.logliks and resumed.converged == whole.converged
    for a, b in zip(resumed.models, whole.models, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [[(h["loglik"], h["step"]) for h in r] for r in resumed.histories] == \
        [[(h["loglik"], h["step"]) for h in r] for r in whole.histories]
    np.testing.assert_allclose(np.concatenate(whole.models), 0.0, atol=1e-4)  # the optimum


def test_a_saved_loop_of_another_fit_is_a_mismatch_naming_its_source():
    snapshots = []
    em(_LinearEM(), _starts(), max_iter=2, on_iteration=lambda s: snapshots.append(copy.deepcopy(s)))
    saved = _saved(snapshots[-1])
    with pytest.raises(CheckpointMismatch, match="the test's snapshot holds 2 restarts; this fit has 3"):
        em(_LinearEM(), [*_starts(), np.zeros(3)], resume_from=saved)
    with pytest.raises(CheckpointMismatch, match="restart 0 do not have the shapes"):
        em(_LinearEM(), [np.zeros(4), np.zeros(4)], resume_from=saved)
    with pytest.raises(CheckpointMismatch, match="another version of dpgm"):
        em(_LinearEM(), _starts(), resume_from=SavedLoop(2, saved.loop | {"version": 0}, saved.histories))

"""Fits side by side with merged passes: answers equal NumPy's, one merged pass per round of requests, and an
interrupt of a merged pass reaches the caller without leaving any job waiting (the driver's threads end)."""

from __future__ import annotations

import threading

import dask
import dask.array as da
import numpy as np
import pytest

from dpgm.api.shared_passes import SharedPasses
from dpgm.stats.source import DataSource


def _source(shared: SharedPasses, index: int) -> DataSource:
    import xarray as xr

    base = DataSource.of(xr.Dataset({"x": ("row", np.arange(4.0))}))
    return shared.source(base, index, group=0)


def test_jobs_of_different_lengths_share_their_passes_and_get_numpys_answers():
    x = np.random.default_rng(0).normal(size=1000)
    lazy = da.from_array(x, chunks=100)
    shared = SharedPasses()

    def job(index: int, rounds: int):
        source = _source(shared, index)
        return [float(source.compute((lazy * (r + index)).sum())) for r in range(rounds)]

    outcomes = shared.run([lambda: job(0, 3), lambda: job(1, 1), lambda: job(2, 2)])
    assert all(ok for ok, _ in outcomes)
    for index, rounds in ((0, 3), (1, 1), (2, 2)):
        np.testing.assert_allclose(outcomes[index][1], [x.sum() * (r + index) for r in range(rounds)], rtol=1e-12)
    assert shared.passes == 3  # the longest job's passes, not 3 + 1 + 2


class _Stop(BaseException):
    """What a signal handler raises in the driver (not an Exception)."""


def _stop(block):
    if block.size:  # not dask's call on an empty block to infer the result's type
        raise _Stop("interrupted")
    return block


def test_an_interrupt_during_a_merged_pass_reaches_the_caller_and_no_job_is_left_waiting():
    stopping = da.from_array(np.arange(10.0), chunks=5).map_blocks(_stop, dtype=float).sum()
    shared = SharedPasses()
    outcome: dict = {}

    def driver():
        jobs = [lambda i=i: float(_source(shared, i).compute(stopping)) for i in range(3)]
        try:
            with dask.config.set(scheduler="sync"):
                shared.run(jobs)
        except _Stop as error:
            outcome["raised"] = error

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "a job was left waiting for a pass that was interrupted"
    assert isinstance(outcome.get("raised"), _Stop)


def test_a_job_that_fails_is_reported_and_the_others_finish():
    shared = SharedPasses()

    def bad():
        raise ValueError("no such variable")

    def good():
        return float(_source(shared, 1).compute(da.ones(10, chunks=5).sum()))

    outcomes = shared.run([bad, good])
    assert outcomes[0][0] is False and isinstance(outcomes[0][1], ValueError)
    assert outcomes[1] == (True, pytest.approx(10.0))

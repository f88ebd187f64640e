"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_time(run: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Run ``run`` ``repeats`` times: the median seconds, every time, and the last value."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, value


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median seconds of ``repeats`` runs and the last value."""
    median, _, value = median_time(run, repeats)
    return median, value


def _scheduler_tasks(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def timed_on_cluster(client, run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Like :func:`timed`, each run starting once the scheduler forgot the previous run's keys:
    an identical pass submitted at once would otherwise reuse results still held in memory."""
    times, value = [], None
    for _ in range(repeats):
        while client.run_on_scheduler(_scheduler_tasks):
            time.sleep(0.01)
        start = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value

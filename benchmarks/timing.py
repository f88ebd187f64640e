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

"""Stopping a pass's tasks: which of them a worker still holds, and calls waited for a bounded time."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

__all__ = ["count_running", "key_names", "running_tasks", "within"]


def count_running(client: Any, names: set[str] | None, counts: dict) -> None:
    """``counts`` <- each worker's :func:`running_tasks` of ``names``."""
    counts.update(client.run(running_tasks, names=names, on_error="ignore"))


def key_names(obj: Any) -> set[str] | None:
    """The names of the pass's task keys (``dpgm-generate-<token>`` of ``("dpgm-generate-<token>", 3)``);
    None (every task) for a graph of too many names to send to the workers."""
    with contextlib.suppress(Exception):
        names = {str(k[0] if isinstance(k, tuple) else k) for k in obj.__dask_graph__().keys()}
        return names if len(names) <= 1000 else None
    return None


def running_tasks(dask_worker: Any, names: set[str] | None) -> int:
    """On a worker: how many tasks of ``names`` (any task: None) are running (cancelled ones too) or ready to."""
    state = dask_worker.state
    keys = [ts.key for ts in [*state.executing, *state.long_running, *state.ready, *state.constrained]]
    return sum(1 for key in keys if names is None or str(key[0] if isinstance(key, tuple) else key) in names)


def within(seconds: float, function: Any, *args: Any, **kwargs: Any) -> bool:
    """Call ``function`` in a thread; stop waiting for it after ``seconds`` (its errors are ignored). Whether
    the call returned in that time."""
    def call() -> None:
        with contextlib.suppress(Exception):
            function(*args, **kwargs)

    thread = threading.Thread(target=call, name="dpgm-stop-pass", daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()

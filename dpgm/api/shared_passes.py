"""Several fits advancing together: each pass over the data serves every one of them.

:class:`SharedPasses` runs fit functions side by side, each in a thread of the
driver, each with a :class:`SharedSource`. A fit's pass (``source.compute(lazy)``)
does not run at once: it waits until every fit still running has asked for its
next pass (or finished), and then all the waiting passes run as **one** Dask
computation, whose reads of the data's chunks their graphs share (each chunk is
read once). Closed-form fits ask for one pass, so all of them take one; an EM fit
asks for one per iteration, so ``M`` EM fits take as many passes as the longest
of them, not their sum. This is how :func:`dpgm.cross_validate` fits every
candidate on every fold.

The driver's own work (M steps, IPF on counts, glasso on moments) runs in the
threads, between passes.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpgm.stats.source import DataSource

__all__ = ["FitJob", "SharedPasses", "SharedSource", "check_fit", "fit_together"]


class _Memo:
    """A statistic asked for by several jobs: computed by the first, waited for by the others."""

    def __init__(self):
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class _Failed:
    """A pass that failed: every fit that waited for it raises ``error``."""

    def __init__(self, error: BaseException):
        self.error = error


@dataclass(frozen=True)
class SharedSource(DataSource):
    """A fit's data source whose passes run together with the other fits' of a :class:`SharedPasses`."""

    shared: Any = None
    index: int = 0
    group: Any = None

    def memo(self, key: Any, make: Any) -> Any:
        """``make()`` once for every job of the same ``group`` (the same data) asking for ``key``."""
        return self.shared.memo((self.group, key), make)

    def memo_across(self, key: Any, make: Any) -> Any:
        """``make()`` once for every job asking for ``key``, whatever its group (every bootstrap replicate)."""
        return self.shared.memo(("across groups", key), make)

    def compute(self, lazy: Any) -> Any:
        """Wait for the other fits' next passes and run them all as one (an eager value is returned as it is)."""
        return self.shared.compute(self.index, lazy)


class SharedPasses:
    """Run fits side by side, their passes merged.

    Parameters
    ----------
    client
        The Dask client the merged passes run on (None: Dask's default scheduler).
    progress
        What each merged pass reports to (see :func:`dpgm.cluster.compute`).

    Attributes
    ----------
    passes
        Merged passes run so far. A pass over data in memory (NumPy, not Dask, arrays) is run by
        its own job as it is asked for, and counts as one too.
    """

    def __init__(self, client: Any = None, progress: Any = False):
        self.client, self.progress = client, progress
        self.passes = 0
        self._lock = threading.Condition()
        self._waiting: dict[int, Any] = {}
        self._answers: dict[int, Any] = {}
        self._running = 0
        self._parked = 0  # jobs waiting for another job's statistic (memo)
        self._memo: dict[Any, _Memo] = {}
        self._closed = False

    def source(self, base: DataSource, index: int, group: Any) -> SharedSource:
        """``base`` (its data and schema) as the source of job ``index`` of :meth:`run`; jobs of the same
        ``group`` read the same data, and compute a statistic they all ask for once (:meth:`memo`)."""
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(DataSource)}
        return SharedSource(**{**fields, "client": self.client, "progress": False}, shared=self, index=index,
                            group=group)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` computed by the first job asking for ``key``; the others wait for its value.

        A waiting job counts as waiting for a pass: the merged pass the first job waits for
        runs without it.
        """
        with self._lock:
            entry = self._memo.get(key)
            first = entry is None
            if first:
                entry = self._memo[key] = _Memo()
            else:
                self._parked += 1
                self._lock.notify_all()
        if first:
            try:
                entry.value = make()
            except BaseException as error:
                entry.error = error
                raise
            finally:
                entry.done.set()
            return entry.value
        entry.done.wait()
        with self._lock:
            self._parked -= 1
        if entry.error is not None:
            raise entry.error
        return entry.value

    def compute(self, index: int, lazy: Any) -> Any:
        """Job ``index``'s pass: queued, then answered by the next merged pass."""
        from dpgm.stats.folds import is_lazy

        if not is_lazy(lazy):  # data in memory: the job's pass has run already, on its own
            with self._lock:
                self.passes += 1
            return lazy
        with self._lock:
            if self._closed:
                raise RuntimeError("the shared passes were stopped")
            self._waiting[index] = lazy
            self._lock.notify_all()
            while index not in self._answers:
                self._lock.wait()
            answer = self._answers.pop(index)
        if isinstance(answer, _Failed):
            raise answer.error
        return answer

    def run(self, jobs: Sequence[Callable[[], Any]]) -> list[tuple[bool, Any]]:
        """Run every job (a fit taking its source from :meth:`source`), merging their passes.

        Returns
        -------
        list of (bool, object)
            Per job, in order: ``(True, its result)`` or ``(False, the exception it raised)``.
        """
        outcomes: list[tuple[bool, Any]] = [(False, RuntimeError("not run"))] * len(jobs)

        def work(i: int) -> None:
            try:
                outcomes[i] = (True, jobs[i]())
            except BaseException as error:  # reported to the caller with the job's index
                outcomes[i] = (False, error)
            finally:
                with self._lock:
                    self._running -= 1
                    self._lock.notify_all()

        threads = [threading.Thread(target=work, args=(i,), name=f"dpgm-fit-{i}", daemon=True)
                   for i in range(len(jobs))]
        self._running = len(jobs)
        for thread in threads:
            thread.start()
        try:
            while self._step():
                pass
        finally:
            self._close()
            for thread in threads:
                thread.join()
        return outcomes

    def _step(self) -> bool:
        """Wait until every running job waits for a pass, then run their passes as one; False when all are done."""
        from dpgm.cluster import compute
        from dpgm.stats.scores import together

        with self._lock:
            while self._running and (not self._waiting or len(self._waiting) + self._parked < self._running):
                self._lock.wait()
            if not self._running:
                return False
            batch, self._waiting = self._waiting, {}
        try:
            values = compute(together(*batch.values()), client=self.client, progress=self.progress)
            self.passes += 1
        except BaseException as error:  # an interrupt too: every job of the pass is answered before it propagates
            with self._lock:
                self._answers.update((index, _Failed(error)) for index in batch)
                self._lock.notify_all()
            if not isinstance(error, Exception):
                raise
            return True
        with self._lock:
            self._answers.update(zip(batch, values, strict=True))
            self._lock.notify_all()
        return True

    def _close(self) -> None:
        """Answer every waiting job with a failure (an interrupt of the driver): no thread is left waiting."""
        with self._lock:
            self._closed = True
            stopped = _Failed(RuntimeError("the shared passes were stopped"))
            for index in list(self._waiting):
                self._answers[index] = stopped
            self._waiting.clear()
            self._lock.notify_all()


def check_fit(model: Any, method: str | None, options: Mapping[str, Any], label: str,
              refused: Sequence[str] = ("checkpoint", "resume")) -> tuple[str, dict, float, int]:
    """``(method, options, tol, max_iter)`` of one of several fits run together, checked before any pass.

    Raises ConfigError / ConfigTypeError naming ``label`` (the candidate, the bootstrap): an
    option the method does not take, one of ``refused`` (files of one fit: the fits run
    together write none), a kind without a score.
    """
    from dpgm.api.kinds import kind_of
    from dpgm.api.options import check_fit_options
    from dpgm.errors import ConfigError, ConfigTypeError

    options = dict(options)
    for name in refused:
        if name in options:
            raise ConfigError(f"{label}: option {name!r} is not taken here (the fits run together write no "
                              "checkpoints)")
    tol, max_iter = options.pop("tol", 1e-8), options.pop("max_iter", 1000)
    try:
        method = check_fit_options(model, method, {"tol": tol, "max_iter": max_iter, **options})
    except (ConfigError, ConfigTypeError) as error:
        raise type(error)(f"{label}: {error}") from None
    kind = kind_of(model)
    if kind.score is None:
        raise ConfigTypeError(f"{label}: a {kind.name} has no score")
    if "persist" in kind.methods[method].options:
        options.setdefault("persist", False)  # one copy of the data per fit would not fit in memory
    return method, options, tol, max_iter


@dataclass(frozen=True)
class FitJob:
    """One of the fits :func:`fit_together` runs: the model, its checked method and options
    (:func:`check_fit`), its data's source and the group of fits that read the same data."""

    model: Any
    method: str
    options: Mapping[str, Any]
    tol: float
    max_iter: int
    base: DataSource
    group: Any


def fit_together(jobs: Sequence[FitJob], client: Any, progress: Any) -> tuple[list[tuple[bool, Any]], int]:
    """Run every fit side by side (:class:`SharedPasses`): per fit ``(True, FitResult)`` or ``(False, error)``,
    and the merged passes run."""
    from dpgm.api.kinds import kind_of
    from dpgm.api.options import check_sizes

    shared = SharedPasses(client, progress)
    calls = []
    for index, job in enumerate(jobs):
        source = shared.source(job.base, index, group=job.group)
        check_sizes(job.model, source, job.method, dict(job.options))
        run = kind_of(job.model).methods[job.method].run
        calls.append(lambda run=run, job=job, source=source: run(
            job.model, source, job.method, tol=job.tol, max_iter=job.max_iter, callback=None, **job.options))
    return shared.run(calls), shared.passes

"""The EM loop: one E step (one pass over the data) per iteration for all restarts at once.

The loop is independent of the model: it talks to one :class:`EMFamily` per model
kind (as dask-glm's solvers talk to a family), whose ``estep(parameters, iteration)``
runs one distributed pass computing every active restart's log-likelihood and
expected statistics together, and whose ``mstep(parameters, statistics)`` updates
one restart on the driver. "Parameters" are whatever the two exchange (raw arrays);
``to_model`` / ``from_model`` convert at the edges (checkpoints, resume and the
result), so the loop itself builds no labels.

The loop touches no storage: after every iteration it hands ``on_iteration`` a
:class:`LoopSnapshot` (everything a checkpoint holds, :mod:`dpgm.io.checkpoint`
writes it), and ``resume_from`` takes a :class:`SavedLoop` already read back; the
API (:func:`dpgm.api.em_control.run_em`) wires a checkpoint folder to both.

The E-step protocol (every model kind honours it): a pass returns, for each
parameter set it was given, ``(loglik, statistics)`` with ``loglik`` a float (the
log-likelihood of those parameters on the rows of the pass) and ``statistics`` the
expected sufficient statistics, *additive over rows* (``EMFamily.add`` combines
two blocks of rows, ``EMFamily.subtract`` removes one).

Options of the loop:

* plain EM (Dempster et al. 1977, ``accelerate=None``): each iteration evaluates
  ``θ_t`` and moves to ``F(θ_t)``.
* Convergence: the log-likelihood is estimated to be within ``tol`` (relative) of
  the maximum: every EM record carries ``gap``, the estimated distance from its
  log-likelihood to the maximum (:mod:`dpgm.algorithms.stopping`: Aitken's
  acceleration of the gains, at EM's rate measured on the log-likelihood and on the
  parameters), and the fit converges when ``MARGIN * gap <= tol * |loglik|``.
* ``accelerate="squarem"``: SQUAREM extrapolation (:mod:`dpgm.algorithms.squarem`)
  with the monotonicity safeguard of Varadhan and Roland's reference implementation:
  an extrapolated point ``θ'`` is not judged itself but through its EM image
  ``F(θ')`` (the stabilisation step, computed from the pass that evaluates ``θ'``);
  an image whose log-likelihood is below the last accepted point's is rejected and
  the loop goes on from the cycle's plain EM point. Every evaluated point costs one
  pass, rejected ones included. Convergence is judged on EM steps only: an image
  ``F(θ')`` against the point it is the image of; its ``gap`` is estimated at the
  rate of the cycle's EM steps ``θ' → F(θ') → F(F(θ'))``, which can be short (an
  extrapolated point's error is not along EM's slowest direction): when it is within
  tolerance the loop takes :data:`~dpgm.algorithms.stopping.CERTIFY_STEPS` plain EM
  steps (their rates, Aitken's ratio of their gains included, join the window) and
  converges only if the last of them is within tolerance too; otherwise SQUAREM goes
  on from there.
* ``incremental=True``: :data:`INCREMENTAL_PASSES` passes of incremental EM (Neal
  and Hinton 1998) over blocks of whole chunks (:data:`INCREMENTAL_BLOCKS` at
  most): each block's statistics are computed in one distributed computation (one
  task per chunk), replace that block's previous statistics in the running total,
  and an M step follows. The first pass sums the blocks seen so far (the M steps
  are invariant to the scale of the statistics). Each block counts as its share
  of the rows of a pass. Full-batch iterations (plain or SQUAREM) then polish to
  the plain EM fixed point.
* ``prune_restarts=True``: from iteration :data:`PRUNE_AFTER` on, a restart whose
  log-likelihood plus :data:`PRUNE_HORIZON` times the gain of its last EM step is
  still below the best restart's log-likelihood (it would need more than that many
  further EM steps at its present rate just to draw level, and EM's increases
  shrink) is dropped from the passes. With SQUAREM the last EM step of a cycle is
  the one from the extrapolated point to its image, never the extrapolation's jump.

Each record carries ``param_change``: the largest absolute change of the
parameter vector (:meth:`EMFamily.vector`) since the restart's previous evaluated
point. A restart's result is its accepted point of highest log-likelihood.

References
----------
Dempster, A. P., Laird, N. M. and Rubin, D. B. (1977). Maximum likelihood from
incomplete data via the EM algorithm. *J. R. Statist. Soc. B* 39, 1-38.

Neal, R. M. and Hinton, G. E. (1998). A view of the EM algorithm that justifies
incremental, sparse, and other variants. In *Learning in Graphical Models*, 355-368.

Varadhan, R. and Roland, C. (2008). Simple and globally convergent methods for
accelerating the convergence of any EM algorithm. *Scand. J. Statist.* 35, 335-353.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpgm.algorithms.squarem import MAX_STEP, STEP_FACTOR, extrapolate, shorter_bound, step_length
from dpgm.algorithms.stopping import (
    CERTIFY_STEPS,
    RATE_WINDOW,
    ROUNDING,
    estimated_gap,
    parameter_rate,
    within_tolerance,
)
from dpgm.errors import CheckpointMismatch

__all__ = ["ACCELERATIONS", "EMFamily", "EMState", "LoopSnapshot", "SavedLoop", "em"]

ACCELERATIONS = (None, "squarem")
INCREMENTAL_PASSES = 2
INCREMENTAL_BLOCKS = 8
PRUNE_AFTER = 5
PRUNE_HORIZON = 100
LOOP_VERSION = 3  # the layout of LoopSnapshot.loop (a resume refuses any other)


class EMFamily:
    """What the EM loop needs of one model kind: the E step, the M step, conversions.

    Subclasses implement :meth:`estep`, :meth:`mstep` and :meth:`vector`; SQUAREM
    also needs :meth:`unconstrained` / :meth:`constrained` (a parametrisation in
    which any vector maps back to valid parameters); incremental EM needs
    :meth:`row_blocks` and ``rows=`` support in :meth:`estep`. Everything the loop
    reads of a family is declared here; a subclass overrides, never adds to, it.

    Attributes
    ----------
    incremental_full_first_pass
        Incremental EM's first pass takes every block at the starting parameters (one
        plain EM step) instead of M steps on a growing partial sum: for M steps that
        cannot leave a zero (IPF, GIS: multiplicative updates).
    passes_per_estep
        Passes over the data one E step takes (a hidden Markov model's long layout: two).
    """

    incremental_full_first_pass: bool = False
    passes_per_estep: int = 1

    def estep(self, parameters: Sequence[Any], iteration: int,
              rows: tuple[int, int] | None = None) -> list[tuple[float, Any]]:
        """One pass (over ``rows``, a range of whole chunks, or all rows): ``(loglik, statistics)`` per set."""
        raise NotImplementedError

    def mstep(self, parameters: Any, statistics: Any) -> Any:
        """New parameters of one restart from its (summed) statistics."""
        raise NotImplementedError

    def vector(self, parameters: Any) -> np.ndarray:
        """The parameters as one flat vector (``param_change``; SQUAREM measures its step length on it)."""
        raise NotImplementedError

    def unconstrained(self, parameters: Any) -> np.ndarray:
        """The parameters as an unconstrained vector (SQUAREM extrapolates there)."""
        return self.vector(parameters)

    def constrained(self, vector: np.ndarray, like: Any) -> Any:
        """Parameters from an unconstrained vector (``like``: parameters of the same shapes)."""
        raise NotImplementedError

    def to_model(self, parameters: Any) -> Any:
        """The labelled model of some parameters (checkpoints, the result)."""
        return parameters

    def from_model(self, model: Any) -> Any:
        """The parameters of a labelled model (resume)."""
        return model

    def add(self, first: Any, second: Any) -> Any:
        """Statistics of two disjoint sets of rows combined."""
        return _leafwise(first, second, lambda a, b: a + b)

    def subtract(self, total: Any, part: Any) -> Any:
        """Statistics of ``total``'s rows without ``part``'s."""
        return _leafwise(total, part, lambda a, b: a - b)

    def row_blocks(self, n_blocks: int) -> list[tuple[int, int]]:
        """At most ``n_blocks`` row ranges of whole chunks covering the data (incremental EM)."""
        raise NotImplementedError(f"{type(self).__name__} does not support incremental EM")


def _leafwise(first: Any, second: Any, operation: Callable[[Any, Any], Any]) -> Any:
    if isinstance(first, dict):
        return {key: _leafwise(first[key], second[key], operation) for key in first}
    if isinstance(first, tuple | list):
        return type(first)(_leafwise(a, b, operation) for a, b in zip(first, second, strict=True))
    return operation(first, second)


@dataclass
class EMState:
    """Outcome of :func:`em`: per restart its model, history, log-likelihood and status."""

    models: list[Any]
    histories: list[list[dict]]
    converged: list[bool]
    n_iter: int
    passes: float
    best: int = 0
    logliks: list[float] = field(default_factory=list)
    pruned: list[int] = field(default_factory=list)
    extras: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LoopSnapshot:
    """The loop after one iteration: everything a checkpoint holds (given to ``em``'s ``on_iteration``).

    The values are the loop's own (not copies): a hook writes or copies them before it returns.

    Attributes
    ----------
    iteration
        Iterations done.
    models
        Each restart's best model so far (its current point before it has one), labelled (``to_model``).
    state
        ``{"histories", "converged", "done"}``: per restart its records, whether it converged, whether it stopped.
    loop
        The exact loop state a resume continues from (``version``, every restart's points and SQUAREM's
        cycle, ``passes``, ``incremental_left``): plain values, NumPy arrays, Fractions and the family's parameters.
    """

    iteration: int
    models: list[Any]
    state: dict[str, Any]
    loop: dict[str, Any]


@dataclass(frozen=True)
class SavedLoop:
    """A loop state read back (from a checkpoint): what ``em``'s ``resume_from`` continues from.

    Attributes
    ----------
    iteration
        Iterations done when it was saved.
    loop
        :attr:`LoopSnapshot.loop` as saved.
    histories
        ``LoopSnapshot.state["histories"]`` as saved.
    source
        Where it was read (messages name it), e.g. ``"the checkpoint 'ck/'"``.
    """

    iteration: int
    loop: Any
    histories: Any
    source: str = "the saved loop state"


@dataclass
class _Restart:
    """One restart's place in the loop (plain EM is SQUAREM that never extrapolates)."""

    point: Any
    kind: str = "base"  # what ``point`` is: "base" (a new start), "first" (F(base)), "extrapolated",
    # "plain" (a plain EM step certifying SQUAREM's estimate)
    best: Any = None
    best_loglik: float | None = None
    last_change: float = float("inf")  # gain of the last accepted EM step (pruning's rate)
    last_vector: np.ndarray | None = None
    u0: np.ndarray | None = None
    v0: np.ndarray | None = None
    fallback: Any = None  # the cycle's plain EM point θ2, where a rejected cycle goes on
    pending: float | None = None  # L(θ') while ``point`` is the image F(θ') awaiting its judgment
    alpha: float = 1.0
    step_max: float = 1.0
    done: bool = False
    converged: bool = False
    blocks: dict = field(default_factory=dict)
    total: Any = None
    rates: list = field(default_factory=list)  # EM's last estimated log-likelihood rates (each record's gap)
    plain_steps: int = 0  # plain EM steps taken so far to certify SQUAREM's estimate


def em(
    family: EMFamily,
    starts: list[Any],
    *,
    max_iter: int = 100,
    tol: float = 1e-8,
    callback: Callable[[dict], None] | None = None,
    on_iteration: Callable[[LoopSnapshot], None] | None = None,
    resume_from: SavedLoop | None = None,
    accelerate: str | None = None,
    incremental: bool = False,
    prune_restarts: bool = False,
) -> EMState:
    """Run EM from ``starts`` (one parameter set per restart).

    Parameters
    ----------
    family
        The model kind's E step, M step and conversions.
    starts
        Starting parameters, one per restart.
    max_iter, tol
        Stopping rule: at most ``max_iter`` iterations (each one pass, an
        incremental pass included), or converged: the log-likelihood is estimated to
        be within ``tol · |loglik|`` of the maximum (twice the record's ``gap`` at most
        that; after SQUAREM, confirmed by plain EM steps).
    callback
        Called with each restart's record every iteration (``restart``,
        ``iteration``, ``loglik``, ``change``, ``param_change``, ``gap``, ``converged``,
        ``passes``, ``step``, ``accepted``, ``seconds``); ``gap`` is the estimated distance
        from ``loglik`` to the maximum, None where there is no estimate (an extrapolated
        point, EM not yet in its linear phase); ``converged`` is true on the record
        where the restart converged.
    on_iteration
        Called with a :class:`LoopSnapshot` after every iteration (a checkpoint writer).
    resume_from
        A loop state saved from a snapshot to continue from: the loop goes on from the exact
        state saved (every restart's points and SQUAREM's cycle), so the result equals an
        uninterrupted run's bit for bit; ``starts`` only give the shapes the saved parameters
        must have (None: not checked). An incremental phase in progress goes on if
        ``incremental`` is set.
    accelerate
        None (plain EM) or ``"squarem"`` (the API's default).
    incremental
        Start with incremental passes over blocks of chunks.
    prune_restarts
        Drop restarts that are hopelessly behind (see the module's description).

    Returns
    -------
    EMState

    Raises
    ------
    CheckpointMismatch
        ``resume_from`` is not of this fit: another layout, another number of restarts, or
        parameters whose shapes differ from ``starts``' (or that the family cannot turn into a model).
    """
    if accelerate not in ACCELERATIONS:
        raise ValueError(f"accelerate must be one of {list(ACCELERATIONS)}, got {accelerate!r}")
    histories: list[list[dict]] = [[] for _ in starts]
    iteration = 0
    passes = Fraction(0)
    incremental_left = INCREMENTAL_PASSES if incremental else 0
    runs = [_Restart(point=p) for p in starts]
    if resume_from is not None:
        iteration, runs, histories, passes, left = _resume(family, resume_from, starts)
        incremental_left = left if incremental else 0  # an incremental phase is finished, never started again
        if not incremental_left:
            for run in runs:
                run.blocks, run.total = {}, None
    start = time.perf_counter()

    def report(i: int, loglik: float, change, point: Any, step: str, accepted: bool) -> dict:
        vector = family.vector(point)
        previous = runs[i].last_vector
        runs[i].last_vector = vector
        record = {
            "restart": i, "iteration": iteration, "loglik": float(loglik), "change": change,
            "param_change": None if previous is None else _max_change(vector, previous), "gap": None,
            "converged": False,
            "passes": float(passes), "step": step, "accepted": accepted, "seconds": time.perf_counter() - start,
        }
        histories[i].append(record)
        return record

    def told(record: dict) -> None:
        if callback is not None:
            callback(record)

    def save() -> None:
        if on_iteration is not None:
            # the whole loop state (every restart's points, SQUAREM's cycle, the passes so far): a resume from
            # any iteration, the last included, continues exactly as this run would have
            loop = {"version": LOOP_VERSION, "runs": [{f.name: getattr(r, f.name) for f in fields(r)} for r in runs],
                    "passes": passes, "incremental_left": incremental_left}
            on_iteration(LoopSnapshot(
                iteration, [family.to_model(r.best if r.best is not None else r.point) for r in runs],
                {"histories": histories, "converged": [r.converged for r in runs], "done": [r.done for r in runs]},
                loop))

    if incremental_left:
        blocks = family.row_blocks(INCREMENTAL_BLOCKS)
        total_rows = sum(stop - begin for begin, stop in blocks)
        # families whose M step cannot leave a zero (IPF, GIS: multiplicative updates) take the first
        # pass's blocks at the starting parameters (a plain EM step), not a growing partial sum
        warm = family.incremental_full_first_pass
        while incremental_left and iteration < max_iter:
            iteration += 1
            incremental_left -= 1
            active = [i for i, r in enumerate(runs) if not r.done]
            for b, rows in enumerate(blocks):
                results = family.estep([runs[i].point for i in active], iteration, rows=rows)
                passes += Fraction(rows[1] - rows[0], max(total_rows, 1))
                for i, (loglik, statistics) in zip(active, results, strict=True):
                    run = runs[i]
                    old = run.blocks.get(b)
                    if run.total is None:
                        run.total = statistics
                    else:
                        run.total = family.add(run.total if old is None else family.subtract(run.total, old[1]),
                                               statistics)
                    run.blocks[b] = (loglik, statistics)
                    if not (warm and len(run.blocks) < len(blocks) and old is None):
                        run.point = family.mstep(run.point, run.total)
            for i in active:
                # the blocks' log-likelihoods were each taken at the parameters of their own block
                told(report(i, sum(loglik for loglik, _ in runs[i].blocks.values()), None, runs[i].point,
                            "incremental", False))
            if not incremental_left:
                for run in runs:
                    run.blocks, run.total = {}, None
            save()

    while iteration < max_iter and not all(r.done for r in runs):
        iteration += 1
        active = [i for i, r in enumerate(runs) if not r.done]
        results = family.estep([runs[i].point for i in active], iteration)
        passes += family.passes_per_estep
        for i, (loglik, statistics) in zip(active, results, strict=True):
            told(_advance(family, runs[i], i, float(loglik), statistics, tol, accelerate, report))
        if prune_restarts and iteration >= PRUNE_AFTER:
            _prune(runs)
        save()
    logliks = [r.best_loglik if r.best_loglik is not None else float("-inf") for r in runs]
    best = max(range(len(runs)), key=logliks.__getitem__)
    models = [family.to_model(r.best if r.best is not None else r.point) for r in runs]
    pruned = [i for i, r in enumerate(runs) if r.done and not r.converged]
    return EMState(models, histories, [r.converged for r in runs], iteration, float(passes), best, logliks, pruned,
                   extras={"tol": tol})


def _resume(family: EMFamily, saved: SavedLoop, starts: list[Any]) -> tuple[int, list[_Restart], list, Fraction,
                                                                            int]:
    """The loop's state in ``saved``, verified: ``(iteration, runs, histories, passes, incremental passes left)``.

    Raises
    ------
    CheckpointMismatch
        The saved restarts are not of this fit: another number of restarts, or parameters
        whose shapes differ from ``starts``' (or that the family cannot turn into a model).
    """
    iteration, loop, where = saved.iteration, saved.loop, saved.source
    names = {f.name for f in fields(_Restart)}
    if not (isinstance(loop, dict) and loop.get("version") == LOOP_VERSION and isinstance(loop.get("runs"), list)
            and all(isinstance(r, dict) and set(r) == names for r in loop["runs"])):
        raise CheckpointMismatch(f"{where} holds a loop state of another version of dpgm: start afresh")
    runs = [_Restart(**fields_) for fields_ in loop["runs"]]
    histories = saved.histories
    templates = [s for s in starts if s is not None]
    if templates and len(templates) != len(runs):
        raise CheckpointMismatch(f"{where} holds {len(runs)} restarts; this fit has {len(templates)}")
    for i, run in enumerate(runs):
        if templates and _shapes(run.point) != _shapes(templates[i]):
            raise CheckpointMismatch(f"{where}: the parameters of restart {i} do not have the shapes of this "
                                     "fit's model (written for another model)")
        try:
            family.to_model(run.best if run.best is not None else run.point)
        except (ValueError, TypeError, KeyError, IndexError) as error:
            raise CheckpointMismatch(f"{where}: the parameters of restart {i} do not fit this model "
                                     f"({type(error).__name__}: {error})") from None
    if not isinstance(histories, list) or len(histories) != len(runs):
        raise CheckpointMismatch(f"{where} holds {len(histories)} histories for {len(runs)} restarts")
    return iteration, runs, histories, Fraction(loop["passes"]), int(loop["incremental_left"])


def _shapes(value: Any) -> Any:
    """The tree of ``value`` with every array replaced by ``(shape, dtype kind)`` and every leaf by its type (to
    compare two parameter trees: a model by its class and tables, a dataclass by its fields)."""
    if isinstance(value, np.ndarray | np.generic):
        return ("array", np.shape(value), np.asarray(value).dtype.kind)
    if isinstance(value, dict):
        return {"dict": [(_shapes(k), _shapes(v)) for k, v in value.items()]}
    if isinstance(value, tuple | list):
        return {type(value).__name__: [_shapes(v) for v in value]}
    if is_dataclass(value) and not isinstance(value, type):
        return {type(value).__qualname__: {f.name: _shapes(getattr(value, f.name)) for f in fields(value)}}
    if callable(getattr(value, "_to_store", None)):  # a labelled model: its tables' values and labels
        tables = dict(value._to_store())
        return {type(value).__name__: {str(k): _shapes(t) if k == "__attrs__" else
                                       (_shapes(np.asarray(t.values)), [str(d) for d in t.dims],
                                        {str(d): _shapes(np.asarray(t.coords[d].values)) for d in t.dims
                                         if d in t.coords})
                                       for k, t in tables.items()}}
    return type(value).__name__


def _wants_longer(u0: np.ndarray, u1: np.ndarray, u2: np.ndarray) -> bool:
    r, v = u1 - u0, u2 - 2 * u1 + u0
    return bool(r @ r > v @ v)


def _max_change(vector: np.ndarray, previous: np.ndarray) -> float:
    """Largest absolute change between two parameter vectors (equal infinities do not change)."""
    with np.errstate(invalid="ignore"):
        change = np.where(vector == previous, 0.0, np.abs(vector - previous))
    return float(np.max(change, initial=0.0))


def _advance(family: EMFamily, run: _Restart, i: int, loglik: float, statistics: Any, tol: float,
             accelerate: str | None, report: Callable) -> dict:
    """One evaluated point of one restart: record it, accept or reject it, choose the next point; its record."""
    point, kind = run.point, run.kind
    if kind == "extrapolated":
        # not judged itself: its EM image F(θ') (the stabilisation step) is, in the next pass
        before = run.best_loglik
        record = report(i, loglik, loglik - before, point, "extrapolated", bool(loglik >= before))
        run.pending = loglik
        run.u0, run.v0 = family.unconstrained(point), run.last_vector
        run.point, run.kind = family.mstep(point, statistics), "first"
        return record
    pending, run.pending = run.pending, None
    accepted = pending is None or bool(loglik >= run.best_loglik)
    previous = run.best_loglik
    change = None if previous is None else loglik - previous
    before = run.last_vector
    record = report(i, loglik, change, point, "em", accepted)
    if not accepted:  # the safeguard: back to the plain EM point F(θ1) of the cycle
        run.step_max = shorter_bound(run.step_max, run.alpha)
        run.point, run.kind = run.fallback, "base"
        return record
    if pending is not None and run.alpha >= run.step_max:
        run.step_max = min(run.step_max * STEP_FACTOR, MAX_STEP)
    run.best, run.best_loglik = point, loglik
    # convergence is judged on EM steps only: this point's gain over the point it is the EM image of
    step_change = change if pending is None else loglik - pending
    earlier_gain = run.last_change
    if step_change is not None:
        run.last_change = step_change  # the pruning rule's rate: one EM step's gain, never a jump
    following = family.mstep(point, statistics)
    v2 = family.vector(following)
    # θ0 of the step θ0 -> θ1 = point: plain EM's previous point; in SQUAREM, the cycle's base or extrapolated point
    plain = accelerate is None or kind == "plain"
    start = before if plain else run.v0 if kind == "first" else None
    gap = _gap(run, step_change, start, v2, loglik, earlier_gain=earlier_gain if plain else None)
    record["gap"] = gap
    close = step_change is not None and within_tolerance(gap, loglik, tol)
    if kind == "plain":  # certifying SQUAREM's estimate: converged only if the last plain step is within tol
        run.plain_steps += 1
        if run.plain_steps < CERTIFY_STEPS or not close:
            # the next plain step, or (not yet) SQUAREM going on from here
            run.point, run.kind = following, "plain" if run.plain_steps < CERTIFY_STEPS else "base"
            return record
    if close and plain:
        run.done = run.converged = record["converged"] = True
        return record
    if close:  # SQUAREM's estimate is within tol: plain EM steps, with their own rates, confirm it
        run.plain_steps = 0
        run.point, run.kind = following, "plain"
        return record
    if accelerate is None:
        run.point = following
    elif kind == "base":
        # report() has just taken the point's vector (run.last_vector)
        run.u0, run.v0, run.point, run.kind = family.unconstrained(point), run.last_vector, following, "first"
    else:  # kind == "first": θ1 = point, θ2 = following
        v1 = run.last_vector
        run.alpha = step_length(run.v0, v1, v2, run.step_max)
        run.point, run.kind, run.fallback = following, "base", following
        if run.alpha <= 1.0 and run.step_max <= 1.0 and _wants_longer(run.v0, v1, v2):
            run.step_max = STEP_FACTOR  # the bound held the step at the EM step: let the next one go further
        if run.alpha <= 1.0:
            return record
        proposal = extrapolate(run.u0, family.unconstrained(point), family.unconstrained(following), run.alpha)
        if np.all(np.isfinite(proposal)):
            try:
                run.point, run.kind = family.constrained(proposal, following), "extrapolated"
            except (ValueError, ArithmeticError, np.linalg.LinAlgError):
                run.point = following  # no valid parameters there: the plain EM step, no pass spent
    return record


def _gap(run: _Restart, gain: float | None, start: np.ndarray | None, following: np.ndarray, loglik: float, *,
         earlier_gain: float | None) -> float | None:
    """The estimated distance to the maximum after the EM step ``start -> run's point`` of ``gain``
    (:mod:`dpgm.algorithms.stopping`); the step's rate joins the restart's window of rates. ``earlier_gain``:
    the previous EM step's gain when the steps follow one another (plain EM), else None (SQUAREM).

    A step whose gain is at the log-likelihood's rounding level (``ROUNDING · |loglik|``) measures no rate (its
    parameter change is rounding too): its gap is taken at the window's rates, or is ``|gain|`` without them."""
    if gain is None or start is None:
        return None
    if abs(gain) <= ROUNDING * abs(loglik):
        gap = estimated_gap(gain, run.rates)  # None without a rate below 1
        return abs(gain) if gap is None else gap
    rate = parameter_rate(start, run.last_vector, following)
    rates = [] if rate is None else [rate]
    if earlier_gain is not None and np.isfinite(earlier_gain) and 0 < gain < earlier_gain:
        rates.append(gain / earlier_gain)  # Aitken's ratio of two successive gains (at or above 1: rounding)
    if not rates:
        return estimated_gap(gain, [])
    run.rates = [*run.rates, max(rates)][-RATE_WINDOW:]
    return estimated_gap(gain, run.rates)


def _prune(runs: list[_Restart]) -> None:
    """Drop restarts that would need more than PRUNE_HORIZON iterations at their present rate to draw level."""
    known = [r.best_loglik for r in runs if r.best_loglik is not None and np.isfinite(r.best_loglik)]
    if len(known) < 2:
        return
    leader = max(known)
    for run in runs:
        if run.done or run.best_loglik is None or run.best_loglik >= leader:
            continue
        gain = max(run.last_change, 0.0) if np.isfinite(run.last_change) else float("inf")
        if run.best_loglik + PRUNE_HORIZON * gain < leader:
            run.done = True

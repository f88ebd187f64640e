"""Checks of specification values that several kinds' builders share (:attr:`dpgm.api.kinds.SpecForm.build`).

A builder turns the keys of a ``model:`` specification into a model; what it checks
against the data (a latent variable that is observed, a name that is not in the data,
a categorical variable where a continuous one is needed) is refused here with a
:class:`~dpgm.errors.SpecError` naming the key or the variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from dpgm.errors import SpecError

__all__ = ["check_latent_not_observed", "continuous_variables", "edge_pairs", "name_lists", "scopes_in_data",
           "spec_errors"]


def check_latent_not_observed(latent: list[str], states: dict[str, tuple[str, ...]]) -> None:
    """A latent variable present in the data would be fitted as observed: refuse it, naming it."""
    observed = [v for v in latent if v in states]
    if observed:
        raise SpecError(
            f"latent variable {observed[0]!r} is a variable of the data, so it would be fitted as observed; "
            f"rename it, remove it from 'latent' to fit it as observed, or drop it from the data "
            f"('drop: [{observed[0]}]' in the specification, or --drop {observed[0]})"
            + (f" (also in the data: {observed[1:]})" if len(observed) > 1 else ""))


def edge_pairs(spec: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    """``spec['edges']`` as (parent, child) pairs, or a SpecError saying what a ``kind`` needs."""
    edges = spec.get("edges")
    if not isinstance(edges, list) or not all(isinstance(e, list | tuple) and len(e) == 2 for e in edges):
        raise SpecError(f"a {kind} needs 'edges': a list of [parent, child] pairs")
    return [tuple(e) for e in edges]


def name_lists(spec: dict[str, Any], key: str, kind: str, size: int | None) -> list[tuple[str, ...]]:
    """``spec[key]`` as a list of name tuples (``size``: each exactly that long), or a SpecError naming it."""
    value = spec.get(key)
    ok = isinstance(value, list) and all(
        isinstance(e, list) and e and all(isinstance(v, str) and v for v in e) and (size is None or len(e) == size)
        for e in value)
    if not ok:
        what = "a list of [parent, child] pairs" if size == 2 else "a list of variable lists"
        raise SpecError(f"{key!r} of a {kind} must be {what}, got {value!r}")
    return [tuple(e) for e in value]


def scopes_in_data(spec: dict[str, Any], key: str, kind: str, states: dict[str, tuple[str, ...]]) -> list[tuple]:
    """``spec[key]``, a list of variable lists, each variable a categorical variable of the data."""
    scopes = spec.get(key)
    if not isinstance(scopes, list) or not all(isinstance(c, list) and c for c in scopes):
        raise SpecError(f"a {kind} needs '{key}': a list of variable lists")
    unknown = sorted({v for c in scopes for v in c} - set(states))
    if unknown:
        raise SpecError(f"{key} name variables not in the data: {unknown}; data variables: {sorted(states)}")
    return [tuple(c) for c in scopes]


def continuous_variables(named: list[str], kind: str, states: dict[str, tuple[str, ...]],
                         continuous: list[str] | None) -> None:
    """Every variable of ``named`` is a continuous variable of the data (``continuous`` None: not known)."""
    categorical = [v for v in named if v in states]
    if categorical:
        raise SpecError(f"a {kind} needs continuous variables; {categorical} are categorical in the data")
    if continuous is not None:
        unknown = [v for v in named if v not in continuous]
        if unknown:
            raise SpecError(f"variables {unknown} are not in the data; continuous variables: {sorted(continuous)}")


@contextlib.contextmanager
def spec_errors(kind: str) -> Iterator[None]:
    """A model constructor's ``TypeError`` or ``ValueError`` as a SpecError prefixed with the ``kind``."""
    try:
        yield
    except SpecError:
        raise
    except (TypeError, ValueError) as error:
        raise SpecError(f"{kind}: {error}") from None

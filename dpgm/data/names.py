"""Which names a dataset variable may have, checked before anything is written.

A variable is an array of the Zarr group, stored under its name: a name with ``/`` (or ``\\``)
would be a folder, a name of dots only a step up the path, ``__`` starts names the Zarr format
reserves, and ``row`` is the dimension every variable runs along (a column of that name would
become the row index and be lost). ``weight`` is the frequency weights' name: a second column
that would become the weights is a clash. Each refusal names the column and a rename that works.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence

from dpgm.data.schema import ROW, WEIGHT
from dpgm.errors import DataError

__all__ = ["check_columns", "check_variables", "problem"]


def problem(name: str) -> str | None:
    """Why ``name`` cannot be the name of a stored variable, or None if it can."""
    if name == "":
        return "has no name"
    if name == ROW:
        return f"is named {ROW!r}, the dimension every variable runs along: it would become the row index and be lost"
    if "/" in name or "\\" in name:
        return "holds a '/' or '\\', which the Zarr store would read as a folder"
    if set(name) == {"."}:
        return "is made of dots only, which the Zarr store would read as a step in its path"
    if name.startswith("__"):
        return "starts with '__', which the Zarr format reserves"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    return None


def suggestion(name: str, taken: Iterable[str] = ()) -> str:
    """A name that works in place of ``name`` (and is not in ``taken``)."""
    if name == ROW:
        base = "row_id"
    elif name == WEIGHT:
        base = "weight_in"
    else:
        base = re.sub(r"[/\\\x00-\x1f\x7f]+", "_", name).lstrip("_")
        if not base.strip("."):
            base = "column"
    taken = set(taken)
    candidate, n = base, 2
    while candidate in taken or problem(candidate) is not None:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


def cli_rename(old: str, new: str) -> str:
    """How ``dpgm convert`` and :func:`dpgm.convert` are told to rename ``old``."""
    return f"--rename {shlex.quote(f'{old}={new}')} (rename={{{old!r}: {new!r}}} in Python)"


def pandas_rename(old: str, new: str) -> str:
    """How a pandas frame's column ``old`` is renamed before :func:`dpgm.from_pandas`."""
    return f"df.rename(columns={{{old!r}: {new!r}}})"


def check_columns(columns: Sequence[str], *, rename: Mapping[str, str] | None = None, weight: str | None = None,
                  how: Callable[[str, str], str] = cli_rename) -> dict[str, str]:
    """The variable each input column becomes (``"weight"`` for the frequency weights), refusing names
    that cannot be stored and columns that would clash.

    Parameters
    ----------
    columns
        The input's column names, in order.
    rename
        ``{column: new name}``.
    weight
        The column of frequency weights, if one (a column named ``weight`` is the weights too).
    how
        How to tell the user to rename a column: ``how(old, new)``.

    Raises
    ------
    DataError
        A name used twice, a rename of a column that is not there, a name that cannot be
        stored (:func:`problem`), or two columns that would become one variable.
    """
    rename = dict(rename or {})
    seen: set[str] = set()
    for column in columns:
        if column in seen:
            raise DataError(f"column {column!r} appears twice in the input: give one of them another name in the "
                            "file (dpgm cannot tell them apart)")
        seen.add(column)
    unknown = sorted(set(rename) - seen)
    if unknown:
        raise DataError(f"cannot rename columns {unknown}: not in the input; columns: {list(columns)}")
    if weight is not None and weight not in seen:
        raise DataError(f"weight column {weight!r} is not in the input; columns: {list(columns)}")
    variables: dict[str, str] = {}
    owner: dict[str, str] = {}
    for column in columns:
        is_weight = column == weight or (column == WEIGHT and column not in rename)
        variable = WEIGHT if is_weight else rename.get(column, column)
        if variable == WEIGHT and not is_weight:
            raise DataError(f"cannot rename column {column!r} to {WEIGHT!r}, the frequency weights' name: name it "
                            f"the weights instead (--weight {shlex.quote(column)}, weight={column!r} in Python)")
        why = problem(variable)
        if why is not None:
            shown = f"column {column!r}" if variable == column else f"column {column!r} (renamed {variable!r})"
            raise DataError(f"{shown} {why}; rename it, e.g. {how(column, suggestion(variable, seen))}")
        if variable in owner:
            first = owner[variable]
            if variable == WEIGHT:
                clash = first if first == WEIGHT else column
                other = column if clash == first else first
                raise DataError(f"column {clash!r} and the weight column {other!r} would both be the frequency "
                                f"weights; rename it, e.g. {how(clash, suggestion(clash, seen))}")
            raise DataError(f"columns {first!r} and {column!r} would both be the variable {variable!r}; rename one, "
                            f"e.g. {how(column, suggestion(variable, seen | set(owner)))}")
        owner[variable] = column
        variables[column] = variable
    return variables


def check_variables(names: Iterable[str], what: str = "variable", *, hint: str = "") -> None:
    """Refuse a dataset variable whose name cannot be stored (:func:`problem`), naming it."""
    for name in names:
        why = problem(name)
        if why is not None:
            raise DataError(f"{what} {name!r} {why}; rename it{f' ({hint})' if hint else ''}")

"""Column kinds: the one rule that :func:`dpgm.convert` and :func:`dpgm.from_pandas` share.

Each input column becomes a categorical or a continuous variable (or the frequency
weights). The decision is made from a *summary* of the whole column, never from its
first rows: :class:`Summary` holds the column's distinct labels, how many rows are
numbers, text or missing, and its first few text tokens; summaries of pieces of a
column (a CSV byte range, a Parquet row group) merge into the summary of the whole
column, the same whatever the pieces. :func:`decide` then applies the rule:

* a column named in ``categorical`` / ``continuous`` is what it is named;
* a **float** column (stored as floats, or text whose numbers include one not written
  as an integer, e.g. ``1.5`` or ``2e3``) is continuous;
* an **integer** column (stored as integers, or text whose values are all written as
  integers) is continuous if it has more than :data:`MANY_INTEGERS` (50) distinct
  values, else categorical with the integers as labels (``"7"``, never ``"07"``);
* **text** and **boolean** columns are categorical;
* a column of numbers except for a few text tokens (at most :data:`FEW_TOKENS`
  distinct ones, on fewer rows than the numbers: ``NA?``, ``-``) is **refused**, naming
  the column, its first rows holding them and the tokens, and suggesting to read them
  as missing (``na_values``) or to name the column categorical; a column with more
  text than that is text;
* a column with no values at all is continuous (all missing).

Labels are **sorted** by default: labels that are numbers first, in numeric order
(``"2" < "10"``), then the others as strings (``"B" < "a"``); ``label_order="appearance"``
keeps the order in which they first appear in the input. A pandas ``Categorical``
keeps its declared categories, in their order.

What was decided, and why, is a :class:`ConversionReport`, kept in the dataset's
attribute ``dpgm_conversion`` (so it survives writing and opening the store).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpgm.errors import ConfigError, DataError

__all__ = [
    "FEW_TOKENS",
    "LABEL_ORDERS",
    "MANY_INTEGERS",
    "ColumnKind",
    "ConversionReport",
    "sort_labels",
]

MANY_INTEGERS = 50
"""An integer column with more distinct values than this is continuous (unless named categorical)."""
FEW_TOKENS = 10
"""A column of numbers with at most this many distinct text tokens (on fewer rows than the numbers) is refused."""
MAX_STATES = 32767
LABEL_ORDERS = ("sorted", "appearance")
REPORT = "dpgm_conversion"
_ROWS_SHOWN = 5
_INTEGER = r"^\s*[+-]?[0-9]+\s*$"


# ---------------------------------------------------------------------------------------------
# the report


@dataclass(frozen=True)
class ColumnKind:
    """What one input column became, and why.

    Attributes
    ----------
    column
        The input column's name.
    variable
        The dataset variable it became (``"weight"`` for the frequency weights).
    kind
        ``"categorical"``, ``"continuous"`` or ``"weight"``.
    reason
        Why, e.g. ``"integer, 72 distinct values (> 50)"`` or ``"text, 2 labels"``.
    """

    column: str
    variable: str
    kind: str
    reason: str


@dataclass(frozen=True)
class ConversionReport(Sequence):
    """The kind of every column of a converted dataset and why: one :class:`ColumnKind` each.

    ``dpgm convert`` prints it (``str(report)``: one line per column); in Python,
    ``ConversionReport.from_dataset(ds)`` reads it from the dataset that
    :func:`dpgm.convert` or :func:`dpgm.from_pandas` returned, or from the store.

    Examples
    --------
    >>> import pandas as pd
    >>> import dpgm
    >>> ds = dpgm.from_pandas(pd.DataFrame({"age": range(18, 90), "smoker": ["yes", "no"] * 36}))
    >>> print(ConversionReport.from_dataset(ds))
    age     continuous   integer, 72 distinct values (> 50)
    smoker  categorical  text, 2 labels
    >>> ConversionReport.from_dataset(ds)["age"].kind
    'continuous'
    """

    columns: tuple[ColumnKind, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.columns)

    def __iter__(self) -> Iterator[ColumnKind]:
        return iter(self.columns)

    def __getitem__(self, key):  # by position or by column name
        if isinstance(key, str):
            for column in self.columns:
                if column.column == key:
                    return column
            raise KeyError(f"no column {key!r} in the report; columns: {[c.column for c in self.columns]}")
        return self.columns[key]

    def __str__(self) -> str:
        width = max((len(c.column) for c in self.columns), default=0)
        return "\n".join(f"{c.column:<{width}}  {c.kind:<11}  {c.reason}" for c in self.columns)

    def to_attrs(self) -> list[dict[str, str]]:
        """The report as plain values for the dataset attribute ``dpgm_conversion``."""
        return [{"column": c.column, "variable": c.variable, "kind": c.kind, "reason": c.reason}
                for c in self.columns]

    @classmethod
    def from_dataset(cls, ds: Any) -> ConversionReport:
        """The report kept in a dataset's attribute ``dpgm_conversion``.

        Raises
        ------
        DataError
            The dataset was not made by :func:`dpgm.convert` or :func:`dpgm.from_pandas`.
        """
        entries = getattr(ds, "attrs", {}).get(REPORT)
        if not isinstance(entries, list):
            raise DataError(f"the dataset has no {REPORT!r} attribute: it was not made by dpgm.convert or "
                            "dpgm.from_pandas")
        return cls(tuple(ColumnKind(**{k: str(e[k]) for k in ("column", "variable", "kind", "reason")})
                         for e in entries))


# ---------------------------------------------------------------------------------------------
# options


@dataclass(frozen=True)
class Missing:
    """Tokens read as missing (``na_values``): labels equal to one of ``texts``, or numbers equal to
    one of ``numbers`` (``"-999"`` also matches ``-999.0``), as pandas' ``na_values`` does."""

    texts: frozenset[str] = frozenset()
    numbers: tuple[float, ...] = ()


def check_options(categorical: Sequence[str] | str, continuous: Sequence[str] | str,
                  na_values: Sequence[str] | str, label_order: str) -> tuple[tuple[str, ...], tuple[str, ...],
                                                                              Missing, str]:
    """The conversion options, checked before any pass (a single string is one name or token).

    Raises
    ------
    ConfigError
        An unknown ``label_order``, or a column named both categorical and continuous.
    """
    names = [(n,) if isinstance(n, str) else tuple(map(str, n)) for n in (categorical, continuous, na_values)]
    categorical, continuous, tokens = names
    if label_order not in LABEL_ORDERS:
        raise ConfigError(f"label_order must be one of {LABEL_ORDERS}, got {label_order!r}")
    both = sorted(set(categorical) & set(continuous))
    if both:
        raise ConfigError(f"columns {both} are named both categorical and continuous; name each once")
    numbers = pd.to_numeric(pd.Series(list(tokens), dtype=object), errors="coerce").dropna()
    return categorical, continuous, Missing(frozenset(tokens), tuple(float(v) for v in numbers)), label_order


# ---------------------------------------------------------------------------------------------
# labels


def parse_labels(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each label as a number (NaN: not a number) and whether it is written as an integer."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pd.to_numeric(pd.Series(labels, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    integers = np.zeros(len(values), dtype=bool)
    whole = np.flatnonzero(np.isfinite(values) & (values == np.round(values)))  # only these can be integers
    if len(whole):
        written = pc.match_substring_regex(pa.array([labels[i] for i in whole], type=pa.large_string()), _INTEGER)
        integers[whole] = written.to_numpy(zero_copy_only=False).astype(bool)
    return values, integers


def canonical_integers(labels: Sequence[str]) -> list[str]:
    """Labels written as integers, as the integer's own text (``"07"``, ``"+7"`` -> ``"7"``)."""
    out = []
    for label in labels:
        try:
            out.append(str(int(label)))
        except ValueError:
            out.append(label)
    return out


def sort_labels(labels: Sequence[str]) -> list[str]:
    """Labels in dpgm's order: numbers first, in numeric order, then the others as strings.

    Examples
    --------
    >>> sort_labels(["10", "b", "2", "B", "-1.5"])
    ['-1.5', '2', '10', 'B', 'b']
    """
    values, _ = parse_labels(list(labels))
    keys = [(0, v, s) if not np.isnan(v) else (1, 0.0, s) for v, s in zip(values.tolist(), labels, strict=True)]
    return [s for _, _, s in sorted(keys)]


def ordered(labels: Sequence[str], label_order: str) -> list[str]:
    """``labels`` (distinct, in order of first appearance) in the order ``label_order`` asks for."""
    return sort_labels(labels) if label_order == "sorted" else list(labels)


# ---------------------------------------------------------------------------------------------
# one column of a piece of input, and its summary


@dataclass
class Summary:
    """What the kind of a column is decided from; summaries of pieces merge (:meth:`merge`).

    ``storage`` is how the input stores the column: ``"text"`` (CSV, strings), ``"integer"``,
    ``"float"``, ``"boolean"``, ``"other"`` (dates and such, read as text) or ``"empty"``
    (no values). ``labels`` are the distinct values as text in order of first appearance
    (None: more than 32767, or a float column not asked for labels); ``tokens`` the first
    :data:`FEW_TOKENS` + 1 distinct values that are not numbers, with their row counts;
    ``token_rows`` the first rows holding one.
    """

    storage: str
    rows: int
    missing: int
    labels: list[str] | None
    number_rows: int
    text_rows: int
    tokens: dict[str, int]
    token_rows: list[int]
    non_integer: bool
    overflow_row: int = -1  # first row of the piece where the labels passed 32767

    @classmethod
    def merge(cls, parts: Sequence[Summary], offsets: Sequence[int], column: str) -> Summary:
        """The summary of a whole column from its pieces' (``offsets``: each piece's first row)."""
        storages = {p.storage for p in parts} - {"empty"}
        if not storages:
            storage = "empty"
        elif len(storages) == 1:
            storage = storages.pop()
        elif storages == {"integer", "float"}:
            storage = "float"
        elif "float" in storages:
            raise DataError(f"is stored as {sorted(storages)} in different files; convert them separately",
                            variable=column)
        else:
            storage = "text"
        labels: dict[str, None] | None = {}
        tokens: dict[str, int] = {}
        token_rows: list[int] = []
        overflow = -1
        for part, offset in zip(parts, offsets, strict=True):
            if labels is not None and part.storage != "empty":
                if part.labels is None:
                    labels, overflow = None, int(offset)
                else:
                    labels.update(dict.fromkeys(part.labels))
                    if len(labels) > MAX_STATES:
                        labels, overflow = None, int(offset)
            for token, count in part.tokens.items():
                if token in tokens or len(tokens) <= FEW_TOKENS:
                    tokens[token] = tokens.get(token, 0) + count
            token_rows += [int(offset) + r for r in part.token_rows][: _ROWS_SHOWN - len(token_rows)]
        return cls(storage, sum(p.rows for p in parts), sum(p.missing for p in parts),
                   None if labels is None else list(labels), sum(p.number_rows for p in parts),
                   sum(p.text_rows for p in parts), tokens, token_rows, any(p.non_integer for p in parts), overflow)


@dataclass
class Column:
    """One column of a piece of input: each row's index into ``labels`` (-1: missing) and each
    row as a number (NaN: missing or not a number). A float column read without labels has
    ``labels``/``indices`` None."""

    storage: str
    labels: list[str] | None
    indices: np.ndarray | None
    numbers: np.ndarray
    label_numbers: np.ndarray | None = None
    label_integers: np.ndarray | None = None

    def first_text_row(self) -> int:
        """The first row holding a value that is not a number, -1 if none."""
        if self.labels is None:
            return -1
        text = np.append(np.isnan(self.label_numbers), False)[self.indices]
        return int(np.argmax(text)) if text.any() else -1

    def summary(self) -> Summary:
        """This piece's :class:`Summary` (rows counted from the piece's first row)."""
        rows = len(self.numbers)
        if self.labels is None:
            missing = int(np.isnan(self.numbers).sum())
            return Summary(self.storage if missing < rows else "empty", rows, missing, None, rows - missing, 0, {},
                           [], False)
        counts = np.bincount(self.indices[self.indices >= 0], minlength=len(self.labels))
        missing = rows - int(counts.sum())
        text = np.isnan(self.label_numbers) & (counts > 0)
        shown = np.flatnonzero(text)[: FEW_TOKENS + 1]
        token_rows = []
        if text.any():
            token_rows = np.flatnonzero(np.append(text, False)[self.indices])[:_ROWS_SHOWN].tolist()
        return Summary(
            storage=self.storage if missing < rows else "empty",
            rows=rows,
            missing=missing,
            labels=list(self.labels) if len(self.labels) <= MAX_STATES else None,
            number_rows=int(counts[~text].sum()),
            text_rows=int(counts[text].sum()),
            tokens={self.labels[i]: int(counts[i]) for i in shown},
            token_rows=token_rows,
            non_integer=bool((~np.isnan(self.label_numbers) & ~self.label_integers & (counts > 0)).any()),
        )


def labelled_column(storage: str, labels: list[str], indices: np.ndarray, missing: Missing,
                    values: np.ndarray | None = None) -> Column:
    """A column from its distinct labels and each row's index into them; labels that ``missing``
    names become missing; labels of a boolean column are never numbers. ``values``: the labels
    as numbers where the input stores them as numbers (not parsed again)."""
    if storage == "boolean":
        values, integers = np.full(len(labels), np.nan), np.zeros(len(labels), dtype=bool)
    elif values is not None:
        values = np.asarray(values, dtype=np.float64)
        integers = np.full(len(labels), storage == "integer")
    else:
        values, integers = parse_labels(labels)
    drop = np.zeros(len(labels), dtype=bool)
    if missing.texts:
        drop |= pd.Index(labels, dtype=object).isin(list(missing.texts))
    if missing.numbers:
        drop |= np.isin(values, missing.numbers)
    if drop.any():
        keep = np.flatnonzero(~drop)
        relabel = np.full(len(labels) + 1, -1, dtype=np.int64)  # the last entry: missing stays missing
        relabel[keep] = np.arange(len(keep))
        indices = relabel[indices]
        labels, values, integers = [labels[i] for i in keep], values[keep], integers[keep]
    numbers = np.append(values, np.nan)[indices]
    return Column(storage, labels, indices, numbers, values, integers)


def float_column(numbers: np.ndarray, missing: Missing) -> Column:
    """A float column read without labels; numbers that ``missing`` names become NaN."""
    numbers = np.array(numbers, dtype=np.float64)
    if missing.numbers:
        numbers[np.isin(numbers, missing.numbers)] = np.nan
    return Column("float", None, None, numbers)


def series_column(series: pd.Series, missing: Missing, *, with_labels: bool) -> Column:
    """A pandas column as a :class:`Column`, read as :func:`dpgm.convert` reads the same values
    from a file: integers labelled ``"7"``, floats ``"7.5"``, booleans ``"True"``, text as it is."""
    from pandas.api import types

    dtype = series.dtype
    if types.is_bool_dtype(dtype):
        storage = "boolean"
    elif types.is_integer_dtype(dtype):
        storage = "integer"
    elif types.is_float_dtype(dtype):
        if not with_labels:
            return float_column(series.to_numpy(dtype=np.float64, na_value=np.nan), missing)
        storage = "float"
    elif types.is_object_dtype(dtype) or types.is_string_dtype(dtype):
        storage = "text"
    else:
        storage = "other"
    codes, uniques = pd.factorize(series, sort=False, use_na_sentinel=True)
    if storage == "other":  # dates and such: as pandas prints them, as convert does
        labels = [str(v) for v in pd.Series(uniques).astype("string").tolist()]
    else:
        text = {"integer": lambda v: str(int(v)), "float": lambda v: str(float(v)),
                "boolean": lambda v: str(bool(v))}.get(storage, str)
        labels = [text(v) for v in uniques]
    indices = codes.astype(np.int64, copy=False)
    if storage in ("integer", "float"):  # numbers as pandas holds them: not parsed again
        return labelled_column(storage, labels, indices, missing, values=np.asarray(uniques, dtype=np.float64))
    if len(set(labels)) != len(labels):  # values that print alike (1 and "1" in an object column): one label
        merged, distinct = pd.factorize(np.asarray(labels, dtype=object))
        indices, labels = np.append(merged, -1)[indices], [str(v) for v in distinct]
    return labelled_column(storage, labels, indices, missing)


# ---------------------------------------------------------------------------------------------
# the rule


@dataclass(frozen=True)
class Plan:
    """What a column becomes: its kind, its labels in their final order (None: continuous), and
    whether its labels are read as integers (``"07"`` is state ``"7"``)."""

    column: str
    variable: str
    kind: str
    labels: list[str] | None
    canonical: bool
    reason: str

    @property
    def report(self) -> ColumnKind:
        """This column's line of the :class:`ConversionReport`."""
        return ColumnKind(self.column, self.variable, self.kind, self.reason)


def values_type(summary: Summary) -> str:
    """``"integer"``, ``"float"``, ``"text"``, ``"boolean"`` or ``"empty"``: what the column's values are."""
    if summary.storage in ("empty", "integer", "float", "boolean"):
        return summary.storage
    if summary.text_rows or not summary.number_rows:
        return "text"
    return "float" if summary.non_integer else "integer"


def decide(column: str, summary: Summary, *, variable: str | None = None, categorical: bool = False,
           continuous: bool = False, weight: bool = False, label_order: str = "sorted",
           chunk_rows: int | None = None) -> Plan:
    """Apply the rule (see the module's docstring) to one column's summary.

    Raises
    ------
    DataError
        Numbers except for a few text tokens (or text in a column named continuous, or in
        the weights), naming the column, its first rows holding them, their chunk and the
        tokens; more than 32767 labels for a categorical column.
    """
    variable = variable or column
    values = values_type(summary)
    gaps = f", {summary.missing:,} missing" if summary.missing else ""
    if weight or continuous:
        if summary.text_rows:
            _refuse(column, summary, chunk_rows, named="the weights" if weight else "continuous")
        why = "frequency weights" if weight else f"{values}, named continuous"
        return Plan(column, variable, "weight" if weight else "continuous", None, False, why + gaps)
    if categorical:
        labels = _labels(column, summary, chunk_rows)
        count = "labels" if values in ("text", "boolean") else "distinct values"
        return Plan(column, variable, "categorical", ordered(labels, label_order), False,
                    f"{values}, {len(labels):,} {count}, named categorical{gaps}")
    if values == "empty":
        return Plan(column, variable, "continuous", None, False, "no values (all missing)")
    if values == "float":
        return Plan(column, variable, "continuous", None, False, f"float{gaps}")
    if values == "integer":
        distinct = None if summary.labels is None else list(dict.fromkeys(canonical_integers(summary.labels)))
        if distinct is None or len(distinct) > MANY_INTEGERS:
            many = f"{len(distinct):,}" if distinct is not None else f"more than {MAX_STATES:,}"
            return Plan(column, variable, "continuous", None, False,
                        f"integer, {many} distinct values (> {MANY_INTEGERS}){gaps}")
        return Plan(column, variable, "categorical", ordered(distinct, label_order), True,
                    f"integer, {len(distinct)} distinct values (<= {MANY_INTEGERS}){gaps}")
    if (values == "text" and summary.number_rows and len(summary.tokens) <= FEW_TOKENS
            and summary.number_rows > summary.text_rows):
        _refuse(column, summary, chunk_rows)
    labels = _labels(column, summary, chunk_rows)
    return Plan(column, variable, "categorical", ordered(labels, label_order), False,
                f"{values}, {len(labels):,} labels{gaps}")


def _labels(column: str, summary: Summary, chunk_rows: int | None) -> list[str]:
    if summary.labels is None:
        chunk = summary.overflow_row // chunk_rows if chunk_rows and summary.overflow_row >= 0 else None
        raise DataError(f"has more than {MAX_STATES:,} distinct values: too many states for a categorical "
                        "variable", variable=column, chunk=chunk)
    return summary.labels


def _refuse(column: str, summary: Summary, chunk_rows: int | None, named: str | None = None) -> None:
    """Refuse a column holding text where numbers are expected, in one line."""
    tokens = list(summary.tokens)[:FEW_TOKENS]
    more = ", ..." if len(summary.tokens) > FEW_TOKENS else ""
    n = summary.text_rows
    rows = ", ".join(map(str, summary.token_rows)) + (", ..." if n > len(summary.token_rows) else "")
    what = (f"{n:,} row{'s' if n != 1 else ''} of text {', '.join(map(repr, tokens))}{more} "
            f"at row{'s' if n != 1 else ''} {rows}")
    options = " ".join(f"--na-values {shlex.quote(t)}" for t in tokens)
    advice = f"read {'it' if len(tokens) == 1 else 'them'} as missing with {options} (na_values={tokens!r})"
    if named is None:
        head = f"holds numbers except for {what}"
        advice += f", or keep the column as text with --categorical {shlex.quote(column)} (categorical=[{column!r}])"
    elif named == "the weights":
        head = f"holds the frequency weights but has {what}"
    else:
        head = f"is named {named} but holds {what}"
    chunk = summary.token_rows[0] // chunk_rows if chunk_rows and summary.token_rows else None
    raise DataError(f"{head}; {advice}", variable=column, chunk=chunk)


def code_lookup(plan: Plan, labels: Sequence[str]) -> np.ndarray:
    """Each of a piece's labels as its code in ``plan.labels`` (-1: not among them); one more
    entry, -1, for missing rows (index -1)."""
    keys = canonical_integers(labels) if plan.canonical else list(labels)
    return np.append(pd.Index(plan.labels).get_indexer(keys), -1)


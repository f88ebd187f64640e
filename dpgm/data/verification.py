"""``dpgm.verify``: every chunk of a store present and its bytes those its writer recorded, in one pass.

The driver reads the store's group metadata (the completion marker, the chunk manifest and
the schema record, :mod:`dpgm.data.manifest`) and every array's ``zarr.json``, and compares
them; then one task per chunk row-block reads that block's chunk files of every array, checks
each file's CRC-32C against the 4 bytes stored with it and against the manifest, and reports
what is missing or damaged. The reports are merged in a tree (``split_every=8``); nothing
but the small reports reaches the driver.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dpgm.data.integrity import COMPLETE
from dpgm.data.manifest import ChunkFiles, merge_tree, records, schema_changes
from dpgm.errors import DataError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["VerifyReport", "verify"]

SPLIT_EVERY = 8


@dataclass
class VerifyReport:
    """What :func:`verify` found.

    Attributes
    ----------
    path
        The store.
    verifiable
        Whether the store has a chunk manifest (written by this dpgm); without one nothing
        can be verified and ``ok`` is False.
    complete
        Whether its writer marked it complete.
    problems
        Problems of the store as a whole (incomplete, records damaged, unverifiable).
    variables
        Per array: ``chunks`` in its grid, ``checked``, ``missing`` (``{"chunk", "file"}``),
        ``damaged`` (``{"chunk", "file", "reason"}``) and ``metadata`` (changes of its
        ``zarr.json`` since the store was marked complete).
    """

    path: str
    verifiable: bool = True
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every chunk present and intact, and every array's metadata as recorded."""
        return not self.problems and all(not (v["missing"] or v["damaged"] or v["metadata"])
                                         for v in self.variables.values())

    @property
    def n_chunks(self) -> int:
        return sum(v["checked"] for v in self.variables.values())

    def counts(self) -> tuple[int, int]:
        """Chunks missing and chunks damaged, over all arrays."""
        return (sum(len(v["missing"]) for v in self.variables.values()),
                sum(len(v["damaged"]) for v in self.variables.values()))

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (``dpgm verify --json``)."""
        missing, damaged = self.counts()
        return {"path": self.path, "ok": self.ok, "verifiable": self.verifiable, "complete": self.complete,
                "problems": list(self.problems), "chunks": self.n_chunks, "missing": missing, "damaged": damaged,
                "variables": self.variables}

    def summary(self) -> str:
        """One line: verified, or the counts and the first problem."""
        if self.ok:
            return (f"verified {self.path}: all {self.n_chunks} chunks of {len(self.variables)} arrays present, their "
                    "bytes match the chunk manifest and their CRC-32C")
        if self.problems:
            return f"{self.path!r} failed verification: {self.problems[0]}"
        missing, damaged = self.counts()
        return (f"{self.path!r} failed verification: {missing} missing, {damaged} damaged of {self.n_chunks} chunks "
                f"checked (first: {self._first_problem()})")

    def _first_problem(self) -> str:
        for name, v in self.variables.items():
            if v["metadata"]:
                return f"variable {name!r}: {v['metadata'][0]}"
            for entry, what in [*((e, "is missing") for e in v["missing"]),
                                *((e, e["reason"]) for e in v["damaged"])]:
                chunk = entry["chunk"][0] if entry["chunk"] else 0
                return f"variable {name!r}, chunk {chunk}: {entry['file']!r} {what}"
        return "none"

    def lines(self) -> list[str]:
        """The text of ``dpgm verify``: one line per array with problems, then the summary."""
        out = []
        for name, v in self.variables.items():
            if v["missing"] or v["damaged"] or v["metadata"]:
                out.append(f"  {name}: {v['checked']} chunks checked, {len(v['missing'])} missing, "
                           f"{len(v['damaged'])} damaged" + "".join(f"; {m}" for m in v["metadata"]))
                out += [f"    missing chunk {e['chunk']}: {e['file']}" for e in v["missing"]]
                out += [f"    damaged chunk {e['chunk']}: {e['file']}: {e['reason']}" for e in v["damaged"]]
        return out


@dataclass(frozen=True)
class Chunk:
    """One chunk to check: where it is and what the manifest records of it (small: shipped to a task)."""

    array: str
    key: str
    coords: tuple[int, ...]
    expected: int | None
    stored: bool


@dataclass(frozen=True)
class Plan:
    """The driver's part of a verification: the report so far and what each row-block task checks."""

    report: VerifyReport
    files: ChunkFiles
    blocks: list[list[Chunk]]


def plan(path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Plan:
    """Read the store's records and metadata (on the driver) and plan the chunk pass.

    Raises
    ------
    FileNotFoundError
        No store at the path.
    """
    path = os.fspath(path)
    # an absolute path for the chunk pass: workers started in other folders read the same files
    files = ChunkFiles(path if "://" in path else os.path.abspath(path), storage_options)
    group = files.document("")
    if group is None:
        if "://" not in path and not os.path.exists(path):
            raise FileNotFoundError(f"no store at {path!r}")
        raise DataError(f"{path!r} is not a Zarr v3 store (no readable zarr.json of a group)")
    attrs = group.get("attributes") or {}
    report = VerifyReport(path)
    if COMPLETE in attrs and attrs[COMPLETE] is not True:
        report.complete = False
        report.problems.append("its writer marked it incomplete (killed, out of space or failed)")
    try:
        found = records(attrs, path)
    except DataError as error:
        report.problems.append(str(error))
        return Plan(report, files, [])
    if found is None:
        report.verifiable = False
        report.problems.append("it is unverifiable: it has no chunk manifest (written by an earlier dpgm or another "
                               "tool); write it again with this dpgm")
        return Plan(report, files, [])
    schema, chunks = found
    blocks: list[list] = []
    for name in sorted(chunks):
        record = chunks[name]
        raw = files.read(name, "zarr.json")
        changes = ["its zarr.json is missing"] if raw is None else schema_changes(schema[name], raw)
        report.variables[name] = {"chunks": record.n_chunks, "checked": 0, "missing": [], "damaged": [],
                                  "metadata": changes}
        for coords in record.all_chunks():
            block = coords[0] if coords else 0
            while len(blocks) <= block:
                blocks.append([])
            blocks[block].append(Chunk(name, record.key(coords), coords, record.expected(coords), record.stored))
    return Plan(report, files, blocks)


def _check_chunk(files: ChunkFiles, chunk: Chunk) -> tuple[str, str | None]:
    """``("ok" | "missing" | "damaged", reason)`` for one chunk file."""
    import google_crc32c
    import numpy as np

    data, expected = files.read(chunk.array, chunk.key), chunk.expected
    if data is None:
        return ("ok", None) if expected is None else ("missing", None)
    if expected is None:
        return "damaged", "a file where the writer recorded an empty chunk (fill value only)"
    if not chunk.stored:
        if google_crc32c.value(data) != expected:
            return "damaged", "its CRC-32C differs from the one recorded in the chunk manifest"
        return "ok", None
    if len(data) < 4:
        return "damaged", "shorter than its checksum"
    stored = int.from_bytes(data[-4:], "little")
    if google_crc32c.value(np.frombuffer(data, np.uint8, len(data) - 4)) != stored:
        return "damaged", "checksum mismatch (its bytes differ from the CRC-32C stored with them)"
    if stored != expected:
        return "damaged", "a chunk other than the one its writer recorded (its CRC-32C differs from the manifest's)"
    return "ok", None


def _verify_block(files: ChunkFiles, block: list[Chunk]) -> dict:
    """One row-block's chunks of every array: ``{array: {"checked", "missing", "damaged"}}``."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in block:
        entry = out.setdefault(chunk.array, {"checked": 0, "missing": [], "damaged": []})
        entry["checked"] += 1
        status, reason = _check_chunk(files, chunk)
        where = {"chunk": list(chunk.coords), "file": files.name(chunk.array, chunk.key)}
        if status == "missing":
            entry["missing"].append(where)
        elif status == "damaged":
            entry["damaged"].append({**where, "reason": reason})
    return out


def _merge(*parts: dict) -> dict:
    merged: dict[str, dict[str, Any]] = {}
    for part in parts:
        for name, entry in part.items():
            into = merged.setdefault(name, {"checked": 0, "missing": [], "damaged": []})
            into["checked"] += entry["checked"]
            into["missing"] += entry["missing"]
            into["damaged"] += entry["damaged"]
    return merged


def chunk_pass(checks: Plan) -> Any:
    """The lazy pass over every chunk: one task per row-block, reports merged in a tree."""
    import dask

    token = uuid.uuid4().hex  # reads files that may have changed since: never a cached result
    files = dask.delayed(checks.files, pure=True, traverse=False, name=f"dpgm-verify-files-{token}")
    tasks = [dask.delayed(_verify_block, pure=True, traverse=False)(
        files, block, dask_key_name=(f"dpgm-verify-block-{token}", i)) for i, block in enumerate(checks.blocks)]
    return merge_tree(tasks, _merge, "dpgm-verify-merge", token, SPLIT_EVERY)


def finish(checks: Plan, found: dict) -> VerifyReport:
    """The report with the chunk pass's findings, chunks in order."""
    report = checks.report
    for name, entry in found.items():
        variable = report.variables[name]
        variable["checked"] += entry["checked"]
        variable["missing"] = sorted(variable["missing"] + entry["missing"], key=lambda e: e["chunk"])
        variable["damaged"] = sorted(variable["damaged"] + entry["damaged"], key=lambda e: e["chunk"])
    return report


def verify(path: str | os.PathLike[str], *, client: Client | None = None,
           storage_options: dict[str, Any] | None = None, progress: bool | str = False) -> VerifyReport:
    """Check that every chunk of a store is present and its bytes are those its writer recorded.

    One pass on the cluster: one task per chunk row-block reads that block's chunk files of
    every array and checks their CRC-32C against the 4 bytes stored with them and against
    the store's chunk manifest; the per-block reports are merged in a tree. The arrays'
    metadata are compared with the schema record on the driver. Works on datasets, model
    stores and checkpoints written by dpgm.

    Parameters
    ----------
    path
        The store: a local path or an fsspec URL.
    client
        Dask client (default: the active one, else Dask's threads).
    storage_options
        Passed to fsspec for URLs.
    progress
        Show progress of the pass.

    Returns
    -------
    VerifyReport
        ``ok`` when every chunk is present and intact; per array the chunks checked, missing
        and damaged. A store without a chunk manifest is reported unverifiable (``ok`` False).

    Raises
    ------
    FileNotFoundError
        No store at the path.
    DataError
        The path holds no Zarr v3 group.

    Examples
    --------
    >>> import tempfile, dpgm
    >>> path = tempfile.mkdtemp() + "/asia.zarr"
    >>> _ = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 1000, path, chunk_rows=250)
    >>> report = dpgm.verify(path)
    >>> report.ok, report.variables["smoke"]["checked"]
    (True, 4)
    """
    from dpgm.cluster import compute

    checks = plan(path, storage_options)
    if not checks.blocks:
        return checks.report
    return finish(checks, compute(chunk_pass(checks), client=client, progress=progress))

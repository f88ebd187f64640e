"""An output claimed for a command is never replaced unasked, even when it appears after the command's early
check (another writer finishing in between): exit 73, the output as that writer left it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from dpgm.cli.failures import EX_CANTCREAT, Failure
from dpgm.cli.outputs import check_output, claimed
from dpgm.data.claim import lock_path


def _in_a_command():
    return click.Context(click.Command("fit"))


def test_an_output_that_appears_between_the_check_and_the_claim_is_refused(tmp_path):
    out = tmp_path / "m.zarr"
    with _in_a_command():
        check_output("--out", out)  # nothing there yet: the early check passes
        out.mkdir()
        (out / "zarr.json").write_text("{}")  # another writer's output lands now
        with pytest.raises(Failure) as refused, claimed("--out", out):
            pass
    assert refused.value.exit_code == EX_CANTCREAT and "--overwrite" in refused.value.message
    assert (out / "zarr.json").read_text() == "{}"
    assert not Path(lock_path(str(out))).exists()  # the claim was released


def test_with_overwrite_and_for_folders_continued_by_later_runs_the_claim_holds(tmp_path):
    out, folder = tmp_path / "m.zarr", tmp_path / "checkpoint"
    out.mkdir()
    folder.mkdir()
    with _in_a_command():
        with claimed("--out", out, overwrite=True):
            assert out.exists()
        with claimed("--checkpoint", folder, folder=True):
            assert folder.exists()

"""Counts on a real `dask scheduler` + 2 `dask worker` processes started on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dask_processes import dask_processes
from data_helpers import pandas_counts, random_frame

import dpgm


@pytest.fixture(scope="module")
def scheduler_file(tmp_path_factory):
    with dask_processes(tmp_path_factory.mktemp("cluster"), 2) as file:
        yield file


def test_counts_on_real_scheduler_and_workers(tmp_path, scheduler_file):
    from distributed import Client

    frame = random_frame(np.random.default_rng(9), 4000, {"a": 3, "b": 4, "c": 2}, missing=0.1, weighted=True)
    dpgm.write_dataset(dpgm.from_pandas(frame), tmp_path / "d.zarr", chunk_rows=512)
    scopes = [("a", "b"), ("c", "b", "a"), ("c",)]
    with dpgm.connect(scheduler_file=str(scheduler_file)) as client:
        assert isinstance(client, Client) and len(client.scheduler_info()["workers"]) == 2
        tables = dpgm.counts(dpgm.open_dataset(tmp_path / "d.zarr"), scopes, client=client)
    for scope in scopes:
        expected, missing = pandas_counts(frame, scope)
        np.testing.assert_allclose(tables[scope].values, expected, rtol=1e-12)
        assert tables.n_missing[scope] == pytest.approx(missing, rel=1e-12)


def test_cli_counts_against_real_scheduler(tmp_path, scheduler_file):
    address = json.loads(Path(scheduler_file).read_text())["address"]
    ds = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 2000, tmp_path / "a.zarr", seed=2, chunk_rows=300)
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": address}
    out = subprocess.run([sys.executable, "-m", "dpgm.cli", "counts", str(tmp_path / "a.zarr"), "--scope", "either,xray",
                          "--json"], capture_output=True, text=True, env=env, timeout=120, check=True)
    expected = dpgm.counts(ds, [("either", "xray")])[("either", "xray")]
    assert json.loads(out.stdout)["tables"]["either,xray"]["counts"] == expected.values.tolist()


def _slow_sum(values):
    import time

    time.sleep(1.2)
    return sum(values)


def test_batch_progress_lines_report_long_passes_only(client, monkeypatch, caplog):
    """progress="lines": a pass longer than LINE_SECONDS logs task counts, then one closing line
    (with the right result); a short pass logs only the closing line. Each names the pass (its key's prefix)."""
    import logging
    import re

    import dask

    from dpgm import cluster

    monkeypatch.setattr(cluster, "LINE_SECONDS", 0.4)
    parts = [dask.delayed(int)(i) for i in range(5)]
    with caplog.at_level(logging.INFO, logger="dpgm"):
        assert cluster.compute(dask.delayed(_slow_sum)(parts), client=client, progress="lines") == 10
    lines = [r.getMessage() for r in caplog.records if r.name == "dpgm"]
    assert any(re.fullmatch(r"pass slow_sum: \d+/\d+ tasks done \(\d+%\), [\d.]+ s", line) for line in lines), lines
    assert re.fullmatch(r"pass slow_sum finished [\d.]+ s", lines[-1]), lines
    assert float(lines[-1].split()[-2]) >= 1.2
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpgm"):
        assert cluster.compute(dask.delayed(sum)(parts), client=client, progress="lines") == 10
    assert [r.getMessage().rsplit(" ", 2)[0] for r in caplog.records if r.name == "dpgm"] == ["pass sum finished"]


def test_terminal_bar_is_drawn_for_long_passes_only(client, monkeypatch, capsys):
    import dask

    from dpgm import cluster

    monkeypatch.setattr(cluster, "BAR_AFTER_SECONDS", 0.3)
    parts = [dask.delayed(int)(i) for i in range(5)]
    assert cluster.compute(dask.delayed(_slow_sum)(parts), client=client, progress=True) == 10
    assert "100% Completed" in capsys.readouterr().out
    assert cluster.compute(dask.delayed(sum)(parts), client=client, progress=True) == 10
    assert capsys.readouterr().out == ""


def test_embedded_workers_log_critical_messages_only():
    """The embedded cluster's worker processes keep every ``distributed`` logger (``distributed.core``'s
    "Received 'close-stream'" included) to critical messages, as ``silence_logs`` means; the levels are
    read in the worker processes themselves."""
    import logging

    with dpgm.connect(n_workers=1) as client:
        levels = client.run(lambda: {name: logging.getLogger(name).getEffectiveLevel()
                                     for name in ("distributed.core", "distributed.worker", "distributed.comm")})
    assert [set(by_name.values()) for by_name in levels.values()] == [{logging.CRITICAL}], levels

"""``dpgm score`` on a hidden Markov model fitted on the long layout: one log-likelihood per sequence.

Oracle: hmmlearn's ``CategoricalHMM.score`` of each sequence alone (the total rel 1e-9).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from cli_runs import run_dpgm
from hmmlearn.hmm import CategoricalHMM

import dpgm
from dpgm.data.schema import state_attrs
from dpgm.models.store import save

pytestmark = pytest.mark.usefixtures("shared_cluster")  # commands on the session's cluster (cli_runs)


def test_score_prints_the_long_layouts_total_over_its_sequences(tmp_path):
    rng = np.random.default_rng(3)
    model = dpgm.hmm(2, list("abc")).with_arrays(rng.dirichlet(np.ones(2)), rng.dirichlet(np.ones(2), 2),
                                                 rng.dirichlet(np.ones(3), 2))
    reference = CategoricalHMM(n_components=2, n_features=3, init_params="")
    reference.startprob_, reference.transmat_, reference.emissionprob_ = model.arrays()
    lengths = [30, 1, 75, 12]
    pieces = [reference.sample(n, random_state=i)[0][:, 0] for i, n in enumerate(lengths)]
    long = xr.Dataset({"sequence": ("row", np.repeat(np.arange(len(lengths)), lengths).astype(float)),
                       "obs": ("row", np.concatenate(pieces).astype(np.int8), state_attrs(list("abc")))})
    dpgm.write_dataset(long, tmp_path / "long.zarr", chunk_rows=20)
    save(model.with_sequence("sequence"), tmp_path / "model")
    done = run_dpgm("score", tmp_path / "model", tmp_path / "long.zarr", "--report", tmp_path / "score.json",
                    check=True, timeout=180)
    assert "sequences 4" in done.stdout
    report = json.loads((tmp_path / "score.json").read_text())
    assert report["total"] == pytest.approx(sum(reference.score(p.reshape(-1, 1)) for p in pieces), rel=1e-9)
    assert report["rows"] == len(lengths)

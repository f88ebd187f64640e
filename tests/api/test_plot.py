"""Convergence plots: the plotted points are the fit's history, the file is a real image."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import dpgm


def _titanic() -> xr.DataArray:
    # Titanic survival table (R datasets::Titanic, Dawson 1995): Class x Sex x Age x Survived
    counts = np.array([0, 0, 35, 0, 0, 0, 17, 0, 118, 154, 387, 670, 4, 13, 89, 3,
                       5, 11, 13, 0, 1, 13, 14, 0, 57, 14, 75, 192, 140, 80, 76, 20]).reshape(2, 2, 2, 4)
    table = xr.DataArray(counts, dims=["Survived", "Age", "Sex", "Class"],
                         coords={"Survived": ["No", "Yes"], "Age": ["Child", "Adult"], "Sex": ["Male", "Female"],
                                 "Class": ["1st", "2nd", "3rd", "Crew"]})
    return table.transpose("Class", "Sex", "Age", "Survived")


def test_plot_shows_the_history_and_writes_an_image(tmp_path):
    import matplotlib.image

    table = _titanic()
    model = dpgm.LogLinearModel.from_margins(
        [("Class", "Sex", "Age"), ("Class", "Survived"), ("Sex", "Survived"), ("Age", "Survived")],
        {v: list(table.coords[v].values) for v in table.dims})
    result = dpgm.fit(model, table, method="gis", tol=1e-6, max_iter=2000)
    figure = result.plot(tmp_path / "gis.png")
    loglik, error = figure.axes[0].lines[0], figure.axes[1].lines[0]
    np.testing.assert_array_equal(loglik.get_ydata(), [r["loglik"] for r in result.history])
    np.testing.assert_array_equal(error.get_ydata(), [r["max_error"] for r in result.history])
    assert figure.axes[1].get_yscale() == "log"
    image = matplotlib.image.imread(tmp_path / "gis.png")
    assert image.shape[:2] == (400, 1100)  # 11 x 4 inches at 100 dpi


def test_em_plot_draws_every_restart_and_the_gap_to_the_end(tmp_path):
    truth = dpgm.load_network("asia")
    data = dpgm.sample_bayesian_network(truth, 2000, seed=4).drop_vars("tub")
    result = dpgm.fit(truth, data, method="em", n_init=3, random_state=1, tol=1e-9, max_iter=200)
    figure = result.plot()
    assert len(figure.axes[0].lines) == 3
    best = [r["loglik"] for r in result.info["restart_histories"][result.info["restart"]]]
    drawn = [line.get_ydata() for line in figure.axes[0].lines]
    assert any(np.array_equal(d, best) for d in drawn)
    final = result.history[-1]["loglik"]
    gaps = figure.axes[1].lines[0].get_ydata()
    expected = [final - r["loglik"] for r in result.history if final - r["loglik"] > 0]
    np.testing.assert_array_equal(gaps, expected)


def test_closed_form_has_nothing_to_plot():
    truth = dpgm.load_network("asia")
    result = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), dpgm.sample_bayesian_network(truth, 500, seed=0))
    with pytest.raises(ValueError, match="no iterations"):
        result.plot()

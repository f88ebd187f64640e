"""BIF reading against pgmpy's own BIF reader on the shipped networks."""

import gzip

import numpy as np
import pytest
from pgmpy.readwrite import BIFReader

from dpgm.io import read_bif, write_bif
from dpgm.networks import available_networks, network_path


@pytest.mark.parametrize("name", ["asia", "sachs", "child", "alarm", "hailfinder"])
def test_read_bif_matches_pgmpy(name):
    ours = read_bif(network_path(name))
    text = gzip.decompress(network_path(name).read_bytes()).decode()
    theirs = BIFReader(string=text).get_model()
    assert set(ours.variables) == set(theirs.nodes())
    for cpd in theirs.get_cpds():
        table = ours.cpds[cpd.variable]
        assert list(table.dims) == cpd.variables
        for dim in table.dims:
            assert list(table.coords[dim].values) == cpd.state_names[dim]
        # pgmpy keeps the printed numbers; we renormalize columns that sum to 1 +- 1e-5
        np.testing.assert_allclose(table.values, cpd.values, rtol=0, atol=1e-5)
        np.testing.assert_allclose(table.values.sum(axis=0), 1.0, rtol=0, atol=1e-14)


def test_write_read_round_trip_is_exact(tmp_path):
    model = read_bif(network_path("alarm"))
    write_bif(model, tmp_path / "alarm.bif.gz")
    again = read_bif(tmp_path / "alarm.bif.gz")
    assert again.variables == model.variables
    for v in model.variables:
        np.testing.assert_array_equal(again.cpds[v].values, model.cpds[v].values)


def test_shipped_networks_include_the_standard_ones():
    assert {"asia", "sachs", "child", "alarm"} <= set(available_networks())


def test_bad_column_sum_is_refused(tmp_path):
    text = "variable a { type discrete [ 2 ] { x, y }; }\nprobability ( a ) { table 0.5, 0.4; }\n"
    (tmp_path / "bad.bif").write_text(text)
    with pytest.raises(ValueError, match="'a'.*sums to"):
        read_bif(tmp_path / "bad.bif")

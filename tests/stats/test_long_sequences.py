"""The E step of the long layout (``dpgm.stats.long_sequences``) on a real cluster and real Zarr stores.

Oracles: hmmlearn's ``CategoricalHMM`` (``score``, ``predict_proba``, one Baum-Welch
iteration) and ``GaussianHMM`` (``score``, ``predict_proba``, ``decode``: the Viterbi path
exactly) on the same sequences, rel 1e-9; a plain log-space forward-backward of
each whole sequence (``tests/chain_oracle.py``) for random models, sequences and
chunkings, with missing steps, to 1e-10. Bad input: a ``DataError`` naming the
variable and the chunk.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings

import numpy as np
import pytest
import xarray as xr
from chain_oracle import (
    categorical_accumulate,
    categorical_log_emission,
    gaussian_log_emission,
    oracle,
    viterbi_oracle,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpgm
from dpgm.cluster import pass_name
from dpgm.data.schema import Schema, state_attrs
from dpgm.errors import DataError
from dpgm.inference.segment_paths import VITERBI
from dpgm.inference.segments import FORWARD_BACKWARD
from dpgm.stats.long_sequences import long_expected_stats, long_row_map, sequence_layout
from dpgm.stats.source import DataSource

TOL = 1e-10
SYMBOLS = list("abcde")


def _dataset(ids: np.ndarray, codes: np.ndarray, *, labelled_ids: bool = False) -> xr.Dataset:
    if labelled_ids:  # a categorical id variable: each label is a sequence
        labels = [f"s{i}" for i in range(int(ids.max()) + 1)]
        sequence = ("row", ids.astype(np.int16), state_attrs(labels, "int16"))
    else:
        sequence = ("row", ids.astype(np.float64))
    return xr.Dataset({"sequence": sequence, "letter": ("row", codes.astype(np.int8), state_attrs(SYMBOLS))})


def _stored(directory, ds: xr.Dataset, chunk_rows: int, client) -> DataSource:
    path = f"{directory}/long.zarr"
    dpgm.write_dataset(ds, path, chunk_rows=chunk_rows)
    return DataSource.of(dpgm.open_dataset(path), client=client)


def _model(rng: np.random.Generator, n_states: int, n_symbols: int = len(SYMBOLS)):
    return (rng.dirichlet(np.ones(n_states)), rng.dirichlet(np.ones(n_states), n_states),
            rng.dirichlet(np.ones(n_symbols), n_states))


def _estep(source: DataSource, parameters, **options):
    return long_expected_stats(source, ["letter"], "sequence", parameters, categorical_log_emission,
                               categorical_accumulate, segments=FORWARD_BACKWARD, **options)


def _per_row(source: DataSource, parameters, segments=FORWARD_BACKWARD, **options) -> np.ndarray:
    return source.compute(long_row_map(source, ["letter"], "sequence", parameters, categorical_log_emission,
                                       segments=segments, **options))


def _emission_counts(codes: np.ndarray, gamma: np.ndarray, n_symbols: int) -> np.ndarray:
    """Expected emission counts from per-step posteriors, observed steps only."""
    counts = np.zeros((gamma.shape[1], n_symbols))
    for symbol in range(n_symbols):
        counts[:, symbol] = gamma[codes == symbol].sum(axis=0)
    return counts


def _assert_equals_oracle(source, ids, codes, model, tol=TOL):
    start, transition, emission = model
    log_emission = categorical_log_emission(0, {"letter": codes}, emission)
    loglik, gamma, start_counts, transition_counts = oracle(log_emission, ids, start, transition)
    [(found, counts)] = _estep(source, [model])
    # every step missing: loglik 0, up to rounding of one ulp per step
    np.testing.assert_allclose(found, loglik, rtol=tol, atol=1e-15 * len(ids))
    np.testing.assert_allclose(counts["start"], start_counts, rtol=tol, atol=tol)
    np.testing.assert_allclose(counts["transition"], transition_counts, rtol=tol, atol=tol)
    np.testing.assert_allclose(counts["emission"], _emission_counts(codes, gamma, emission.shape[1]), rtol=tol,
                               atol=tol)
    np.testing.assert_allclose(_per_row(source, model), gamma, rtol=0, atol=tol)
    # the decoded path is a best path: its log-probability is the best one (equally probable paths may differ)
    best, _ = viterbi_oracle(log_emission, ids, start, transition)
    path = _per_row(source, model, VITERBI)[:, 0]
    on_path = np.log(start[path[np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])]]).sum()
    within = np.flatnonzero(ids[1:] == ids[:-1]) + 1
    on_path += np.log(transition[path[within - 1], path[within]]).sum() + log_emission[np.arange(len(ids)), path].sum()
    np.testing.assert_allclose(on_path, best, rtol=0, atol=1e-8)


def test_against_hmmlearn_over_five_chunks(tmp_path, client):
    """Five sequences (one of length 1, two crossing several chunk boundaries) in 5 Zarr chunks: log-likelihood
    = hmmlearn's ``score``, posteriors = ``predict_proba``, and the parameters of one Baum-Welch iteration from
    the expected counts = hmmlearn's after one iteration (``fit`` with ``n_iter=1``), all rel 1e-9."""
    from hmmlearn.hmm import CategoricalHMM

    rng = np.random.default_rng(0)
    lengths = [430, 1, 77, 300, 192]
    ids = np.repeat(np.arange(len(lengths)), lengths)
    codes = rng.integers(0, len(SYMBOLS), ids.size)
    start, transition, emission = model = _model(rng, 3)
    source = _stored(tmp_path, _dataset(ids, codes), 200, client)
    assert len(source.data.chunks["row"]) == 5

    reference = CategoricalHMM(n_components=3, n_features=len(SYMBOLS), init_params="", params="ste", n_iter=1,
                               tol=-np.inf)
    reference.startprob_, reference.transmat_, reference.emissionprob_ = start, transition, emission
    X = codes.reshape(-1, 1)
    [(loglik, counts)] = _estep(source, [model])
    np.testing.assert_allclose(loglik, reference.score(X, lengths), rtol=1e-9)
    np.testing.assert_allclose(_per_row(source, model), reference.predict_proba(X, lengths), rtol=1e-9,
                               atol=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hmmlearn warns that one iteration does not converge
        reference.fit(X, lengths)
    np.testing.assert_allclose(counts["start"] / counts["start"].sum(), reference.startprob_, rtol=1e-9)
    np.testing.assert_allclose(counts["transition"] / counts["transition"].sum(axis=1, keepdims=True),
                               reference.transmat_, rtol=1e-9)
    np.testing.assert_allclose(counts["emission"] / counts["emission"].sum(axis=1, keepdims=True),
                               reference.emissionprob_, rtol=1e-9)


def test_gaussian_emissions_and_viterbi_against_hmmlearn(tmp_path, client):
    """The same passes with Gaussian emissions (a continuous variable, the caller's log densities), against
    hmmlearn's ``GaussianHMM``: loglik = ``score`` and posteriors = ``predict_proba`` (rel 1e-9), and the
    decoded path = ``decode``'s Viterbi path, state by state, with sequences crossing 5 chunks."""
    from hmmlearn.hmm import GaussianHMM

    rng = np.random.default_rng(1)
    lengths = [520, 1, 240, 239]
    ids = np.repeat(np.arange(len(lengths)), lengths)
    start, transition, _ = _model(rng, 3)
    means, variances = np.array([-1.0, 0.5, 2.0]), np.array([0.5, 1.0, 2.0])
    x = rng.normal(means[rng.integers(0, 3, ids.size)], 1.0)
    ds = xr.Dataset({"sequence": ("row", ids.astype(np.float64)), "x": ("row", x)})
    source = _stored(tmp_path, ds, 200, client)
    parameters = (start, transition, (means, variances))
    reference = GaussianHMM(n_components=3, covariance_type="diag", init_params="", params="")
    reference.startprob_, reference.transmat_ = start, transition
    reference.means_, reference.covars_ = means[:, None], variances[:, None]
    X = x.reshape(-1, 1)

    def lazy(segments):
        return long_row_map(source, ["x"], "sequence", parameters, gaussian_log_emission, segments=segments)

    [(loglik, _)] = long_expected_stats(source, ["x"], "sequence", [parameters], gaussian_log_emission,
                                        segments=FORWARD_BACKWARD)
    np.testing.assert_allclose(loglik, reference.score(X, lengths), rtol=1e-9)
    np.testing.assert_allclose(source.compute(lazy(FORWARD_BACKWARD)), reference.predict_proba(X, lengths),
                               rtol=1e-9, atol=1e-15)
    path = source.compute(lazy(VITERBI))
    assert path.shape == (ids.size, 1) and path.dtype == np.int64
    np.testing.assert_array_equal(path[:, 0], reference.decode(X, lengths, algorithm="viterbi")[1])


def _problem(seed: int, n_states: int, lengths: list[int], missing: float, labelled_ids: bool):
    rng = np.random.default_rng(seed)
    ids = np.repeat(rng.permutation(len(lengths)), lengths)  # contiguous, not sorted
    codes = rng.integers(0, len(SYMBOLS), ids.size)
    codes[rng.random(ids.size) < missing] = -1
    return ids, codes, _model(rng, n_states), _dataset(ids, codes, labelled_ids=labelled_ids)


problems = dict(seed=st.integers(0, 2**32 - 1), n_states=st.integers(2, 4),
                lengths=st.lists(st.integers(1, 60), min_size=1, max_size=5) | st.just([400]),
                missing=st.sampled_from([0.0, 0.2, 1.0]), labelled_ids=st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk_fraction=st.floats(0.001, 1.0), **problems)
def test_zarr_chunks_anywhere_equal_whole_sequences(tmp_path_factory, client, chunk_fraction, seed, n_states,
                                                    lengths, missing, labelled_ids):
    """Random models and sequences (one long one, length 1, missing steps, every step missing) in a Zarr store
    of random chunk rows, on the cluster: loglik, counts and posteriors equal the whole-sequence oracle to 1e-10."""
    ids, codes, model, ds = _problem(seed, n_states, lengths, missing, labelled_ids)
    chunk_rows = max(1, int(chunk_fraction * ids.size))
    directory = tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp())
    _assert_equals_oracle(_stored(directory, ds, chunk_rows, client), ids, codes, model)


@settings(max_examples=12, deadline=None)
@given(cuts=st.lists(st.floats(0, 1), max_size=10), **problems)
def test_irregular_dask_chunks_equal_whole_sequences(client, cuts, seed, n_states, lengths, missing,
                                                     labelled_ids):
    """The same with a dask-backed dataset cut at random rows (chunks of any sizes), on the cluster."""
    ids, codes, model, ds = _problem(seed, n_states, lengths, missing, labelled_ids)
    edges = sorted({0, ids.size, *(int(c * ids.size) for c in cuts)})
    chunked = ds.chunk({"row": tuple(np.diff(edges).tolist())})
    _assert_equals_oracle(DataSource.of(chunked, client=client), ids, codes, model)


def test_in_memory_without_a_client_equals_whole_sequences():
    ids, codes, model, ds = _problem(5, 3, [3000, 1, 200], 0.1, False)
    _assert_equals_oracle(DataSource.of(ds), ids, codes, model)


@dataclasses.dataclass(frozen=True)
class CountingSource(DataSource):
    """A data source that records the name of every pass it runs."""

    passes: list = dataclasses.field(default_factory=list)

    def compute(self, lazy):
        self.passes.append(pass_name(lazy))
        return super().compute(lazy)


def test_restarts_share_two_passes_and_equal_single_runs(tmp_path, client):
    """Three parameter sets in one E step: two passes (the layout given), each set's result identical to
    its own E step; one long sequence over 8 chunks."""
    rng = np.random.default_rng(2)
    ids = np.zeros(4000, dtype=np.int64)
    codes = rng.integers(-1, len(SYMBOLS), ids.size)
    path = tmp_path / "one.zarr"
    dpgm.write_dataset(_dataset(ids, codes), path, chunk_rows=500)
    data = dpgm.open_dataset(path)
    source = CountingSource(data, Schema.from_dataset(data), client)
    layout = sequence_layout(source, "sequence")
    assert layout.n_sequences == 1 and layout.n_chunks == 8
    models = [_model(rng, 3) for _ in range(3)]
    source.passes.clear()
    together = _estep(source, models, layout=layout)
    assert source.passes == ["dpgm-segments", "dpgm-estep"]
    for model, result in zip(models, together, strict=True):
        [alone] = _estep(source, [model], layout=layout)
        assert alone[0] == result[0]
        for key in ("start", "transition", "emission"):
            np.testing.assert_array_equal(alone[1][key], result[1][key])
    _assert_equals_oracle(source, ids, codes, models[1])


def test_rows_of_whole_sequences_equal_their_share(tmp_path, client):
    """``rows=``: a block of chunks holding whole sequences gives those sequences' totals; a block that cuts a
    sequence is refused, naming the chunk."""
    rng = np.random.default_rng(3)
    ids = np.repeat([0, 1, 2], [250, 150, 400])  # chunks of 100: sequence 1 ends at row 400
    codes = rng.integers(0, len(SYMBOLS), ids.size)
    model = _model(rng, 2)
    source = _stored(tmp_path, _dataset(ids, codes), 100, client)
    layout = sequence_layout(source, "sequence")
    [(loglik, counts)] = _estep(source, [model], layout=layout, rows=(400, 800))
    expected = oracle(categorical_log_emission(0, {"letter": codes[400:]}, model[2]), ids[400:], model[0],
                      model[1])
    np.testing.assert_allclose(loglik, expected[0], rtol=TOL)
    np.testing.assert_allclose(counts["transition"], expected[3], rtol=TOL)
    with pytest.raises(DataError, match="inside sequence 2") as error:
        _estep(source, [model], layout=layout, rows=(0, 500))
    assert error.value.variable == "sequence" and error.value.chunk == 4


@pytest.mark.parametrize(("ids", "chunk", "message"), [
    ([0, 1, 0, 0, 2, 2, 2, 2, 3, 3, 3, 3], 0, "sequence 0 reappears at row 2"),  # inside one chunk
    ([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 2, 2], 2, "sequence 0 reappears"),  # each chunk sorted, the data not
    ([5, 5, 3, 3, 4, 4, 9, 9, 6, 6, 3, 3], 2, "sequence 3 reappears"),  # unsorted chunks
    ([1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 1], 2, "sequence 1 reappears at row 3"),  # after a sequence over chunks
])
def test_non_contiguous_sequences_are_refused(tmp_path, client, ids, chunk, message):
    ids = np.asarray(ids)
    source = _stored(tmp_path, _dataset(ids, np.zeros(ids.size, dtype=np.int64)), 4, client)
    with pytest.raises(DataError, match=message) as error:
        sequence_layout(source, "sequence")
    assert error.value.variable == "sequence" and error.value.chunk == chunk
    assert "contiguous" in str(error.value)


def test_unsorted_contiguous_ids_are_accepted(tmp_path, client):
    ids = np.asarray([5, 5, 5, 5, 5, 3, 3, 3, 9, 9, 1, 1])
    source = _stored(tmp_path, _dataset(ids, np.zeros(ids.size, dtype=np.int64)), 4, client)
    layout = sequence_layout(source, "sequence")
    assert layout.n_sequences == 4
    assert layout.continues_in.tolist() == [False, True, False]


@pytest.mark.parametrize(("values", "message"), [
    ([0.0, 0.0, np.nan, 1.0], "id nan at row 2 of the chunk is missing"),
    ([0.0, -3.0, 1.0, 1.0], "not a non-negative integer"),
    ([0.0, 0.5, 1.0, 1.0], "not a non-negative integer"),
])
def test_bad_sequence_ids_are_refused(tmp_path, client, values, message):
    ds = _dataset(np.zeros(8), np.zeros(8, dtype=np.int64))
    ds["sequence"] = ("row", np.concatenate([[0.0] * 4, values]))
    source = _stored(tmp_path, ds, 4, client)
    with pytest.raises(DataError, match=message) as error:
        sequence_layout(source, "sequence")
    assert error.value.variable == "sequence" and error.value.chunk == 1


def test_missing_labelled_id_and_weights_are_refused(tmp_path, client):
    ds = _dataset(np.zeros(6, dtype=np.int64), np.zeros(6, dtype=np.int64), labelled_ids=True)
    ds["sequence"].values[3] = -1
    with pytest.raises(DataError, match="id -1 at row 3 of the chunk is missing") as error:
        sequence_layout(_stored(tmp_path / "a", ds, 6, client), "sequence")
    assert error.value.chunk == 0
    weighted = _dataset(np.zeros(6), np.zeros(6, dtype=np.int64)).assign(weight=("row", np.ones(6)))
    with pytest.raises(DataError, match="weights are not supported in the long layout") as error:
        sequence_layout(DataSource.of(weighted), "sequence")
    assert error.value.variable == "weight"


def test_a_layout_of_other_data_is_refused(tmp_path, client):
    rng = np.random.default_rng(4)
    codes = rng.integers(0, len(SYMBOLS), 12)
    one = _stored(tmp_path / "a", _dataset(np.repeat([0, 1], 6), codes), 4, client)
    other = _stored(tmp_path / "b", _dataset(np.repeat([0, 1], [3, 9]), codes), 4, client)
    with pytest.raises(DataError, match="does not describe this data"):
        _estep(other, [_model(rng, 2)], layout=sequence_layout(one, "sequence"))
    sequences = _dataset(np.zeros(12), codes).assign(sequence=(("row", "time"), np.zeros((12, 2))))
    with pytest.raises(DataError, match="sequence ids over \\('row',\\)"):
        sequence_layout(DataSource.of(sequences), "sequence")

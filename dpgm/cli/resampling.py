"""``dpgm bootstrap``: the Poisson bootstrap of a specification's fit, its replicates saved as a Zarr store.

The store (``--out``) is ``BootstrapResult.replicates`` written by
:func:`dpgm.data.result_store.write_results`, so ``xr.open_zarr(out)`` reads it back equal:
every parameter over ``replicate`` and its own dimensions, named as
:func:`dpgm.models.parameters.parameter_tables` names them (``table:asia``, ``a,b``,
``coefficients.c``; names are kept, never mapped), ``loglik``, ``converged`` and ``passes``
per replicate, the attributes ``random_state``, ``passes``, ``method`` and ``model``, plus
dpgm's completion records (``dpgm_complete``, ``dpgm_manifest``, ``dpgm_schema``: ``dpgm
verify`` checks the store). It is written under a temporary name beside ``--out`` and swapped
in when complete; a URL (``s3://...``, with ``--storage-options``) is written beside the old
store and copied over it (:func:`dpgm.data.claim.writing`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from dpgm.cli.connection import (
    cluster,
    connection_options,
    scheduler_file_option,
    scheduler_option,
    storage_options,
    workers_option,
)
from dpgm.cli.entry import cli
from dpgm.cli.failures import EX_NOT_CONVERGED, errors
from dpgm.cli.options import progress
from dpgm.cli.outputs import check_output, claimed, is_remote, replacing, write_text_atomically

SUMMARY_ENTRIES = 100
"""Parameter entries printed at most (the summary's first ones); the others are counted, and are in --report."""


@cli.command()
@click.argument("spec", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--replicates", type=click.IntRange(2, 100_000), default=200, show_default=True,
              help="Number of bootstrap replicates B.")
@click.option("--random-state", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="Seed of the Poisson weights (a hash of each row's position, the replicate and the seed).")
@click.option("--out", type=click.Path(), required=True,
              help="Zarr store to write the replicates to (every parameter over 'replicate'; xarray.open_zarr "
                   "reads it).")
@click.option("--report", type=click.Path(), default=None,
              help="Write the estimate's log-likelihood, the passes, the seconds and every parameter's estimate, "
                   "bootstrap standard error and percentile interval as JSON here.")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Level of the percentile intervals of --report.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --out store (the new one is swapped in when complete) and --report file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def bootstrap(spec, data, replicates, random_state, out, report, level, overwrite, scheduler, scheduler_file,
              workers) -> None:
    """Fit the model of SPEC (YAML/TOML) to DATA and to B Poisson bootstrap replicates of DATA; save the
    replicates' parameters to --out.

    Replicate b weighs each row by a Poisson(1) draw from a hash of the row's position, b and
    --random-state, computed by the worker that reads the row: all B fits share their passes
    (one pass for complete-data models, whatever B; EM fits advance together from the fit on
    DATA). Prints each parameter's estimate, bootstrap standard error and 95 % percentile
    interval. Exits 0 when every fit converged and 3 when one stopped at its iteration limit
    (the store and the report are written either way).
    """
    from dpgm.api.bootstrap import bootstrap as run
    from dpgm.data import Schema, open_dataset
    from dpgm.spec import SpecError, build_model, drop_variables, read_spec

    check_output("--out", out, overwrite=overwrite, inputs=(data, spec))
    check_output("--report", report, overwrite=overwrite, inputs=(data, spec))
    click.get_current_context().meta["dpgm.inputs"] = [spec, data]
    with errors():
        ds = open_dataset(data, storage_options=storage_options(data))
        try:
            parsed, ds = drop_variables(read_spec(spec), ds)
            schema = Schema.from_dataset(ds)
            model, method, options = build_model(parsed, schema.states, continuous=schema.continuous)
        except SpecError as error:
            raise SpecError(f"specification {spec!r}: {error}") from None
        with claimed("--out", out, overwrite=overwrite):  # one writer: a second one exits 73 naming this one
            with cluster(scheduler, scheduler_file, workers) as client:
                start = time.perf_counter()
                result = run(model, ds, replicates=replicates, random_state=random_state, method=method,
                             options=options, client=client, progress=progress())
                seconds = time.perf_counter() - start
            save_replicates(result.replicates, out)
            click.echo(summary(result))
            failed = replicates - int(result.replicates["converged"].sum())
            stopped = ([] if result.estimate.converged else ["the fit on the data did not converge"]) + (
                [f"{failed} replicate(s) did not converge"] if failed else [])
            click.echo("; ".join([f"{replicates} replicates, {result.passes} pass(es) over the data, {seconds:.2f} s",
                                  f"replicates saved to {out}", *stopped]))
            if report:
                payload = report_of(result, level) | {"seconds": seconds, "spec": str(spec), "data": str(data),
                                                      "out": str(out)}
                write_text_atomically(report, json.dumps(payload, indent=2, default=float, allow_nan=False))
    if stopped:
        sys.exit(EX_NOT_CONVERGED)


def save_replicates(replicates, out: str) -> None:
    """Write ``replicates`` to the store ``out``: under a temporary name beside it, swapped in when complete
    (a URL: beside the old store and copied over it, :func:`dpgm.data.claim.writing`)."""
    from dpgm.data.claim import writing
    from dpgm.data.result_store import write_results

    if is_remote(out):
        options = storage_options(out)
        with writing(out, mode="w", storage_options=options) as target:
            write_results(replicates, target, storage_options=options)
        return
    with replacing(out) as pending:
        write_results(replicates, pending)


def summary(result) -> str:
    """``result.summary()``; past :data:`SUMMARY_ENTRIES` entries, its first ones and how many were left out."""
    text = result.summary(max_entries=SUMMARY_ENTRIES)
    if text.endswith("are not shown"):
        text += " (--report holds them all; --out every replicate)"
    return text


def _listed(array: Any) -> Any:
    """Nested lists of floats, NaN as None (JSON has no NaN)."""
    import numpy as np

    values = np.asarray(array, dtype=float)
    return np.where(np.isfinite(values), values, None).tolist() if values.ndim else (
        float(values) if np.isfinite(values) else None)


def report_of(result, level: float) -> dict:
    """The --report: the estimate's fit, the bootstrap's figures, and per parameter its dimensions, labels,
    estimate, standard error and interval (nested lists over the dimensions, in their order)."""
    from dpgm.models.parameters import parameter_tables

    estimate = parameter_tables(result.estimate.model)
    errors, interval = result.standard_errors, result.confidence_interval(level)
    parameters = {}
    for name in result.parameters:
        table = estimate[name]
        bounds = interval[name].transpose("bound", *table.dims)
        parameters[name] = {
            "dims": list(table.dims),
            "coords": {d: [v.item() if hasattr(v, "item") else v for v in table[d].values]
                       for d in table.dims if d in table.coords},
            "estimate": _listed(table.values),
            "standard_error": _listed(errors[name].transpose(*table.dims).values),
            "lower": _listed(bounds.sel(bound="lower").values),
            "upper": _listed(bounds.sel(bound="upper").values),
        }
    fit = result.estimate
    converged = result.replicates["converged"].values
    return {"model": type(fit.model).__name__, "method": fit.method, "replicates": result.n_replicates,
            "random_state": result.random_state, "level": level, "passes": result.passes,
            "estimate": {"loglik": fit.loglik, "converged": bool(fit.converged), "n_iter": fit.n_iter,
                         "passes": fit.passes, "n_rows": fit.n_rows},
            "replicates_converged": int(converged.sum()), "parameters": parameters}

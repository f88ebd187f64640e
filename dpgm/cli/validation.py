"""``dpgm cv``: cross-validate candidate specifications on one dataset and print (and report) the choice."""

from __future__ import annotations

import json
import time
from pathlib import Path

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
from dpgm.cli.failures import errors
from dpgm.cli.options import progress
from dpgm.cli.outputs import check_output, write_text_atomically


@cli.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--folds", type=click.IntRange(2, 1000), default=5, show_default=True, help="Number of folds K.")
@click.option("--random-state", type=click.IntRange(0), default=0, show_default=True,
              help="Seed of the fold assignment (a hash of each row's position).")
@click.option("--report", type=click.Path(), default=None,
              help="Write every candidate's per-fold and mean held-out log-likelihood, AIC, BIC and the choice "
                   "as JSON here.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --report file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def cv(specs, data, folds, random_state, report, overwrite, scheduler, scheduler_file, workers) -> None:
    """Cross-validate the models of the specifications SPECS (YAML/TOML, one candidate each) on DATA.

    Every candidate is fitted on every K-1 folds in shared passes (one pass for complete-data
    models) and scored on the held-out fold in one more pass; the candidate with the highest mean
    held-out log-likelihood per row is chosen. Each candidate is named by its file's stem.
    """
    from dpgm.api.cross_validation import Candidate, cross_validate
    from dpgm.data import Schema, open_dataset
    from dpgm.spec import SpecError, build_model, read_spec

    check_output("--report", report, overwrite=overwrite, inputs=(data, *specs))
    click.get_current_context().meta["dpgm.inputs"] = [*specs, data]
    with errors():
        ds = open_dataset(data, storage_options=storage_options(data))
        schema = Schema.from_dataset(ds)
        candidates = {}
        for spec in specs:
            try:
                model, method, options = build_model(read_spec(spec), schema.states, continuous=schema.continuous)
            except SpecError as error:
                raise SpecError(f"specification {spec!r}: {error}") from None
            name = Path(spec).stem
            if name in candidates:
                name = str(spec)
            candidates[name] = Candidate(model, method, options, name)
        with cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            result = cross_validate(candidates, ds, folds=folds, random_state=random_state, client=client,
                                    progress=progress())
            seconds = time.perf_counter() - start
        click.echo(_table(result))
        click.echo(f"chosen: {result.chosen.item()}  ({folds} folds, {result.attrs['passes']} passes over the "
                   f"data, {seconds:.2f} s)")
        if report:
            payload = {"chosen": str(result.chosen.item()), "folds": folds, "random_state": random_state,
                       "passes": result.attrs["passes"], "seconds": seconds, "data": str(data),
                       "candidates": {name: _row(result, name) | {"spec": str(spec)}
                                      for name, spec in zip(candidates, specs, strict=True)}}
            write_text_atomically(report, json.dumps(payload, indent=2, default=float))


_COLUMNS = ("mean_loglik_per_row", "standard_error", "aic", "bic", "n_params")


def _row(result, name: str) -> dict:
    """One candidate's figures: its per-fold held-out log-likelihood and rows, the means and criteria."""
    one = result.sel(candidate=name)
    row = {"loglik": one.loglik.values.tolist(), "rows": one.rows.values.tolist(),
           "converged": bool(one.converged)}
    return row | {c: one[c].item() for c in _COLUMNS if c in result}


def _table(result) -> str:
    """The candidates, one per line: held-out log-likelihood per row +- its standard error, AIC, BIC."""
    names = [str(c) for c in result.candidate.values]
    width = max(len(n) for n in [*names, "candidate"])
    lines = [f"{'candidate':<{width}}  {'held-out loglik/row':>20}  {'s.e.':>9}  {'AIC':>14}  {'BIC':>14}"]
    chosen = str(result.chosen.item())
    for name in names:
        one = result.sel(candidate=name)
        lines.append(f"{name:<{width}}  {float(one.mean_loglik_per_row):>20.6f}  {float(one.standard_error):>9.6f}  "
                     f"{float(one.aic):>14.3f}  {float(one.bic):>14.3f}" + ("  <- chosen" if name == chosen else ""))
    return "\n".join(lines)

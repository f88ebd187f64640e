"""Commands on datasets: ``dpgm generate``, ``convert``, ``info`` and ``counts``."""

from __future__ import annotations

import json
import time

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
from dpgm.cli.options import Count, check_chunks, default_chunk_rows, progress
from dpgm.cli.outputs import check_output, claimed, write_text_atomically


@cli.command()
@click.argument("network")
@click.argument("out", type=click.Path())
@click.option("--rows", type=Count(), required=True, help="Number of rows (1e6 accepted).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--missing", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Fraction of values missing completely at random.")
@click.option("--chunk-rows", type=Count(), default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing store (the new one is written beside it and swapped in when complete).")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def generate(network, out, rows, seed, missing, chunk_rows, overwrite, scheduler, scheduler_file, workers) -> None:
    """Sample ROWS rows of NETWORK (a shipped network's name or a BIF file) into the Zarr store OUT."""
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.networks import load_network

    check_output("OUT", out, overwrite=overwrite)
    with errors():
        model = load_network(network)
        chunk_rows = chunk_rows or default_chunk_rows(rows)
        check_chunks(rows, chunk_rows, len(model.variables))
        with claimed("OUT", out, overwrite=overwrite, remove_created=True), \
                cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            ds = sample_bayesian_network(
                model, rows, out, seed=seed, missing=missing, chunk_rows=chunk_rows,
                client=client, progress=progress(), mode="w" if overwrite else "w-",
                storage_options=storage_options(out),
            )
            seconds = time.perf_counter() - start
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out} in {seconds:.1f} s")


@cli.command()
@click.argument("source", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--chunk-rows", type=Count(), default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--categorical", multiple=True, help="Column to make categorical whatever its values (repeatable).")
@click.option("--continuous", multiple=True, help="Column to make continuous (repeatable).")
@click.option("--na-values", multiple=True,
              help="A value to read as missing in every column, besides '', NA, NaN, n/a, null... (repeatable).")
@click.option("--label-order", type=click.Choice(["sorted", "appearance"]), default="sorted", show_default=True,
              help="Order of a categorical column's labels: sorted (numbers numerically, then text) or as they "
                   "first appear.")
@click.option("--weight", default=None, help="Column of frequency weights.")
@click.option("--rename", "renames", multiple=True, metavar="COLUMN=NAME",
              help="Store the column COLUMN as the variable NAME, e.g. --rename row=row_id (repeatable; the other "
                   "options name input columns).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing store (the new one is written beside it and swapped in when complete).")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def convert(source, out, chunk_rows, categorical, continuous, na_values, label_order, weight, renames, overwrite,
            scheduler, scheduler_file, workers) -> None:
    """Convert CSV/TSV/Parquet SOURCE (a file, a directory of files or a glob) to the Zarr dataset OUT.

    One task per Parquet row group or 64 MiB of CSV, in two passes (labels and checks, then codes), on the
    cluster. Prints each column's kind and why: floats continuous, integers continuous above 50 distinct
    values, text categorical; a column of numbers but for a few text tokens is refused (see --na-values).
    """
    from dpgm.data.convert import convert as run
    from dpgm.data.convert import input_variables
    from dpgm.data.kinds import ConversionReport, check_options

    rename = {}
    for text in renames:
        column, equals, name = text.rpartition("=")
        if not equals or not column or not name:
            raise click.BadParameter(f"{text!r} is not COLUMN=NAME", param_hint="--rename")
        rename[column] = name
    check_output("OUT", out, overwrite=overwrite, inputs=(source,))
    click.get_current_context().meta["dpgm.inputs"] = [source]
    with errors():
        check_options(categorical, continuous, na_values, label_order)
        input_variables(source, rename=rename, weight=weight, storage_options=storage_options())
    with errors(), claimed("OUT", out, overwrite=overwrite, remove_created=True), \
            cluster(scheduler, scheduler_file, workers) as client:
        ds = run(source, out, chunk_rows=chunk_rows, categorical=categorical, continuous=continuous,
                 na_values=na_values, label_order=label_order, weight=weight, rename=rename,
                 mode="w" if overwrite else "w-", storage_options=storage_options(), client=client,
                 progress=progress())
    click.echo(str(ConversionReport.from_dataset(ds)))
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out}")


@cli.command()
@click.argument("data", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def info(data, as_json) -> None:
    """Describe the dataset or saved model DATA.

    A dataset: its schema, chunking and row count. A model store (``model.save()``,
    ``dpgm fit --out``): its kind, variables and states, structure, free parameters,
    and the fit that produced it where the store keeps one.
    """
    from dpgm.api.sources import group_attributes

    click.get_current_context().meta["dpgm.inputs"] = [data]
    with errors():
        attrs = group_attributes(data, storage_options(data))
    if attrs is not None and "dpgm_model" in attrs:
        _model_info(data, attrs, as_json)
        return
    from dpgm.data import Schema, open_dataset
    from dpgm.data.manifest import check_present

    with errors():
        ds = open_dataset(data, storage_options=storage_options(data))
        schema = Schema.from_dataset(ds)
        # every chunk file the store's manifest records is there (a listing; `dpgm verify` reads them)
        n_files = check_present(data, storage_options(data), list(map(str, ds.variables)))
    chunks = ds[next(iter(ds.data_vars))].chunks[0] if ds.data_vars else ()
    if as_json:
        click.echo(json.dumps({
            "kind": "dataset", "n_rows": schema.n_rows, "chunks": [int(c) for c in chunks],
            "variables": {name: list(v.states) if v.categorical else "continuous" for name, v in schema.items()},
            "weight": schema.weight, "complete_marker": "dpgm_complete" in ds.attrs,
            "verifiable": n_files is not None, "chunk_files": n_files}))
        return
    click.echo(f"{data}: {schema.n_rows:,} rows in {len(chunks)} chunks of up to {max(chunks, default=0):,} rows")
    for name, variable in schema.items():
        if variable.categorical:
            click.echo(f"  {name:24s} {str(variable.dtype):8s} {variable.cardinality:3d} states: {', '.join(variable.states)}")
        else:
            click.echo(f"  {name:24s} {str(variable.dtype):8s} continuous")
    if schema.weight:
        click.echo(f"  {schema.weight:24s} frequency weights")
    if "dpgm_complete" not in ds.attrs:
        click.echo("note: no completion marker (written by an earlier dpgm or another tool): dpgm cannot tell "
                   "whether every chunk was written; write it again with this dpgm to be sure")
    if n_files is None:
        click.echo("note: unverifiable: no chunk manifest (written by an earlier dpgm or another tool): a lost chunk "
                   "file would read as missing values; write the store again with this dpgm to make it verifiable")
    else:
        click.echo(f"chunk manifest: all {n_files:,} chunk files present (`dpgm verify` checks their bytes)")


def _model_info(path: str, attrs: dict, as_json: bool) -> None:
    """``dpgm info`` of a model store: :func:`dpgm.models.description.describe` of the model read back,
    with the fit record the store keeps (``dpgm fit --out``)."""
    from dpgm.models.description import describe
    from dpgm.models.store import load

    with errors():
        model = load(path, storage_options=storage_options(path))
        try:
            description = describe(model)
        except TypeError:  # a class taught by dpgm.models.saving.register: its kind is all we know
            description = {"kind": attrs["dpgm_model"], "fitted": None, "n_params": None, "variables": {},
                           "structure": {}}
    description["fit"] = attrs.get("dpgm_fit")
    if as_json:
        click.echo(json.dumps({"path": str(path)} | description, default=str))
        return
    for line in _model_lines(path, description):
        click.echo(line)


def _model_lines(path: str, description: dict) -> list[str]:
    """The text of ``dpgm info MODEL``: kind and size, one line per variable, the structure, the fit."""
    structure, variables = description["structure"], description["variables"]
    n_params = description["n_params"]
    head = f"{path}: {description['kind']}, {len(variables)} variables"
    if "edges" in structure:
        head += f", {len(structure['edges'])} edges"
    head += (f", {n_params:,} free parameters" if n_params is not None else ", not fitted")
    lines = [head]
    width = max([8, *(len(v) for v in variables)])
    for name, states in variables.items():
        if isinstance(states, list):
            lines.append(f"  {name:{width}s} {len(states):3d} states: {', '.join(states)}")
        else:
            lines.append(f"  {name:{width}s} {states or 'states from the data'}")
    for key, value in structure.items():
        if key == "edges":
            text = ", ".join(f"{a} -> {b}" for a, b in value) or "none"
        elif key in ("cliques", "scopes", "margins") and value is not None:
            text = "; ".join(f"({', '.join(scope)})" for scope in value) or "none"
        elif key == "nodes":
            text = ", ".join(f"{v}: {kind}" for v, kind in value.items())
        elif isinstance(value, dict):
            text = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list):
            text = ", ".join(map(str, value)) or "none"
        else:
            text = str(value)
        lines.append(f"{key}: {text}")
    fit = description.get("fit")
    if fit:
        state = "converged" if fit.get("converged") else "NOT converged"
        lines.append(f"fit: {fit.get('method')}, {state} after {fit.get('n_iter')} iterations, "
                     f"{fit.get('passes')} pass(es) over {fit.get('n_rows', 0):,.0f} rows of {fit.get('data')}")
        scores = [f"{name} {fit[key]:.6f}" for key, name in (("loglik", "log-likelihood"), ("aic", "AIC"),
                                                               ("bic", "BIC"), ("g2", "G^2"))
                  if isinstance(fit.get(key), int | float)]
        if fit.get("df") is not None:
            scores.append(f"df {fit['df']}")
        if fit.get("seconds") is not None:
            scores.append(f"{fit['seconds']:.2f} s")
        lines.append("     " + "   ".join(scores))
    else:
        lines.append("fit: no record in the store (saved with model.save(); `dpgm fit --out` keeps one)")
    return lines


@cli.command()
@click.argument("data", type=click.Path())
@click.option("--scope", "scopes", multiple=True, required=True, help="Comma-separated variables, e.g. A,B (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
@click.option("--out", type=click.Path(), default=None, help="Save the tables as JSON to this file instead.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def counts(data, scopes, as_json, out, overwrite, scheduler, scheduler_file, workers) -> None:
    """Contingency tables of each --scope of DATA, in one pass."""
    from dpgm.data import Schema, open_dataset
    from dpgm.stats.counts import check_table_sizes
    from dpgm.stats.counts import counts as run

    parsed = [tuple(s.strip() for s in scope.split(",") if s.strip()) for scope in scopes]
    check_output("--out", out, overwrite=overwrite, inputs=(data,))
    click.get_current_context().meta["dpgm.inputs"] = [data]
    with errors():
        ds = open_dataset(data, storage_options=storage_options(data))
        schema = Schema.from_dataset(ds)
        checked = schema.check_scopes(parsed)
        check_table_sizes(checked, {v: schema[v].cardinality for s in checked for v in s})
        with cluster(scheduler, scheduler_file, workers, quiet=as_json) as client:
            tables = run(ds, parsed, client=client, progress=False if as_json else progress())
    payload = {
        ",".join(scope): {
            "dims": list(table.dims),
            "states": {d: list(map(str, table.coords[d].values)) for d in table.dims},
            "counts": table.values.tolist(),
            "n_missing": tables.n_missing[scope],
        }
        for scope, table in tables.items()
    }
    text = json.dumps({"n_rows": tables.n_rows, "tables": payload})
    if as_json:
        click.echo(text)
        return
    if out:
        with errors():
            write_text_atomically(out, text)
        click.echo(f"saved {len(tables)} tables to {out}")
        return
    for scope, table in tables.items():
        click.echo(f"\n{','.join(scope)}  (missing: {tables.n_missing[scope]:,})")
        click.echo(table.to_series().to_string())

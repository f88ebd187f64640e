"""``dpgm verify``: every chunk of a store present and intact, checked on the cluster in one pass."""

from __future__ import annotations

import json

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
from dpgm.cli.failures import EX_DATAERR, Failure, errors
from dpgm.cli.options import progress


@cli.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report (per variable: chunks checked, missing, "
                                                       "damaged) as JSON.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def verify(store, as_json, scheduler, scheduler_file, workers) -> None:
    """Check that every chunk of STORE (a dataset, model or checkpoint dpgm wrote) is present and its bytes
    match the store's chunk manifest and their CRC-32C: one task per chunk row-block on the cluster.

    Exits 0 when everything is as its writer recorded it, 65 otherwise (a chunk missing or damaged, metadata
    changed, an incomplete store, or one without a manifest, which cannot be verified).
    """
    from dpgm.data.verification import chunk_pass, finish, plan

    click.get_current_context().meta["dpgm.inputs"] = [store]
    with errors():
        checks = plan(store, storage_options(store))
        report = checks.report
        if checks.blocks:
            with cluster(scheduler, scheduler_file, workers, quiet=as_json) as client:
                from dpgm.cluster import compute

                report = finish(checks, compute(chunk_pass(checks), client=client,
                                                progress=False if as_json else progress()))
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        for line in report.lines():
            click.echo(line)
        if report.ok:
            click.echo(report.summary())
    if not report.ok:
        raise Failure(report.summary(), EX_DATAERR)

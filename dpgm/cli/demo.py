"""``dpgm demo``: generate, count, fit and run EM on a shipped network."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from dpgm.cli.connection import (
    cluster,
    connection_options,
    scheduler_file_option,
    scheduler_option,
    workers_option,
)
from dpgm.cli.entry import cli
from dpgm.cli.failures import errors
from dpgm.cli.options import Count, fit_progress
from dpgm.cli.outputs import save_plot


@cli.command()
@click.option("--rows", type=Count(), default="1e6", show_default=True)
@click.option("--network", default="alarm", show_default=True)
@click.option("--latent", default="HYPOVOLEMIA,LVFAILURE", show_default=True,
              help="Variables hidden from the EM fit (comma-separated; empty to skip EM).")
@click.option("--em-rows", type=Count(), default="2e4", show_default=True, help="Rows the EM fit uses (the first ones).")
@click.option("--plot", "plot_path", type=click.Path(), default="dpgm-demo-em.png", show_default=True,
              help="Where to save the EM convergence plot.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def demo(rows, network, latent, em_rows, plot_path, scheduler, scheduler_file, workers) -> None:
    """Generate a dataset from a shipped network on a local cluster, count it, fit it, and run EM
    with latent variables and the generated missing values."""
    import numpy as np

    from dpgm.api import fit as run_fit
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network
    from dpgm.stats.counts import counts as run

    model = load_network(network)
    with errors(), tempfile.TemporaryDirectory() as folder, cluster(scheduler, scheduler_file, workers) as client:
        path = Path(folder) / f"{network}.zarr"
        click.echo(f"generating {int(rows):,} rows of {network} ({len(model.variables)} variables, "
                   f"5% of values missing) into {path} ...")
        start = time.perf_counter()
        ds = sample_bayesian_network(model, int(rows), path, seed=0, missing=0.05,
                                     chunk_rows=max(int(rows) // 8, 1), client=client)
        click.echo(f"  {time.perf_counter() - start:.1f} s")
        click.echo(f"counting {len(model.families)} family tables in one pass ...")
        start = time.perf_counter()
        tables = run(ds, model.families, client=client)
        seconds = time.perf_counter() - start
        click.echo(f"  {seconds:.2f} s, {ds.sizes['row'] / seconds:,.0f} rows/s\n")
        click.echo(tables.summary())

        complete = Path(folder) / f"{network}-complete.zarr"
        click.echo(f"\nfitting the {network} structure by maximum likelihood to {int(rows):,} complete rows ...")
        ds = sample_bayesian_network(model, int(rows), complete, seed=1, chunk_rows=max(int(rows) // 8, 1),
                                     client=client)
        start = time.perf_counter()
        result = run_fit(BayesianNetwork.from_edges(model.edges, variables=model.variables), ds, client=client,
                         progress=fit_progress())
        seconds = time.perf_counter() - start
        click.echo(result.summary())
        error = max(float(np.abs(result.model.cpds[v].transpose(*model.cpds[v].dims).values
                                 - model.cpds[v].values).max()) for v in model.variables)
        click.echo(f"  {seconds:.2f} s; largest |fitted - true| CPT entry: {error:.4f}")
        hidden = [v for v in latent.split(",") if v]
        if hidden:
            _demo_em(model, Path(folder) / f"{network}.zarr", hidden, int(em_rows), plot_path, client)
        click.echo(f"\ndashboard: {client.dashboard_link}")


def _demo_em(model, path: Path, hidden: list[str], n_rows: int, plot_path: str, client) -> None:
    """EM on the first rows of the first dataset (5% missing values) with ``hidden`` removed."""
    from dpgm.api import fit as run_fit
    from dpgm.data import open_dataset

    unknown = [v for v in hidden if v not in model.variables]
    if unknown:
        raise click.UsageError(f"--latent names variables not in the network: {unknown}")
    ds = open_dataset(path).drop_vars(hidden).isel(row=slice(0, n_rows))
    rows = ds.sizes["row"]
    click.echo(f"\nEM with {', '.join(hidden)} latent and 5% of the other values missing, {rows:,} rows, "
               "3 random restarts sharing each pass over the data ...")
    start = time.perf_counter()
    result = run_fit(model, ds, method="em", n_init=3, random_state=0, tol=1e-5, max_iter=40, client=client,
                     progress=fit_progress())
    seconds = time.perf_counter() - start
    click.echo(result.summary().splitlines()[0])
    click.echo(f"  log-likelihood {result.loglik:,.1f} after {result.n_iter} iterations; {seconds:.1f} s, "
               f"{seconds / max(result.passes, 1):.2f} s per pass ({rows / (seconds / max(result.passes, 1)):,.0f} "
               "rows/s for all restarts together)")
    save_plot(result, plot_path)


"""The ``dpgm`` command line: batch jobs on an embedded or a real Dask cluster.

Exit codes: 0 success, 2 usage, 3 a fit stopped at its iteration limit without
converging, 65 bad data (incl. an incomplete or corrupted store), 66 no input,
69 scheduler unreachable, 70 internal error, 78 bad configuration (e.g. a bad model
specification, or --resume of a checkpoint written for other data or another specification).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import click

EX_NOT_CONVERGED = 3
EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_SOFTWARE, EX_CONFIG = 65, 66, 69, 70, 78

scheduler_option = click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    default=None,
    help="Address of a running Dask scheduler (default: $DASK_SCHEDULER_ADDRESS, else an embedded local cluster).",
)
scheduler_file_option = click.option("--scheduler-file", default=None, help="Scheduler file of a running cluster (HPC).")
workers_option = click.option("--workers", type=int, default=None, help="Workers of the embedded cluster (default: one per core).")
timeout_option = click.option("--connect-timeout", type=float, default=10.0, show_default=True,
                              help="Seconds to wait for a scheduler at --scheduler.")


class _Failure(click.ClickException):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Map dpgm's exceptions to one-line messages and sysexits codes."""
    from dpgm.cluster import SchedulerUnreachable
    from dpgm.errors import DataError
    from dpgm.fit.checkpoint import CheckpointMismatch
    from dpgm.spec import SpecError

    try:
        yield
    except click.ClickException:
        raise
    except (SpecError, CheckpointMismatch) as error:
        raise _Failure(str(error), EX_CONFIG) from None
    except DataError as error:
        raise _Failure(str(error), EX_DATAERR) from None
    except FileNotFoundError as error:
        raise _Failure(str(error), EX_NOINPUT) from None
    except FileExistsError as error:
        raise _Failure(f"{error}; pass --overwrite to replace it", EX_CONFIG) from None
    except SchedulerUnreachable as error:
        raise _Failure(str(error), EX_UNAVAILABLE) from None
    except (ValueError, TypeError) as error:
        raise _Failure(str(error), EX_DATAERR) from None


@contextlib.contextmanager
def _cluster(scheduler: str | None, scheduler_file: str | None, workers: int | None, quiet: bool = False,
             timeout: float = 10.0):
    from dpgm.cluster import connect

    with connect(scheduler, scheduler_file=scheduler_file, n_workers=workers, timeout=timeout) as client:
        if not quiet:
            click.echo(f"dashboard: {client.dashboard_link}", err=True)
        yield client


def _default_chunk_rows(rows: int) -> int:
    from dpgm.data.convert import default_chunk_rows

    return default_chunk_rows(rows)


def _progress() -> bool:
    return sys.stderr.isatty()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpgm")
def cli() -> None:
    """Fit probabilistic graphical models to chunked Zarr datasets on a Dask cluster."""


@cli.command()
@click.argument("network")
@click.argument("out", type=click.Path())
@click.option("--rows", type=float, required=True, help="Number of rows (1e6 accepted).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--missing", type=float, default=0.0, show_default=True, help="Fraction of values missing completely at random.")
@click.option("--chunk-rows", type=float, default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
@scheduler_option
@scheduler_file_option
@workers_option
def generate(network, out, rows, seed, missing, chunk_rows, overwrite, scheduler, scheduler_file, workers) -> None:
    """Sample ROWS rows of NETWORK (a shipped network's name or a BIF file) into the Zarr store OUT."""
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.networks import load_network

    with _errors():
        model = load_network(network)
        with _cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            ds = sample_bayesian_network(
                model, int(rows), out, seed=seed, missing=missing,
                chunk_rows=int(chunk_rows) if chunk_rows else _default_chunk_rows(int(rows)),
                client=client, progress=_progress(), mode="w" if overwrite else "w-",
            )
            seconds = time.perf_counter() - start
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out} in {seconds:.1f} s")


@cli.command()
@click.argument("source", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--chunk-rows", type=float, default=None,
              help="Rows per chunk (default: a sixteenth of the rows, 10,000 to 1,000,000).")
@click.option("--categorical", multiple=True, help="Column to treat as categorical (repeatable).")
@click.option("--continuous", multiple=True, help="Column to treat as continuous (repeatable).")
@click.option("--weight", default=None, help="Column of frequency weights.")
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
def convert(source, out, chunk_rows, categorical, continuous, weight, overwrite) -> None:
    """Convert CSV/TSV/Parquet SOURCE (a file, a directory of files or a glob) to the Zarr dataset OUT.

    One task per Parquet row group or 64 MiB of CSV, in two passes (labels, then codes).
    """
    from dpgm.data.convert import convert as run

    with _errors():
        ds = run(source, out, chunk_rows=int(chunk_rows) if chunk_rows else None, categorical=categorical,
                 continuous=continuous,
                 weight=weight, mode="w" if overwrite else "w-")
    click.echo(f"wrote {ds.sizes['row']:,} rows x {len(ds.data_vars)} variables to {out}")


@cli.command()
@click.argument("data", type=click.Path())
def info(data) -> None:
    """Schema, chunking and row count of the dataset DATA."""
    from dpgm.data import Schema, open_dataset

    with _errors():
        ds = open_dataset(data)
        schema = Schema.from_dataset(ds)
    chunks = ds[next(iter(ds.data_vars))].chunks[0] if ds.data_vars else ()
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


@cli.command()
@click.argument("data", type=click.Path())
@click.option("--scope", "scopes", multiple=True, required=True, help="Comma-separated variables, e.g. A,B (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
@click.option("--out", type=click.Path(), default=None, help="Save the tables as JSON to this file instead.")
@scheduler_option
@scheduler_file_option
@workers_option
@timeout_option
def counts(data, scopes, as_json, out, scheduler, scheduler_file, workers, connect_timeout) -> None:
    """Contingency tables of each --scope of DATA, in one pass."""
    from dpgm.data import open_dataset
    from dpgm.stats import counts as run

    parsed = [tuple(s.strip() for s in scope.split(",") if s.strip()) for scope in scopes]
    with _errors():
        ds = open_dataset(data)
        with _cluster(scheduler, scheduler_file, workers, quiet=as_json, timeout=connect_timeout) as client:
            tables = run(ds, parsed, client=client, progress=_progress() and not as_json)
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
        Path(out).write_text(text)
        click.echo(f"saved {len(tables)} tables to {out}")
        return
    for scope, table in tables.items():
        click.echo(f"\n{','.join(scope)}  (missing: {tables.n_missing[scope]:,})")
        click.echo(table.to_series().to_string())


@cli.command()
@click.argument("spec", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--out", type=click.Path(), required=True, help="Zarr group to write the fitted model to.")
@click.option("--method", default=None, help="Override the specification's method.")
@click.option("--report", type=click.Path(), default=None, help="Write the result summary as JSON here.")
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@click.option("--checkpoint", type=click.Path(), default=None, help="Folder to checkpoint EM into every iteration.")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --checkpoint.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Save a convergence plot (log-likelihood per iteration) to this PNG/SVG/PDF file.")
@click.option("--performance-report", type=click.Path(), default=None,
              help="Save Dask's performance report of the fit (task stream, profile) to this HTML file.")
@scheduler_option
@scheduler_file_option
@workers_option
def fit(spec, data, out, method, report, overwrite, checkpoint, resume, plot_path, performance_report, scheduler,
        scheduler_file, workers) -> None:
    """Fit the model of SPEC (YAML/TOML) to the dataset DATA and save it to --out.

    Exits 0 on convergence and 3 when the iteration limit was reached first.
    """
    from dpgm.api import fit as run
    from dpgm.data import Schema, open_dataset
    from dpgm.data.integrity import dataset_fingerprint
    from dpgm.fit.checkpoint import check_fingerprint, set_fingerprint
    from dpgm.spec import build_model, read_spec

    with _errors():
        ds = open_dataset(data)
        parsed = read_spec(spec)
        model, spec_method, options = build_model(parsed, Schema.from_dataset(ds).states)
        if resume and not checkpoint:
            raise click.UsageError("--resume needs --checkpoint")
        if checkpoint:
            fingerprint = {"data": dataset_fingerprint(ds), "specification": _spec_fingerprint(parsed, method)}
            if resume and not check_fingerprint(checkpoint, fingerprint):
                click.echo(f"warning: the checkpoint {checkpoint!r} has no fingerprint (written by an earlier "
                           "dpgm): cannot check it was written for this data and specification", err=True)
            set_fingerprint(checkpoint, fingerprint)
            options["checkpoint"] = checkpoint
        if resume:
            options["resume"] = checkpoint
        with _cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            with _performance_report(performance_report):
                result = run(model, ds, method=method or spec_method, client=client, progress=_progress(),
                             callback=_echo_iteration, **options)
            seconds = time.perf_counter() - start
        result.model.save(out, mode="w" if overwrite else "w-")
    click.echo(result.summary())
    click.echo(f"fitted in {seconds:.2f} s; model saved to {out}")
    if plot_path:
        _save_plot(result, plot_path)
    if report:
        payload = result.to_dict() | {"seconds": seconds, "model_path": str(out), "data": str(data)}
        Path(report).write_text(json.dumps(payload, indent=2, default=float))
    if not result.converged:
        sys.exit(EX_NOT_CONVERGED)


_STOPPING_RULE = ("max_iter", "tol", "loglik_tol")


def _performance_report(path):
    """``distributed.performance_report`` into ``path`` (written when the block ends), or nothing."""
    if path is None:
        return contextlib.nullcontext()
    from distributed import performance_report

    return performance_report(filename=str(path))


def _spec_fingerprint(spec: dict, method: str | None) -> dict:
    """The specification a checkpoint belongs to: everything but the stopping rule (a resumed fit may
    run longer or to a tighter tolerance), with a --method override."""
    kept = {k: v for k, v in spec.items() if k not in _STOPPING_RULE}
    return kept | ({"method": method} if method else {})


def _save_plot(result, path) -> None:
    if not result.history:
        click.echo(f"no convergence plot: {result.method} is a closed form (no iterations)", err=True)
        return
    result.plot(path)
    click.echo(f"convergence plot saved to {path}")


def _echo_iteration(record: dict) -> None:
    parts = [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()]
    click.echo("  " + " ".join(parts), err=True)


@cli.command()
@click.argument("model_path", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--variable", required=True, help="Variable whose posterior to compute (e.g. the latent class).")
@click.option("--name", default=None, help="Name of the new variable (default <variable>_proba).")
@scheduler_option
@scheduler_file_option
@workers_option
def predict(model_path, data, variable, name, scheduler, scheduler_file, workers) -> None:
    """Write every row's posterior of --variable under MODEL_PATH into the dataset DATA."""
    from dpgm.api import predict_proba
    from dpgm.data import open_dataset
    from dpgm.models.store import load

    with _errors():
        model = load(model_path)
        ds = open_dataset(data)
        with _cluster(scheduler, scheduler_file, workers) as client:
            result = predict_proba(model, ds, variable, write=True, name=name, client=client)
    click.echo(f"wrote {result.name} ({ds.sizes['row']:,} rows x {result.shape[1]} states) into {data}")


@cli.command()
@click.option("--rows", type=float, default=1e6, show_default=True)
@click.option("--network", default="alarm", show_default=True)
@click.option("--latent", default="HYPOVOLEMIA,LVFAILURE", show_default=True,
              help="Variables hidden from the EM fit (comma-separated; empty to skip EM).")
@click.option("--em-rows", type=float, default=2e4, show_default=True, help="Rows the EM fit uses (the first ones).")
@click.option("--plot", "plot_path", type=click.Path(), default="dpgm-demo-em.png", show_default=True,
              help="Where to save the EM convergence plot.")
@scheduler_option
@scheduler_file_option
@workers_option
def demo(rows, network, latent, em_rows, plot_path, scheduler, scheduler_file, workers) -> None:
    """Generate a dataset from a shipped network on a local cluster, count it, fit it, and run EM
    with latent variables and the generated missing values."""
    import numpy as np

    from dpgm.api import fit as run_fit
    from dpgm.data.sample import sample_bayesian_network
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.networks import load_network
    from dpgm.stats import counts as run

    model = load_network(network)
    with _errors(), tempfile.TemporaryDirectory() as folder, _cluster(scheduler, scheduler_file, workers) as client:
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
        result = run_fit(BayesianNetwork.from_edges(model.edges, variables=model.variables), ds, client=client)
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
                     callback=_echo_restart_iteration)
    seconds = time.perf_counter() - start
    click.echo(result.summary().splitlines()[0])
    click.echo(f"  log-likelihood {result.loglik:,.1f} after {result.n_iter} iterations; {seconds:.1f} s, "
               f"{seconds / max(result.passes, 1):.2f} s per pass ({rows / (seconds / max(result.passes, 1)):,.0f} "
               "rows/s for all restarts together)")
    _save_plot(result, plot_path)


def _echo_restart_iteration(record: dict) -> None:
    if record["restart"] == 0:
        change = record["change"]
        click.echo(f"  iteration {record['iteration']:3d}  loglik {record['loglik']:,.2f}"
                   + (f"  change {change:+.3g}" if change is not None else ""))


def main() -> None:
    """Entry point of the ``dpgm`` command."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as error:
        sys.exit(error.exit_code)


if __name__ == "__main__":
    main()

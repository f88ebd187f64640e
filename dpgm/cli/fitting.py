"""Commands on models: ``dpgm fit``, ``dpgm predict`` and ``dpgm score``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from dpgm.cli.connection import (
    checkpoint_location,
    cluster,
    connection_options,
    scheduler_file_option,
    scheduler_option,
    storage_options,
    workers_option,
)
from dpgm.cli.entry import cli
from dpgm.cli.failures import EX_CANTCREAT, EX_CONFIG, EX_NOT_CONVERGED, Failure, errors
from dpgm.cli.options import fit_progress, progress
from dpgm.cli.outputs import (
    check_output,
    check_plot,
    claimed,
    is_remote,
    save_model,
    save_plot,
    write_text_atomically,
)


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
@click.option("--drop", multiple=True, help="Variable to remove from the data first, e.g. to fit it as latent "
              "(repeatable; the specification's 'drop:' list does the same).")
@click.option("--performance-report", type=click.Path(), default=None,
              help="Save Dask's performance report of the fit (task stream, profile) to this HTML file.")
@click.option("--standard-errors", is_flag=True,
              help="Print each parameter's asymptotic standard error and 95 % Wald interval (and add them to "
                   "--report); refused before any pass where the kind and method have none (dpgm bootstrap).")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def fit(spec, data, out, method, report, overwrite, checkpoint, resume, plot_path, drop, performance_report,
        standard_errors, scheduler, scheduler_file, workers) -> None:
    """Fit the model of SPEC (YAML/TOML) to the dataset DATA and save it to --out.

    Exits 0 on convergence and 3 when the iteration limit was reached first.
    """
    from dpgm.api import fit as run
    from dpgm.api.options import check_checkpoint
    from dpgm.cluster import performance_report as cluster_performance_report
    from dpgm.data import Schema, open_dataset
    from dpgm.spec import SpecError, build_model, drop_variables, read_spec
    from dpgm.stats.source import DataSource

    if resume and not checkpoint:
        raise click.UsageError("--resume needs --checkpoint")
    # every output is checked before any work: a finished fit is never lost to a path that cannot be written
    check_output("--out", out, overwrite=overwrite, inputs=(data, spec))
    check_output("--report", report, overwrite=overwrite, inputs=(data, spec))
    check_plot(plot_path, overwrite, inputs=(data, spec))
    check_output("--performance-report", performance_report, overwrite=overwrite, inputs=(data, spec))
    check_output("--checkpoint", checkpoint, folder=True, inputs=(data, spec))
    click.get_current_context().meta["dpgm.inputs"] = [data]
    with errors(checkpoint):
        if checkpoint and not resume and not overwrite and _holds_iteration(checkpoint):
            raise Failure(f"--checkpoint {checkpoint!r} holds the checkpoint of an earlier run: pass --resume to "
                          "continue it, or --overwrite to start afresh", EX_CANTCREAT)
        ds = open_dataset(data, storage_options=storage_options(data))
        parsed = read_spec(spec)
        try:
            parsed, ds = drop_variables(parsed, ds, drop)
            schema = Schema.from_dataset(ds)
            model, chosen, options = build_model(parsed, schema.states, method=method, continuous=schema.continuous)
        except SpecError as error:
            raise SpecError(f"specification {spec!r}: {error}") from None
        if standard_errors:
            _check_standard_errors(model, chosen or _default_method(model), options)
        if checkpoint:
            options["checkpoint"] = checkpoint_location(checkpoint)
        if resume:
            options["resume"] = checkpoint_location(checkpoint)
        # a checkpoint of other data or another specification is refused before the cluster starts
        check_checkpoint(model, DataSource(ds, schema), chosen or _default_method(model), options,
                         extra={"specification": _spec_fingerprint(parsed, method)})
        # one writer per output, claimed before any pass: a second fit to the same --out or --checkpoint exits 73
        with claimed("--out", out, overwrite=overwrite), claimed("--checkpoint", checkpoint, folder=True):
            with cluster(scheduler, scheduler_file, workers) as client:
                start = time.perf_counter()
                with cluster_performance_report(performance_report):
                    result = run(model, ds, method=chosen, client=client, progress=fit_progress(), **options)
                    unavailable = _formed_standard_errors(result) if standard_errors else None
                seconds = time.perf_counter() - start
            save_model(result.model, out, result=result, data=data, seconds=seconds)
            shown = standard_errors and unavailable is None
            click.echo(result.summary())
            if shown:
                click.echo(_standard_error_lines(result))
            click.echo(f"fitted in {seconds:.2f} s; model saved to {out}")
            if plot_path:
                save_plot(result, plot_path)
            if report:
                payload = result.to_dict() | {"seconds": seconds, "model_path": str(out), "data": str(data)}
                if shown:
                    payload["standard_errors"] = _standard_error_report(result)
                write_text_atomically(report, json.dumps(payload, indent=2, default=float))
    if unavailable:  # known only after the fit (a Markov network's empty margin cell): the model is saved
        raise Failure(f"--standard-errors: {unavailable}", EX_CONFIG)
    if not result.converged:
        sys.exit(EX_NOT_CONVERGED)


def _formed_standard_errors(result) -> str | None:
    """Form the fit's standard errors now (an EM fit's take a pass over the data: while the cluster runs); the
    reason they cannot be formed, or None."""
    try:
        result.standard_errors  # noqa: B018
    except NotImplementedError as error:
        return str(error)
    return None


def _check_standard_errors(model, method: str, options: dict) -> None:
    """Refuse --standard-errors (exit 78) where the registry declares none for the kind and method, and for a
    penalised fit (``l1`` / ``l2``: no asymptotic standard errors)."""
    from dpgm.api.kinds import kind_of

    penalties = [name for name in ("l1", "l2") if options.get(name)]
    if penalties:
        raise Failure(f"--standard-errors: a fit penalised by {' and '.join(penalties)} has no asymptotic standard "
                      "errors; dpgm bootstrap gives bootstrap standard errors", EX_CONFIG)
    kind = kind_of(model)
    entry = kind.methods[method]
    if entry.observed_information:
        from dpgm.api.observed_information import MAX_MOVES

        if model.n_free_parameters() > MAX_MOVES:
            raise Failure(f"--standard-errors: a {kind.name} fitted by {method} has {model.n_free_parameters()} free "
                          f"parameters; an EM fit's observed information is formed for at most {MAX_MOVES}; dpgm "
                          "bootstrap gives bootstrap standard errors for every kind", EX_CONFIG)
    if not entry.standard_errors:
        having = [f"{k.name} {m}" for k in _kinds() for m, how in k.methods.items() if how.standard_errors]
        raise Failure(f"--standard-errors: a {kind.name} fitted by {method} has no asymptotic standard errors yet "
                      f"(they exist for {', '.join(having)}); dpgm bootstrap gives bootstrap standard errors for "
                      "every kind", EX_CONFIG)


def _kinds():
    from dpgm.api.kinds import kinds

    return kinds()


_SE_LINES = 100


def _standard_error_lines(result, level: float = 0.95) -> str:
    """Each parameter entry's estimate, standard error and Wald interval, one line each (the first
    :data:`_SE_LINES`, then how many more there are)."""
    import numpy as np

    from dpgm.models.parameters import parameter_tables

    errors, interval = result.standard_errors, result.confidence_interval(level)
    estimates = parameter_tables(result.model)
    lines = [f"standard errors (asymptotic) and {level:.0%} Wald intervals:",
             f"  {'parameter':<44} {'estimate':>12} {'s.e.':>12} {'lower':>12} {'upper':>12}"]
    total = 0
    for name in errors.data_vars:
        estimate = estimates[name]
        error = errors[name].reindex_like(estimate)
        low = interval[name].sel(bound="lower").reindex_like(estimate)
        high = interval[name].sel(bound="upper").reindex_like(estimate)
        for index in np.ndindex(estimate.shape):
            total += 1
            if total > _SE_LINES:
                continue
            labels = [str(estimate[d].values[i]) if d in estimate.coords else str(i)
                      for d, i in zip(estimate.dims, index, strict=True)]
            label = name + (f"[{', '.join(labels)}]" if labels else "")
            lines.append(f"  {label:<44} {float(estimate.values[index]):>12.5g} {float(error.values[index]):>12.5g} "
                         f"{float(low.values[index]):>12.5g} {float(high.values[index]):>12.5g}")
    if total > _SE_LINES:
        lines.append(f"  ... {total - _SE_LINES:,} more of the {total:,} entries (--report holds them all)")
    return "\n".join(lines)


def _standard_error_report(result, level: float = 0.95) -> dict:
    """Each parameter's dims, labels, estimate, standard error and Wald interval, as nested lists (NaN: None)."""
    import numpy as np

    from dpgm.models.parameters import parameter_tables

    errors, interval = result.standard_errors, result.confidence_interval(level)
    estimates = parameter_tables(result.model)

    def listed(array) -> object:
        values = np.asarray(array, dtype=float)
        return np.where(np.isnan(values), None, values).tolist()

    report = {}
    for name in errors.data_vars:
        estimate = estimates[name]
        report[name] = {"dims": list(estimate.dims),
                        "coords": {d: [str(x) for x in estimate[d].values] for d in estimate.dims
                                   if d in estimate.coords},
                        "estimate": listed(estimate.values),
                        "standard_error": listed(errors[name].reindex_like(estimate).values),
                        "lower": listed(interval[name].sel(bound="lower").reindex_like(estimate).values),
                        "upper": listed(interval[name].sel(bound="upper").reindex_like(estimate).values),
                        "level": level}
    return report


def _default_method(model) -> str:
    from dpgm.api.kinds import kind_of

    return kind_of(model).default_method


_STOPPING_RULE = ("max_iter", "tol", "loglik_tol")


def _spec_fingerprint(spec: dict, method: str | None) -> dict:
    """The specification a checkpoint belongs to: everything but the stopping rule (a resumed fit may
    run longer or to a tighter tolerance), with a --method override."""
    kept = {k: v for k, v in spec.items() if k not in _STOPPING_RULE}
    return kept | ({"method": method} if method else {})


@cli.command()
@click.argument("model_path", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--variable", required=True, help="Variable whose posterior to compute (e.g. the latent class).")
@click.option("--name", default=None, help="Name of the new variable (default <variable>_proba).")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def predict(model_path, data, variable, name, scheduler, scheduler_file, workers) -> None:
    """Write every row's posterior of --variable under MODEL_PATH into the dataset DATA (a hidden Markov
    model's: every step's posteriors of its hidden --variable, and each sequence's Viterbi path)."""
    from dpgm.api import predict_proba
    from dpgm.api.predict import predict as decode
    from dpgm.data import open_dataset
    from dpgm.models.store import load

    click.get_current_context().meta["dpgm.inputs"] = [model_path, data]
    with errors():
        model = load(model_path)
        ds = open_dataset(data, storage_options=storage_options(data))
        with claimed("DATA", data, folder=True), cluster(scheduler, scheduler_file, workers) as client:
            result = predict_proba(model, ds, variable, write=True, name=name, client=client, progress=progress())
            path = (decode(model, ds, variable, write=True, client=client, progress=progress())
                    if result.ndim == 3 else None)
    if path is None:
        click.echo(f"wrote {result.name} ({ds.sizes['row']:,} rows x {result.shape[1]} states) into {data}")
    else:
        click.echo(f"wrote {result.name} ({ds.sizes['row']:,} sequences x {result.shape[1]:,} steps x "
                   f"{result.shape[2]} states) and {path.name} (the Viterbi paths) into {data}")


@cli.command()
@click.argument("model_path", type=click.Path())
@click.argument("data", type=click.Path())
@click.option("--write", "name", default=None, help="Also write each row's log-likelihood into DATA as this variable.")
@click.option("--report", type=click.Path(), default=None, help="Write the total, mean per row and rows as JSON here.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --report file.")
@scheduler_option
@scheduler_file_option
@workers_option
@connection_options
def score(model_path, data, name, report, overwrite, scheduler, scheduler_file, workers) -> None:
    """Print the log-likelihood of the dataset DATA under the model MODEL_PATH: total, mean per row and rows.

    One pass over DATA (which also writes the per-row values with --write).
    """
    import xarray as xr

    from dpgm.api.score import SUMMARY
    from dpgm.api.score import score as run
    from dpgm.cluster import compute
    from dpgm.data import open_dataset
    from dpgm.models.store import load

    check_output("--report", report, overwrite=overwrite, inputs=(data, model_path))
    click.get_current_context().meta["dpgm.inputs"] = [model_path, data]
    with errors():
        model = load(model_path)
        ds = open_dataset(data, storage_options=storage_options(data))
        with claimed("DATA", data, folder=True) if name else _nothing(), \
                cluster(scheduler, scheduler_file, workers) as client:
            start = time.perf_counter()
            scores = run(model, ds, client=client, write=bool(name), name=name or "loglik", progress=progress())
            lazy = xr.Dataset({c: ((), scores.coords[c].data) for c in SUMMARY})  # computed already with --write
            summary = {k: float(v) for k, v in compute(lazy, client=client, progress=progress()).data_vars.items()}
            seconds = time.perf_counter() - start
        unit = "row" if scores.dims == ("row",) else "sequence"  # a long-layout HMM: one value per sequence
        click.echo(f"total {summary['total']:.6f}  mean per {unit} {summary['mean_per_row']:.6f}  "
                   f"{unit}s {summary['rows']:,.0f}")
        if name:
            click.echo(f"wrote {name} ({ds.sizes['row']:,} rows) into {data}")
        if report:
            payload = summary | {"model": scores.attrs["model"], "summed_out": scores.attrs["summed_out"],
                                 "written": name, "seconds": seconds, "model_path": str(model_path),
                                 "data": str(data)}
            write_text_atomically(report, json.dumps(payload, indent=2, default=float))


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def _holds_iteration(checkpoint: str) -> bool:
    """Whether the --checkpoint folder or URL names a complete iteration (its ``LATEST``), read through fsspec
    with --storage-options: an unreachable store fails here, before any work."""
    from dpgm.io.checkpoint import latest_iteration

    return latest_iteration(checkpoint_location(checkpoint)) is not None or (
        not is_remote(checkpoint) and (Path(checkpoint) / "LATEST").exists())

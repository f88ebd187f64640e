"""Outputs of the ``dpgm`` command: checked before any work, claimed for the whole command (one writer
per output: a second one exits 73 naming the first), written under a temporary name or beside the old
one and swapped in when complete, so a failed or interrupted command leaves none half-written and
never loses the output it was replacing."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from dpgm.cli.failures import EX_CANTCREAT, EX_CONFIG, Failure


def is_remote(path: str) -> bool:
    return "://" in str(path)


def check_output(option: str, path: str | os.PathLike[str] | None, *, overwrite: bool = False,
                 folder: bool = False, inputs: tuple = ()) -> None:
    """Refuse, before any work, an output that could not be written (exit 73), naming it and why.

    An existing output without --overwrite, a missing or non-directory parent, a parent
    where a file cannot be created (read-only, no permission: probed by creating one),
    an output that is one of the inputs. ``folder``: the output is a directory that may
    exist (--checkpoint). Remote paths (``s3://...``) are left to the writer.
    """
    if path is None or is_remote(path):
        return
    target = Path(os.path.abspath(path))
    ctx = click.get_current_context()
    ctx.meta.setdefault("dpgm.outputs", []).append(target)
    for given in inputs:
        if given is not None and not is_remote(given) and Path(os.path.abspath(given)) == target:
            raise Failure(f"{option} {os.fspath(path)!r} is also an input: it would be overwritten", EX_CANTCREAT)
    _check_lock(option, path, target, overwrite=overwrite, folder=folder)
    if target.exists() or target.is_symlink():
        if folder and not target.is_dir():
            raise Failure(f"{option} {os.fspath(path)!r} exists and is not a folder", EX_CANTCREAT)
        if not folder and not overwrite:
            raise Failure(f"{option} {os.fspath(path)!r} exists; pass --overwrite to replace it", EX_CANTCREAT)
    parent = target.parent
    if not parent.exists():
        raise Failure(f"{option} {os.fspath(path)!r}: the folder {str(parent)!r} does not exist", EX_CANTCREAT)
    if not parent.is_dir():
        raise Failure(f"{option} {os.fspath(path)!r}: {str(parent)!r} is not a folder", EX_CANTCREAT)
    probe_in = target if folder and target.is_dir() else parent
    try:
        with tempfile.NamedTemporaryFile(dir=probe_in, prefix=".dpgm-probe-"):
            pass
    except OSError as error:
        raise Failure(f"{option} {os.fspath(path)!r}: cannot create a file in {str(probe_in)!r}: "
                      f"{error.strerror or error}", EX_CANTCREAT) from None


def _check_lock(option: str, given, target: Path, *, overwrite: bool, folder: bool) -> None:
    """A writer holding the output, or one that died leaving it unfinished: refused (73) naming it, before
    the shorter "exists" answer. The claim itself comes after (:func:`claimed`); this is its early word."""
    from dpgm.data.claim import holder, lock_path, refusal

    other = holder(target)
    if other is not None:
        why = refusal(target, other, lock_path(target), overwrite=overwrite, take_stale=folder)
        if why is not None:
            raise Failure(f"{option} {os.fspath(given)!r} {why}", EX_CANTCREAT)


@contextlib.contextmanager
def claimed(option: str, path: str | os.PathLike[str] | None, *, overwrite: bool = False, folder: bool = False,
            remove_created: bool = False) -> Iterator[None]:
    """Hold the output ``path`` for the whole command (:func:`dpgm.data.claim.claim`): another writer of it
    exits 73 naming this one. ``folder``: a folder continued by later runs (--checkpoint), whose stale lock
    is taken over. ``remove_created``: a store written in place (generate, convert) is removed again if the
    command fails or is interrupted, but only if this run created it (one killed outright stays marked
    incomplete, its lock stale)."""
    from dpgm.data.claim import OutputBusy, claim, remove

    if path is None:
        yield
        return
    options = click.get_current_context().meta.get("dpgm.storage_options")
    with contextlib.ExitStack() as stack:
        try:
            held = stack.enter_context(claim(path, overwrite=overwrite, take_stale=folder, storage_options=options))
        except OutputBusy as error:
            raise Failure(f"{option} {os.fspath(path)!r} {error.why}", EX_CANTCREAT) from None
        if held.existed and not overwrite and not folder:  # appeared after check_output: never replaced unasked
            raise Failure(f"{option} {os.fspath(path)!r} exists (written after this command checked it); pass "
                          "--overwrite to replace it", EX_CANTCREAT)
        try:
            yield
        except BaseException:
            if remove_created and not held.existed:
                remove(held.path, options)
            raise


def _temporary_sibling(path: Path, suffix: str = "") -> Path:
    return path.parent / f".{path.name}.partial-{os.getpid()}{suffix}"


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a temporary name next to ``path``, then rename it (no half-written file, ever)."""
    target = Path(path)
    pending = _temporary_sibling(target)
    try:
        with open(pending, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(pending, target)
    except BaseException:
        pending.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write a file or store into; on success it replaces
    ``path`` (an existing store by one exchange, :func:`dpgm.data.claim.swap`, then deleted), on failure
    it is removed."""
    from dpgm.data.claim import remove, swap

    target = Path(path)
    pending = _temporary_sibling(target, suffix)
    try:
        yield pending
        if target.is_dir() and not target.is_symlink():
            swap(str(pending), str(target))
        else:
            os.replace(pending, target)
    except BaseException:
        remove(str(pending))
        raise


def save_model(model, out: str, *, result=None, data: str | None = None, seconds: float | None = None) -> None:
    """Save under a temporary name next to ``out``, then rename (a remote store is written beside the old one
    and copied over it in the order :mod:`dpgm.data.claim` documents; its completion marker, set last, tells a
    finished store from a partial one). With ``result`` (the FitResult), the store keeps a record of the fit
    (:func:`fit_record`; ``dpgm info`` shows it)."""
    from dpgm.data.claim import writing
    from dpgm.models.saving import save

    fit = None if result is None else fit_record(result, data, seconds)
    if is_remote(out):
        options = click.get_current_context().meta.get("dpgm.storage_options")
        with writing(out, mode="w", storage_options=options) as target:
            save(model, target, mode="w-", fit=fit, storage_options=options)
        return
    with replacing(out) as pending:
        save(model, pending, mode="w-", fit=fit)


def fit_record(result, data: str | None, seconds: float | None) -> dict:
    """What a model store keeps of the fit that produced it: the result without its history (the method,
    convergence, log-likelihood, goodness of fit, its scalar extras), the data's path and the seconds."""
    record = {k: v for k, v in result.to_dict().items() if k not in ("history", "info")}
    record["info"] = {k: v for k, v in result.info.items() if isinstance(v, int | float | str | bool)}
    where = None if data is None else str(data) if is_remote(data) else os.path.abspath(data)
    return record | {"data": where, "seconds": seconds}


_PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def check_plot(path: str | None, overwrite: bool, inputs: tuple) -> None:
    if path is None:
        return
    if Path(path).suffix.lower() not in _PLOT_FORMATS:
        raise click.BadParameter(f"{path!r}: the file name must end with one of {list(_PLOT_FORMATS)}",
                                 param_hint="--plot")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise Failure("--plot needs matplotlib: pip install 'dpgm[plot]'", EX_CONFIG)
    check_output("--plot", path, overwrite=overwrite, inputs=inputs)


def save_plot(result, path) -> None:
    if not result.history:
        click.echo(f"no convergence plot: {result.method} is a closed form (no iterations)", err=True)
        return
    with replacing(path, suffix=Path(path).suffix) as pending:
        result.plot(pending)
    click.echo(f"convergence plot saved to {path}")

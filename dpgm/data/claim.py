"""One writer per output: a lock beside each output, created atomically, and replacement beside.

Locks
    A writer claims the output ``x.zarr`` (a store, a model, a checkpoint folder) by creating
    the lock ``x.zarr.dpgm-lock`` beside it, atomically: ``open(O_CREAT | O_EXCL)`` on a local
    or network file system, a conditional put (``If-None-Match: *``, fsspec's ``"xb"`` mode,
    which S3 honours) on an object store. The lock names the writer: host, pid, start time,
    command. It is removed when the writer ends, whatever the outcome. A second writer finds
    the lock and is refused (:class:`OutputBusy`, CLI exit 73), naming the first.

    A lock whose writer is gone (same host, and no process of that pid, or one started after
    the lock) is *stale*. It is taken over, with the leftovers of its writer, when the output
    does not exist, when the new writer replaces the output (``overwrite``), or for a folder
    meant to be continued (``take_stale``: checkpoints, which validate their own contents);
    otherwise it is reported. A lock of another host is never judged: if its writer has
    stopped, delete the lock file the message names.

    Within one process the claim is re-entrant for the thread that holds it (a command claims
    its output, then the data writer it calls claims it again); another thread is another writer.

Replacement
    :func:`writing` gives a data writer the place to write: the output itself if there is
    none yet, else (``mode="w"``) a new store beside it, ``x.zarr.dpgm-new-<pid>``. The old
    store stays as it is until the writer returns, having marked the new one complete; then
    the two are swapped (:func:`swap`): on a local file system by one ``renameat2`` exchange
    (Linux; elsewhere two renames, between which the path is briefly absent), then the old
    store is deleted. A failure before the swap removes the new store and leaves the old one.

    An object store has no rename, so the swap is a copy in this order: (1) the new store is
    complete beside the old one, which is still readable; (2) the old store's root metadata is
    rewritten marked incomplete, so readers refuse it from now on (never a mix of two stores);
    (3) the old objects the new store does not have are deleted; (4) the new store's objects
    are copied over, (5) its root metadata (marked complete) last; (6) the copy beside is
    deleted. A failure in (2)-(5) leaves the output refused as incomplete and the complete
    new store beside it (a warning names it); write again to finish.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dpgm.errors import DpgmWarning

__all__ = ["Claim", "Holder", "OutputBusy", "claim", "holder", "lock_path", "location", "refusal", "remove", "swap",
           "writing"]

LOCK = ".dpgm-lock"
EXCLUSIVE = {"s3", "s3a", "memory", "file", "local"}
"""fsspec protocols whose ``"xb"`` mode is known to create a file only if it does not exist; on the others a
lock is created by check, write, wait and read back, which two writers starting within 0.5 s can both pass."""
NEW = ".dpgm-new-"
OLD = ".dpgm-old-"


def is_remote(path: str | os.PathLike[str]) -> bool:
    return "://" in os.fspath(path)


def location(path: str | os.PathLike[str]) -> str:
    """An output's one spelling: an absolute local path (what workers in other folders need), a URL as given."""
    text = os.fspath(path)
    if is_remote(text):
        return text.rstrip("/")
    return os.path.abspath(text)


def lock_path(path: str | os.PathLike[str]) -> str:
    """Where the lock of ``path`` lives: beside it (its folder resolved, so every spelling meets one lock)."""
    where = location(path)
    if is_remote(where):
        return where + LOCK
    return os.path.join(os.path.realpath(os.path.dirname(where)), os.path.basename(where) + LOCK)


@dataclass(frozen=True)
class Holder:
    """The writer a lock names."""

    host: str
    pid: int | None
    started: float
    token: str = ""
    command: str = ""

    def running(self) -> bool | None:
        """Whether the writer still runs: None when it cannot be told (another host, unreadable lock)."""
        if self.host != socket.gethostname() or self.pid is None:
            return None
        if self.pid == os.getpid():
            return _held_here(self.token)
        try:
            import psutil
        except ImportError:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return process.create_time() <= self.started + 1.0  # a later process reusing the pid is another one
        except psutil.AccessDenied:
            return True
        except psutil.Error:  # no such process, or gone while asked
            return False

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)) if self.started else "?"
        who = f"pid {self.pid}" if self.pid is not None else "an unknown process"
        return f"{who} on host {self.host!r} (started {when}{f': {self.command}' if self.command else ''})"


class OutputBusy(FileExistsError):
    """Another writer holds the output (or left a stale lock on it). CLI exit 73."""

    def __init__(self, path: str, holder: Holder, lock: str, why: str):
        self.path, self.holder, self.lock, self.why = path, holder, lock, why
        super().__init__(errno.EEXIST, f"{path!r} {why}", path)

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass
class Claim:
    """A held claim: the output, its lock, whether the output existed when claimed, the writer's record."""

    path: str
    lock: str
    existed: bool
    holder: Holder
    storage_options: dict[str, Any] | None = None
    took_over: Holder | None = None
    depth: int = field(default=1, repr=False)
    thread: int = field(default=0, repr=False)

    def sibling(self, kind: str) -> str:
        """``<output>.dpgm-new-<pid>`` / ``.dpgm-old-<pid>``: beside the output, in the same folder."""
        return self.path + (NEW if kind == "new" else OLD) + str(os.getpid())


_HELD: dict[str, Claim] = {}
_HELD_LOCK = threading.Lock()


def _held_here(token: str) -> bool:
    with _HELD_LOCK:
        return any(c.holder.token == token for c in _HELD.values())


def _filesystem(path: str, storage_options: dict[str, Any] | None):
    import fsspec

    fs, _ = fsspec.core.url_to_fs(path, **(storage_options or {}))
    return fs


def _forget_listings(path: str, storage_options: dict[str, Any] | None) -> None:
    """Make this process see ``path`` as it now is: fsspec caches filesystem objects, each with its listings
    (Zarr's, made on its event loop's thread, among them). A store just removed or replaced must not be
    listed as it was: every cached object of the filesystem's class forgets its listings."""
    fs = _filesystem(path, storage_options)
    for instance in [fs, *getattr(type(fs), "_cache", {}).values()]:
        with contextlib.suppress(Exception):
            instance.invalidate_cache()


def _exists(path: str, storage_options: dict[str, Any] | None) -> bool:
    if not is_remote(path):
        return os.path.lexists(path)
    fs = _filesystem(path, storage_options)
    fs.invalidate_cache()
    return bool(fs.exists(path))


def holder(path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Holder | None:
    """The writer holding ``path`` (from its lock), or None if no lock is there."""
    lock = lock_path(path)
    for _ in range(20):  # a lock being created is empty for a moment
        try:
            text = _read(lock, storage_options)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            record = json.loads(text)
            return Holder(str(record["host"]), int(record["pid"]), float(record["started"]),
                          str(record.get("token", "")), str(record.get("command", "")))
        except (ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return Holder("?", None, 0.0)


def _read(lock: str, storage_options: dict[str, Any] | None) -> str:
    if not is_remote(lock):
        with open(lock) as file:
            return file.read()
    fs = _filesystem(lock, storage_options)
    fs.invalidate_cache()
    return fs.cat_file(lock).decode()


def _record() -> tuple[Holder, bytes]:
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    program = "dpgm" if program in ("dpgm", "__main__.py") else program
    command = " ".join([program, *sys.argv[1:]])[:200]
    me = Holder(socket.gethostname(), os.getpid(), time.time(), uuid.uuid4().hex, command)
    payload = {"dpgm_writer": 1, "host": me.host, "pid": me.pid, "started": me.started, "token": me.token,
               "command": me.command}
    return me, json.dumps(payload).encode()


def _create(lock: str, payload: bytes, storage_options: dict[str, Any] | None) -> bool:
    """Create the lock atomically; False if it exists."""
    if not is_remote(lock):
        try:
            descriptor = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        return True
    fs = _filesystem(lock, storage_options)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if not protocols & EXCLUSIVE:
        return _create_unconditionally(fs, lock, payload)
    for attempt in range(5):
        try:
            with fs.open(lock, "xb") as file:  # S3: If-None-Match: *, refused when the key exists
                file.write(payload)
            return True
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):  # no exclusive create: check, write, read back
            return _create_unconditionally(fs, lock, payload)
        except OSError as error:  # S3 answers 409 ConditionalRequestConflict to a concurrent create
            if "conflict" not in str(error).lower() or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    return False


def _create_unconditionally(fs, lock: str, payload: bytes) -> bool:
    """For a store without conditional writes: a writer that starts within the read-back delay of another
    can still take the same lock (the race window is that delay, 0.5 s)."""
    fs.invalidate_cache()
    if fs.exists(lock):
        return False
    fs.pipe_file(lock, payload)
    time.sleep(0.5)
    fs.invalidate_cache()
    return fs.cat_file(lock) == payload


def _remove_lock(lock: str, token: str, storage_options: dict[str, Any] | None) -> None:
    """Delete the lock if it is still this writer's."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        if json.loads(_read(lock, storage_options)).get("token") != token:
            return
        if is_remote(lock):
            _filesystem(lock, storage_options).rm(lock)
        else:
            os.unlink(lock)


def _take_over(path: str, lock: str, stale: Holder, storage_options: dict[str, Any] | None) -> bool:
    """Remove a stale lock (if it is still the one judged stale) and its writer's leftovers."""
    if is_remote(lock):
        fs = _filesystem(lock, storage_options)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(lock)  # a writer that took it over in between loses its lock here: object stores have no
            # conditional delete through fsspec; the window is this call
    else:
        aside = f"{lock}.stale-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(lock, aside)
        except FileNotFoundError:
            return False
        try:
            with open(aside) as file:
                moved = json.loads(file.read()).get("token", "")
        except ValueError:
            moved = ""
        if moved != stale.token:  # replaced between our look and the rename: put it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, lock)
            os.unlink(aside)
            return False
        os.unlink(aside)
    if stale.pid is not None:
        old, new = f"{path}{OLD}{stale.pid}", f"{path}{NEW}{stale.pid}"
        if not _exists(path, storage_options) and _exists(old, storage_options):
            _rename(old, path, storage_options)  # killed between the two renames of a swap: the old store back
        for leftover in (new, old):
            remove(leftover, storage_options)
    return True


def _rename(source: str, target: str, storage_options: dict[str, Any] | None) -> None:
    if is_remote(source):
        _filesystem(source, storage_options).mv(source, target, recursive=True)
    else:
        os.rename(source, target)


def remove(path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Delete a store, file or link (a link itself, never what it points to); nothing if absent."""
    if is_remote(path):
        fs = _filesystem(path, storage_options)
        fs.invalidate_cache()
        if fs.exists(path):
            fs.rm(path, recursive=True)
        _forget_listings(path, storage_options)
        return
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def claim(path: str | os.PathLike[str], *, overwrite: bool = False, take_stale: bool = False,
          storage_options: dict[str, Any] | None = None) -> Iterator[Claim]:
    """Hold ``path`` exclusively for the duration of the block (see the module's docstring).

    Parameters
    ----------
    path
        The output: a local path or an fsspec URL.
    overwrite
        The writer replaces an existing output: a stale lock on it may be taken over.
    take_stale
        Take over a stale lock even of an existing output (a checkpoint folder to continue).
    storage_options
        Passed to fsspec for URLs.

    Yields
    ------
    Claim
        ``existed`` tells whether the output was there when claimed (what a failed writer may remove).

    Raises
    ------
    OutputBusy
        Another writer holds it, naming it (host, pid, start, command); or a stale lock on an
        existing output without ``overwrite``.

    Examples
    --------
    >>> import tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "d.zarr")
    >>> with claim(out) as held:
    ...     os.path.exists(lock_path(out)), held.existed
    (True, False)
    >>> os.path.exists(lock_path(out))
    False
    """
    where, lock = location(path), lock_path(path)
    me = threading.get_ident()
    with _HELD_LOCK:
        held = _HELD.get(lock)
        mine = held is not None and held.thread == me and held.holder.pid == os.getpid()  # not a forked child
        if held is not None and mine:
            held.depth += 1
    if held is not None and mine:
        try:
            yield held
        finally:
            with _HELD_LOCK:
                held.depth -= 1
        return
    record, payload = _record()
    took_over = None
    while not _create(lock, payload, storage_options):
        other = holder(where, storage_options)
        if other is None:
            continue  # released in between: try again
        why = refusal(where, other, lock, overwrite=overwrite, take_stale=take_stale,
                      storage_options=storage_options)
        if why is not None:
            raise OutputBusy(where, other, lock, why)
        if _take_over(where, lock, other, storage_options):
            took_over = other
    result = Claim(where, lock, _exists(where, storage_options), record, storage_options, took_over,
                   thread=me)
    if took_over is not None:
        warnings.warn(f"took over the lock of {where!r} left by {took_over.describe()}, which is no longer running",
                      DpgmWarning, stacklevel=3)
    with _HELD_LOCK:
        _HELD[lock] = result
    try:
        yield result
    finally:
        with _HELD_LOCK:
            _HELD.pop(lock, None)
        _remove_lock(lock, record.token, storage_options)


def refusal(path: str | os.PathLike[str], other: Holder, lock: str, *, overwrite: bool = False,
            take_stale: bool = False, storage_options: dict[str, Any] | None = None) -> str | None:
    """Why a claim of ``path``, whose lock ``other`` holds, is refused (None: the lock is stale and may be
    taken over), e.g. ``"is being written by another process, pid 4242 on host 'node1' (...)"``."""
    running = other.running()
    if running is not False:
        return _busy(other, lock, running)
    if _exists(location(path), storage_options) and not (overwrite or take_stale):
        return (f"was left unfinished by {other.describe()}, which is no longer running; pass --overwrite "
                "(mode='w') to replace it")
    return None


def _busy(other: Holder, lock: str, running: bool | None) -> str:
    if other.pid is None:
        return f"is locked by {lock!r}, which dpgm cannot read; if no writer runs, delete that file"
    if running is None:
        return (f"is being written by {other.describe()}, on another host: dpgm cannot tell whether it still "
                f"runs; if it has stopped, delete the lock {lock!r}")
    return f"is being written by another process, {other.describe()}; wait for it to finish or stop it"


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], *, mode: str = "w-",
            storage_options: dict[str, Any] | None = None) -> Iterator[str]:
    """Claim ``path`` for a data writer and yield where to write the store.

    ``path`` itself when no output is there; with ``mode="w"`` over an existing one, a new
    store beside it (``<path>.dpgm-new-<pid>``) that replaces it (:func:`swap`) once the block
    returns, i.e. after the writer marked it complete. A failure before the swap removes the
    new store and leaves the old one as it was. A failure of a store written in place leaves it
    (marked incomplete, refused by readers); the ``dpgm`` command removes it.

    Raises
    ------
    ValueError
        ``mode`` is not ``"w-"`` or ``"w"``.
    FileExistsError
        The output exists and ``mode`` is ``"w-"``.
    OutputBusy
        Another writer holds the output.
    """
    if mode not in ("w-", "w"):
        raise ValueError(f"mode must be 'w-' (create) or 'w' (replace), got {mode!r}")
    if not is_remote(path):  # the folder of a new store, as Zarr would create it
        os.makedirs(os.path.dirname(location(path)), exist_ok=True)
    with claim(path, overwrite=mode == "w", storage_options=storage_options) as held:
        if not _exists(held.path, storage_options):
            yield held.path
            return
        if mode == "w-":
            raise FileExistsError(errno.EEXIST, f"{held.path!r} exists; pass mode='w' (--overwrite) to replace it",
                                  held.path)
        pending = held.sibling("new")
        remove(pending, storage_options)  # a leftover of an earlier writer of this pid: the lock is ours
        try:
            yield pending
        except BaseException:
            remove(pending, storage_options)
            raise
        swap(pending, held.path, storage_options)


def swap(new: str, path: str, storage_options: dict[str, Any] | None = None) -> None:
    """Put the complete store ``new`` at ``path`` and delete what was there (see the module's docstring)."""
    if is_remote(path):
        _swap_remote(new, path, storage_options)
        return
    if not os.path.lexists(path):
        os.rename(new, path)
        return
    try:
        _exchange(new, path)
    except OSError:  # no renameat2 exchange here (another OS, NFS): two renames
        old = path + OLD + str(os.getpid())
        remove(old)
        os.rename(path, old)
        try:
            os.rename(new, path)
        except BaseException:
            os.rename(old, path)
            raise
        remove(old)
        return
    remove(new)  # the old store, now under the new one's name


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> None:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); OSError where unsupported."""
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "no renameat2")
    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        raise OSError(errno.ENOSYS, "no renameat2")
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), a)


def _swap_remote(new: str, path: str, storage_options: dict[str, Any] | None) -> None:
    from dpgm.data.integrity import COMPLETE

    fs = _filesystem(path, storage_options)
    source, target = fs._strip_protocol(new).rstrip("/"), fs._strip_protocol(path).rstrip("/")
    fs.invalidate_cache()
    new_keys = sorted(k[len(source) + 1:] for k in fs.find(source))
    old_keys = sorted(k[len(target) + 1:] for k in fs.find(target))
    try:
        if "zarr.json" in old_keys:  # (2) from here on readers refuse the old store
            root = json.loads(fs.cat_file(f"{target}/zarr.json"))
            root.setdefault("attributes", {})[COMPLETE] = False
            fs.pipe_file(f"{target}/zarr.json", json.dumps(root, indent=2).encode())
        stale = [f"{target}/{k}" for k in old_keys if k not in new_keys and k != "zarr.json"]
        if stale:  # (3)
            fs.rm(stale)
        body = [k for k in new_keys if k != "zarr.json"]
        if body:  # (4)
            fs.copy([f"{source}/{k}" for k in body], [f"{target}/{k}" for k in body])
        fs.copy(f"{source}/zarr.json", f"{target}/zarr.json")  # (5) the marker last
    except BaseException:
        warnings.warn(f"replacing {path!r} stopped midway: it is marked incomplete (refused); the complete new "
                      f"store is at {new!r}; write again to finish", DpgmWarning, stacklevel=2)
        raise
    fs.rm(source, recursive=True)  # (6)
    _forget_listings(path, storage_options)
    _forget_listings(new, storage_options)

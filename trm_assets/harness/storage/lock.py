"""One writer per workspace (SPEC §8, issue 18.1): an OS-level lock on ``<workspace>/.trm.lock``.

Every command or run that mutates a workspace — ``trm train`` for its whole duration, each Dagster
run of a unit (from opening the loop context, which may write ``pools.json``, to closing its run
log, with the run's id), the ``pools`` asset when it writes ``pools.json``, ``trm init`` (before it
archives a workspace), ``trm promote`` — holds :func:`workspace_lock`. A second process is
refused at once with :class:`WorkspaceLockedError` naming the holder (pid, host, run id, command,
start time), instead of both writing the store and the run log (the only guard before was
DuckDB's file lock, released between units).

Why this shape:

* ``fcntl.flock`` on a file that is never replaced nor deleted: the kernel releases the lock when
  the holder's process dies (SIGKILL included), so a crashed run never leaves a lock that needs a
  human. The holder's description written into the file is informational only; it is cleared on
  a clean release and overwritten by the next holder, so a stale description (the holder was
  killed) never blocks anyone.
* **re-entrant per process**: ``trm train`` holds the lock and runs every unit in-process through
  Dagster, whose runs take the lock again. A second ``flock`` on another descriptor of the same
  file in the same process would conflict with the first, so the process keeps one descriptor per
  lock file in a registry (keyed by the file's device and inode, so a workspace that was moved
  aside and re-created at the same path is a different lock) guarded by a thread lock, and counts
  nested acquisitions.
* the descriptor is close-on-exec and dropped in forked children: a child never keeps the lock
  alive after its parent died.

Rejected: a pid file checked with ``kill(pid, 0)`` (racy between check and write, wrong after pid
reuse, needs a human to delete it after a crash); POSIX record locks (``fcntl.lockf``: released
when *any* descriptor of the file in the process is closed, e.g. by a library that opened it);
DuckDB's own file lock (released between units, and it does not cover the store).
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trm_assets.domain.errors import TrmError

LOCK_FILE = ".trm.lock"
#: How long an acquisition retries before refusing: covers another process that only probes the
#: lock (:func:`lock_holder`, e.g. the epoch sensor) at the same moment.
DEFAULT_WAIT_S = 1.0
_POLL_S = 0.05
#: How long a probe that found the lock held waits for the holder's description to appear: the
#: holder writes it right after ``flock``, but a loaded machine can deschedule it in between.
DESCRIPTION_SETTLE_S = 0.5
_SETTLE_POLL_S = 0.005


class WorkspaceLockError(TrmError):
    """The workspace lock cannot be taken (the workspace is missing or not a directory)."""


class WorkspaceLockedError(WorkspaceLockError):
    """Another process writes this workspace (``holder`` says which, when it said so)."""

    def __init__(self, message: str, holder: Holder | None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds a workspace lock. ``started`` is UTC ISO-8601; ``run_id`` may be None (a
    command that is not a run, e.g. ``trm init``)."""

    pid: int
    host: str
    command: str
    run_id: str | None
    started: str

    def describe(self) -> str:
        run = f", run {self.run_id}" if self.run_id else ""
        return f"pid {self.pid} on {self.host} ({self.command}{run}, since {self.started})"


@dataclass
class _Held:
    fd: int
    holder: Holder
    depth: int


_HELD: dict[tuple[int, int], _Held] = {}
_HELD_LOCK = threading.Lock()


def _forget_in_child() -> None:
    # A forked child shares the parent's open file description: closing its copy leaves the
    # parent's lock intact, and the child no longer believes it holds the lock.
    global _HELD_LOCK
    for held in _HELD.values():
        with suppress(OSError):
            os.close(held.fd)
    _HELD.clear()
    _HELD_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def lock_path(workspace: str | Path) -> Path:
    return Path(workspace) / LOCK_FILE


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_directory(ws: Path, create: bool) -> None:
    if ws.exists() and not ws.is_dir():
        raise WorkspaceLockError(f"{ws}: exists and is not a directory; a workspace is a directory")
    if not ws.exists():
        if not create:
            raise WorkspaceLockError(
                f"{ws}: no such workspace (create one with `trm init --workspace {ws} "
                "--config FILE`)"
            )
        ws.mkdir(parents=True, exist_ok=True)


def _is_lock_file_of(fd: int, ws: Path) -> bool:
    """Whether ``fd`` is still the lock file at ``ws``'s path (not one moved away with its
    directory, or replaced, while its opener waited for it)."""
    try:
        now = os.stat(lock_path(ws))
    except OSError:
        return False
    st = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _read_holder_fd(fd: int, settle_s: float = 0.0) -> Holder | None:
    """The description in the lock file; retries for up to ``settle_s`` while it is empty (a
    holder writes it just after taking the lock, so a probe can land in between)."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            holder = _parse_holder(os.pread(fd, 4096, 0))
        except OSError:
            return None
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(_SETTLE_POLL_S)


def _parse_holder(raw: bytes) -> Holder | None:
    try:
        data: Any = json.loads(raw.decode("utf-8"))
        return Holder(
            pid=int(data["pid"]),
            host=str(data["host"]),
            command=str(data["command"]),
            run_id=None if data.get("run_id") is None else str(data["run_id"]),
            started=str(data["started"]),
        )
    except (ValueError, KeyError, TypeError):
        return None  # empty (released, or being written this instant) or not ours


def _write_holder(fd: int, holder: Holder) -> None:
    data = (json.dumps(asdict(holder), sort_keys=True) + "\n").encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _try_flock(fd: int, operation: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def _refusal(ws: Path, holder: Holder | None, command: str) -> WorkspaceLockedError:
    who = holder.describe() if holder is not None else "another process (it has not said which)"
    kill = f" (`kill {holder.pid}`)" if holder is not None else ""
    return WorkspaceLockedError(
        f"{ws}: refusing to run {command}: the workspace is in use by {who}. Only one process "
        f"may write a workspace at a time; wait for it to finish or stop it{kill}. A holder that "
        "died releases the lock by itself.",
        holder,
    )


@contextmanager
def workspace_lock(
    workspace: str | Path,
    *,
    command: str,
    run_id: str | None = None,
    create: bool = False,
    wait_s: float = DEFAULT_WAIT_S,
) -> Iterator[Holder]:
    """Hold the workspace's writer lock for the ``with`` block; yields the holder on record.

    Re-entrant within a process (a nested acquisition keeps the outer holder's description).
    Raises :class:`WorkspaceLockedError` (naming the holder) when another process holds it for
    longer than ``wait_s``; :class:`WorkspaceLockError` when the workspace directory is missing
    (``create=True`` creates it: ``trm init``) or is a file.
    """
    ws = Path(workspace)
    deadline = time.monotonic() + wait_s
    while True:
        _check_directory(ws, create)
        fd = os.open(lock_path(ws), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with _HELD_LOCK:
            held = _HELD.get(key)
            if held is not None:
                os.close(fd)
                held.depth += 1
                break
            try:
                if not _try_flock(fd, fcntl.LOCK_EX, max(0.0, deadline - time.monotonic())):
                    raise _refusal(ws, _read_holder_fd(fd, DESCRIPTION_SETTLE_S), command)
                moved = not _is_lock_file_of(fd, ws)
                if not moved:
                    holder = Holder(os.getpid(), socket.gethostname(), command, run_id, _now())
                    _write_holder(fd, holder)
            except BaseException:
                os.close(fd)
                raise
            if not moved:
                held = _HELD[key] = _Held(fd, holder, 1)
                break
        # The workspace was moved aside (`trm init`) while this process waited: the lock it got
        # is the moved directory's. Take the one now at the path instead (contract audit: two
        # processes each believed they held the workspace).
        os.close(fd)
    try:
        yield held.holder
    finally:
        with _HELD_LOCK:
            held.depth -= 1
            if held.depth == 0 and _HELD.get(key) is held:
                del _HELD[key]
                try:
                    os.ftruncate(held.fd, 0)  # the description goes with the lock …
                finally:
                    os.close(held.fd)  # … and closing the descriptor releases it


def lock_holder(workspace: str | Path) -> Holder | None:
    """Who holds the workspace's lock now (None when nobody does). Never blocks.

    In the holding process this is its own holder. Elsewhere the file is probed with a shared
    lock for an instant; a stale description left by a killed holder is ignored (the kernel
    released its lock). A holder's description is awaited for up to :data:`DESCRIPTION_SETTLE_S`
    (it is written just after the lock is taken); one that still has none (not ours, or a holder
    stalled that long) is reported with ``pid`` 0 and the command ``unknown``.
    """
    path = lock_path(workspace)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        st = os.fstat(fd)
        with _HELD_LOCK:
            held = _HELD.get((st.st_dev, st.st_ino))
            if held is not None:
                return held.holder
        if _try_flock(fd, fcntl.LOCK_SH, 0.0):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return _read_holder_fd(fd, DESCRIPTION_SETTLE_S) or Holder(
            0, "unknown", "unknown", None, "unknown"
        )
    finally:
        os.close(fd)

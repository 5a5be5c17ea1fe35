"""Atomic file writes: write a temp file beside the target, fsync, then ``os.replace``.

A crash at any point leaves either the old file or the new one, never a truncated mix. A process
killed between creating its temp file and the replace leaves that temp file behind
(``.<name>.<pid>.<random>.tmp``); the next write of the same target removes the temp files of
processes that no longer run, so a killed-and-resumed run ends with the same files as one that was
never killed (issue 9; ``docs/decision-stale-temp-files.md``).
"""

from __future__ import annotations

import errno
import glob
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from trm_assets.domain.errors import DataFormatError, TrmError

_TMP_SUFFIX = ".tmp"
#: errno values that mean "the disk is full" (quota included).
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class StorageWriteError(TrmError, OSError):
    """A file of the workspace could not be written (disk full, read-only, no permission).
    Nothing half-written is left in place: the previous content stays. Still an ``OSError``
    (``errno`` kept) for code that handles those."""

    def __init__(self, message: str, *, code: int | None) -> None:
        super().__init__(message)
        self.errno = code


#: What to do after a write failed mid-training (``trm init`` says its own: it keeps nothing).
RESUME_ADVICE: Final = (
    "resume (`trm train --resume`): the unit of work restarts from its last checkpoint"
)


def storage_error(path: str | Path, e: OSError, what: str = "cannot write") -> StorageWriteError:
    """A human error for an ``OSError`` while writing ``path``."""
    if e.errno in DISK_FULL:
        return StorageWriteError(
            f"{path}: {what}: disk full ({e.strerror}); free space on that disk, then "
            f"{RESUME_ADVICE}",
            code=e.errno,
        )
    return StorageWriteError(f"{path}: {what} ({e.strerror or e})", code=e.errno)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_temps(target: Path) -> list[Path]:
    """Remove temp files of ``target`` left by writers that were killed before their replace
    (their process is gone; a temp file without a pid comes from an older writer). Returns them."""
    removed = []
    prefix = f".{target.name}."
    for tmp in target.parent.glob(f"{glob.escape(prefix)}*{_TMP_SUFFIX}"):
        middle = tmp.name[len(prefix) : -len(_TMP_SUFFIX)]
        pid_text = middle.split(".", 1)[0]
        if "." in middle and pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


#: called before every atomic write (the checkpoint's: wait until a commit still landing has
#: landed, so nothing of a unit is durable before the checkpoint of the unit before it)
_BEFORE_WRITE: list[Callable[[], None]] = []


# Files and directories written new during a unit of work whose fsync waits for its checkpoint
# (deferred_sync): None when no unit is open (then every write syncs at once).
_UNSYNCED: list[Path] | None = None
_UNSYNCED_LOCK = threading.Lock()


@contextmanager
def deferred_sync() -> Iterator[None]:
    """While open (a unit of work), :func:`sync_later` collects new files instead of syncing
    them; the checkpoint syncs them (:func:`take_unsynced`, :func:`fsync_paths`) before
    ``state.json`` says they exist. A new version directory is renamed into place atomically
    either way; until the checkpoint it is not referenced by one, and a resume after a crash
    removes it (``restore_workspace_to_mark``), so only its durability is deferred. Whatever
    is still collected when the block ends is synced then."""
    global _UNSYNCED
    with _UNSYNCED_LOCK:
        outer, _UNSYNCED = _UNSYNCED, ([] if _UNSYNCED is None else _UNSYNCED)
    try:
        yield
    finally:
        if outer is None:
            fsync_paths(take_unsynced())
            with _UNSYNCED_LOCK:
                _UNSYNCED = None


def sync_later(paths: Sequence[Path]) -> bool:
    """Queue ``paths`` for the checkpoint's fsync; False (nothing queued) outside a unit."""
    with _UNSYNCED_LOCK:
        if _UNSYNCED is None:
            return False
        _UNSYNCED.extend(paths)
        return True


def take_unsynced() -> list[Path]:
    """The paths queued so far (the queue is emptied)."""
    with _UNSYNCED_LOCK:
        if not _UNSYNCED:
            return []
        out = list(_UNSYNCED)
        _UNSYNCED.clear()
        return out


def fsync_paths(paths: Sequence[Path]) -> None:
    """fsync each file or directory (a vanished one is skipped: a later step removed it)."""
    for path in dict.fromkeys(paths):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def run_before_write() -> None:
    """The hooks :func:`atomic_write_bytes` runs first (for writes that bypass it)."""
    for hook in _BEFORE_WRITE:
        hook()


def before_every_write(hook: Callable[[], None]) -> None:
    """Register ``hook`` to run before every :func:`atomic_write_bytes` (once per hook)."""
    if hook not in _BEFORE_WRITE:
        _BEFORE_WRITE.append(hook)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; an ``OSError`` (disk full …) becomes a
    :class:`StorageWriteError` naming the file, with the old content intact."""
    for hook in _BEFORE_WRITE:
        hook()
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_temps(target)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.{os.getpid()}.", suffix=_TMP_SUFFIX, dir=target.parent
        )
    except OSError as e:
        raise storage_error(target, e) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise storage_error(target, e) from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_text(obj: Any) -> str:
    """Deterministic JSON (sorted keys, 2-space indent, trailing newline): every JSON file the
    workspace writes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None when the file does not exist); invalid JSON or another
    JSON value is a :class:`~trm_assets.domain.errors.DataFormatError` naming the file (never a
    raw traceback). The reader of the cache and ladder files."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFormatError(str(path), f"line {e.lineno}", None, f"valid JSON ({e.msg})") from e
    if not isinstance(data, dict):
        raise DataFormatError(str(path), None, None, "a JSON object")
    return data


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime_ns) of ``path``, None when it cannot be stat'ed: a file written by
    :func:`atomic_write_json` (a replace) always gets a new identity, so a per-process cache keyed
    by it sees every write made by anyone else."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)

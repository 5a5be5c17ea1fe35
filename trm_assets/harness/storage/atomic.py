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
from pathlib import Path
from typing import Any

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


def storage_error(path: str | Path, e: OSError, what: str = "cannot write") -> StorageWriteError:
    """A human error for an ``OSError`` while writing ``path``."""
    if e.errno in DISK_FULL:
        return StorageWriteError(
            f"{path}: {what}: disk full ({e.strerror}); free space on that disk, then resume "
            "(`trm train --resume`): the unit of work restarts from its last checkpoint",
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


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; an ``OSError`` (disk full …) becomes a
    :class:`StorageWriteError` naming the file, with the old content intact."""
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

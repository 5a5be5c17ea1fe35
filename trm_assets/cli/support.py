"""Shared pieces of the ``trm`` command: lazy subcommand groups and human error output."""

from __future__ import annotations

import errno
import functools
import importlib
import importlib.util
import socket
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trm_assets.domain.errors import TrmError

WORKSPACE_OPTION = click.option(
    "--workspace", "workspace", required=True, type=click.Path(path_type=Path), help="Directory."
)
"""The ``--workspace DIR`` option of every command that works on one experiment workspace."""


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked or listed."""

    def __init__(
        self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self._lazy = lazy or {}

    def _available(self) -> dict[str, tuple[str, str]]:
        """Lazy entries whose module exists in this installation."""
        return {
            name: entry
            for name, entry in self._lazy.items()
            if importlib.util.find_spec(entry[0].partition(":")[0]) is not None
        }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._available()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self._available()
        if cmd_name in lazy:
            module, help_text = lazy[cmd_name]
            mod_name, _, attr = module.partition(":")
            cmd = getattr(importlib.import_module(mod_name), attr)
            if not isinstance(cmd, click.Command):
                raise click.ClickException(f"{module} is not a click command")
            cmd.name = cmd_name
            if not cmd.short_help and not cmd.help:
                cmd.short_help = help_text
            return cmd
        return super().get_command(ctx, cmd_name)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """The project's own warnings (their class is ours) as ``warning:`` lines, not a source
    line and its path; any other package's warning as Python shows it."""
    if category.__module__.split(".")[0] == "trm_assets":
        click.echo(f"warning: {message}", err=True)
        return
    _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


_PYTHON_SHOWWARNING = warnings.showwarning


class TopGroup(LazyGroup):
    """The ``trm`` group: any subcommand's TrmError (and disk-full, permission, address-in-use
    OSErrors) reaching the top is shown as ``error:`` lines with exit code 2, like the commands
    wrapped in :func:`fail_on_trm_error` — so a command that forgot the wrapper (or a benchmark)
    never prints a traceback for a user's mistake."""

    def invoke(self, ctx: click.Context) -> Any:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return fail_on_trm_error(super().invoke)(ctx)


#: ``OSError`` numbers that describe the machine, not a bug: shown as an ``error:`` line.
_ENVIRONMENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.EMFILE,
        errno.ENFILE,
        errno.EIO,
        errno.ENAMETOOLONG,
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
    }
)
_DISK_FULL_HINT = (
    "disk full: free space on that disk, then resume (`trm train --resume`): the unit of work "
    "restarts from its last checkpoint"
)


def error_lines(e: BaseException) -> list[str] | None:
    """The ``error:`` lines for an exception a user should see without a traceback, or None
    (a bug: let the traceback through)."""
    lines = _error_lines(e)
    return None if lines is None else [*lines, *getattr(e, "__notes__", ())]


def _error_lines(e: BaseException) -> list[str] | None:
    if isinstance(e, TrmError):
        if type(e).__name__ == "SettingsError":  # one line per variable
            from trm_assets.llm.settings import SettingsError

            if isinstance(e, SettingsError):
                return list(e.problems)
        return [str(e)]
    if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:
        where = f"{e.filename}: " if e.filename else ""
        cause = e.strerror or str(e)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return [f"{where}{cause} ({_DISK_FULL_HINT})"]
        return [f"{where}{cause}"]
    if isinstance(e, socket.gaierror):  # a host name that does not resolve
        return [f"cannot resolve the host ({e.strerror or e})"]
    if "no space left on device" in str(e).lower():  # DuckDB and other libraries' IO errors
        first = str(e).strip().splitlines()[0]
        return [f"{first} ({_DISK_FULL_HINT})"]
    return _settings_lines(e)


def _settings_lines(e: BaseException) -> list[str] | None:
    # A Settings() built without llm.settings.load_settings: same lines, never the raw dump.
    from pydantic import ValidationError

    if isinstance(e, ValidationError) and e.title == "Settings":
        from trm_assets.llm.settings import settings_problems

        return settings_problems(e)
    return None


def fail_on_trm_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Show a TrmError (and a disk-full or permission ``OSError``, an invalid ``TRM_LLM_*``
    variable) as ``error:`` lines without a traceback, exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:
            lines = error_lines(e)
            if lines is None:
                raise
            for line in lines:
                click.echo(f"error: {line}", err=True)
            sys.exit(2)

    return wrapper

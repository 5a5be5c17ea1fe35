"""Shared pieces of the ``trm`` command: lazy subcommand groups and human error output."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import click

from trm_assets.domain.errors import TrmError


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


def fail_on_trm_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Show a TrmError as its message (no traceback), exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TrmError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)

    return wrapper

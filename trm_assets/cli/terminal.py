"""The terminal of ``trm train`` / ``trm eval``: a progress bar rewritten in place on a TTY
(issue 17.4: "a progress bar on a terminal, periodic lines otherwise").

Every line the command prints goes through :meth:`Terminal.echo`, which first clears a bar that
is showing, prints the line, then draws the bar again below it, so output and bar never tangle.
The bar is cut to the terminal's width (a wrapped line cannot be rewritten in place). Off a TTY
(a pipe, a file, CI, ``TERM=dumb``) there is no bar: the periodic progress lines are printed.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

import click

from trm_assets.harness.loop.progress import PROGRESS_MARK, format_progress
from trm_assets.harness.loop.rollouts import InferenceProgress

_CLEAR = "\r\x1b[2K"  # carriage return, erase the whole line
_BAR_CELLS = 20


def render_bar(p: InferenceProgress, width: int) -> str:
    """``  … [#######.............] <the progress line>``, cut to ``width − 1`` characters."""
    share = min(1.0, p.done / p.total) if p.total > 0 else 1.0
    full = round(share * _BAR_CELLS)
    text = f"  {PROGRESS_MARK}[{'#' * full}{'.' * (_BAR_CELLS - full)}] {format_progress(p)}"
    return text[: max(1, width - 1)]


class Terminal:
    """Lines and a live bar on one stream. ``tty`` None: the stream's ``isatty()`` (and a
    ``TERM`` other than ``dumb``)."""

    def __init__(
        self, stream: TextIO | None = None, *, tty: bool | None = None, width: int | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"
        self.tty = tty
        self._width = width
        self._bar = ""  # the bar on screen now ("" none)

    @property
    def width(self) -> int:
        return self._width or shutil.get_terminal_size((100, 24)).columns

    def echo(self, line: str) -> None:
        """A line of output; a bar that is showing stays below it."""
        if self._bar:
            self._write(_CLEAR)
        click.echo(line, file=self.stream)
        if self._bar:
            self._write(self._bar)

    def progress(self, p: InferenceProgress, final: bool) -> None:
        """Draw the barrier's bar in place; ``final`` leaves it on screen as a finished line."""
        if not self.tty:
            return
        text = render_bar(p, self.width) + (" — done" if final else "")
        text = text[: max(1, self.width - 1)]
        self._bar = "" if final else text
        self._write(_CLEAR + text + ("\n" if final else ""))

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

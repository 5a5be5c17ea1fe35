"""The terminal of ``trm train`` / ``trm eval``: a progress bar per rollout barrier, drawn in
place on a TTY by tqdm (issue 17.4: "a progress bar on a terminal, periodic lines otherwise";
``docs/decision-terminal-progress-bar.md``).

Every line the command prints goes through :meth:`Terminal.echo` (``tqdm.write``), which clears
a bar that is showing, prints the line, and draws the bar again below it, so output and bar never
tangle. Off a TTY (a pipe, a file, CI, ``TERM=dumb``) no bar is drawn: the periodic progress
lines are printed instead (:class:`~trm_assets.harness.loop.progress.ProgressReporter`).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

from tqdm import tqdm

from trm_assets.harness.loop.progress import PROGRESS_MARK, progress_details
from trm_assets.harness.loop.rollouts import InferenceProgress

#: ``  … train_e0_s1: 61/72 rollouts |#################   |, 243 model calls, …, ETA 0m04s``
#: (tqdm puts ", " before the postfix)
BAR_FORMAT = "  " + PROGRESS_MARK + "{desc}: {n}/{total} rollouts |{bar:20}|{postfix}"


class Terminal:
    """Lines and one live bar per barrier on one stream. ``tty`` None: the stream's
    ``isatty()`` (and a ``TERM`` other than ``dumb``)."""

    def __init__(
        self, stream: TextIO | None = None, *, tty: bool | None = None, width: int | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"
        self.tty = tty
        self._width = width  # None: the terminal's, read at every draw (a resized window)
        self._bars: dict[str, tqdm] = {}

    @property
    def width(self) -> int:
        """``COLUMNS``, else the terminal's width, else 100 columns. A pseudo-terminal without a
        size (``script``, some containers) reports 0 × 0, where tqdm's own probe draws nothing:
        it hides every bar below the screen's last row."""
        return self._width or shutil.get_terminal_size((100, 24)).columns or 100

    @property
    def height(self) -> int:
        return shutil.get_terminal_size((100, 24)).lines or 24

    def echo(self, line: str) -> None:
        """A line of output; a bar that is showing stays below it."""
        tqdm.write(line, file=self.stream)

    def progress(self, p: InferenceProgress, final: bool) -> None:
        """Draw the barrier's bar; ``final`` leaves it on screen as a finished line."""
        if not self.tty:
            return
        details = progress_details(p) + (" — done" if final else "")
        bar = self._bars.get(p.run_id)
        if bar is None:
            bar = self._bars[p.run_id] = tqdm(
                total=p.total,
                initial=p.done,
                postfix=details,
                desc=p.run_id,
                file=self.stream,
                bar_format=BAR_FORMAT,
                ncols=self.width,
                nrows=self.height,
                ascii=" #",  # any terminal encoding
                leave=True,
                mininterval=0,
                miniters=1,
                smoothing=0,
            )
        else:
            bar.n = p.done
            bar.ncols = self.width
            bar.set_postfix_str(details, refresh=False)
            bar.refresh()
        if final:
            bar.close()
            del self._bars[p.run_id]

    def close(self) -> None:
        """End every bar still showing (an interrupted barrier), so what follows starts on a
        line of its own."""
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()

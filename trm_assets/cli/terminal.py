"""The terminal of ``trm train`` / ``trm eval``: a progress bar per rollout barrier, drawn in
place on a TTY by tqdm (issue 17.4: "a progress bar on a terminal, periodic lines otherwise";
``docs/decision-terminal-progress-bar.md``).

Every line the command prints goes through :meth:`Terminal.echo` (``tqdm.write``), which clears
a bar that is showing, prints the line, and draws the bar again below it, so output and bar never
tangle; so do the warnings logged meanwhile (:meth:`Terminal.logging`). On a TTY the terminal is
written through a descriptor of its own, taken before any Dagster run, so a run's captured
stdout (its compute log) holds no bar, and a character the terminal's encoding lacks is replaced,
never an error inside a barrier. Off a TTY (a pipe, a file, CI, ``TERM=dumb``) no bar is drawn:
the periodic progress lines are printed instead
(:class:`~trm_assets.harness.loop.progress.ProgressReporter`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from typing import TextIO

from tqdm import tqdm

from trm_assets.harness.loop.progress import PROGRESS_MARK, progress_fields
from trm_assets.harness.loop.rollouts import InferenceProgress

#: ``  … 61/72 rollouts |#########   |, ETA 0m04s, 243 model calls, 5,120 tokens/s, elapsed 0m12s,
#: 0 infra: train_e0_s1`` — cut at the terminal's width, so the most wanted come first (tqdm
#: puts ", " before the postfix).
BAR_FORMAT = "  " + PROGRESS_MARK + "{n}/{total} rollouts |{bar:12}|{postfix}"


def bar_postfix(p: InferenceProgress, final: bool) -> str:
    f = progress_fields(p)
    head = "done" if final else f["eta"]
    return f"{head}, {f['calls']}, {f['rate']}, {f['elapsed']}, {f['infra']}: {p.run_id}"


class Terminal:
    """Lines and one live bar per barrier on one stream. ``stream`` None: standard output (on a
    TTY, a descriptor of its own). ``tty`` None: the stream's ``isatty()`` and a ``TERM`` other
    than ``dumb``."""

    def __init__(
        self, stream: TextIO | None = None, *, tty: bool | None = None, width: int | None = None
    ) -> None:
        if stream is None:
            stream = sys.stdout
            if tty is not False and _is_tty(stream):
                stream = _own_descriptor(stream)
        self.stream = stream
        self.tty = _is_tty(stream) if tty is None else tty
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
        """Draw the barrier's bar; ``final`` leaves it on screen as a finished line. A display
        that fails stops drawing (the periodic lines are in the run's log) instead of failing
        the barrier."""
        if not self.tty:
            return
        try:
            self._draw(p, final)
        except Exception:
            self.tty = False
            self.close()

    def _draw(self, p: InferenceProgress, final: bool) -> None:
        postfix = bar_postfix(p, final)
        bar = self._bars.get(p.run_id)
        if bar is None:
            bar = self._bars[p.run_id] = tqdm(
                total=p.total,
                initial=p.done,
                postfix=postfix,
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
            bar.set_postfix_str(postfix, refresh=False)
            bar.refresh()
        if final:
            bar.close()
            del self._bars[p.run_id]

    def close(self) -> None:
        """End every bar still showing (an interrupted barrier), so what follows starts on a
        line of its own."""
        for bar in self._bars.values():
            with contextlib.suppress(Exception):
                bar.close()
        self._bars.clear()

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        """While the command runs on a TTY, warnings logged without a handler of their own (an
        endpoint's retry, a clamped usage count) are printed above the bar instead of by
        Python's fallback on standard error, which glued them onto the bar's line."""
        root = logging.getLogger()
        if not self.tty or root.handlers:
            yield
            return
        handler = _AboveTheBar(self)
        handler.setLevel(logging.WARNING)  # what the fallback printed
        root.addHandler(handler)
        try:
            yield
        finally:
            root.removeHandler(handler)


class _AboveTheBar(logging.Handler):
    def __init__(self, term: Terminal) -> None:
        super().__init__()
        self.term = term

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.term.echo(self.format(record))
        except Exception:
            self.handleError(record)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


def _own_descriptor(stream: TextIO) -> TextIO:
    """A writer of the terminal behind ``stream`` on a duplicate of its descriptor: Dagster
    redirects descriptor 1 into a run's compute log while an op runs, and this one still reaches
    the terminal. Unencodable characters are replaced."""
    try:
        fd = os.dup(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return stream
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return open(fd, "w", encoding=encoding, errors="replace", buffering=1, closefd=True)

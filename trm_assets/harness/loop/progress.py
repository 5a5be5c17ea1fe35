"""Progress inside long rollout barriers (issue 17.4): rollouts done / total, model calls,
tokens/s and an ETA, at a steady cadence — so a slow real model is visibly working.

:class:`ProgressReporter` is a :class:`~trm_assets.harness.loop.observer.LoopObserver`; the
composition root decides where its lines go (``trm train`` → the terminal: a tqdm bar on a TTY,
:mod:`trm_assets.cli.terminal`, periodic lines otherwise; a Dagster run → the
run's log, and the bar on the terminal of the ``trm train`` that drives it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import layered_environ
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.loop.rollouts import InferenceProgress, InferenceResult


def format_progress(p: InferenceProgress) -> str:
    f = progress_fields(p)
    return (
        f"{p.run_id}: {p.done}/{p.total} rollouts, {f['calls']}, {f['rate']}, {f['infra']}, "
        f"{f['elapsed']}, {f['eta']}"
    )


def progress_fields(p: InferenceProgress) -> dict[str, str]:
    """The barrier's model calls, tokens/s, infra failures, elapsed time and ETA, each as shown
    (a terminal's bar puts them in its own order, the most wanted first)."""
    rate = p.tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
    eta = p.eta_s()
    return {
        "calls": f"{p.llm_calls} model calls",
        "rate": f"{rate:,.0f} tokens/s",
        "infra": f"{p.n_infra} infra",
        "elapsed": f"elapsed {_duration(p.elapsed_s)}",
        "eta": f"ETA {'?' if eta is None else _duration(eta)}",
    }


def _duration(s: float) -> str:
    s = max(0, round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


#: How a periodic progress line starts in a run's log (and on a terminal without a bar).
PROGRESS_MARK = "… "
#: ``live(progress, final)``: draws the barrier's state (a terminal's bar); ``final`` once, at the
#: barrier's end.
LiveProgress = Callable[[InferenceProgress, bool], None]


class ProgressReporter(LoopObserver):
    """Emits one progress line per barrier every ``every_s`` seconds (and at the barrier's end
    when it lasted longer than that); barriers shorter than ``every_s`` stay silent.

    ``live`` (a terminal's bar) is called too, at most every ``live_every_s`` seconds (this
    reporter's clock), once the barrier has run for ``live_after_s`` (its own elapsed time: a
    barrier the simulator finishes at once draws nothing), and with ``final=True`` at the end of
    a barrier it drew."""

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        live: LiveProgress | None = None,
        live_every_s: float = 0.2,
        live_after_s: float = 1.0,
    ) -> None:
        self.emit = emit
        self.every_s = every_s
        self.clock = clock
        self.live = live
        self.live_every_s = live_every_s
        self.live_after_s = live_after_s
        self._last: dict[str, float] = {}
        self._drawn: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._latest: dict[str, InferenceProgress] = {}

    def on_rollouts(self, progress: InferenceProgress) -> None:
        now = self.clock()
        run = progress.run_id
        start = self._started.setdefault(run, now)
        self._latest[run] = progress
        last = self._last.get(run, start)
        if now - last >= self.every_s:
            self._last[run] = now
            self.emit(format_progress(progress))
        drawn = self._drawn.get(run)
        if (
            self.live is not None
            and progress.elapsed_s >= self.live_after_s
            and (drawn is None or now - drawn >= self.live_every_s)
        ):
            self._drawn[run] = now
            self.live(progress, False)

    def on_barrier(self, result: InferenceResult) -> None:
        latest = self._latest.pop(result.run_id, None)
        start = self._started.pop(result.run_id, None)
        reported = self._last.pop(result.run_id, None) is not None
        drawn = self._drawn.pop(result.run_id, None) is not None
        if latest is not None and start is not None and reported:
            self.emit(format_progress(latest) + " — done")
        if latest is not None and drawn and self.live is not None:
            self.live(latest, True)


def progress_every_s(environ: Mapping[str, str], dotenv_path: str | Path | None = ".env") -> float:
    """``TRM_PROGRESS_EVERY_S`` (seconds between progress lines, default 10): a number > 0,
    from the environment, else from ``.env`` — where the config and the ``TRM_LLM_*`` settings
    are read too (it was read from the environment only, so a ``.env`` line was ignored)."""
    raw = layered_environ(environ, dotenv_path).get("TRM_PROGRESS_EVERY_S", "10")
    try:
        every = float(raw)
    except ValueError:
        every = math.nan
    if not 0 < every < math.inf:
        raise TrmError(f"TRM_PROGRESS_EVERY_S: expected seconds > 0, got {raw!r}")
    return every

"""Progress lines inside a barrier (issue 17.4): cadence, content, ETA."""

from __future__ import annotations

from trm_assets.harness.loop.progress import ProgressReporter, format_progress
from trm_assets.harness.loop.rollouts import InferenceProgress, InferenceResult
from trm_assets.llm.protocol import Usage


def _p(done: int, elapsed: float) -> InferenceProgress:
    return InferenceProgress("r", done, 10, done // 2, 0, elapsed, 3 * done, 1000 * done)


def test_format_has_rollouts_calls_rate_and_eta() -> None:
    line = format_progress(_p(4, 20.0))
    assert line == (
        "r: 4/10 rollouts, 12 model calls, 200 tokens/s, 0 infra, elapsed 0m20s, ETA 0m30s"
    )


def test_reporter_cadence() -> None:
    now = [0.0]
    lines: list[str] = []
    rep = ProgressReporter(lines.append, every_s=10.0, clock=lambda: now[0])
    for i, t in enumerate([0.0, 4.0, 9.0, 10.5, 15.0, 21.0], start=1):
        now[0] = t
        rep.on_rollouts(_p(i, t))
    assert [ln.split(":")[1].split(",")[0].strip() for ln in lines] == [
        "4/10 rollouts",
        "6/10 rollouts",
    ]
    rep.on_barrier(InferenceResult(run_id="r", predictions=(), wall_s=21.0, usage=Usage()))
    assert lines[-1].endswith("— done") and len(lines) == 3
    # a short barrier stays silent
    quiet: list[str] = []
    rep2 = ProgressReporter(quiet.append, every_s=10.0, clock=lambda: 1.0)
    rep2.on_rollouts(_p(1, 0.5))
    rep2.on_barrier(InferenceResult(run_id="r", predictions=(), wall_s=0.5, usage=Usage()))
    assert quiet == []


def test_live_bar_cadence_and_final_draw() -> None:
    """The terminal's bar (issue 17.4): drawn once a barrier has lasted ``live_after_s``, at most
    every ``live_every_s``, then once with ``final`` at its end; a short barrier draws nothing."""
    now = [0.0]
    drawn: list[tuple[int, bool]] = []
    rep = ProgressReporter(
        lambda _line: None,
        every_s=10.0,
        clock=lambda: now[0],
        live=lambda p, final: drawn.append((p.done, final)),
        live_every_s=0.5,
        live_after_s=1.0,
    )
    for i, t in enumerate([0.0, 0.4, 0.9, 1.0, 1.2, 1.4, 1.6, 2.3], start=1):
        now[0] = t
        rep.on_rollouts(_p(i, t))
    assert drawn == [(4, False), (7, False), (8, False)]  # 1.0, 1.6, 2.3: 0.2 and 0.4 apart skip
    rep.on_barrier(InferenceResult(run_id="r", predictions=(), wall_s=2.3, usage=Usage()))
    assert drawn[-1] == (8, True) and len(drawn) == 4
    quick: list[tuple[int, bool]] = []
    rep2 = ProgressReporter(
        lambda _line: None, clock=lambda: 0.5, live=lambda p, f: quick.append((p.done, f))
    )
    rep2.on_rollouts(_p(1, 0.5))
    rep2.on_barrier(InferenceResult(run_id="r", predictions=(), wall_s=0.5, usage=Usage()))
    assert quick == []

"""A step starts its skills' evolution calls together (``docs/decision-evolve-prefetch.md``) and
ends exactly where the one-call-after-another step ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trm_assets.harness.loop import step

from .conftest import digest, new_workspace, run_to_end, tiny_config


def _run(
    ws: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...], *, prefetch: bool
) -> list[int]:
    """A tiny run; returns, per evolution call, how many calls were in flight when it started."""
    real = step.evolve_single_skill
    flying = 0
    seen: list[int] = []

    async def counted(*a: Any, **k: Any) -> Any:
        nonlocal flying
        flying += 1
        seen.append(flying)
        try:
            return await real(*a, **k)
        finally:
            flying -= 1

    with monkeypatch.context() as mp:  # undoes only these patches (not the repository cwd)
        mp.setattr(step, "evolve_single_skill", counted)
        if not prefetch:
            mp.setattr(step, "_prefetch_evolutions", lambda *a, **k: {})
        # a little latency, so that calls in flight together show (results do not depend on it)
        cfg = tiny_config("sim.latency_ms_mean=2", "sim.latency_ms_jitter=0", *extra)
        run_to_end(new_workspace(ws, cfg), cfg)
    return seen


# run_max_gates=2: the cap stops steps part-way, so nothing may be started ahead of time there
@pytest.mark.parametrize("extra", [(), ("run_max_gates=2",)])
def test_evolution_calls_overlap_and_the_run_ends_as_with_calls_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...]
) -> None:
    together = _run(tmp_path / "together", monkeypatch, extra, prefetch=True)
    in_turn = _run(tmp_path / "in_turn", monkeypatch, extra, prefetch=False)
    assert max(in_turn) == 1  # the reference really made one call at a time
    if not extra:
        assert max(together) >= 2  # and the shipped step did not
    assert len(together) == len(in_turn)  # the same calls, no extra one
    assert digest(tmp_path / "together") == digest(tmp_path / "in_turn")

"""A step starts its skills' evolution calls together (``docs/decision-evolve-prefetch.md``) and
ends exactly where the one-call-after-another step ends."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from trm_assets.evolution import evolve as evolve_mod
from trm_assets.harness.loop import step
from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace

from .conftest import digest, run_to_end


def _run(
    ws: Path, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...], *, prefetch: bool
) -> list[int]:
    """A tiny run; returns, per evolution call, how many calls were in flight when it started."""
    real = evolve_mod.evolve_single_skill
    flying = 0
    seen: list[int] = []

    async def counted(*a: Any, **k: Any) -> Any:
        nonlocal flying
        flying += 1
        seen.append(flying)
        try:
            # each call stays in flight a while: calls started together overlap even on a
            # loaded machine (a 2 ms model call could end before its sibling started)
            await asyncio.sleep(0.05)
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


@pytest.fixture(scope="module")
def free_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[int], Path]:
    """The shipped step without a gate cap (``_run`` with no override, prefetch on), run once for
    the tests below that start from it: its calls in flight, and its workspace."""
    ws = tmp_path_factory.mktemp("prefetch") / "free"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        return _run(ws, mp, (), prefetch=True), ws


FAULTS = (  # infra faults (retried, or an INFRA no-edit) and malformed replies, evolve calls too
    "sim.fault_timeout_rate=0.1",
    "sim.fault_http_5xx_rate=0.1",
    "sim.fault_malformed_rate=0.05",
    "sim.timeout_sleep_s=0",
)


# run_max_gates=2: the cap stops steps part-way, so nothing may be started ahead of time there
@pytest.mark.parametrize("extra", [(), ("run_max_gates=2",), FAULTS])
def test_evolution_calls_overlap_and_the_run_ends_as_with_calls_in_turn(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: tuple[str, ...],
    free_run: tuple[list[int], Path],
) -> None:
    if extra:
        together_ws = tmp_path / "together"
        together = _run(together_ws, monkeypatch, extra, prefetch=True)
    else:
        together, together_ws = free_run
    in_turn = _run(tmp_path / "in_turn", monkeypatch, extra, prefetch=False)
    assert max(in_turn) == 1  # the reference really made one call at a time
    if not extra:
        assert max(together) >= 2  # and the shipped step did not
    assert len(together) == len(in_turn)  # the same calls, no extra one
    assert digest(together_ws) == digest(tmp_path / "in_turn")


# The tiny run's steps make 1, 2, 2, 2 evolution calls, each of which is gated. With the cap at 3
# the second step fits exactly (1 gate so far + 2 = 3): its calls start together; the third step
# would not fit (3 + 2 > 3) and the cap then stops the run's gates. With the cap at 4 the third
# step does not fit (3 + 2 > 4): its one call before the cap is made in turn.
@pytest.mark.parametrize(("cap", "together_want"), [(3, [1, 1, 2]), (4, [1, 1, 2, 1])])
def test_the_cap_guard_at_its_boundary(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cap: int,
    together_want: list[int],
    free_run: tuple[list[int], Path],
) -> None:
    assert free_run[0] == [1, 1, 2, 1, 2, 1, 2]
    extra = (f"run_max_gates={cap}",)
    together = _run(tmp_path / "together", monkeypatch, extra, prefetch=True)
    in_turn = _run(tmp_path / "in_turn", monkeypatch, extra, prefetch=False)
    assert together == together_want
    assert in_turn == [1] * len(together_want)
    assert digest(tmp_path / "together") == digest(tmp_path / "in_turn")

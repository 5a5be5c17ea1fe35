"""A lost ``state.json`` (review of the CLI's bad inputs): with training runs past the init unit
on record the loop refuses to start over — a new start evaluated the evolved skills as the seed
and mixed the old runs in — and ``trm check`` reports it. A state lost before any step (a kill
inside the init unit) still starts over."""

from __future__ import annotations

from pathlib import Path

import pytest

from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import current_action, run_action
from trm_assets.harness.storage.checkpoint import CheckpointError, load_state
from trm_assets.harness.storage.integrity import check_workspace
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def test_a_state_lost_after_a_step_is_refused_and_reported(tmp_path: Path) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init
        (ws / "state.json").unlink()  # lost before any step: init may run again
        assert check_workspace(ws).ok
        assert current_action(ctx) == Action("init")
        run_action(ctx, Action("init"))
        run_action(ctx, current_action(ctx))  # step e0 s0
        assert current_action(ctx) == Action("step", epoch=0, step=1)
        (ws / "state.json").unlink()
        last = [r.run_id for r in read_manifest(ws).history if r.run_id.startswith("train_e")]
        assert last
        with pytest.raises(CheckpointError, match="missing, but the workspace trained") as e:
            run_action(ctx, current_action(ctx))
        assert f"the last {last[-1]}" in str(e.value)
        assert load_state(ws / "state.json", cfg) is None  # nothing was written
    report = check_workspace(ws)
    assert not report.ok
    assert any("state.json: missing, but the workspace trained" in p for p in report.problems)


@pytest.mark.parametrize("junk", [b'{"epoch": 0, "next', b"\x00\xff\xfe"])
def test_trm_report_on_an_unreadable_state_names_the_file(tmp_path: Path, junk: bytes) -> None:
    """`trm report` read state.json with a bare json.loads (a JSONDecodeError traceback)."""
    from trm_assets.cli.report import report_data

    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))
    (ws / "state.json").write_bytes(junk)
    with pytest.raises(CheckpointError, match=r"state\.json: (invalid JSON|not UTF-8)"):
        report_data(ws)


def test_a_lost_ladder_is_reported_by_check(tmp_path: Path) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init writes the ladder
    assert check_workspace(ws).ok
    (ws / "ladder.json").unlink()
    report = check_workspace(ws)
    assert any("ladder.json: missing after the init unit" in p for p in report.problems)

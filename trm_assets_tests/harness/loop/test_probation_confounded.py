"""GATE §7 in the loop: a probation whose anchor read another default strategy or another prompt
set than R is confounded — R's outcomes cannot be charged to the skill's edits — and is deferred,
never rolled back or kept on that evidence. The kernel's rule is tested in the domain tests; this
tests the loop's side of it (`settle_probations` comparing the anchor with R), which a change that
never set ``confounded`` used to pass."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from trm_assets.domain.probation import ProbationVerdict
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import current_action, run_action, train
from trm_assets.harness.storage.checkpoint import load_state, save_state
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import new_workspace, tiny_config

SETTLE = Action("slow_update", epoch=0, slow_step=4)
DEFER = ProbationVerdict.DEFER.value


def _to_settlement(ws: Path, cfg: RunConfig) -> None:
    """Train up to (not through) epoch 0's probation settlement."""
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        while current_action(ctx) != SETTLE:
            train(ctx, max_units=1)


def _settle(ws: Path, cfg: RunConfig) -> dict[str, str]:
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, SETTLE)
        state = load_state(ctx.paths.state, ctx.cfg)
    assert state is not None and state.slow.probations is not None
    return {name: s.verdict for name, s in state.slow.probations.items()}


def test_a_probation_whose_anchor_read_another_default_strategy_is_deferred(
    tmp_path: Path,
) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    _to_settlement(ws, cfg)
    shutil.copytree(ws, tmp_path / "twin", symlinks=True)
    twin = tmp_path / "twin"
    plain = _settle(ws, cfg)
    decided = sorted(name for name, verdict in plain.items() if verdict != DEFER)
    assert decided, f"the run should settle a probation on its evidence: {plain}"
    name = decided[0]

    state = load_state(twin / "state.json", cfg)
    assert state is not None
    p = state.probations[name]
    state.probations[name] = dataclasses.replace(
        p, anchor_default_hash="0" * len(p.anchor_default_hash)
    )
    save_state(twin / "state.json", state, twin)
    confounded = _settle(twin, cfg)
    assert confounded[name] == DEFER
    assert {k: v for k, v in confounded.items() if k != name} == {
        k: v for k, v in plain.items() if k != name
    }

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
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import current_action, run_action, train
from trm_assets.harness.storage.checkpoint import TrainState, load_state, save_state
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import new_workspace, tiny_config

SETTLE = Action("slow_update", epoch=0, slow_step=4)
DEFER = ProbationVerdict.DEFER.value


def _to_settlement(ws: Path, cfg: RunConfig) -> None:
    """Train up to (not through) epoch 0's probation settlement."""
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        while current_action(ctx) != SETTLE:
            train(ctx, max_units=1)


def _settle(ws: Path, cfg: RunConfig, action: Action = SETTLE) -> dict[str, str]:
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, action)
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


def _state_at(ws: Path, cfg: RunConfig, action: Action) -> TrainState:
    """Train up to (not through) ``action``; the checkpoint there."""
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        while (now := current_action(ctx)) != action:
            assert now is not None and now.kind != "finalize", f"{action} never came"
            train(ctx, max_units=1)
        state = load_state(ctx.paths.state, ctx.cfg)
    assert state is not None
    return state


def test_a_discarded_r2_leaves_the_momentum_text_unevaluated(tmp_path: Path) -> None:
    """Seed 2's epoch 0: the momentum rewrites three skills, R2 regresses and its prompts are
    reverted, so R2 is discarded while the three guidance texts stay current. Their types'
    correctness is R's, of the text before the guidance; the epoch's history names exactly the
    skill files whose current text differs from the text their outcomes came from (R's, or the
    anchor a probation rollback restored; read from the version store)."""
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=10))
    slow = state.slow
    assert slow.r is not None and slow.r2 is not None and slow.r_outcomes is not None
    assert slow.r2.ran and not slow.r2.kept, "the scenario: R2 ran and was discarded"
    rolled = {
        name: settled.new_skills_version
        for name, settled in (slow.probations or {}).items()
        if settled.new_skills_version is not None
    }
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        current = ctx.skills(ctx.paths.skills_version)
        # the text whose outcomes each file's type holds: R's, or the anchor a rollback restored
        source = {f: ctx.skills(rolled.get(f, slow.r.skills_version)).get(f) for f in current}
        by_file = {skill_file_name(t): qids for t, qids in ctx.validation_by_type.items()}
    changed = tuple(sorted(f for f in current if current[f] != source[f]))
    assert len(changed) == 3
    assert state.history[-1].unevaluated_skills == changed
    for name in set(changed) - set(rolled):  # the type still holds R's outcomes
        assert {q: state.correctness[q] for q in by_file[name]} == {
            q: slow.r_outcomes[q] for q in by_file[name]
        }


def test_a_probation_opened_on_an_unevaluated_skill_is_deferred(tmp_path: Path) -> None:
    """Seed 10 opens a probation in epoch 1. Had epoch 0 left that skill's momentum text
    unevaluated, its anchor would be R's outcomes of another text: the settlement defers it."""
    cfg = tiny_config("seed=10")
    ws = new_workspace(tmp_path / "ws", cfg)
    settle = Action("slow_update", epoch=1, slow_step=4)
    state = _state_at(ws, cfg, settle)
    (name,) = [n for n, p in state.probations.items() if p.opened_epoch == 1]
    assert state.history[0].unevaluated_skills is None
    shutil.copytree(ws, tmp_path / "twin", symlinks=True)
    twin = tmp_path / "twin"
    plain = _settle(ws, cfg, settle)
    assert plain[name] != DEFER, f"the run should settle {name} on its evidence: {plain}"

    state.history = (dataclasses.replace(state.history[0], unevaluated_skills=(name,)),)
    save_state(twin / "state.json", state, twin)
    stale = _settle(twin, cfg, settle)
    assert stale[name] == DEFER
    assert {k: v for k, v in stale.items() if k != name} == {
        k: v for k, v in plain.items() if k != name
    }

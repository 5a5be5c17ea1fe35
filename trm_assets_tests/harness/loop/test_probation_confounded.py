"""GATE §7 in the loop: a probation whose anchor read another default strategy or another prompt
set than R is confounded — R's outcomes cannot be charged to the skill's edits — and is deferred,
never rolled back or kept on that evidence. The kernel's rule is tested in the domain tests; this
tests the loop's side of it (`settle_probations` comparing the anchor with R), which a change that
never set ``confounded`` used to pass."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from trm_assets.agent.messages import active_skill_files
from trm_assets.domain.probation import ProbationVerdict
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import current_action, run_action, train
from trm_assets.harness.loop.slow_update import _unevaluated_types_before
from trm_assets.harness.storage.checkpoint import TrainState, load_state, save_state
from trm_assets.harness.storage.records import ProbationSettlement
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace

SETTLE = Action("slow_update", epoch=0, slow_step=4)
DEFER = ProbationVerdict.DEFER.value


def _state_at(ws: Path, cfg: RunConfig, action: Action) -> TrainState:
    """Train up to (not through) ``action``; the checkpoint there."""
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        while (now := current_action(ctx)) != action:
            assert now is not None and now.kind != "finalize", f"{action} never came"
            train(ctx, max_units=1)
        state = load_state(ctx.paths.state, ctx.cfg)
    assert state is not None
    return state


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
    state = _state_at(ws, cfg, SETTLE)
    shutil.copytree(ws, tmp_path / "twin", symlinks=True)
    twin = tmp_path / "twin"
    plain = _settle(ws, cfg)
    decided = sorted(name for name, verdict in plain.items() if verdict != DEFER)
    assert decided, f"the run should settle a probation on its evidence: {plain}"
    name = decided[0]

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


@pytest.mark.parametrize(
    ("seed", "skill_mode", "kept", "n_stale"),
    [(2, "task", False, 2), (1, "all", False, 12), (12, "task", True, 0)],
)
def test_the_epoch_names_the_types_whose_outcomes_are_of_another_text(
    tmp_path: Path, seed: int, skill_mode: str, kept: bool, n_stale: int
) -> None:
    """Epoch 0's momentum rewrites skills in each case. Seeds 2 and 1 discard R2 (it regressed;
    the prompts are reverted) and keep the guidance: the types that read a rewritten skill (its
    own under ``skill_mode: task``, every type under ``all``) still hold R's outcomes, or a rolled
    back anchor's, of another text. Seed 12 keeps R2: nothing is stale. The oracle compares each
    type's prompt key (the loop's reuse key) for the text its outcomes came from with the current
    one, and checks that a stale type's correctness really is R's."""
    cfg = tiny_config(f"seed={seed}", f"skill_mode={skill_mode}")
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=10))
    slow = state.slow
    assert slow.r is not None and slow.r2 is not None and slow.r_outcomes is not None
    assert slow.momentum is not None and slow.momentum.updated
    assert slow.r2.ran and slow.r2.kept is kept
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        task_of = {skill_file_name(t): t for t in ctx.validation_by_type}
        rolled = {
            task_of[name]: settled.new_skills_version
            for name, settled in (slow.probations or {}).items()
            if settled.new_skills_version is not None
        }

        def key(task_type: str, skills_version: str, prompts_version: str) -> str:
            prompts = json.dumps(ctx.prompt_files(prompts_version), sort_keys=True)
            return ctx.prompt_key(task_type, ctx.skills(skills_version), prompts)

        def source(task_type: str) -> tuple[str, str]:
            assert slow.r is not None and slow.r2 is not None
            if slow.r2.kept and slow.r2.r2 is not None:  # R2's outcomes replaced every type's
                return slow.r2.r2.skills_version, slow.r2.r2.prompts_version
            return rolled.get(task_type) or slow.r.skills_version, slow.r.prompts_version

        now = (ctx.paths.skills_version, ctx.paths.prompts_version)
        stale = tuple(
            t for t in sorted(ctx.validation_by_type) if key(t, *source(t)) != key(t, *now)
        )
        by_type = dict(ctx.validation_by_type)
    assert len(stale) == n_stale
    assert state.history[-1].unevaluated_types == (stale or None)
    for t in set(stale) - set(rolled):  # the type still holds R's outcomes
        assert {q: state.correctness[q] for q in by_type[t]} == {
            q: slow.r_outcomes[q] for q in by_type[t]
        }


def test_the_lookup_reads_the_epoch_before_the_probation_opened(tmp_path: Path) -> None:
    """A probation opened in epoch E reads what epoch E − 1 left stale, not an older epoch."""
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=10))
    (h0,) = state.history
    assert h0.unevaluated_types
    state.history = (h0, dataclasses.replace(h0, epoch=1, unevaluated_types=None))
    assert _unevaluated_types_before(state, 1) == h0.unevaluated_types
    assert _unevaluated_types_before(state, 2) == ()
    assert _unevaluated_types_before(state, 0) == ()


def test_a_probation_opened_on_an_unevaluated_type_is_deferred(tmp_path: Path) -> None:
    """Seed 10 opens a probation in epoch 1. Had epoch 0 left that skill's momentum text
    unevaluated, its anchor would be R's outcomes of another text: the settlement defers it,
    and settles the others as before."""
    cfg = tiny_config("seed=10")
    ws = new_workspace(tmp_path / "ws", cfg)
    settle = Action("slow_update", epoch=1, slow_step=4)
    state = _state_at(ws, cfg, settle)
    (name,) = [n for n, p in state.probations.items() if p.opened_epoch == 1]
    task_type = state.probations[name].task_type
    assert state.history[0].unevaluated_types is None
    shutil.copytree(ws, tmp_path / "twin", symlinks=True)
    twin = tmp_path / "twin"
    plain = _settle(ws, cfg, settle)
    assert plain[name] != DEFER, f"the run should settle {name} on its evidence: {plain}"

    state.history = (dataclasses.replace(state.history[0], unevaluated_types=(task_type,)),)
    save_state(twin / "state.json", state, twin)
    stale = _settle(twin, cfg, settle)
    assert stale[name] == DEFER
    assert {k: v for k, v in stale.items() if k != name} == {
        k: v for k, v in plain.items() if k != name
    }


def test_the_epoch_keeps_its_settlements_equal_to_the_rollbacks_in_the_store(
    tmp_path: Path,
) -> None:
    """The history entry keeps every probation the slow update settled (``state.slow`` is
    cleared when the next epoch begins). Seed 2's epoch 0 rolls one back: its entry equals the
    settlement the rollback's version recorded in its note, with that version."""
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=10))
    settled = state.history[0].probations
    assert settled is not None and settled == state.slow.probations
    notes = {}
    for d in sorted((ws / "store" / "skills").glob("v*")):
        note = json.loads((d / "_meta.json").read_text())
        if str(note.get("reason", "")).startswith("probation rollback e0 "):
            notes[note["reason"].split()[3].rstrip(":")] = (d.name, note["extra"]["probation"])
    assert notes
    rolled = {n: e for n, e in settled.items() if e.verdict == ProbationVerdict.ROLLBACK.value}
    assert {n: (e.new_skills_version, e) for n, e in rolled.items()} == {
        n: (v, ProbationSettlement(**recorded, new_skills_version=v))
        for n, (v, recorded) in notes.items()
    }


def test_another_skill_file_the_type_reads_confounds_under_skill_mode_all(
    tmp_path: Path,
) -> None:
    """GATE §7: "other skills affecting this type changed between anchor and R" confounds. Under
    ``skill_mode: all`` every type reads every skill file, so a probation whose type's *other*
    files differ between the epoch's start (the text its anchor outcomes are of) and R is
    deferred. Seed 1's epoch 0 has such probations. The oracle reads the files from the store."""
    cfg = tiny_config("seed=1", "skill_mode=all")
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, SETTLE)
    assert state.slow.r is not None
    start, at_r = state.epoch_start_versions["skills"], state.slow.r.skills_version

    def files(version: str) -> dict[str, str]:
        d = ws / "store" / "skills" / version
        return {f.name: f.read_text() for f in sorted(d.glob("*.md"))}

    a, b = files(start), files(at_r)
    moved = {
        name: sorted(f for f in set(a) | set(b) if f != name and a.get(f) != b.get(f))
        for name in state.probations
    }
    assert any(moved.values()), f"the fixture run must change a second file: {moved}"
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, SETTLE)
        after = load_state(ctx.paths.state, ctx.cfg)
    assert after is not None and after.slow.probations is not None
    for name, files_moved in moved.items():
        settled = after.slow.probations[name]
        if files_moved:
            assert settled.verdict == DEFER, (name, settled)
            assert ", ".join(files_moved) in settled.reason


@pytest.mark.parametrize("seed", [17, 10])
def test_a_probation_on_a_file_no_type_reads_has_no_evidence_under_skill_mode_none(
    tmp_path: Path, seed: int
) -> None:
    """Under ``skill_mode: none`` the agent reads no skill file: an accepted edit (an A/A gate's
    false accept) changed nothing a question reads, so anchor and R ran the same text and their
    differences are noise. Seed 17's epoch 0 rolled such an edit back as verified worse (net −1
    on one discordant pair), seed 10 kept it as "not worse"; both are deferred, with the reason.
    The oracle: the probation's type reads none of the edited file in either version (read from
    the store), and the pairs are still counted."""
    cfg = tiny_config(f"seed={seed}", "skill_mode=none")
    ws = new_workspace(tmp_path / "ws", cfg)
    state = _state_at(ws, cfg, SETTLE)
    (name,) = state.probations
    assert state.slow.r is not None
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        p = state.probations[name]
        for version in (state.epoch_start_versions["skills"], state.slow.r.skills_version):
            assert name in ctx.skills(version)
            assert active_skill_files(p.task_type, ctx.skills(version), cfg.skill_mode) == ()
        run_action(ctx, SETTLE)
        after = load_state(ctx.paths.state, ctx.cfg)
    assert after is not None and after.slow.probations is not None
    settled = after.slow.probations[name]
    assert settled.verdict == DEFER
    assert settled.wins + settled.losses >= 1
    assert settled.new_skills_version is None
    assert settled.reason == (
        f"no evidence: {p.task_type} reads no version of {name} under skill_mode 'none', "
        "so both arms ran the same text"
    )

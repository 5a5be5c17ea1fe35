"""The momentum's scope (docs/decision-momentum-scope.md): guidance only for a task type whose
skill text differs from its epoch-start text when the momentum runs. A type whose edit was
accepted this epoch and rolled back by its probation in step 4 reads its epoch-start text again,
with its epoch-start outcomes: both arms of its pairs ran the same text, so it gets no guidance
(it used to, from its persistent-fail and stable-success lists alone)."""

from __future__ import annotations

from pathlib import Path

from trm_assets.domain.probation import ProbationVerdict
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.storage.workspace import resolve_paths
from trm_assets_tests.harness.loop.test_probation_confounded import _state_at
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def _text(ws: Path, version: str, name: str) -> str | None:
    path = ws / "store" / "skills" / version / name
    return path.read_text() if path.exists() else None


def test_a_rolled_back_type_gets_no_momentum(tmp_path: Path) -> None:
    cfg = tiny_config()  # seed 2: epoch 0 rolls a probation back in step 4
    ws = new_workspace(tmp_path / "ws", cfg)
    before = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=6))
    at_momentum = resolve_paths(ws).skills_version
    start = before.epoch_start_versions["skills"]
    assert before.slow.probations is not None
    settled = before.slow.probations
    rolled = {
        t
        for t in before.changed_task_types_this_epoch
        if skill_file_name(t) in settled
        and settled[skill_file_name(t)].verdict == ProbationVerdict.ROLLBACK.value
    }
    assert rolled, "the fixture run must roll a probation back in epoch 0"
    # the oracle: the changed types whose file, read from the store, differs from epoch start
    expected = {
        t
        for t in before.changed_task_types_this_epoch
        if _text(ws, at_momentum, skill_file_name(t)) != _text(ws, start, skill_file_name(t))
    }
    assert expected and not rolled & expected  # the rollback restored the epoch-start text

    after = _state_at(ws, cfg, Action("slow_update", epoch=0, slow_step=7))
    assert after.slow.momentum is not None
    assert after.budget["e0"]["momentum"]["llm_calls"] == len(expected)  # one call per type
    assert set(after.slow.momentum.updated) <= {skill_file_name(t) for t in expected}


def test_a_type_the_previous_epoch_left_unevaluated_gets_no_momentum(tmp_path: Path) -> None:
    """Seed 3: epoch 0 discards R2 and keeps Action Reasoning's guidance, so the type's epoch-1
    start outcomes are of an older text than the one it reads. An edit of it is accepted in
    epoch 1: its momentum pairs would charge that ungated guidance to the edit, so it gets none
    (as its probation defers). The oracle reads the texts from the store."""
    cfg = tiny_config("seed=3", "epochs=3")
    ws = new_workspace(tmp_path / "ws", cfg)
    before = _state_at(ws, cfg, Action("slow_update", epoch=1, slow_step=6))
    stale = set(before.history[0].unevaluated_types or ())
    at_momentum = resolve_paths(ws).skills_version
    start = before.epoch_start_versions["skills"]
    changed = set(before.changed_task_types_this_epoch)
    assert stale & changed, "the fixture run must edit a stale type in epoch 1"
    expected = {
        t
        for t in changed - stale
        if _text(ws, at_momentum, skill_file_name(t)) != _text(ws, start, skill_file_name(t))
    }
    after = _state_at(ws, cfg, Action("slow_update", epoch=1, slow_step=7))
    assert after.slow.momentum is not None
    assert after.budget["e1"].get("momentum", {"llm_calls": 0})["llm_calls"] == len(expected)
    assert set(after.slow.momentum.updated) <= {skill_file_name(t) for t in expected}

"""``rollout_budget`` (issue 15 C): the planner ends an epoch early so that its slow update fits,
and finalizes with reason ``budget``; and R2's per-type harm check (slow update step 8)."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from trm_assets.domain.gate import log_mixture_e
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import (
    Action,
    Progress,
    budget_exhausted,
    next_action,
    slow_update_reserve,
)
from trm_assets.harness.loop.runner import train
from trm_assets.harness.loop.slow_update import _harmed_types
from trm_assets.harness.storage.checkpoint import load_state, new_state
from trm_assets.harness.storage.records import (
    EpochCounters,
    PhaseUsage,
    ProbationSettlement,
    SlowRecords,
    training_rollouts,
)
from trm_assets.llm.factory import build_providers
from trm_assets_tests.harness.loop.conftest import digest
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def _usage(rollouts: int) -> PhaseUsage:
    return PhaseUsage(rollouts=rollouts, prompt_tokens=0, completion_tokens=0, llm_calls=0)


def test_training_rollouts_leave_out_the_test_pool_reports() -> None:
    ledger = {
        "init": {"seed_eval": _usage(24)},
        "e0": {"step_rollouts": _usage(12), "gate": _usage(40), "holdout": _usage(36)},
        "final": {"holdout": _usage(12)},
    }
    assert training_rollouts(ledger) == 24 + 12 + 40


def test_the_planner_cuts_an_epoch_only_before_a_step() -> None:
    base = Progress(True, 1, 2, 0, 200, 6, False, False, budget_exhausted=True)
    # mid-epoch: the remaining steps are skipped, the slow update starts
    assert next_action(base) == Action("slow_update", epoch=1, slow_step=1)
    # an epoch without a step has nothing to evaluate: finalize at once
    assert next_action(replace(base, next_step=0)) == Action("finalize", reason="budget")
    # a slow update that has begun runs to its end (here: function 4 next)
    assert next_action(replace(base, slow_done=3)) == Action("slow_update", epoch=1, slow_step=4)
    assert next_action(replace(base, budget_exhausted=False)) == Action("step", epoch=1, step=2)
    done = replace(base, finalized=True, stop_reason="budget")
    assert next_action(done) == Action("done", reason="budget")


def test_budget_exhausted_counts_the_largest_step_and_the_last_slow_update() -> None:
    cfg = tiny_config("rollout_budget=1000")  # val_size 24
    state = new_state(cfg)
    state.initialized = True
    state.budget = {"init": {"seed_eval": _usage(24)}}
    # no slow update yet: R and R2 over the validation pool are reserved (2 × 24)
    assert slow_update_reserve(state, cfg) == 48
    state.epoch_counters = EpochCounters(step_rollouts_max=300)
    state.budget["e0"] = {"step_rollouts": _usage(12), "gate": _usage(600)}  # 636 spent
    assert not budget_exhausted(state, cfg)  # 636 + 300 + 48 = 984 <= 1000
    state.budget["e0"]["gate"] = _usage(620)  # 656 + 300 + 48 = 1004
    assert budget_exhausted(state, cfg)
    # once an epoch's slow update ran, its R and R2 are the reserve (served rows are cheaper)
    state.epoch = 1
    state.budget["e0"].update(R=_usage(10), R2=_usage(5))
    assert slow_update_reserve(state, cfg) == 15
    assert not budget_exhausted(replace(state, budget={"init": {"seed_eval": _usage(24)}}), cfg)
    assert not budget_exhausted(state, tiny_config())  # no budget: never


def _run(ws: Path, budget: int | None, max_units: int | None = None) -> None:
    cfg = tiny_config(*(("epochs=5", f"rollout_budget={budget}") if budget else ("epochs=5",)))
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=max_units)


def test_a_budgeted_run_ends_with_a_slow_update_within_its_budget(tmp_path: Path) -> None:
    unbounded = new_workspace(tmp_path / "free", tiny_config("epochs=5"))
    _run(unbounded, None)
    free = json.loads((unbounded / "state.json").read_text())
    spent_free = training_rollouts(free["budget"])
    budget = spent_free // 2
    ws = new_workspace(tmp_path / "ws", tiny_config("epochs=5", f"rollout_budget={budget}"))
    _run(ws, budget)
    cfg = tiny_config("epochs=5", f"rollout_budget={budget}")
    state = load_state(ws / "state.json", cfg)
    assert state is not None and state.final is not None
    assert state.final.reason == "budget"
    # within it here, where the estimates hold; the budget is a target, not a cap (a dearer step
    # or a less-served R/R2 than before can pass it: docs/decision-rollout-budget.md)
    assert training_rollouts(state.budget) <= budget < spent_free
    # every epoch begun was closed by its slow update (the delivered best saw an R of it)
    begun = {int(scope[1:]) for scope in state.budget if scope.startswith("e")}
    assert len(state.history) == len(begun) == max(begun) + 1
    assert [h.epoch for h in state.history] == sorted(begun)
    # the cut epoch ran fewer steps than configured, or the run stopped between epochs
    last = f"e{max(begun)}"
    steps_run = state.budget[last]["step_rollouts"]["rollouts"] // 12  # batch_size 12
    assert steps_run < 2 or state.epoch == max(begun) + 1


def test_a_budgeted_run_resumed_after_every_unit_ends_the_same(tmp_path: Path) -> None:
    cfg = tiny_config("epochs=5")
    ref = new_workspace(tmp_path / "ref", cfg)
    _run(ref, None)
    budget = training_rollouts(json.loads((ref / "state.json").read_text())["budget"]) // 2
    whole = new_workspace(tmp_path / "whole", tiny_config("epochs=5", f"rollout_budget={budget}"))
    _run(whole, budget)
    stepped = tmp_path / "stepped"
    shutil.copytree(
        new_workspace(tmp_path / "w2", tiny_config("epochs=5", f"rollout_budget={budget}")),
        stepped,
    )
    for _ in range(200):  # one unit per process, as a restarted process would
        state = load_state(
            stepped / "state.json", tiny_config("epochs=5", f"rollout_budget={budget}")
        )
        if state is not None and state.finalized:
            break
        _run(stepped, budget, max_units=1)
    assert digest(stepped) == digest(whole)


def test_r2_harm_check_names_the_types_verified_worse(tmp_path: Path) -> None:
    cfg = tiny_config("val_size=96")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        by_type = {t: q for t, q in ctx.validation_by_type.items() if len(q) >= 2}
        # the type with the most questions is hurt, the next one was rolled back
        hurt, rolled, *others = sorted(by_type, key=lambda t: (-len(by_type[t]), t))
        r = {q: True for qs in by_type.values() for q in qs}
        r2 = dict(r)
        for q in by_type[hurt] + by_type[rolled]:  # every question of two types now wrong
            r2[q] = False
        state = new_state(cfg)
        settled = {
            skill_file_name(rolled): ProbationSettlement(
                verdict="ROLLBACK", wins=0, losses=2, pairs=2, reason="", edits=1
            )
        }
        state.slow = SlowRecords(r_outcomes=r, probations=settled)
        n_hurt = len(by_type[hurt])
        harmed = _harmed_types(ctx, state, r2)
    # E⁻ of n losses and no win reaches 1/α_harm = 10 only with enough questions: compute it
    assert log_mixture_e(n_hurt, 0) >= math.log(10)  # enough questions to verify the harm
    assert harmed == (hurt,)  # the rolled-back type is left out (R ran its old text)
    assert all(t not in harmed for t in others)


@pytest.mark.parametrize("flip", [0, 1])
def test_r2_harm_check_is_silent_without_a_change(tmp_path: Path, flip: int) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        qs = [q for qids in ctx.validation_by_type.values() for q in qids]
        r = {q: (i % 2 == 0) for i, q in enumerate(qs)}
        r2 = {q: (v if flip == 0 else not v) for q, v in r.items()}
        state = new_state(cfg)
        state.slow = SlowRecords(r_outcomes=r)
        harmed = _harmed_types(ctx, state, r2)
    # identical outcomes: no pair is discordant; every answer swapped: wins equal losses per
    # type within one question, far from a verified harm
    assert harmed == ()

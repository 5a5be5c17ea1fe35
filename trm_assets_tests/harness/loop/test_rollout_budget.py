"""``rollout_budget`` (issue 15 C): the planner ends an epoch early so that its slow update fits,
and finalizes with reason ``budget``; and R2's per-type harm check (slow update step 8)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
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
from trm_assets.harness.loop.slow_update import _harmed_types, r2_against_r
from trm_assets.harness.storage.checkpoint import load_state, new_state
from trm_assets.harness.storage.records import (
    EpochCounters,
    PhaseUsage,
    ProbationSettlement,
    RunRef,
    SlowRecords,
    training_rollouts,
)
from trm_assets.harness.storage.workspace import advance_current, revert_files
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


Outcomes = Callable[[dict[str, list[str]], str, str], dict[str, bool]]


def _r2_case(
    tmp_path: Path, mode: str, r_of: Outcomes, r2_of: Outcomes
) -> tuple[dict[str, list[str]], str, str, tuple[tuple[str, ...], float | None, float | None]]:
    """R ran a version with an accepted edit of ``rolled``'s skill, step 4 rolled it back (a real
    new version), R2 ran after: ``r2_against_r`` on the outcomes ``r_of`` and ``r2_of`` give
    (arguments: the questions by type, the hurt type, the rolled-back type)."""
    cfg = tiny_config("val_size=96", f"skill_mode={mode}")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        by_type = {t: list(q) for t, q in ctx.validation_by_type.items()}
        hurt, rolled, *_ = sorted(by_type, key=lambda t: (-len(by_type[t]), t))
        seed = ctx.paths.skills_version
        name = skill_file_name(rolled)
        text = ctx.skills(seed)[name] + "\n- an accepted edit"
        edited = advance_current(ws, "skills", {name: text}, reason="test: R's version")
        back = revert_files(ws, "skills", seed, [name], reason="test: probation rollback")
        r, r2 = r_of(by_type, hurt, rolled), r2_of(by_type, hurt, rolled)
        state = new_state(cfg)
        settled = {
            name: ProbationSettlement(
                verdict="ROLLBACK",
                wins=0,
                losses=2,
                pairs=2,
                reason="",
                edits=1,
                new_skills_version=back.version,
            )
        }
        acc = sum(r.values()) / len(r)
        run = RunRef("r", edited.version, ctx.paths.prompts_version, acc)
        state.slow = SlowRecords(r=run, r_outcomes=dict(r), probations=settled)
        return by_type, hurt, rolled, r2_against_r(ctx, state, r2, sum(r2.values()) / len(r2))


@pytest.mark.parametrize("mode", ["task", "all", "none"])
def test_r2_harm_check_names_the_types_verified_worse(tmp_path: Path, mode: str) -> None:
    def r_of(by_type: dict[str, list[str]], hurt: str, rolled: str) -> dict[str, bool]:
        return {q: True for qs in by_type.values() for q in qs}

    def r2_of(by_type: dict[str, list[str]], hurt: str, rolled: str) -> dict[str, bool]:
        # every question of the hurt and the rolled type wrong under R2, the rest right
        return {q: t not in (hurt, rolled) for t, qs in by_type.items() for q in qs}

    by_type, hurt, rolled, (harmed, _, _) = _r2_case(tmp_path, mode, r_of, r2_of)
    # E⁻ of n losses and no win reaches 1/α_harm = 10 only with enough questions: compute it
    assert log_mixture_e(len(by_type[hurt]), 0) >= math.log(10)
    assert log_mixture_e(len(by_type[rolled]), 0) >= math.log(10)
    # which types read, after the rollback, the text R ran: under `task` every type but the
    # rolled one (its own file was reverted), under `all` none (every type reads that file),
    # under `none` every type (no type reads a skill)
    expected = {"task": (hurt,), "all": (), "none": tuple(sorted((hurt, rolled)))}[mode]
    assert harmed == expected


@pytest.mark.parametrize("mode", ["task", "all", "none"])
def test_r2_pooled_comparison_leaves_out_a_rolled_back_text(tmp_path: Path, mode: str) -> None:
    """The rollback fixed the rolled type's questions (wrong under R's text, right under R2's),
    and R2 lost one answer elsewhere: over every question R2 looks better, over the questions
    whose text R ran it is worse."""

    def r_of(by_type: dict[str, list[str]], hurt: str, rolled: str) -> dict[str, bool]:
        return {q: t != rolled for t, qs in by_type.items() for q in qs}

    def r2_of(by_type: dict[str, list[str]], hurt: str, rolled: str) -> dict[str, bool]:
        r2 = {q: True for qs in by_type.values() for q in qs}
        r2[by_type[hurt][0]] = False
        return r2

    by_type, _, rolled, (harmed, r_acc, r2_acc) = _r2_case(tmp_path, mode, r_of, r2_of)
    assert harmed == ()  # one lost answer is no verified harm
    n_all = sum(len(qs) for qs in by_type.values())
    n_rolled = len(by_type[rolled])
    assert n_rolled > 1  # so that the whole pool favours R2
    if mode == "task":  # R2 is judged on the other types' questions: R had them all right
        assert (r_acc, r2_acc) == (1.0, 1 - 1 / (n_all - n_rolled))
    elif mode == "all":  # no type read R's text after the rollback: no pooled comparison
        assert (r_acc, r2_acc) == (None, None)
    else:  # the whole pool (R's text is every type's text)
        assert (r_acc, r2_acc) == ((n_all - n_rolled) / n_all, 1 - 1 / n_all)
        assert r2_acc is not None and r_acc is not None and r2_acc > r_acc


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
        harmed = _harmed_types(ctx, state, r2, tuple(sorted(ctx.validation_by_type)))
    # identical outcomes: no pair is discordant; every answer swapped: wins equal losses per
    # type within one question, far from a verified harm
    assert harmed == ()

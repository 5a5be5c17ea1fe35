"""The thin orchestrator (fidelity #13, seed §15 ``Runner.train``): epoch → step → per-skill.

It only asks :func:`~trm_assets.harness.loop.plan.next_action` what comes next and calls the unit:
``init`` (:func:`~trm_assets.harness.loop.step.initialize_training`), a step
(:func:`~trm_assets.harness.loop.step.run_step`, per-skill gating inside), the ten slow-update
functions (:mod:`trm_assets.harness.loop.slow_update`), and :func:`finalize` (early stop or the last
epoch: deliver best — current ← best — and evaluate it on the test pool). Every unit checkpoints,
so stopping between any two units and resuming ends exactly where an uninterrupted run ends.
Budget (rollouts and tokens per phase) is accounted by the units into the state's ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.plan import Action, next_action, progress_of
from trm_assets.harness.loop.slow_update import SLOW_STEPS, holdout_accuracy, report_epoch
from trm_assets.harness.loop.step import checkpoint, initialize_training, require_action, run_step
from trm_assets.harness.storage.checkpoint import TrainState, load_state, open_unit
from trm_assets.harness.storage.lock import workspace_lock
from trm_assets.harness.storage.records import FinalReport
from trm_assets.harness.storage.workspace import read_best, update_current

Echo = Callable[[str], None]


@dataclass(frozen=True)
class TrainSummary:
    units: int
    last: Action
    state: TrainState | None


def current_action(ctx: LoopContext) -> Action:
    return next_action(progress_of(load_state(ctx.paths.state, ctx.cfg), ctx.cfg))


def run_action(ctx: LoopContext, action: Action, *, echo: Echo | None = None) -> None:
    """Execute one unit of work (the one the planner returned)."""
    if action.kind == "init":
        initialize_training(ctx, echo=echo)
    elif action.kind == "step":
        assert action.epoch is not None and action.step is not None
        run_step(ctx, action.epoch, action.step, echo=echo)
    elif action.kind == "slow_update":
        assert action.epoch is not None and action.slow_step is not None
        fn = SLOW_STEPS[action.slow_step - 1]
        if fn is report_epoch:
            report_epoch(ctx, action.epoch, echo=echo)
        else:
            fn(ctx, action.epoch)
    elif action.kind == "finalize":
        finalize(ctx, action, echo=echo)
    else:
        raise ValueError(f"nothing to run for {action.describe()}")
    for observer in ctx.observers:
        observer.on_unit_done(action)


def finalize(ctx: LoopContext, action: Action, *, echo: Echo | None = None) -> TrainState:
    """Deliver best (current ← best) and evaluate it on the test pool (a report, no decision)."""
    paths = ctx.paths
    state = open_unit(ctx.workspace, paths.state, ctx.cfg, paths.baseline_cache, "\0")
    require_action(ctx, state, action)
    best = read_best(ctx.workspace)
    assert best is not None, "initialize_training always sets a best"
    update_current(ctx.workspace, skills=best.skills, prompts=best.prompts)
    test_acc = holdout_accuracy(ctx, state, "final", best.skills, best.prompts)
    state.final = FinalReport(
        reason=action.reason,
        skills_version=best.skills,
        prompts_version=best.prompts,
        val_accuracy=best.val_accuracy,
        val_expected_accuracy=ctx.expected_accuracy(
            best.skills, best.prompts, list(ctx.pools.validation)
        ),
        test_accuracy=test_acc,
        test_expected_accuracy=ctx.expected_accuracy(
            best.skills, best.prompts, list(ctx.pools.test)
        ),
    )
    state.finalized = True
    checkpoint(ctx, state)
    if echo is not None:
        f = state.final
        echo(
            f"delivered best {best.skills}/{best.prompts} ({action.reason}): val "
            f"{_f(f.val_accuracy)}, test {_f(f.test_accuracy)}"
            + (
                f" (expected val {_f(f.val_expected_accuracy)}, SIMULATED)"
                if f.val_expected_accuracy is not None
                else ""
            )
        )
    return state


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def train(
    ctx: LoopContext,
    *,
    max_units: int | None = None,
    echo: Echo | None = None,
    on_unit: Callable[[Action], None] | None = None,
) -> TrainSummary:
    """Run units until ``done`` (or ``max_units``); resumes from whatever the state says,
    holding the workspace's writer lock throughout (issue 18.1)."""
    with workspace_lock(ctx.workspace, command="train"):
        return _train(ctx, max_units=max_units, echo=echo, on_unit=on_unit)


def _train(
    ctx: LoopContext,
    *,
    max_units: int | None,
    echo: Echo | None,
    on_unit: Callable[[Action], None] | None,
) -> TrainSummary:
    units = 0
    action = current_action(ctx)
    while action.kind != "done" and (max_units is None or units < max_units):
        run_action(ctx, action, echo=echo)
        units += 1
        if on_unit is not None:
            on_unit(action)
        action = current_action(ctx)
    return TrainSummary(units, action, load_state(ctx.paths.state, ctx.cfg))

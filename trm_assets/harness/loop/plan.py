"""What runs next: ONE pure function shared by ``trm train`` and the Dagster epoch sensor.

The loop is a sequence of *units of work*, each ending with a checkpoint:

``init`` → for each epoch E: ``step (E, 0)`` … ``step (E, steps_per_epoch − 1)`` →
``slow_update (E, 1)`` … ``slow_update (E, 10)`` → next epoch … → ``finalize`` (deliver best,
final test evaluation) → ``done``.

After the slow update of an epoch in which early stop fired, the next unit is ``finalize`` with
reason ``early_stopped``; ``done`` carries the same reason. Under a ``rollout_budget`` the planner
ends an epoch early when its next step might not leave room for the slow update
(:func:`budget_exhausted`): the remaining steps are skipped and the slow update runs, so what the
last steps accepted is evaluated, settled and deliverable; the run then finalizes with reason
``budget`` (at once, if the epoch has no step yet). :func:`next_action` reads only the
:class:`Progress` summary of the persisted state, so a restarted process (or a sensor tick)
computes the same next unit as an uninterrupted run; :func:`advance` is its inverse, the progress
a unit's commit records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from trm_assets.harness.storage.records import training_rollouts

if TYPE_CHECKING:
    from trm_assets.harness.data.config import RunConfig
    from trm_assets.harness.storage.checkpoint import TrainState

ActionKind = Literal["init", "step", "slow_update", "finalize", "done"]
StopReason = Literal["", "completed", "early_stopped", "budget"]
N_SLOW_STEPS = 10


@dataclass(frozen=True)
class Progress:
    """The planner's view of the state (all integers and flags)."""

    initialized: bool
    epoch: int  # the epoch in progress (== epochs once every epoch is done)
    next_step: int  # next step of ``epoch``; == steps_per_epoch → the slow update
    slow_done: int  # slow-update functions of ``epoch`` already done (0..10)
    epochs: int
    steps_per_epoch: int
    early_stopped: bool
    finalized: bool
    # under a rollout budget: the next step might not leave room for the slow update
    budget_exhausted: bool = False
    stop_reason: StopReason = ""  # the finalized run's reason (``done`` repeats it)


@dataclass(frozen=True)
class Action:
    """The next unit of work. ``slow_step`` is the 1-based index of a slow-update function."""

    kind: ActionKind
    epoch: int | None = None
    step: int | None = None
    slow_step: int | None = None
    reason: StopReason = ""

    def describe(self) -> str:
        if self.kind == "step":
            return f"step (epoch {self.epoch}, step {self.step})"
        if self.kind == "slow_update":
            return f"slow update (epoch {self.epoch}, function {self.slow_step}/10)"
        if self.kind in ("finalize", "done"):
            return f"{self.kind} ({self.reason})"
        return self.kind


def next_action(p: Progress) -> Action:
    """The unit of work an uninterrupted run would execute next (pure)."""
    if p.finalized:
        reason: StopReason = p.stop_reason or ("early_stopped" if p.early_stopped else "completed")
        return Action("done", reason=reason)
    if not p.initialized:
        return Action("init")
    in_slow = p.slow_done > 0  # once begun, an epoch's slow update runs to its end
    if p.early_stopped and not in_slow:
        return Action("finalize", reason="early_stopped")
    if p.epoch >= p.epochs:
        return Action("finalize", reason="completed")
    if not in_slow and p.budget_exhausted:
        if p.next_step == 0:  # nothing of this epoch to evaluate
            return Action("finalize", reason="budget")
        return Action("slow_update", epoch=p.epoch, slow_step=1)
    if p.next_step < p.steps_per_epoch and not in_slow:
        return Action("step", epoch=p.epoch, step=p.next_step)
    return Action("slow_update", epoch=p.epoch, slow_step=p.slow_done + 1)


def progress_of(state: TrainState | None, cfg: RunConfig) -> Progress:
    """Summarize a (possibly missing) state for :func:`next_action`."""
    if state is None:
        return Progress(False, 0, 0, 0, cfg.epochs, cfg.steps_per_epoch, False, False)
    return Progress(
        initialized=state.initialized,
        epoch=state.epoch,
        next_step=state.next_step,
        slow_done=state.slow_done,
        epochs=cfg.epochs,
        steps_per_epoch=cfg.steps_per_epoch,
        early_stopped=state.early_stopped,
        finalized=state.finalized,
        budget_exhausted=budget_exhausted(state, cfg),
        stop_reason=_stop_reason(state),
    )


def _stop_reason(state: TrainState) -> StopReason:
    reason = state.final.reason if state.final is not None else ""
    return reason if reason in ("completed", "early_stopped", "budget") else ""  # type: ignore[return-value]


def slow_update_reserve(state: TrainState, cfg: RunConfig) -> int:
    """Rollouts the epoch's slow update is expected to cost: R and R2 of the last epoch that ran
    them (served outcomes at temperature 0 make them cheaper than the pool), else the validation
    pool twice (R, and R2 when momentum or the prompts changed)."""
    for epoch in range(state.epoch - 1, -1, -1):
        phases = state.budget.get(f"e{epoch}", {})
        if "R" in phases:
            return sum(phases[k]["rollouts"] for k in ("R", "R2") if k in phases)
    return 2 * cfg.val_size


def budget_exhausted(state: TrainState, cfg: RunConfig) -> bool:
    """Under ``rollout_budget``: the next step, estimated as the largest step of the run so far
    (the batch before any), plus the slow update would go past the budget. A pure function of
    the checkpoint, so a resumed run and the Dagster sensor plan the same units."""
    if cfg.rollout_budget is None or not state.initialized:
        return False
    step = state.epoch_counters.step_rollouts_max or cfg.batch_size
    spent = training_rollouts(state.budget)
    return spent + step + slow_update_reserve(state, cfg) > cfg.rollout_budget


def advance(state: TrainState, done: Action) -> None:
    """Move the persisted progress past the unit ``done`` (its commit): afterwards
    :func:`next_action` returns the unit an uninterrupted run executes after it."""
    if done.kind == "init":
        state.initialized = True
    elif done.kind == "step":
        assert done.step is not None
        state.next_step = done.step + 1
    elif done.kind == "slow_update":
        assert done.epoch is not None and done.slow_step is not None
        if done.slow_step < N_SLOW_STEPS:
            state.slow_done = done.slow_step
        else:  # the epoch is over: the next unit is the next epoch's first step (or finalize)
            state.epoch, state.next_step, state.slow_done = done.epoch + 1, 0, 0
    elif done.kind == "finalize":
        state.finalized = True
    else:
        raise ValueError(f"nothing to advance past {done.describe()}")

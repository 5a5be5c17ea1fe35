"""The thin orchestrator (fidelity #13, seed §15 ``Runner.train``): epoch → step → per-skill.

It only asks :func:`~trm_assets.harness.loop.plan.next_action` what comes next and runs that
unit (:func:`run_action`): it opens the unit's session
(:func:`~trm_assets.harness.loop.session.open_session`), runs the unit's body from the registry
:data:`UNITS` and commits the session (the unit's one checkpoint), so stopping between any two
units and resuming ends exactly where an uninterrupted run ends. The registry names every unit:
``init`` (:func:`~trm_assets.harness.loop.step.initialize_training`), a step
(:func:`~trm_assets.harness.loop.step.run_step`, per-skill gating inside), the ten slow-update
functions (:mod:`trm_assets.harness.loop.slow_update`), and :func:`finalize` (early stop or the last
epoch: deliver best — current ← best — and evaluate it on the test pool); ``trm train``, the
Dagster ops (their names and descriptions) and the sensor (through the planner) use it. Budget
(rollouts and tokens per phase) is accounted by the units into the state's ledger.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.plan import (
    N_SLOW_STEPS,
    Action,
    budget_exhausted,
    next_action,
    progress_of,
)
from trm_assets.harness.loop.session import UnitSession, open_session
from trm_assets.harness.loop.slow_update import SLOW_STEPS, holdout_accuracy
from trm_assets.harness.loop.step import initialize_training, run_step
from trm_assets.harness.storage.atomic import deferred_sync
from trm_assets.harness.storage.checkpoint import (
    CheckpointError,
    TrainState,
    load_state,
    read_state_file,
    wait_for_commits,
)
from trm_assets.harness.storage.lock import workspace_lock
from trm_assets.harness.storage.records import FinalReport
from trm_assets.harness.storage.workspace import read_best, update_current

Echo = Callable[[str], None]


@dataclass(frozen=True)
class TrainSummary:
    units: int
    last: Action
    state: TrainState | None


def planned(state_path: Path, cfg: RunConfig) -> Action:
    """The planner's next unit for the checkpoint at ``state_path`` (``init`` before one)."""
    return next_action(progress_of(load_state(state_path, cfg), cfg))


def current_action(ctx: LoopContext) -> Action:
    return planned(ctx.paths.state, ctx.cfg)


def run_action(
    ctx: LoopContext, action: Action, *, echo: Echo | None = None, behind: bool = False
) -> object:
    """Execute one unit of work (the one the planner returned): open its session, run its body,
    commit. Returns what the body returned (the unit's result record). ``behind``: the commit
    lands while the caller opens the next unit (a caller running units in a row; it waits with
    :func:`~trm_assets.harness.storage.checkpoint.wait_for_commits` before it stops)."""
    unit = unit_of(action)
    with deferred_sync():  # new versions are synced by the unit's checkpoint
        session = open_session(ctx, action, echo=echo)
        result = unit.body(session)
        session.commit(behind=behind)
    for observer in ctx.observers:
        observer.on_unit_done(action)
    return result


def finalize(s: UnitSession) -> FinalReport:
    """Deliver best (current ← best) and evaluate it on the test pool (a report, no decision)."""
    ctx, state, action = s.ctx, s.state, s.action
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
    f = state.final
    s.say(
        f"delivered best {best.skills}/{best.prompts} ({action.reason}): val "
        f"{_f(f.val_accuracy)}, test {_f(f.test_accuracy)}"
        + (
            f" (expected val {_f(f.val_expected_accuracy)}, SIMULATED)"
            if f.val_expected_accuracy is not None
            else ""
        )
    )
    return f


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# ------------------------------------------------------------------------------------------------
# the registry of units


@dataclass(frozen=True)
class UnitDef:
    """One kind of unit of work: its name (a Dagster op's), its description and its body (run on
    the opened session; the runner commits)."""

    name: str
    doc: str
    body: Callable[[UnitSession], object]


def _unit_def(body: Callable[[UnitSession], object]) -> UnitDef:
    return UnitDef(body.__name__, (body.__doc__ or body.__name__).strip(), body)


INIT_UNIT = UnitDef("init", (initialize_training.__doc__ or "").strip(), initialize_training)
STEP_UNIT = UnitDef("step", (run_step.__doc__ or "").strip(), run_step)
SLOW_UNITS: tuple[UnitDef, ...] = tuple(_unit_def(fn) for fn in SLOW_STEPS)  # fidelity #13's order
FINALIZE_UNIT = UnitDef("finalize", (finalize.__doc__ or "").strip(), finalize)
UNITS: tuple[UnitDef, ...] = (INIT_UNIT, STEP_UNIT, *SLOW_UNITS, FINALIZE_UNIT)
assert len(SLOW_UNITS) == N_SLOW_STEPS  # the planner counts the same ten


def unit_of(action: Action) -> UnitDef:
    """The registry's entry for a planned unit (``done`` has none)."""
    if action.kind == "init":
        return INIT_UNIT
    if action.kind == "step":
        return STEP_UNIT
    if action.kind == "slow_update":
        assert action.slow_step is not None
        return SLOW_UNITS[action.slow_step - 1]
    if action.kind == "finalize":
        return FINALIZE_UNIT
    raise ValueError(f"nothing to run for {action.describe()}")


def train(
    ctx: LoopContext,
    *,
    max_units: int | None = None,
    echo: Echo | None = None,
    on_unit: Callable[[Action], None] | None = None,
) -> TrainSummary:
    """Run units until ``done`` (or ``max_units``); resumes from whatever the state says,
    holding the workspace's writer lock throughout (issue 18.1)."""
    with writer_lock(ctx, "train"):
        return _train(ctx, max_units=max_units, echo=echo, on_unit=on_unit)


def _land_behind(error: BaseException) -> None:
    """Wait for the checkpoints still landing behind a unit that raised ``error``. A landing
    that failed too does not replace the unit's own error (the one to fix first): it is added
    to it as a note, which the command line prints after the error."""
    try:
        wait_for_commits()
    except BaseException as landing:  # reported on the unit's error, not instead of it
        error.add_note(f"also, an earlier checkpoint did not land: {landing}")


@contextlib.contextmanager
def writer_lock(ctx: LoopContext, command: str) -> Iterator[None]:
    """The workspace's writer lock around a unit or an epoch. A unit that fails leaves its
    rollout rows buffered (the pessimistic rows of what it sent): they are written before the
    lock is released, not by a log close after it (best effort: a write that fails again keeps
    them buffered for that close)."""
    with workspace_lock(ctx.workspace, command=command):
        try:
            yield
        except BaseException:
            ctx.flush_log_quietly()
            raise


def _train(
    ctx: LoopContext,
    *,
    max_units: int | None,
    echo: Echo | None,
    on_unit: Callable[[Action], None] | None,
) -> TrainSummary:
    units = 0
    action = current_action(ctx)
    try:
        while action.kind != "done" and (max_units is None or units < max_units):
            run_action(ctx, action, echo=echo, behind=True)
            units += 1
            if on_unit is not None:
                wait_for_commits()  # a callback sees the unit's checkpoint on disk
                on_unit(action)
            action = current_action(ctx)
    except BaseException as e:
        _land_behind(e)
        raise
    wait_for_commits()
    return TrainSummary(units, action, load_state(ctx.paths.state, ctx.cfg))


def finished(state_path: Path, cfg: RunConfig) -> str | None:
    """For ``trm train --resume``: what to say when a finalized workspace has nothing left to
    train (None while it has); a CheckpointError when ``cfg`` asks it for more epochs than it
    trained before it completed (it resumed into nothing)."""
    if not state_path.exists():
        return None
    # read, not resumed: the config is checked against it when training resumes (after the data)
    state = read_state_file(state_path)
    if not state.finalized or state.structural_fingerprint != cfg.structural_fingerprint():
        return None  # training it, or another config's (the resume refuses that, naming why)
    trained = len(state.history)
    reason = state.final.reason if state.final is not None else "completed"

    def refuse(stopped: str, asks: str, larger: str) -> CheckpointError:
        return CheckpointError(
            f"{state_path}: training {stopped} and was finalized (best delivered); {asks}, but a "
            "finalized workspace does not train further. Start a new workspace (`trm init`, or "
            f"`trm promote` the best version and `trm init --from-seed`) with the larger {larger}"
        )

    if reason == "budget" and not budget_exhausted(state, cfg):
        raise refuse(
            "stopped at its rollout budget",
            f"`rollout_budget: {cfg.rollout_budget}` leaves room for more",
            "budget",
        )
    if cfg.epochs > trained and reason == "completed":
        raise refuse(
            f"finished after {trained} epoch(s)",
            f"`epochs: {cfg.epochs}` asks for more",
            "`epochs`",
        )
    return f"nothing to do: training finished after {trained} epoch(s) ({reason}) and was finalized"

"""Units of work as the Dagster layer sees them: ordering, idempotent re-runs, whole epochs.

The planner (:mod:`trm_assets.harness.loop.plan`) says what runs next; this module answers the
questions a scheduler asks on top of it: has this unit already run, is it the next one, and "run
everything that is left of epoch E" (materializing an epoch partition from the UI). Plain Python:
the Dagster ops and assets call these functions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.plan import N_SLOW_STEPS, Action
from trm_assets.harness.loop.runner import current_action, run_action, writer_lock
from trm_assets.harness.storage.workspace import RUN_BASE, read_manifest

UnitStatus = Literal["done", "next", "later"]
Echo = Callable[[str], None]


class UnitOrderError(RuntimeError):
    """A unit was requested before the units it depends on (a human must pick the right one)."""


def unit_rank(action: Action, cfg: RunConfig) -> tuple[int, int]:
    """Total order of units: init < steps of epoch 0 < its slow update < … < finalize < done."""
    per_epoch = cfg.steps_per_epoch + N_SLOW_STEPS
    if action.kind == "init":
        return (-1, 0)
    if action.kind == "step":
        assert action.epoch is not None and action.step is not None
        return (action.epoch, action.step)
    if action.kind == "slow_update":
        assert action.epoch is not None and action.slow_step is not None
        return (action.epoch, cfg.steps_per_epoch + action.slow_step - 1)
    if action.kind == "finalize":
        return (10**9, 0)
    return (10**9, per_epoch)


def unit_status(ctx: LoopContext, unit: Action) -> UnitStatus:
    """``done`` (already run: re-running must be a no-op), ``next``, or ``later``."""
    return status_against(unit, current_action(ctx), ctx.cfg)


def status_against(unit: Action, nxt: Action, cfg: RunConfig) -> UnitStatus:
    """:func:`unit_status` when the planner's next unit is ``nxt``."""
    if nxt.kind == "done":
        return "done"
    a, b = unit_rank(unit, cfg), unit_rank(nxt, cfg)
    if a < b:
        return "done"
    return "next" if a == b else "later"


def passed_over(workspace: Path, unit: Action) -> bool:
    """A step the planner passed over (the rollout budget ended its epoch before it, or
    training stopped first): behind the next unit (:func:`unit_status` says ``done``) but never
    ran — its batch run (``train_e<E>_s<S>``, recorded by every step that ran) is not in the
    manifest. Only meaningful for a unit whose status is ``done``."""
    if unit.kind != "step":
        return False
    return read_manifest(workspace).run(f"{RUN_BASE}_e{unit.epoch}_s{unit.step}") is None


def unit_key(action: Action) -> str:
    """A stable name for a unit, used in Dagster tags and run keys."""
    if action.kind == "step":
        return f"step:e{action.epoch}:s{action.step}"
    if action.kind == "slow_update":
        return f"slow:e{action.epoch}:{action.slow_step}"
    return action.kind


def run_unit(ctx: LoopContext, unit: Action, *, echo: Echo | None = None) -> bool:
    """Run ``unit`` if it is next, holding the workspace's writer lock (issue 18.1) for the whole
    unit; see :func:`_run_unit`."""
    with writer_lock(ctx, f"unit {unit_key(unit)}"):
        return _run_unit(ctx, unit, echo=echo)


def _run_unit(ctx: LoopContext, unit: Action, *, echo: Echo | None = None) -> bool:
    """Run ``unit`` if it is next (running ``init`` first when the unit is the very first step).

    Returns False when the unit had already run (idempotent re-execution), True when it ran.
    Raises :class:`UnitOrderError` when earlier units are still pending.
    """
    nxt = current_action(ctx)
    if nxt.kind == "init" and unit.kind == "step" and (unit.epoch, unit.step) == (0, 0):
        run_action(ctx, nxt, echo=echo)
        nxt = current_action(ctx)
    status = status_against(unit, nxt, ctx.cfg)
    if status == "done":
        return False
    if status != "next":
        raise UnitOrderError(
            f"{ctx.workspace}: cannot run {unit.describe()} yet; the next unit is "
            f"{nxt.describe()} (run it first, or let the epoch sensor / "
            "`trm train --resume` drive the order)"
        )
    run_action(ctx, unit, echo=echo)
    return True


def run_epoch(
    ctx: LoopContext,
    epoch: int,
    *,
    echo: Echo | None = None,
    on_unit: Callable[[Action], None] | None = None,
) -> int:
    """Run every unit left of ``epoch`` (its init, steps and ten slow-update functions).

    Returns the number of units run (0 when the epoch was already complete). Raises
    :class:`UnitOrderError` when an earlier epoch is not complete. Holds the workspace's writer
    lock throughout.
    """
    with writer_lock(ctx, f"epoch e{epoch}"):
        ran = 0
        while True:
            nxt = current_action(ctx)
            in_epoch = nxt.kind in ("step", "slow_update") and nxt.epoch == epoch
            if nxt.kind == "init" or in_epoch:
                pass
            elif (
                nxt.kind in ("step", "slow_update") and nxt.epoch is not None and nxt.epoch < epoch
            ):
                raise UnitOrderError(
                    f"{ctx.workspace}: epoch {epoch} cannot start before epoch {nxt.epoch} is "
                    f"complete (next unit: {nxt.describe()}); materialize epoch e{nxt.epoch} first"
                )
            else:
                return ran  # the epoch is complete (or training finished / early-stopped)
            run_action(ctx, nxt, echo=echo)
            ran += 1
            if on_unit is not None:
                on_unit(nxt)

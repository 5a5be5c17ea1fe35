"""A unit of work as one object (issue 14): opened once, committed once.

:func:`open_session` is the only way a unit starts: it loads the checkpoint once, rolls the
workspace back to the checkpoint's mark (versions, manifest pointers and history), purges the
baseline-cache entries a killed attempt of this very unit left, verifies the versions the
checkpoint refers to and the run log's identity, and refuses a unit the planner would not run
next. The unit's body then works on ``session.state`` (and the :class:`LoopContext` it carries:
the manifest cache, the one binding of the rollout parameters); :meth:`UnitSession.commit` moves
the progress past the unit (:func:`~trm_assets.harness.loop.plan.advance`), flushes the run log
and writes ``state.json`` atomically. The runner
(:func:`~trm_assets.harness.loop.runner.run_action`) opens and commits; a body never does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.plan import Action, advance, next_action, progress_of
from trm_assets.harness.storage.checkpoint import (
    CheckpointError,
    TrainState,
    load_state,
    new_state,
    open_unit,
    record_decision_config,
    save_state,
    save_state_behind,
)
from trm_assets.harness.storage.workspace import lost_state_message, read_manifest, runs_past_init

Echo = Callable[[str], None]


@dataclass
class UnitSession:
    """The unit being run, its working state and where its progress lines go."""

    ctx: LoopContext
    action: Action
    state: TrainState
    echo: Echo | None = None
    committed: bool = False

    @property
    def epoch(self) -> int:
        assert self.action.epoch is not None, self.action
        return self.action.epoch

    @property
    def step(self) -> int:
        assert self.action.step is not None, self.action
        return self.action.step

    def say(self, line: str) -> None:
        if self.echo is not None:
            self.echo(line)

    def commit(self, *, behind: bool = False) -> None:
        """The unit's one checkpoint: progress past the unit, run log flushed, ``state.json``.
        ``behind``: the flush and the write land on the run log's writer thread while the caller
        goes on to the next unit (:func:`~trm_assets.harness.storage.checkpoint.save_state_behind`);
        a caller that stops after it must :func:`wait_for_commits`."""
        if self.committed:
            raise RuntimeError(f"{self.action.describe()} was already committed")
        self.ctx.drain_later()  # the unit's last bookkeeping, before its checkpoint
        advance(self.state, self.action)
        if behind:
            save_state_behind(self.ctx.paths.state, self.state, self.ctx.workspace, self.ctx.log)
        else:
            checkpoint(self.ctx, self.state)
        self.committed = True


def cache_prefix(base: str, action: Action) -> str:
    """The baseline-cache runs a killed attempt of ``action`` may have left (purged on open):
    a step's gate runs, an epoch's slow-update runs; nothing for init and finalize."""
    if action.kind == "step":
        return f"{base}_e{action.epoch}_s{action.step}_gate_"
    if action.kind == "slow_update":
        return f"{base}_e{action.epoch}_slow_"
    return "\0"  # no run id starts with NUL


def open_session(ctx: LoopContext, action: Action, *, echo: Echo | None = None) -> UnitSession:
    """Open ``action`` (see the module docstring); ``init`` starts from a new state."""
    paths = ctx.paths
    ctx.forget_later()
    if action.kind == "init":
        existing = load_state(paths.state, ctx.cfg)
        if existing is not None and existing.initialized:
            raise CheckpointError(f"{paths.state}: training is already initialised")
        if existing is None and (lost := runs_past_init(read_manifest(ctx.workspace))):
            raise CheckpointError(lost_state_message(paths.state, lost))
        record_decision_config(paths.state, ctx.cfg)
        return UnitSession(ctx, action, new_state(ctx.cfg), echo)
    prefix = cache_prefix(ctx.base, action)
    state = open_unit(ctx.workspace, paths.state, ctx.cfg, paths.baseline_cache, prefix)
    require_action(ctx, state, action)
    if action.kind == "step":
        ctx.forget_killed_gates(prefix)
    record_decision_config(paths.state, ctx.cfg)  # after the drift warning named the old values
    return UnitSession(ctx, action, state, echo)


def require_action(ctx: LoopContext, state: TrainState, expected: Action) -> None:
    """Refuse to run a unit the planner would not run next (out of order / already done)."""
    got = next_action(progress_of(state, ctx.cfg))
    if got != expected:
        raise CheckpointError(
            f"{ctx.paths.state}: the next unit of work is {got.describe()}, not "
            f"{expected.describe()}; run units in the planner's order (`trm train --resume`)"
        )


def checkpoint(ctx: LoopContext, state: TrainState) -> None:
    ctx.log.flush()
    save_state(ctx.paths.state, state, ctx.workspace)

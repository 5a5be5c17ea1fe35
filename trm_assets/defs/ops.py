"""Ops of one experiment: one op per unit of work (a step, each of the ten slow-update functions,
finalize), each recording what its unit created (:class:`~trm_assets.defs.recording.Recorder`).

The same slow-update ops make the ``slow_update`` job and, after one op per step, the epoch asset
(``epoch_eval`` / ``holdout_report``), so a UI epoch run shows its progress op by op. Every op
carries the experiment's pool (``trm_<experiment>``): with pool granularity ``run`` in
``dagster.yaml`` the run queue admits one run per experiment even when it was launched from the
asset catalog, whose implicit job has no ``trm/experiment`` tag.

Why it is long: the unit runner every op calls (its lock, progress and messages) and the epoch
bounds every epoch-partitioned op checks first belong with the op factories that use them.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn

import dagster as dg

from trm_assets.defs.checks import leak_check_result, lineage_check_result
from trm_assets.defs.experiments import Experiment
from trm_assets.defs.partitions import (
    ensure_partitions,
    epoch_key,
    epoch_step_key,
    parse_key,
    step_key,
)
from trm_assets.defs.recording import Event, Recorder, Scope
from trm_assets.defs.resources import LLMResource
from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import override_key
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.progress import (
    PROGRESS_MARK,
    LiveProgress,
    ProgressReporter,
    progress_every_s,
)
from trm_assets.harness.loop.runner import SLOW_UNITS, UnitDef, planned
from trm_assets.harness.loop.units import UnitOrderError, passed_over, run_unit, unit_key
from trm_assets.harness.reports.lineage import load_state_dict
from trm_assets.harness.storage.lock import workspace_lock

AFTER_STOP_TAG = "trm/after_stop"  # "skip": an epoch run queued after an early stop is a no-op
SLOW_NAMES = [u.name for u in SLOW_UNITS]
Unit = dict[str, Any]  # {"epoch": int, "skip": bool}, passed from op to op


def planned_action(experiment: Experiment) -> Action:
    """The planner's next unit for the experiment's workspace (``init`` before training)."""
    return planned(experiment.workspace_dir() / "state.json", experiment.run_config())


def llm_of(context: dg.OpExecutionContext, scope: Scope) -> LLMResource:
    llm = getattr(context.resources, scope.llm_key)
    assert isinstance(llm, LLMResource)
    return llm


#: ``trm train`` through Dagster runs each unit in its own process (the in-process executor):
#: while it does, its terminal echo, so the unit's lines and progress show live as well as in
#: the run's log (None in the webserver and the daemon). Set by :func:`~.driver.drive`.
LIVE_ECHO: Callable[[str], None] | None = None
#: And, when that terminal is a TTY, its progress bar (the periodic progress lines then go to the
#: run's log only).
LIVE_PROGRESS: LiveProgress | None = None


def run_unit_here(context: dg.OpExecutionContext, scope: Scope, action: Action) -> bool:
    """Run one unit of work of the experiment (False: it had already run). Progress lines of long
    rollout barriers go to the run's log; a unit out of order is a message, not a trace."""

    def say(line: str) -> None:
        context.log.info(line)
        if (live := LIVE_ECHO) is not None:
            live(line)

    try:
        every = progress_every_s(os.environ)
    except TrmError:  # `trm train` checked it before the first run; elsewhere the default
        every = 10.0
    live = LIVE_PROGRESS
    # a driving terminal that draws a bar: the periodic lines go to the run's log only
    emit = say if live is None else context.log.info
    progress = ProgressReporter(
        lambda line: emit(f"{PROGRESS_MARK}{line}"), every_s=every, live=live
    )
    # one writer (issue 18.1): the lock covers opening the context (it may write pools.json)
    # and closing the run log too, and names this run to a process it refuses
    lock = workspace_lock(
        scope.experiment.workspace_dir(),
        command=f"dagster run of unit {unit_key(action)}",
        run_id=context.run.run_id,
    )
    try:
        with lock, scope.experiment.open(llm_of(context, scope).providers, (progress,)) as ctx:
            ran = run_unit(ctx, action, echo=say)
    except (UnitOrderError, TrmError) as e:
        raise dg.Failure(description=str(e), allow_retries=False) from None
    if not ran:
        context.log.info(never_ran(scope, action) or f"{action.describe()} already ran: skipped")
    return ran


def never_ran(scope: Scope, action: Action) -> str | None:
    """Why a step behind the planner's next unit has nothing to show (the planner passed over
    it: :func:`~trm_assets.harness.loop.units.passed_over`), or None when it ran."""
    if not passed_over(scope.experiment.workspace_dir(), action):
        return None
    budget = scope.experiment.run_config().rollout_budget
    why = "training stopped before it (early stop)"
    if budget is not None:
        why = (
            f"the rollout budget (`rollout_budget: {budget}`) ended epoch {action.epoch} before "
            "it, or training stopped before it"
        )
    return f"{action.describe()} never ran: {why}; there is nothing to materialize for it"


# ------------------------------------------------------------------------------------------------
# Bounds: an epoch past the configured ones is a message naming the key to raise


def epoch_bounds(scope: Scope, epoch: int) -> tuple[str, str] | None:
    """``("past", message)`` for an epoch the config does not train, ``("stopped", message)``
    after an early stop, None when the epoch can run (or has run)."""
    exp = scope.experiment
    if epoch < 0:
        return ("past", f"experiment {exp.name}: e{epoch} is not an epoch (epochs count from e0)")
    cfg = exp.run_config()
    state = load_state_dict(exp.workspace_dir()) or {}
    trained = [int(h["epoch"]) for h in state.get("history", [])]
    if any(e == epoch for e in trained):
        return None
    config = exp.resolved_config_path()
    # where `epochs` comes from: the experiment's own override (experiments.yaml) beats the file
    overridden = any(override_key(o) == "epochs" for o in exp.overrides)
    source = (
        f"the experiment's override `epochs={cfg.epochs}` in experiments.yaml"
        if overridden
        else f"`epochs: {cfg.epochs}` in {config}"
    )
    change = (
        f"register it again with a larger `epochs` (`trm train --workspace "
        f"{exp.workspace} --epochs {epoch + 1}` or `trm sweep ... --set epochs={epoch + 1}`)"
        if overridden
        else f"raise `epochs` to at least {epoch + 1} in that config"
    )
    if epoch >= cfg.epochs:
        if state.get("finalized"):
            return (
                "past",
                f"experiment {exp.name}: training finished after {cfg.epochs} epoch(s) "
                f"({source}) and was finalized (best delivered); "
                f"e{epoch} is past the last epoch e{cfg.epochs - 1}. A finalized workspace does "
                "not train further: start a new experiment with a larger `epochs` (e.g. "
                f"`trm sweep --config {config} --set epochs={epoch + 1} ...`).",
            )
        return (
            "past",
            f"experiment {exp.name}: e{epoch} is past the last epoch e{cfg.epochs - 1} "
            f"({source}); {change} to continue (before the finalize run delivers best).",
        )
    if state.get("early_stopped") and trained and epoch > max(trained):
        return (
            "stopped",
            f"experiment {exp.name}: training stopped early after e{max(trained)} (no "
            f"validation improvement for `patience: {cfg.patience}` epochs); nothing to run "
            f"for e{epoch}.",
        )
    after = max(trained, default=-1)
    if epoch > after and planned_action(exp).reason == "budget":
        spent = f"after e{after}" if trained else "before the first epoch"
        return (
            "stopped",
            f"experiment {exp.name}: the rollout budget (`rollout_budget: "
            f"{cfg.rollout_budget}` in {config}) was spent {spent}; nothing to run for "
            f"e{epoch} (the finalize run delivers best). Raise `rollout_budget` to train on.",
        )
    return None


def _checked_bounds(scope: Scope, epoch: int) -> tuple[str, str] | None:
    try:
        return epoch_bounds(scope, epoch)
    except TrmError as e:  # an unreadable checkpoint: the message, not a traceback
        raise dg.Failure(description=str(e), allow_retries=False) from None


def refuse_or_skip(context: dg.OpExecutionContext, scope: Scope, epoch: int) -> bool:
    """True when the epoch run must do nothing (queued after an early stop); raises a Failure
    naming the config key for an epoch past the configured ones, removing the partition a user
    added for it when nothing was ever materialized there (no junk partition)."""
    bounds = _checked_bounds(scope, epoch)
    if bounds is None:
        return False
    kind, message = bounds
    if kind == "stopped" and context.run.tags.get(AFTER_STOP_TAG) == "skip":
        context.log.info(message)
        return True
    refuse(context, scope, epoch, message)


def refuse_past(context: dg.OpExecutionContext, scope: Scope, epoch: int) -> None:
    """A step of an epoch the config does not train (the UI's `e<N>|s<M>` past the last epoch):
    the epoch run's failure, word for word, and no junk partition. A step after an early stop or
    a budget stop is left to :func:`never_ran`, which names the step."""
    bounds = _checked_bounds(scope, epoch)
    if bounds is not None and bounds[0] == "past":
        refuse(context, scope, epoch, bounds[1])


def refuse(context: dg.OpExecutionContext, scope: Scope, epoch: int, message: str) -> NoReturn:
    """Fail with ``message``, removing the epoch partition a user added when nothing was ever
    materialized there."""
    key = epoch_key(epoch)
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=scope.keys.epoch_eval, asset_partitions=[key]), limit=1
    ).records
    if not records and context.instance.has_dynamic_partition(scope.partitions.epochs_name, key):
        context.instance.delete_dynamic_partition(scope.partitions.epochs_name, key)
        message += f" (the partition {key} was removed again)"
    raise dg.Failure(description=message, allow_retries=False)


# ------------------------------------------------------------------------------------------------
# Op factories


def begin_epoch_op(scope: Scope, *, job: str = "epoch") -> dg.OpDefinition:
    """First op of an epoch run (``job`` ``epoch``: the epoch asset, whose upstream versions come
    in as inputs; ``slow_update``: the job): the epoch from the partition, checked against the
    config — past the last epoch is a clear failure."""
    ins = (
        {"skill_versions": dg.In(dg.Nothing), "prompt_versions": dg.In(dg.Nothing)}
        if job == "epoch"
        else {}
    )

    @dg.op(
        name=scope.op_name(f"begin_{job}"),
        description="Check the epoch against the config (past the last epoch: a clear failure).",
        ins=ins,
        out=dg.Out(dict),
        pool=scope.pool,
    )
    def begin(context: dg.OpExecutionContext) -> Unit:
        epoch = parse_key(context.partition_key, "e")
        return {"epoch": epoch, "skip": refuse_or_skip(context, scope, epoch)}

    return begin


def _unit_op(
    scope: Scope,
    name: str,
    description: str,
    action: Callable[[int], Action],
    record: Callable[[dg.DagsterInstance, Recorder, int, bool], Iterable[Event]] = lambda *_: (),
) -> dg.OpDefinition:
    """One op running one unit of an epoch (skipped after an early stop): the unit's
    ``action(epoch)``, the events of what it created, then ``record``'s (e.g. a partition)."""

    @dg.op(
        name=scope.op_name(name),
        description=description,
        ins={"unit": dg.In(dict)},
        out=dg.Out(dict),
        required_resource_keys={scope.llm_key},
        pool=scope.pool,
    )
    def unit_fn(context: dg.OpExecutionContext, unit: Unit) -> Iterator[Event | dg.Output[Unit]]:
        if not unit["skip"]:
            epoch = int(unit["epoch"])
            ran = run_unit_here(context, scope, action(epoch))
            recorder = scope.recorder(context.instance)
            yield from recorder.new_events()
            yield from record(context.instance, recorder, epoch, ran)
        yield dg.Output(unit)

    return unit_fn


def step_op(scope: Scope, step: int) -> dg.OpDefinition:
    """One step of the epoch; records its versions and its ``step_results`` partition."""
    return _unit_op(
        scope,
        f"step_{step}",
        f"Step {step}: roll out the batch, diagnose, gate each skill edit (SPEC 5.3).",
        lambda epoch: Action("step", epoch=epoch, step=step),
        lambda instance, recorder, epoch, ran: step_events(
            instance, scope, recorder, epoch, step, ran
        ),
    )


def step_events(
    instance: dg.DagsterInstance, scope: Scope, recorder: Recorder, epoch: int, step: int, ran: bool
) -> tuple[dg.AssetMaterialization, ...]:
    """The step's ``step_results`` partition; none for a step the planner passed over."""
    if not ran and never_ran(scope, Action("step", epoch=epoch, step=step)) is not None:
        return ()
    return (step_materialization(instance, scope, recorder, epoch, step, ran),)


def step_materialization(
    instance: dg.DagsterInstance, scope: Scope, recorder: Recorder, epoch: int, step: int, ran: bool
) -> dg.AssetMaterialization:
    ensure_partitions(instance, scope.partitions.epochs_name, [epoch_key(epoch)])
    ensure_partitions(instance, scope.partitions.steps_name, [step_key(step)])
    md, tags = recorder.step(epoch, step)
    return dg.AssetMaterialization(
        asset_key=scope.keys.step_results,
        partition=epoch_step_key(epoch, step),
        metadata={**md, "ran_now": ran},
        tags=tags,
    )


def slow_ops(scope: Scope) -> list[dg.OpDefinition]:
    """The ten slow-update functions (SPEC 5.6), one op each, in order."""
    return [_slow_op(scope, i, unit_def) for i, unit_def in enumerate(SLOW_UNITS, 1)]


def _slow_op(scope: Scope, index: int, unit_def: UnitDef) -> dg.OpDefinition:
    return _unit_op(
        scope,
        unit_def.name,
        f"Slow update {index}/10: " + unit_def.doc.splitlines()[0],
        lambda epoch: Action("slow_update", epoch=epoch, slow_step=index),
    )


def publish_epoch_events_op(scope: Scope) -> dg.OpDefinition:
    """Last op of ``slow_update``: ``epoch_eval`` / ``holdout_report`` as materializations and the
    evaluations of their checks (the asset path runs the checks as steps instead)."""

    @dg.op(
        name=scope.op_name("publish_epoch"),
        description="Publish epoch_eval and holdout_report with the exact versions evaluated.",
        ins={"unit": dg.In(dict)},
        out={},
        pool=scope.pool,
    )
    def publish(context: dg.OpExecutionContext, unit: Unit) -> Iterator[Event]:
        if unit["skip"]:
            return
        epoch = int(unit["epoch"])
        recorder = scope.recorder(context.instance)
        yield from recorder.new_events()
        simulated = scope.experiment.run_config().llm_provider == "sim"
        (eval_md, eval_tags), (hold_md, hold_tags) = recorder.epoch(epoch, simulated)
        key = epoch_key(epoch)
        ensure_partitions(context.instance, scope.partitions.epochs_name, [key])
        yield dg.AssetMaterialization(
            asset_key=scope.keys.epoch_eval, partition=key, metadata=eval_md, tags=eval_tags
        )
        yield dg.AssetMaterialization(
            asset_key=scope.keys.holdout_report, partition=key, metadata=hold_md, tags=hold_tags
        )
        yield from epoch_check_evaluations(context.instance, scope)

    return publish


def epoch_check_evaluations(
    instance: dg.DagsterInstance, scope: Scope
) -> list[dg.AssetCheckEvaluation]:
    out = []
    for name, result in (
        ("epoch_eval_lineage_exact", lineage_check_result(instance, scope)),
        ("no_test_pool_leak", leak_check_result(scope)),
    ):
        out.append(
            dg.AssetCheckEvaluation(
                asset_key=scope.keys.epoch_eval,
                check_name=name,
                passed=result.passed,
                metadata=result.metadata,
                severity=result.severity,
            )
        )
    return out


def deliver_best_op(scope: Scope) -> dg.OpDefinition:
    @dg.op(
        name=scope.op_name("deliver_best"),
        description="Deliver best (current ← best) and evaluate it on the test pool.",
        required_resource_keys={scope.llm_key},
        out={},
        pool=scope.pool,
    )
    def deliver_best(context: dg.OpExecutionContext) -> Iterator[Event]:
        action = planned_action(scope.experiment)
        if action.kind == "done":  # finalized already: a re-run is a no-op
            context.log.info("nothing to finalize: training was finalized already")
        elif action.kind != "finalize":  # a green run that delivered nothing misled the chain
            raise dg.Failure(
                description=f"cannot finalize yet: the next unit is {action.describe()}",
                allow_retries=False,
            )
        else:
            run_unit_here(context, scope, action)
        yield from scope.recorder(context.instance).new_events()

    return deliver_best

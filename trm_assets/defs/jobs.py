"""Jobs: ``gate_step`` (one step of one epoch), ``slow_update`` (the ten ops of SPEC 5.6, in
process), ``finalize`` (deliver best + final test evaluation) and ``epoch_job`` (a whole epoch).

``dagster job launch -j slow_update -w workspace.yaml --config-json
'{"ops": {"snapshot_and_rerun_validation": {"config": {"epoch": 0}}}}'`` runs the slow update of
epoch 0 on the code location's workspace (add ``"workspace": "DIR"`` to pick another one).
"""

from collections.abc import Callable
from typing import Any

import dagster as dg

from trm_assets.defs.assets.training import (
    epoch_metadata,
    skill_version_events,
    step_results,
)
from trm_assets.defs.partitions import EPOCHS, epoch_key
from trm_assets.defs.resources import TrmResource
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import current_action
from trm_assets.harness.loop.slow_update import SLOW_STEPS
from trm_assets.harness.loop.units import run_unit

gate_step = dg.define_asset_job(
    "gate_step",
    selection=dg.AssetSelection.assets(step_results),
    description="One step of one epoch (partition 'e<epoch>|s<step>').",
    executor_def=dg.in_process_executor,
    tags={"trm/mutates": "true"},
)

epoch_job = dg.define_asset_job(
    "epoch_job",
    selection=dg.AssetSelection.assets("epoch_eval", "holdout_report"),
    description="Everything left of one epoch (partition 'e<epoch>'): steps, then slow update.",
    executor_def=dg.in_process_executor,
    tags={"trm/mutates": "true"},
)


class SlowUpdateConfig(dg.Config):
    """Config of the first op; the others receive it from their predecessor."""

    epoch: int
    workspace: str = ""  # empty: the code location's workspace


def _resource(trm: TrmResource, workspace: str) -> TrmResource:
    return trm if not workspace or workspace == trm.workspace else TrmResource(workspace=workspace)


def _run_slow(
    context: dg.OpExecutionContext, trm: TrmResource, unit: dict[str, Any], index: int
) -> dict[str, Any]:
    res = _resource(trm, unit["workspace"])
    epoch = int(unit["epoch"])
    with res.open() as ctx:
        ran = run_unit(
            ctx, Action("slow_update", epoch=epoch, slow_step=index), echo=context.log.info
        )
        simulated = ctx.providers.simulated
    if not ran:
        context.log.info(f"slow-update function {index}/10 of epoch {epoch} already ran: skipped")
    if index == len(SLOW_STEPS):
        _publish_epoch(context, res, epoch, simulated)
    return {**unit, "ran": ran}


def _publish_epoch(
    context: dg.OpExecutionContext, trm: TrmResource, epoch: int, simulated: bool
) -> None:
    """Record epoch_eval / holdout_report (and changed skill versions) for lineage."""
    key = epoch_key(epoch)
    if not context.instance.has_dynamic_partition(EPOCHS, key):
        context.instance.add_dynamic_partitions(EPOCHS, [key])
    for event in skill_version_events(trm, context.instance):
        context.log_event(event)
    for asset, md in epoch_metadata(trm, context.instance, epoch, simulated):
        context.log_event(dg.AssetMaterialization(asset_key=asset, partition=key, metadata=md))


def _make_slow_op(index: int, fn: Callable[..., Any]) -> dg.OpDefinition:
    name = fn.__name__
    doc = (fn.__doc__ or name).strip().splitlines()[0]
    if index == 1:

        @dg.op(name=name, description=doc, out=dg.Out(dict))
        def first(
            context: dg.OpExecutionContext, config: SlowUpdateConfig, trm: TrmResource
        ) -> dict[str, Any]:
            unit = {"epoch": config.epoch, "workspace": config.workspace or trm.workspace}
            return _run_slow(context, trm, unit, index)

        return first

    @dg.op(name=name, description=doc, ins={"unit": dg.In(dict)}, out=dg.Out(dict))
    def later(
        context: dg.OpExecutionContext, unit: dict[str, Any], trm: TrmResource
    ) -> dict[str, Any]:
        return _run_slow(context, trm, unit, index)

    return later


SLOW_OPS = [_make_slow_op(i, fn) for i, fn in enumerate(SLOW_STEPS, start=1)]


@dg.graph(description="SPEC 5.6: the ten steps of the slow update, strictly in order.")
def slow_update_graph() -> None:
    unit = SLOW_OPS[0]()
    for op_def in SLOW_OPS[1:]:
        unit = op_def(unit)


slow_update = slow_update_graph.to_job(
    name="slow_update",
    executor_def=dg.in_process_executor,
    tags={"trm/mutates": "true"},
)


@dg.op(description="Deliver best (current ← best) and evaluate it on the test pool.")
def deliver_best(context: dg.OpExecutionContext, trm: TrmResource) -> None:
    with trm.open() as ctx:
        action = current_action(ctx)
        if action.kind != "finalize":
            context.log.info(f"nothing to finalize: the next unit is {action.describe()}")
            return
        run_unit(ctx, action, echo=context.log.info)


@dg.job(executor_def=dg.in_process_executor, tags={"trm/mutates": "true"})
def finalize() -> None:
    """The end of training: deliver best and the final held-out evaluation."""
    deliver_best()


def slow_update_run_config(epoch: int, workspace: str = "") -> dict[str, Any]:
    cfg: dict[str, Any] = {"epoch": epoch}
    if workspace:
        cfg["workspace"] = workspace
    return {"ops": {SLOW_OPS[0].name: {"config": cfg}}}

"""Training assets of one experiment. Every body is a call into the harness.

* ``skill_versions`` [task type] and ``prompt_versions``: every version the loop creates, recorded
  by the run that created it (content hash as data version). They are declared, not computed: a
  version comes from a training unit, so the catalog offers no "Materialize" for them.
* ``batches`` [epoch]: the mini-batches, recorded when the epoch's first step draws them.
* ``step_results`` [epoch × step]: one step (the ``gate_step`` job); its metadata lists every
  gate of the step and the exact versions its batch rollouts used.
* ``epoch_eval`` / ``holdout_report`` [epoch]: one op per step, then the ten slow-update functions,
  then the publication naming exactly the evaluated versions (the ``epoch`` job).
* ``baseline_cache`` [task type]: the gate baseline rollouts cached per task type.

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from trm_assets.defs.ops import begin_epoch_op, never_ran, refuse_past, run_unit_here, step_op
from trm_assets.defs.partitions import epoch_step_of
from trm_assets.defs.recording import Event, Scope, baseline_cache_metadata
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.storage.cache_store import BaselineCacheStore

CODE_VERSION = "1"


def version_specs(scope: Scope) -> list[dg.AssetSpec]:
    keys, parts = scope.keys, scope.partitions
    return [
        dg.AssetSpec(
            keys.skill_versions,
            partitions_def=parts.task_types,
            group_name=scope.name,
            description=(
                "Every version of a task type's skill file the loop created (accept, rollback, "
                "momentum, delivery), recorded by the run that created it; data version = the "
                "file's content hash (first 16 hex)."
            ),
        ),
        dg.AssetSpec(
            keys.prompt_versions,
            group_name=scope.name,
            description=(
                "Every version of the prompt set (system/tool evolution, R2 revert, delivery); "
                "data version = the set's content hash."
            ),
        ),
        dg.AssetSpec(
            keys.batches,
            partitions_def=parts.epochs,
            group_name=scope.name,
            deps=[keys.pools],
            description="The mini-batches of an epoch, recorded when its first step draws them.",
        ),
    ]


def step_results_asset(scope: Scope) -> dg.AssetsDefinition:
    keys, parts = scope.keys, scope.partitions

    @dg.asset(
        key=keys.step_results,
        partitions_def=parts.epoch_steps,
        group_name=scope.name,
        deps=[
            dg.AssetDep(keys.skill_versions, partition_mapping=dg.AllPartitionMapping()),
            dg.AssetDep(keys.prompt_versions),
            # inferred: the epoch dimension of e|s maps to batches' epoch
            dg.AssetDep(keys.batches),
        ],
        required_resource_keys={scope.llm_key},
        code_version=CODE_VERSION,
        pool=scope.pool,
    )
    def step_results(
        context: dg.AssetExecutionContext,
    ) -> Iterator[Event | dg.MaterializeResult[None]]:
        """One step of one epoch: roll out the batch, diagnose, gate each skill edit (SPEC 5.3);
        its metadata lists every gate (verdict, W/L, blocks, rollouts)."""
        try:
            epoch, step = epoch_step_of(context.partition_key)
        except ValueError as e:  # a hand-added partition key: a message, not a stack trace
            raise dg.Failure(description=str(e), allow_retries=False) from None
        steps = scope.experiment.run_config().steps_per_epoch
        if step >= steps:  # never runs: not "early stop", not "not yet"
            raise dg.Failure(
                description=f"s{step} is not a step of experiment {scope.name} "
                f"(`steps_per_epoch: {steps}`: s0 … s{steps - 1}); nothing to materialize",
                allow_retries=False,
            )
        refuse_past(context.op_execution_context, scope, epoch)
        action = Action("step", epoch, step)
        ran = run_unit_here(context.op_execution_context, scope, action)
        why = None if ran else never_ran(scope, action)
        if why is not None:  # a step the planner passed over has no versions to record
            raise dg.Failure(description=why, allow_retries=False)
        recorder = scope.recorder(context.instance)
        yield from recorder.new_events()
        md, tags = recorder.step(epoch, step)
        yield dg.MaterializeResult(metadata={**md, "ran_now": ran}, tags=tags)

    return step_results


def epoch_asset(scope: Scope, slow: list[dg.OpDefinition]) -> dg.AssetsDefinition:
    """``slow``: the experiment's ten slow-update ops, shared with its ``slow_update`` job."""
    keys, parts = scope.keys, scope.partitions
    steps = [step_op(scope, s) for s in range(scope.experiment.run_config().steps_per_epoch)]
    begin = begin_epoch_op(scope)
    publish = publish_epoch_outputs_op(scope)

    @dg.graph(
        name=f"{scope.name}__epoch_results",
        ins={"skill_versions": dg.GraphIn(), "prompt_versions": dg.GraphIn()},
        out={"epoch_eval": dg.GraphOut(), "holdout_report": dg.GraphOut()},
    )
    def epoch_results(skill_versions: None, prompt_versions: None) -> dict[str, Any]:
        """Materializing an epoch partition runs what is left of that epoch — its steps, then
        the ten slow-update functions, one op each — and publishes the results."""
        unit = begin(skill_versions=skill_versions, prompt_versions=prompt_versions)
        for op_def in [*steps, *slow]:
            unit = op_def(unit)
        epoch_eval, holdout_report = publish(unit)
        return {"epoch_eval": epoch_eval, "holdout_report": holdout_report}

    # AssetsDefinition.from_graph, not @graph_multi_asset: dagster 1.13's graph_multi_asset
    # drops an AssetIn's partition_mapping, so every epoch mapped onto the skill_versions
    # partition of the same key (a task type) and any backfill of epochs was refused
    return dg.AssetsDefinition.from_graph(
        epoch_results,
        keys_by_input_name={
            "skill_versions": keys.skill_versions,
            "prompt_versions": keys.prompt_versions,
        },
        keys_by_output_name={"epoch_eval": keys.epoch_eval, "holdout_report": keys.holdout_report},
        partitions_def=parts.epochs,
        partition_mappings={"skill_versions": dg.AllPartitionMapping()},
        group_name=scope.name,
        can_subset=False,
        code_versions_by_output_name={"epoch_eval": CODE_VERSION, "holdout_report": CODE_VERSION},
        descriptions_by_output_name={
            "epoch_eval": (
                "Validation accuracy of an epoch, every gate of the epoch, and the exact "
                "skill/prompt versions evaluated (their skill_versions events)."
            ),
            "holdout_report": "Four-way held-out report on the test pool (seed, start, current, "
            "best) and the versions each evaluated.",
        },
    )


def publish_epoch_outputs_op(scope: Scope) -> dg.OpDefinition:
    @dg.op(
        name=scope.op_name("publish_epoch_outputs"),
        description="Publish epoch_eval and holdout_report with the exact versions evaluated.",
        ins={"unit": dg.In(dict)},
        out={
            "epoch_eval": dg.Out(dg.Nothing, is_required=False),
            "holdout_report": dg.Out(dg.Nothing, is_required=False),
        },
        pool=scope.pool,
    )
    def publish(
        context: dg.OpExecutionContext, unit: dict[str, Any]
    ) -> Iterator[Event | dg.Output[None]]:
        if unit["skip"]:
            return
        recorder = scope.recorder(context.instance)
        yield from recorder.new_events()
        simulated = scope.experiment.run_config().llm_provider == "sim"
        (eval_md, eval_tags), (hold_md, hold_tags) = recorder.epoch(int(unit["epoch"]), simulated)
        yield dg.Output(None, "epoch_eval", metadata=eval_md, tags=eval_tags)
        yield dg.Output(None, "holdout_report", metadata=hold_md, tags=hold_tags)

    return publish


def baseline_cache_asset(scope: Scope) -> dg.AssetsDefinition:
    keys, parts = scope.keys, scope.partitions

    @dg.asset(
        key=scope.keys.baseline_cache,
        partitions_def=parts.task_types,
        group_name=scope.name,
        deps=[dg.AssetDep(keys.skill_versions)],
    )
    def baseline_cache(context: dg.AssetExecutionContext) -> dg.MaterializeResult[None]:
        """Gate baseline rollouts cached for a task type (GATE §6.3: gate draws only); also
        recorded by the runs whose gates add entries."""
        ws = scope.experiment.workspace_dir()
        store = BaselineCacheStore(ws / "baseline_cache", context.partition_key)
        return dg.MaterializeResult(metadata=baseline_cache_metadata(store))

    return baseline_cache

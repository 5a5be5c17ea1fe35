"""Jobs of one experiment, named ``<experiment>__<job>``; every run carries the experiment's tags
(``trm/experiment``: the run queue lets one run per experiment in at a time):

* ``gate_step``: one step of one epoch (partition ``e<epoch>|s<step>`` of ``step_results``);
* ``slow_update``: the ten functions of SPEC 5.6, one op each, then the publication of
  ``epoch_eval`` / ``holdout_report`` (partition ``e<epoch>``);
* ``epoch``: the epoch asset — whatever is left of the epoch, one op per step and per function;
* ``finalize``: deliver best and the final held-out evaluation.

All run in process (the default executor costs ~2 s per op in a subprocess): e.g.
``dagster job launch -w workspace.yaml -j default__slow_update --tags
'{"dagster/partition": "e0"}'`` (or ``trm launch``, which prints the run id and its UI URL).

No ``from __future__ import annotations`` in the Dagster layer: dagster inspects real annotations.
"""

from dataclasses import dataclass

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,  # define_asset_job's return type (not re-exported)
)

from trm_assets.defs.ops import begin_epoch_op, deliver_best_op, publish_epoch_events_op
from trm_assets.defs.recording import Scope, run_tags

JOBS = ("gate_step", "slow_update", "epoch", "finalize")


@dataclass(frozen=True)
class ExperimentJobs:
    gate_step: UnresolvedAssetJobDefinition
    slow_update: dg.JobDefinition
    epoch: UnresolvedAssetJobDefinition
    finalize: dg.JobDefinition

    def all(self) -> list[dg.JobDefinition | UnresolvedAssetJobDefinition]:
        return [self.gate_step, self.slow_update, self.epoch, self.finalize]


def job_name(experiment: str, job: str) -> str:
    return f"{experiment}__{job}"


def experiment_jobs(scope: Scope, slow: list[dg.OpDefinition]) -> ExperimentJobs:
    """``slow``: the ten slow-update ops (shared with the epoch asset)."""
    keys = scope.keys
    tags = {**run_tags(scope.experiment), "trm/mutates": "true"}
    gate_step = dg.define_asset_job(
        job_name(scope.name, "gate_step"),
        selection=dg.AssetSelection.assets(keys.step_results),
        description="One step of one epoch (partition 'e<epoch>|s<step>').",
        executor_def=dg.in_process_executor,
        tags=tags,
    )
    epoch = dg.define_asset_job(
        job_name(scope.name, "epoch"),
        selection=dg.AssetSelection.assets(keys.epoch_eval, keys.holdout_report),
        description="Everything left of one epoch (partition 'e<epoch>'): steps, then the slow "
        "update, one op each.",
        executor_def=dg.in_process_executor,
        tags=tags,
    )
    begin = begin_epoch_op(scope, job="slow_update")
    publish = publish_epoch_events_op(scope)

    @dg.job(
        name=job_name(scope.name, "slow_update"),
        description="SPEC 5.6: the ten steps of the slow update, strictly in order, then the "
        "epoch's publication (partition 'e<epoch>').",
        partitions_def=scope.partitions.epochs,
        executor_def=dg.in_process_executor,
        tags=tags,
    )
    def slow_update() -> None:
        unit = begin()
        for op_def in slow:
            unit = op_def(unit)
        publish(unit)

    deliver = deliver_best_op(scope)

    @dg.job(
        name=job_name(scope.name, "finalize"),
        description="The end of training: deliver best and the final held-out evaluation.",
        executor_def=dg.in_process_executor,
        tags=tags,
    )
    def finalize() -> None:
        deliver()

    return ExperimentJobs(gate_step, slow_update, epoch, finalize)

"""``<experiment>__epoch_sensor``: launches the experiment's next unit of training, one run at a
time (Automation → Sensors → its toggle; off by default).

The decision is the planner's (:func:`trm_assets.harness.loop.plan.next_action`, shared with
``trm train``); the sensor only translates it into a run request, adds the epoch/step partitions
it needs, and refuses to launch while a run of this experiment is queued or in progress, while
another process holds the workspace's writer lock, or after a failed run that a human must look
at. Other experiments' runs do not block it.
"""

import json
import os
import socket
import warnings

import dagster as dg

from trm_assets.defs.experiments import EXPERIMENT_TAG
from trm_assets.defs.jobs import ExperimentJobs
from trm_assets.defs.ops import planned_action
from trm_assets.defs.partitions import epoch_key, epoch_step_key, step_key
from trm_assets.defs.recording import Scope, run_tags
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.units import unit_key
from trm_assets.harness.storage.lock import lock_holder

IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
_IN_PROCESS_STATUSES = (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED)
UNIT_TAG = "trm/unit"
WORKSPACE_TAG = "trm/workspace"
PARENT_RUN_TAG = "dagster/parent_run_id"  # set on every re-execution
PID_TAG = "trm/pid"  # set on in-process runs (`trm train`): their worker is that process
HOST_TAG = "trm/host"
LOST_TAG = "trm/worker_lost"
#: The job a catalog "Materialize" runs (dagster's ``IMPLICIT_ASSET_JOB_NAME``, not public API;
#: ``test_sensor_waits_for_an_untagged_catalog_run_of_its_assets`` builds its runs from the real
#: implicit job, so a rename fails there).
IMPLICIT_ASSET_JOB = "__ASSET_JOB"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_lost_runs(
    instance: dg.DagsterInstance, experiment: str
) -> tuple[list[dg.DagsterRun], list[dg.DagsterRun]]:
    """Mark the experiment's in-progress runs whose in-process worker died (e.g. a killed `trm
    train`) as failed, tagged ``trm/worker_lost``; returns (the runs really still in progress,
    the runs marked failed). The sensor calls it on every tick, the driver before a unit."""
    mine = dg.RunsFilter(statuses=IN_PROGRESS, tags={EXPERIMENT_TAG: experiment})
    alive: list[dg.DagsterRun] = []
    lost: list[dg.DagsterRun] = []
    for run in instance.get_runs(filters=mine):
        pid, host = run.tags.get(PID_TAG), run.tags.get(HOST_TAG)
        # only a run the driver executed in process (created NOT_STARTED, then STARTED; never
        # queued) and not a re-execution: one from the UI inherits the parent's tags, pid
        # included, but is launched by the daemon with a run worker of its own
        in_process = run.status in _IN_PROCESS_STATUSES and PARENT_RUN_TAG not in run.tags
        if (
            in_process
            and pid
            and pid.isdigit()
            and host == socket.gethostname()
            and not _process_alive(int(pid))
        ):
            instance.add_run_tags(run.run_id, {LOST_TAG: "true"})
            instance.report_run_failed(run, f"its process (pid {pid}) is gone: worker lost")
            lost.append(run)
        else:
            alive.append(run)
    return alive, lost


def dagster_unit(action: Action) -> Action:
    """Init runs inside the first step's run (one Dagster run per unit otherwise)."""
    return Action("step", epoch=0, step=0) if action.kind == "init" else action


def run_request_for(
    action: Action, scope: Scope, jobs: ExperimentJobs, counter: int
) -> tuple[dg.RunRequest, list[dg.AddDynamicPartitionsRequest]]:
    unit = dagster_unit(action)
    tags = {**run_tags(scope.experiment), UNIT_TAG: unit_key(unit)}
    run_key = f"{scope.name}:{unit_key(unit)}#{counter}"
    parts = scope.partitions
    if unit.kind == "step":
        assert unit.epoch is not None and unit.step is not None
        req = dg.RunRequest(
            run_key=run_key,
            job_name=jobs.gate_step.name,
            partition_key=epoch_step_key(unit.epoch, unit.step),
            tags=tags,
        )
        return req, [
            parts.epochs.build_add_request([epoch_key(unit.epoch)]),
            parts.steps.build_add_request([step_key(unit.step)]),
        ]
    if unit.kind == "slow_update":
        assert unit.epoch is not None
        req = dg.RunRequest(
            run_key=run_key,
            job_name=jobs.slow_update.name,
            partition_key=epoch_key(unit.epoch),
            tags=tags,
        )
        return req, [parts.epochs.build_add_request([epoch_key(unit.epoch)])]
    return dg.RunRequest(run_key=run_key, job_name=jobs.finalize.name, tags=tags), []


def untagged_run_in_progress(instance: dg.DagsterInstance, experiment: str) -> dg.DagsterRun | None:
    """A run in progress that materializes one of the experiment's assets without its tag: the
    catalog's "Materialize" runs the implicit asset job, whose runs carry no tags (contract audit
    of issue 8: the sensor launched beside such a run; the run pool then held its run back)."""
    # only the implicit job's runs: the query stays small on an instance with many runs
    catalog = dg.RunsFilter(statuses=IN_PROGRESS, job_name=IMPLICIT_ASSET_JOB)
    for run in instance.get_runs(filters=catalog):
        if EXPERIMENT_TAG in run.tags:
            continue  # tagged runs are the experiment's (fail_lost_runs) or another's
        keys = {
            *(run.asset_selection or ()),
            *(c.asset_key for c in run.asset_check_selection or ()),
        }
        if any(k.path[0] == experiment for k in keys):
            return run
    return None


# dagster's own @sensor passes its beta ``owners`` parameter internally; not our usage.
warnings.filterwarnings("ignore", message="Parameter `owners`", category=dg.BetaWarning)


def evaluate_epoch_sensor(
    context: dg.SensorEvaluationContext, scope: Scope, jobs: ExperimentJobs
) -> dg.SkipReason | dg.SensorResult:
    """One tick of the experiment's sensor (the decorated sensor is a thin wrapper)."""
    active, _ = fail_lost_runs(context.instance, scope.name)
    run = active[0] if active else untagged_run_in_progress(context.instance, scope.name)
    if run is not None:
        stuck = (
            ""
            if active
            else " (a catalog materialization; if its process is gone, terminate it on the "
            "Runs page)"
        )
        return dg.SkipReason(
            f"run {run.run_id} ({run.job_name}) of experiment {scope.name} is "
            f"{run.status.value}: one run per experiment at a time{stuck}"
        )
    holder = lock_holder(scope.experiment.workspace_dir())
    if holder is not None:  # e.g. `trm train` (in process, outside the queue) or `trm eval`
        return dg.SkipReason(
            f"workspace {scope.experiment.workspace} is in use by {holder.describe()}; one writer "
            "per workspace: the sensor launches again once it is released"
        )
    action = planned_action(scope.experiment)
    if action.kind == "done":
        return dg.SkipReason(f"training finished ({action.reason}); nothing to launch")
    unit = dagster_unit(action)
    last = context.instance.get_runs(
        filters=dg.RunsFilter(tags={EXPERIMENT_TAG: scope.name}), limit=2
    )
    # A lost worker (killed process) is relaunched once: the unit restarts from its checkpoint.
    # Any other failure, or a second loss in a row, needs a human.
    relaunch_once = (
        len(last) >= 1
        and last[0].tags.get(LOST_TAG) == "true"
        and not (
            len(last) >= 2
            and last[1].status in FAILED
            and last[1].tags.get(UNIT_TAG) == unit_key(unit)
        )
    )
    if (
        last
        and last[0].status in FAILED
        and last[0].tags.get(UNIT_TAG) == unit_key(unit)
        and not relaunch_once
    ):
        run = last[0]
        return dg.SkipReason(
            f"the last run for {unit.describe()} ({run.run_id}) ended {run.status.value}; not "
            "relaunching it. Read its logs in the UI, fix the cause, then re-execute that run "
            "from the UI or run `trm train --resume`; the sensor continues once the workspace "
            "has moved past this unit."
        )
    cursor = json.loads(context.cursor) if context.cursor else {"launched": 0}
    counter = int(cursor["launched"]) + 1
    request, partition_requests = run_request_for(action, scope, jobs, counter)
    context.update_cursor(json.dumps({"launched": counter}))
    return dg.SensorResult(run_requests=[request], dynamic_partitions_requests=partition_requests)


def epoch_sensor(scope: Scope, jobs: ExperimentJobs) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{scope.name}__epoch_sensor",
        jobs=[jobs.gate_step, jobs.slow_update, jobs.finalize],
        minimum_interval_seconds=5,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            f"Launches the next step / slow update / finalize of experiment {scope.name} "
            f"({scope.experiment.workspace}), one run at a time."
        ),
    )
    def sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason | dg.SensorResult:
        return evaluate_epoch_sensor(context, scope, jobs)

    return sensor

"""A SIGKILL inside a Dagster-driven unit of work (issue 9, the Dagster side of kill-anywhere).

The unit's run stays ``STARTED`` in the instance: nothing in Dagster marks the run of a dead
process as failed (in-process execution has no run worker to health-check). The epoch sensor does:
a run whose process is gone is marked FAILED and tagged ``trm/worker_lost``, and the same unit is
relaunched once (it restarts from its checkpoint); a second loss in a row needs a human. A
re-launch through the driver resumes correctly (``trm bench reliability`` checks the final state).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from trm_assets.defs.build import build_experiment
from trm_assets.defs.ops import planned_action
from trm_assets.defs.partitions import epoch_step_key
from trm_assets.defs.resources import TrmResource
from trm_assets.defs.sensors import LOST_TAG, UNIT_TAG
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.units import unit_key
from trm_assets_tests.reliability.conftest import child_env
from trm_assets_tests.tiny import REPO, SMOKE_CONFIG, TINY, tiny_config
from trm_bench.overhead import new_workspace
from trm_bench.reliability import dagster_args


def _started(home: Path) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return list(
            instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        )


def _kill_inside_a_dagster_run(ws: Path, home: Path, ready: Callable[[], bool]) -> None:
    home.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        dagster_args(ws, SMOKE_CONFIG, TINY),
        cwd=REPO,
        env=child_env(DAGSTER_HOME=str(home)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if ready():
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the driver finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)


def test_sensor_recovers_after_a_killed_dagster_unit(tmp_path: Path) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    home = tmp_path / "dagster_home"
    # killed once init is done, inside step (0, 0)'s Dagster run
    _kill_inside_a_dagster_run(ws, home, lambda: (ws / "state.json").exists())
    trm = TrmResource(workspace=str(ws), config_path=str(SMOKE_CONFIG), overrides=list(TINY))
    built = build_experiment(trm)
    first_step = unit_key(Action("step", epoch=0, step=0))  # init runs inside its run
    with dg.DagsterInstance.from_config(str(home)) as instance:
        stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        (lost,) = stuck  # the killed unit's run, and only it
        assert lost.tags[UNIT_TAG] == first_step and lost.job_name == built.jobs.gate_step.name
        with dg.build_sensor_context(instance=instance) as ctx:
            result = built.sensor(ctx)
        assert not isinstance(result, dg.SkipReason), result.skip_message
        assert isinstance(result, dg.SensorResult), result
        # the lost run is marked failed, and the same unit is requested again (once)
        after = instance.get_run_by_id(lost.run_id)
        assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
        assert after.tags[LOST_TAG] == "true"
        (req,) = result.run_requests or []
        assert req.tags[UNIT_TAG] == first_step and req.job_name == built.jobs.gate_step.name
        assert req.partition_key == epoch_step_key(0, 0)
    # the relaunched run of the same unit is lost too: a second loss in a row needs a human
    _kill_inside_a_dagster_run(
        ws, home, lambda: [r.tags.get(UNIT_TAG) for r in _started(home)] == [first_step]
    )
    # killed inside that unit's run, before its checkpoint: the plan still names it
    assert planned_action(built.scope.experiment) == Action("step", epoch=0, step=0)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (again,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        assert again.run_id != lost.run_id and again.tags[UNIT_TAG] == first_step
        with dg.build_sensor_context(instance=instance) as ctx:
            second = built.sensor(ctx)
        assert isinstance(second, dg.SkipReason), second
        assert again.run_id in (second.skip_message or "")
        after = instance.get_run_by_id(again.run_id)
        assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
        assert after.tags[LOST_TAG] == "true"


def test_a_resume_through_the_driver_fails_the_runs_a_killed_train_left(tmp_path: Path) -> None:
    """`trm train` killed with SIGKILL left its unit's run STARTED for good, even after `trm
    train --resume` finished the experiment (only the sensor, with the daemon on, failed it):
    the driver now marks such runs of its experiment failed before it runs a unit (review)."""
    from trm_assets.defs.driver import drive

    ws = new_workspace(tmp_path / "ws", tiny_config())
    home = tmp_path / "dagster_home"
    _kill_inside_a_dagster_run(ws, home, lambda: (ws / "state.json").exists())
    (lost,) = _started(home)
    trm = TrmResource(workspace=str(ws), config_path=str(SMOKE_CONFIG), overrides=list(TINY))
    said: list[str] = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        # re-executions from the UI inherit the dead pid's tags but have workers of their own
        # (review): one starting, one started by the daemon; neither is the driver's to fail
        from dagster._core.storage.dagster_run import DagsterRun
        from dagster._core.utils import make_new_run_id

        rerun = {**lost.tags, "dagster/parent_run_id": lost.run_id}
        others = [
            DagsterRun(job_name=lost.job_name, run_id=make_new_run_id(), status=st, tags=tags)
            for st, tags in (
                (dg.DagsterRunStatus.STARTING, lost.tags),
                (dg.DagsterRunStatus.STARTED, rerun),
            )
        ]
        # and a run of the killed driver that was created but never started: lost too
        unstarted = DagsterRun(
            job_name=lost.job_name,
            run_id=make_new_run_id(),
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags=lost.tags,
        )
        for run in (*others, unstarted):
            instance.add_run(run)
        summary = drive(trm, instance, echo=said.append, max_runs=0)
        after = instance.get_run_by_id(lost.run_id)
        kept = [instance.get_run_by_id(r.run_id) for r in others]
        never = instance.get_run_by_id(unstarted.run_id)
    assert summary.runs == 0
    assert [r.status for r in kept if r is not None] == [r.status for r in others]
    assert never is not None and never.status == dg.DagsterRunStatus.FAILURE
    assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
    assert after.tags[LOST_TAG] == "true"
    assert sorted(said) == sorted(
        f"run {r.run_id[:8]} ({r.job_name}) was left in progress by a process that is gone: "
        "marked failed"
        for r in (lost, unstarted)
    )

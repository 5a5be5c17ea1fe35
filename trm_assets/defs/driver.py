"""``trm train`` through Dagster: the same jobs the epoch sensor launches, executed in process
against a persistent instance, so every unit of work is a Dagster run with lineage in the UI.

The order comes from the planner (:func:`trm_assets.defs.sensors.planned_action`, the same
function the sensor calls); each unit becomes one run of ``gate_step``, ``slow_update`` or
``finalize``.
"""

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from trm_assets.defs.jobs import finalize, gate_step, slow_update, slow_update_run_config
from trm_assets.defs.partitions import EPOCHS, STEPS, epoch_key, step_key
from trm_assets.defs.resources import TrmResource
from trm_assets.defs.sensors import (
    HOST_TAG,
    PID_TAG,
    UNIT_TAG,
    WORKSPACE_TAG,
    dagster_unit,
    planned_action,
)
from trm_assets.domain.errors import TrmError
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.units import unit_key

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DAGSTER_HOME = PROJECT_ROOT / "dagster_home"
Echo = Callable[[str], None]


class TrainingRunFailed(TrmError, RuntimeError):
    """A Dagster run of a unit failed; the workspace is at the last checkpoint."""


@dataclass(frozen=True)
class DriveSummary:
    runs: int
    last: Action
    run_ids: tuple[str, ...]


def ensure_dagster_home() -> Path:
    """``DAGSTER_HOME`` as set, else the project's ``dagster_home/`` (with its shipped yaml)."""
    home = Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def _run_config(trm: TrmResource, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "resources": {
            "trm": {
                "config": {
                    "workspace": trm.workspace,
                    "config_path": trm.config_path,
                    "overrides": list(trm.overrides),
                }
            }
        },
        # The driver prints one line per unit; Dagster's own event log stays in the instance.
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
    }
    if extra:
        cfg.update(extra)
    return cfg


def _job(name: str) -> dg.JobDefinition:
    from trm_assets.definitions import defs  # the code location's jobs, resources bound

    return defs.resolve_job_def(name)


def execute_unit(action: Action, trm: TrmResource, instance: dg.DagsterInstance) -> str:
    """Execute the Dagster run of one planned unit; returns its run id."""
    unit = dagster_unit(action)
    # the pid lets the sensor tell a run whose in-process worker was killed from a live one
    tags = {
        UNIT_TAG: unit_key(unit),
        WORKSPACE_TAG: trm.workspace,
        PID_TAG: str(os.getpid()),
        HOST_TAG: socket.gethostname(),
    }
    if unit.kind == "step":
        assert unit.epoch is not None and unit.step is not None
        e, s = epoch_key(unit.epoch), step_key(unit.step)
        for name, key in ((EPOCHS, e), (STEPS, s)):
            if not instance.has_dynamic_partition(name, key):
                instance.add_dynamic_partitions(name, [key])
        result = _job(gate_step.name).execute_in_process(
            run_config=_run_config(trm),
            instance=instance,
            partition_key=dg.MultiPartitionKey({"epoch": e, "step": s}),
            tags=tags,
            raise_on_error=False,
        )
    elif unit.kind == "slow_update":
        assert unit.epoch is not None
        result = _job(slow_update.name).execute_in_process(
            run_config=_run_config(trm, slow_update_run_config(unit.epoch)),
            instance=instance,
            tags=tags,
            raise_on_error=False,
        )
    else:
        result = _job(finalize.name).execute_in_process(
            run_config=_run_config(trm),
            instance=instance,
            tags=tags,
            raise_on_error=False,
        )
    if not result.success:
        failure = next(
            (ev for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"), None
        )
        detail = ""
        if failure is not None and failure.step_failure_data is not None:
            err = failure.step_failure_data.error
            detail = f": {err.message.strip()}" if err is not None else ""
        raise TrainingRunFailed(
            f"run {result.run_id} ({unit.describe()}) failed{detail}. The workspace is at its "
            f"last checkpoint; fix the cause and run `trm train --resume` (or re-execute the "
            "run from the UI)"
        )
    return result.run_id


def drive(
    trm: TrmResource,
    instance: dg.DagsterInstance,
    *,
    echo: Echo | None = None,
    max_runs: int | None = None,
) -> DriveSummary:
    """Execute units until the planner says ``done`` (or ``max_runs``)."""
    say = echo or (lambda _m: None)
    run_ids: list[str] = []
    action = planned_action(trm)
    while action.kind != "done" and (max_runs is None or len(run_ids) < max_runs):
        unit = dagster_unit(action)
        t0 = time.monotonic()
        run_id = execute_unit(action, trm, instance)
        run_ids.append(run_id)
        for line in harness_lines(instance, run_id):
            say(line)
        what = unit.describe()
        if unit.kind == "slow_update":
            what = f"slow update (epoch {unit.epoch}, functions {unit.slow_step}..10)"
        say(f"  [{what}: dagster run {run_id[:8]}, {time.monotonic() - t0:.1f}s]")
        action = planned_action(trm)
    return DriveSummary(len(run_ids), action, tuple(run_ids))


def harness_lines(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The progress lines the harness logged inside a run (plain log messages at INFO or above,
    without Dagster's own events)."""
    lines = []
    for e in instance.all_logs(run_id):
        level = e.level if isinstance(e.level, int) else logging.getLevelName(e.level)
        if e.dagster_event is None and isinstance(level, int) and level >= logging.INFO:
            lines.append(e.user_message)
    return [line for line in lines if line]

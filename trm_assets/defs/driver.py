"""``trm train`` through Dagster: the same jobs the epoch sensor launches, executed in process
against a persistent instance, so every unit of work is a Dagster run with lineage in the UI.

The order comes from the planner (:func:`trm_assets.defs.ops.planned_action`, the same function
the sensor calls); each unit becomes one run of ``<experiment>__gate_step``, ``__slow_update`` or
``__finalize``. The experiment is registered in the instance (``$DAGSTER_HOME/experiments.yaml``)
so the UI's code location serves it.
"""

import logging
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import dagster as dg
import yaml

from trm_assets.defs import ops
from trm_assets.defs.build import ExperimentDefs, build_experiment
from trm_assets.defs.experiments import EXPERIMENT_TAG, Experiment, register
from trm_assets.defs.ops import planned_action
from trm_assets.defs.partitions import ensure_partitions, epoch_key, epoch_step_key, step_key
from trm_assets.defs.resources import LLMResource, llm_resources
from trm_assets.defs.sensors import HOST_TAG, PID_TAG, UNIT_TAG, dagster_unit, fail_lost_runs
from trm_assets.domain.errors import TrmError
from trm_assets.harness.loop.plan import N_SLOW_STEPS, Action
from trm_assets.harness.loop.progress import PROGRESS_MARK, LiveProgress
from trm_assets.harness.loop.units import status_against, unit_key
from trm_assets.harness.reports.lineage import load_state_dict
from trm_assets.harness.storage.workspace import RUN_BASE, manifest_path, read_manifest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DAGSTER_HOME = PROJECT_ROOT / "dagster_home"
Echo = Callable[[str], None]


class TrainingRunFailed(TrmError, RuntimeError):
    """A Dagster run of a unit failed; the workspace is at the last checkpoint."""


class TrainingInterrupted(TrainingRunFailed):
    """The run of a unit was interrupted (Ctrl-C, SIGTERM): nothing is wrong to fix."""


@dataclass(frozen=True)
class DriveSummary:
    runs: int
    last: Action
    run_ids: tuple[str, ...]
    experiment: str = ""  # the name it is registered under (its asset-key prefix and UI folder)


def ensure_dagster_home() -> Path:
    """``DAGSTER_HOME`` as set, else the project's ``dagster_home/`` (with its shipped yaml).

    The instance's storage is created once under an exclusive lock on the home: two commands
    started together on a fresh instance (two workspaces) otherwise race to create its SQLite
    tables (``table snapshots already exists``, issue 18.10)."""
    import fcntl

    home = Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    with open(home / ".trm-instance.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            with dg.DagsterInstance.get() as instance:  # creates (or migrates) the storage
                instance.get_runs(limit=1)
        except (yaml.YAMLError, dg.DagsterInvalidConfigError) as e:  # a hand-edited dagster.yaml
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TrmError(
                f"{home / 'dagster.yaml'} (DAGSTER_HOME): not a valid Dagster instance config "
                f"({first}); fix or remove the file (see the README's Dagster section)"
            ) from None
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return home


@dataclass
class Executor:
    """Runs an experiment's units as in-process Dagster runs against one instance."""

    experiment: Experiment
    instance: dg.DagsterInstance
    resources: Mapping[str, LLMResource]

    def __post_init__(self) -> None:
        self.built: ExperimentDefs = build_experiment(self.experiment)
        self.defs = self.built.bound(self.resources)

    def execute(self, action: Action) -> str:
        """Execute the Dagster run of one planned unit; returns its run id."""
        unit = dagster_unit(action)
        jobs, parts = self.built.jobs, self.built.scope.partitions
        # the pid lets the sensor tell a run whose in-process worker was killed from a live one
        tags = {UNIT_TAG: unit_key(unit), PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
        kwargs: dict[str, Any] = {}
        if unit.kind == "step":
            assert unit.epoch is not None and unit.step is not None
            ensure_partitions(self.instance, parts.epochs_name, [epoch_key(unit.epoch)])
            ensure_partitions(self.instance, parts.steps_name, [step_key(unit.step)])
            name, kwargs["partition_key"] = (
                jobs.gate_step.name,
                epoch_step_key(unit.epoch, unit.step),
            )
        elif unit.kind == "slow_update":
            assert unit.epoch is not None
            ensure_partitions(self.instance, parts.epochs_name, [epoch_key(unit.epoch)])
            name = jobs.slow_update.name
            kwargs["partition_key"] = epoch_key(unit.epoch)
        else:
            name = jobs.finalize.name
        result = self.defs.resolve_job_def(name).execute_in_process(
            # the terminal gets the unit's own lines (ops.LIVE_ECHO) and one error line naming
            # the cause; Dagster's event lines and stack traces stay in the run's log (the UI)
            run_config={"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}},
            instance=self.instance,
            tags=tags,
            raise_on_error=False,
            **kwargs,
        )
        if not result.success and _interrupted(result):
            raise TrainingInterrupted(
                f"interrupted during {unit.describe()} (run {result.run_id}); the workspace is at "
                "its last checkpoint: `trm train --resume` continues where it stopped"
            )
        if not result.success:
            raise TrainingRunFailed(
                f"run {result.run_id} ({unit.describe()}) failed{_failure_detail(result)}. The "
                "workspace is at its last checkpoint; fix the cause and run `trm train --resume` "
                "(or re-execute the run from the UI, where its log has the full traceback)"
            )
        return result.run_id


def _failure_detail(result: dg.ExecuteInProcessResult) -> str:
    failure = next((ev for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"), None)
    if failure is None or failure.step_failure_data is None:
        return ""
    err = failure.step_failure_data.error
    user = failure.step_failure_data.user_failure_data
    text = (user.description if user is not None else None) or _root_message(err)
    return f": {text.strip()}" if text else ""


#: What an interrupt looks like in a failed run: Dagster's own, Python's, and DuckDB's (a Ctrl-C
#: that lands inside a run-log query surfaces as "RuntimeError: Query interrupted", which a
#: hostile pass saw reported as a failure "to fix", exit 2).
_INTERRUPTS: Final = (
    "DagsterExecutionInterruptedError",
    "KeyboardInterrupt",
    "Query interrupted",
    "InterruptException",
)


def _interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether the run stopped on an interrupt: Dagster turns SIGINT / SIGTERM in an op into
    ``DagsterExecutionInterruptedError`` (a step failure); one that lands outside an op (while
    the run initialises its resources) fails the run itself with the ``KeyboardInterrupt``."""
    for ev in result.all_events:
        if ev.event_type_value == "STEP_FAILURE":
            err = ev.step_failure_data.error
        elif ev.event_type_value == "PIPELINE_FAILURE":
            err = ev.job_failure_data.error
        else:
            continue
        while err is not None:
            if any(name in (err.cls_name or "") + str(err.message) for name in _INTERRUPTS):
                return True
            err = err.cause
    return False


def _root_message(err: Any) -> str:
    """The innermost cause of a Dagster error (an op's own exception, not Dagster's
    ``DagsterExecutionStepExecutionError`` wrapping it), without its qualified class name when
    it is one of ours (a TrmError's message names the file and the fix)."""
    while err is not None and getattr(err, "cause", None) is not None:
        err = err.cause
    if err is None:
        return ""
    text = str(err.message).strip()
    head, sep, rest = text.partition(": ")
    if sep and head.startswith("trm_assets.") and " " not in head:
        return rest
    return text


def register_in(instance: dg.DagsterInstance, experiment: Experiment) -> Experiment:
    """Register the experiment in the instance's registry (so its code location serves it); a
    directory name another workspace already uses gets a path-derived suffix."""
    return register(instance.root_directory, experiment, rename_on_conflict=True)


def execute_unit(
    action: Action,
    trm: Experiment,
    instance: dg.DagsterInstance,
    resources: Mapping[str, LLMResource] | None = None,
) -> str:
    """Execute the Dagster run of one planned unit; returns its run id."""
    exp = register_in(instance, trm)
    return Executor(exp, instance, resources or llm_resources()).execute(action)


def drive(
    trm: Experiment,
    instance: dg.DagsterInstance,
    *,
    echo: Echo | None = None,
    max_runs: int | None = None,
    resources: Mapping[str, LLMResource] | None = None,
    live: LiveProgress | None = None,
) -> DriveSummary:
    """Execute units until the planner says ``done`` (or ``max_runs``). ``live``: a terminal's
    progress bar, drawn while a unit runs in place of the periodic progress lines."""
    say = echo or (lambda _m: None)
    exp = register_in(instance, trm)
    _, lost = fail_lost_runs(instance, exp.name)
    for run in lost:  # a killed `trm train` left them STARTED
        say(
            f"run {run.run_id[:8]} ({run.job_name}) was left in progress by a process that is "
            "gone: marked failed"
        )
    executor = Executor(exp, instance, resources or llm_resources())
    run_ids: list[str] = catch_up(executor, say)
    action = planned_action(exp)
    while action.kind != "done" and (max_runs is None or len(run_ids) < max_runs):
        unit = dagster_unit(action)
        t0 = time.monotonic()
        shown: list[str] = []  # said while the run ran (ops.LIVE_ECHO), not again after it
        ops.LIVE_ECHO, ops.LIVE_PROGRESS = _live(shown, say), live
        try:
            run_id = executor.execute(action)
        finally:
            ops.LIVE_ECHO = ops.LIVE_PROGRESS = None
        run_ids.append(run_id)
        for line in harness_lines(instance, run_id):
            if line in shown:
                shown.remove(line)
            elif not (live is not None and line.startswith(PROGRESS_MARK)):  # drawn as the bar
                say(line)
        what = unit.describe()
        if unit.kind == "slow_update":
            what = f"slow update (epoch {unit.epoch}, functions {unit.slow_step}..10)"
        say(f"  [{what}: dagster run {run_id[:8]}, {time.monotonic() - t0:.1f}s]")
        action = planned_action(exp)
    return DriveSummary(len(run_ids), action, tuple(run_ids), exp.name)


_STEP_RUN: Final = re.compile(rf"^{RUN_BASE}_e(\d+)_s(\d+)$")


def unpublished(executor: Executor) -> list[Action]:
    """Units whose checkpoint landed but whose partition was never materialized: a kill between
    a unit's checkpoint and its run's events (hostile pass: ``epoch_eval`` e0 and
    ``step_results`` e0|s1 were gone for good — the resume moved on, the plot and the lineage
    lost them). A step ran when its batch run is in the manifest; an epoch ended when it is in
    the checkpoint's history; and a run of this instance was started for the unit."""
    exp, instance = executor.experiment, executor.instance
    keys = executor.built.scope.keys
    ws = exp.workspace_dir()
    if not manifest_path(ws).is_file():
        return []
    # only units a run of this instance was started for (the run the kill left, marked failed):
    # a unit trained with --no-dagster has no record here to complete (review: they were
    # "caught up" at every later resume, each called interrupted)
    started = {
        r.tags.get(UNIT_TAG, "")
        for r in instance.get_runs(filters=dg.RunsFilter(tags={EXPERIMENT_TAG: exp.name}))
    }
    if not started:
        return []
    steps = sorted(
        (int(m.group(1)), int(m.group(2)))
        for r in read_manifest(ws).history
        if (m := _STEP_RUN.match(r.run_id))
    )
    epochs = sorted({int(h["epoch"]) for h in (load_state_dict(ws) or {}).get("history", [])})

    def published(key: dg.AssetKey, partition: str) -> bool:
        return bool(
            instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
            ).records
        )

    # only units wholly behind the planner: a unit it has not finished is its next run's work
    nxt, cfg = planned_action(exp), exp.run_config()

    def done(unit: Action) -> bool:
        return status_against(unit, nxt, cfg) == "done"

    out = [
        Action("step", epoch=e, step=st)
        for e, st in steps
        if unit_key(Action("step", epoch=e, step=st)) in started
        and done(Action("step", epoch=e, step=st))
        and not published(keys.step_results, epoch_step_key(e, st))
    ]
    out += [
        Action("slow_update", epoch=e, slow_step=1)
        for e in epochs
        if any(k.startswith(f"slow:e{e}:") for k in started)
        and done(Action("slow_update", epoch=e, slow_step=N_SLOW_STEPS))
        and not published(keys.epoch_eval, epoch_key(e))
    ]
    return out


def catch_up(executor: Executor, say: Echo) -> list[str]:
    """Materialize what a kill left unpublished (:func:`unpublished`): the unit's job runs again
    for its partition, every unit in it has run already (nothing is re-run or re-decided), and
    its ops publish the partition from the records. Returns the runs' ids."""
    run_ids = []
    for action in unpublished(executor):
        run_id = executor.execute(action)
        run_ids.append(run_id)
        what = dagster_unit(action).describe()
        if action.kind == "slow_update":
            what = f"epoch {action.epoch} (epoch_eval, holdout_report)"
        say(
            f"  [published {what}, which no run had materialized (an interrupted run): "
            f"dagster run {run_id[:8]}]"
        )
    return run_ids


def _live(shown: list[str], say: Echo) -> Echo:
    def echo(line: str) -> None:
        shown.append(line)
        say(line)

    return echo


def harness_lines(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The progress lines the harness logged inside a run (plain log messages at INFO or above,
    without Dagster's own events)."""
    lines = []
    for e in instance.all_logs(run_id):
        level = e.level if isinstance(e.level, int) else logging.getLevelName(e.level)
        if e.dagster_event is None and isinstance(level, int) and level >= logging.INFO:
            lines.append(e.user_message)
    return [line for line in lines if line]

"""A SIGKILL inside a Dagster-driven unit of work (issue 9, the Dagster side of kill-anywhere).

The unit's run stays ``STARTED`` in the instance: nothing marks the run of a dead process as
failed (in-process execution has no run worker to health-check). A re-launch through the driver
resumes correctly (``trm bench reliability`` checks the final state); the epoch sensor, however,
refuses to launch while any run is in progress, so after such a kill it would wait forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg

from trm_assets.defs.build import build_experiment
from trm_assets.defs.resources import TrmResource
from trm_assets_tests.reliability.conftest import (
    REPO,
    SMOKE_CONFIG,
    TINY,
    child_env,
    new_workspace,
    tiny_config,
)
from trm_bench.reliability import dagster_args


def _kill_inside_a_dagster_run(ws: Path, home: Path) -> None:
    home.mkdir()
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
            if (ws / "state.json").exists():  # init done, step (0, 0) in its Dagster run
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
    _kill_inside_a_dagster_run(ws, home)
    trm = TrmResource(workspace=str(ws), config_path=str(SMOKE_CONFIG), overrides=list(TINY))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        stuck = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        assert stuck  # the killed unit's run
        with dg.build_sensor_context(instance=instance) as ctx:
            result = build_experiment(trm).sensor(ctx)
        assert not isinstance(result, dg.SkipReason), result.skip_message

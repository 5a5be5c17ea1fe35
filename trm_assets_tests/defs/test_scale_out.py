"""Scale-out on real parts: a sweep of two experiments queued through the webserver's GraphQL API
(`trm sweep`'s code), on PostgreSQL instance storage (dagster-postgres, a private cluster), run by
the daemon with the QueuedRunCoordinator and the shipped dagster.yaml's tag concurrency limit.

Checked from the instance: both experiments complete with results identical to sequential runs;
no two runs of one experiment overlap while the two experiments run in parallel; the daemon is
SIGKILLed mid-sweep (both epoch runs in flight, both finalize runs queued) and restarted — the
in-flight runs finish, nothing is dequeued while it is down, every queued run then runs exactly
once: no run lost, none duplicated.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from trm_assets.defs.experiments import Experiment
from trm_assets.defs.launch import Launched, Launcher, create_sweep, queue_chain, sweep_members
from trm_assets.harness.data.config import load_config
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets.llm.factory import build_providers

from .conftest import Trained, new_workspace
from .servers import Postgres, daemon, postgres_home, stop, webserver

DONE = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
STATE_KEYS = ("correctness", "history", "final", "rejected_buffer", "budget")


def sequential_result(config: Path, seed: int, ws: Path) -> dict[str, Any]:
    """The same experiment trained in one process, no Dagster (the sequential reference)."""
    cfg = load_config(config, (f"seed={seed}",))
    new_workspace(ws)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        assert train(ctx).last.kind == "done"
    return result_of(ws)


def result_of(ws: Path) -> dict[str, Any]:
    state = json.loads((ws / "state.json").read_text(encoding="utf-8"))
    m = read_manifest(ws)
    return {**{k: state[k] for k in STATE_KEYS}, "current": m.current, "best": m.best}


def wait_for(what: str, ok: Callable[[], bool], timeout_s: float, log_dir: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            tail = (log_dir / "daemon.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"timed out waiting for {what}; daemon log:\n{tail}")
        time.sleep(0.5)


def test_sweep_on_postgres_with_the_queue_survives_a_daemon_kill(
    postgres: Postgres, trained: Trained, tmp_path: Path
) -> None:
    pg = postgres.create_database("scale_out")
    home = postgres_home(tmp_path / "home", pg)
    logs = tmp_path
    members = sweep_members("sw", [trained.small_config], [2, 3], tmp_path / "sweep")
    experiments = [e for e in create_sweep(members, [], home) if isinstance(e, Experiment)]
    with dg.DagsterInstance.from_config(str(home)) as instance:  # creates the schema once

        def status(run_id: str) -> dg.DagsterRunStatus:
            run = instance.get_run_by_id(run_id)
            assert run is not None
            return run.status

        with webserver(home, logs) as url:
            first = daemon(home, logs)
            second = None
            try:
                launcher = Launcher(url)
                launcher.reload()  # serves the experiments registered after it loaded
                launched: list[Launched] = []
                for exp in experiments:
                    launched.extend(queue_chain(launcher, exp, instance))
                epochs = [x.run_id for x in launched if x.job.endswith("__epoch")]
                finals = [x.run_id for x in launched if x.job.endswith("__finalize")]
                assert len(epochs) == len(finals) == 2
                wait_for(
                    "both epoch runs to start",
                    lambda: all(status(r) in (dg.DagsterRunStatus.STARTED, *DONE) for r in epochs),
                    150,
                    logs,
                )
                os.kill(first.pid, signal.SIGKILL)  # the daemon only: its run workers live on
                first.wait(timeout=10)
                assert all(status(r) == dg.DagsterRunStatus.QUEUED for r in finals)
                wait_for(
                    "the in-flight epoch runs to finish without the daemon",
                    lambda: all(status(r) in DONE for r in epochs),
                    150,
                    logs,
                )
                time.sleep(5)  # > dequeue_interval_seconds: nothing may dequeue meanwhile
                assert all(status(r) == dg.DagsterRunStatus.QUEUED for r in finals)
                second = daemon(home, logs)
                wait_for(
                    "the queued runs after the restart",
                    lambda: all(status(r) in DONE for r in finals),
                    150,
                    logs,
                )
            finally:
                stop(first)  # its process group: the orphaned code server, if still there
                if second is not None:
                    stop(second)
        records = {r.dagster_run.run_id: r for r in instance.get_run_records()}
        assert sorted(records) == sorted(x.run_id for x in launched)  # none lost or duplicated
        assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records.values())
        spans: dict[str, list[tuple[float, float]]] = {}
        for x in launched:
            rec = records[x.run_id]
            assert rec.start_time is not None and rec.end_time is not None
            assert rec.dagster_run.tags["trm/experiment"] == x.experiment
            spans.setdefault(x.experiment, []).append((rec.start_time, rec.end_time))
        for runs in spans.values():  # strictly sequential within an experiment, in order
            for (_, end), (start, _) in itertools.pairwise(runs):
                assert start >= end
        (a, b) = (spans[e.name][0] for e in experiments)  # the two epoch runs overlapped
        assert max(a[0], b[0]) < min(a[1], b[1])
    for m in members:
        expected = sequential_result(trained.small_config, m.seed, tmp_path / "seq" / m.name)
        assert result_of(m.workspace) == expected, m.name

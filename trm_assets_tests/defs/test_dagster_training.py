"""The Dagster layer on real executions: jobs resolve, an epoch partition materializes with the
same result as the sensor/driver path, slow_update runs in process, lineage from accuracy to skill
hash, and the epoch sensor's decisions (launch, in-progress skip, failed-run skip, done)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import dagster as dg

from trm_assets.definitions import defs
from trm_assets.defs.assets.training import epoch_results
from trm_assets.defs.driver import drive
from trm_assets.defs.jobs import SLOW_OPS, gate_step, slow_update_run_config
from trm_assets.defs.sensors import UNIT_TAG, WORKSPACE_TAG, epoch_sensor
from trm_assets.harness.loop.slow_update import SLOW_STEPS
from trm_assets.harness.reports.lineage import epoch_summary, skill_facts
from trm_assets.harness.storage.workspace import read_manifest

from .conftest import Trained, new_workspace, tiny_resource

SLOW_NAMES = [
    "snapshot_and_rerun_validation",
    "record_dual_metric",
    "write_back_r_correctness",
    "settle_probations",
    "update_best_from_r",
    "apply_momentum",
    "evolve_system_and_tools",
    "r2_closed_loop",
    "report_epoch",
    "refresh_ladder",
]


def test_every_job_resolves_and_slow_update_has_ten_ops_in_order() -> None:
    dg.Definitions.validate_loadable(defs)
    for name in ("gate_step", "slow_update", "finalize", "epoch_job"):
        assert defs.resolve_job_def(name).name == name
    job = defs.resolve_job_def("slow_update")
    assert [fn.__name__ for fn in SLOW_STEPS] == SLOW_NAMES
    assert [op.name for op in SLOW_OPS] == SLOW_NAMES
    assert job.executor_def is dg.in_process_executor
    deps = job.graph.dependency_structure
    for prev, nxt in itertools.pairwise(SLOW_NAMES):
        upstream = [o.node_name for o in deps.all_upstream_outputs_from_node(nxt)]
        assert upstream == [prev]


def _latest(instance: dg.DagsterInstance, asset: str, partition: str) -> dg.AssetMaterialization:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    assert records, f"no materialization of {asset}[{partition}]"
    mat = records[0].asset_materialization
    assert mat is not None
    return mat


def test_lineage_from_accuracy_to_skill_hash(trained: Trained) -> None:
    summary = epoch_summary(trained.workspace, 0)
    assert summary is not None
    with dg.DagsterInstance.from_config(str(trained.dagster_home)) as instance:
        runs = instance.get_runs()
        assert sorted(r.job_name for r in runs) == ["finalize", "gate_step", "slow_update"]
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        md = _latest(instance, "epoch_eval", "e0").metadata
        assert md["val_accuracy"].value == summary["val_accuracy"]
        assert 0.0 < md["val_accuracy"].value < 1.0
        assert md["skills_version"].value == summary["val_skills_version"]
        assert md["simulated"].value is True
        assert md["rollouts"].value == summary["rollouts"] > 0
        rows = md["per_task_type"].value.records
        assert len(rows) == 12
        for row in rows:
            facts = skill_facts(
                trained.workspace, row.data["task_type"], md["skills_version"].value
            )
            assert md[f"skill_hash/{facts.skill_file}"].value == facts.content_hash
            assert row.data["content_hash"] == facts.content_hash[:16]
            # copied from the skill_versions materialization of exactly this partition
            sv = _latest(instance, "skill_versions", row.data["task_type"])
            assert row.data["skill_versions_data_version"] == sv.tags["dagster/data_version"]
            assert sv.metadata["content_hash"].value == facts.content_hash
        hold = _latest(instance, "holdout_report", "e0").metadata
        assert set(k for k in hold if k.startswith("versions/")) == {
            "versions/seed",
            "versions/epoch_start",
            "versions/current",
            "versions/best",
        }


def test_materializing_an_epoch_partition_equals_the_sensor_path(
    trained: Trained, tmp_path: Path
) -> None:
    ws = new_workspace(tmp_path / "ws")
    trm = tiny_resource(ws, trained.config)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("epochs", ["e0"])
        result = dg.materialize(
            [epoch_results], resources={"trm": trm}, instance=instance, partition_key="e0"
        )
        assert result.success
        keys = sorted(
            m.asset_key.to_user_string() for m in result.get_asset_materialization_events()
        )
        assert keys.count("epoch_eval") == 1 and keys.count("holdout_report") == 1
        assert keys.count("skill_versions") >= 12
        # materializing again is a no-op for training (idempotent), same numbers
        again = dg.materialize(
            [epoch_results], resources={"trm": trm}, instance=instance, partition_key="e0"
        )
        assert again.success
    assert epoch_summary(ws, 0) == epoch_summary(trained.workspace, 0)
    a, b = read_manifest(ws), read_manifest(trained.workspace)
    assert (a.current, a.best) == (b.current, b.best)
    for t in ("Counting Problem", "OCR Problems"):
        assert skill_facts(ws, t) == skill_facts(trained.workspace, t) or (
            skill_facts(ws, t).content_hash == skill_facts(trained.workspace, t).content_hash
        )


def test_slow_update_execute_in_process(trained: Trained, tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "ws")
    trm = tiny_resource(ws, trained.config)
    with dg.instance_for_test() as instance:
        drive(trm, instance, max_runs=1)  # init + the only step: the slow update is next
        assert epoch_summary(ws, 0) is None
        job = defs.resolve_job_def("slow_update")
        run_config = {
            **slow_update_run_config(0),
            "resources": {
                "trm": {"config": {"workspace": str(ws), "config_path": str(trained.config)}}
            },
        }
        result = job.execute_in_process(run_config=run_config, instance=instance)
        assert result.success
        assert [
            e.node_name for e in result.all_events if e.event_type_value == "STEP_SUCCESS"
        ] == SLOW_NAMES
        assert epoch_summary(ws, 0) is not None
        assert (
            _latest(instance, "epoch_eval", "e0")
            .metadata["val_run_id"]
            .value.startswith("train_e0_R")
        )
        # re-running the job on the finished epoch is a no-op that still succeeds
        assert job.execute_in_process(run_config=run_config, instance=instance).success
    state = json.loads((ws / "state.json").read_text())
    assert state["epoch"] == 1 and not state["finalized"]  # the epoch is complete: finalize is next


def _sensor(trm, instance, cursor=None):
    ctx = dg.build_sensor_context(instance=instance, resources={"trm": trm}, cursor=cursor)
    return epoch_sensor(ctx), ctx


def test_sensor_launches_first_step_with_partitions(trained: Trained, tmp_path: Path) -> None:
    trm = tiny_resource(new_workspace(tmp_path / "ws"), trained.config)
    with dg.instance_for_test() as instance:
        result, ctx = _sensor(trm, instance)
        assert isinstance(result, dg.SensorResult)
        (req,) = result.run_requests
        assert req.job_name == "gate_step"
        assert req.partition_key == dg.MultiPartitionKey({"epoch": "e0", "step": "s0"})
        assert req.run_key and req.tags[UNIT_TAG] == "step:e0:s0"
        added = sorted(
            (r.partitions_def_name, tuple(r.partition_keys))
            for r in result.dynamic_partitions_requests
        )
        assert added == [("epochs", ("e0",)), ("steps", ("s0",))]
        assert json.loads(ctx.cursor) == {"launched": 1}


def test_sensor_skips_while_a_run_is_in_progress(trained: Trained, tmp_path: Path) -> None:
    trm = tiny_resource(new_workspace(tmp_path / "ws"), trained.config)
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def(gate_step.name)
        instance.create_run_for_job(job_def=job, run_config={})  # NOT_STARTED
        result, _ = _sensor(trm, instance)
        assert isinstance(result, dg.SkipReason)
        assert (
            "NOT_STARTED" in result.skip_message
            and "one mutating run at a time" in result.skip_message
        )


def test_sensor_does_not_relaunch_after_a_failure(trained: Trained, tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "ws")
    trm = tiny_resource(ws, trained.config)
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def(gate_step.name)
        run = instance.create_run_for_job(
            job_def=job, run_config={}, tags={UNIT_TAG: "step:e0:s0", WORKSPACE_TAG: str(ws)}
        )
        instance.report_run_failed(run)
        result, _ = _sensor(trm, instance)
        assert isinstance(result, dg.SkipReason)
        msg = result.skip_message
        assert "FAILURE" in msg and "not relaunching" in msg and "trm train --resume" in msg


def test_sensor_requests_slow_update_then_stops_when_done(trained: Trained, tmp_path: Path) -> None:
    ws = new_workspace(tmp_path / "ws")
    trm = tiny_resource(ws, trained.config)
    with dg.instance_for_test() as instance:
        drive(trm, instance, max_runs=1)
        result, _ = _sensor(trm, instance, cursor=json.dumps({"launched": 4}))
        (req,) = result.run_requests
        assert req.job_name == "slow_update"
        assert req.run_config == slow_update_run_config(0)
        assert req.run_key.endswith("#5")
    with dg.instance_for_test() as instance:
        result, _ = _sensor(trained.trm, instance)
        assert isinstance(result, dg.SkipReason)
        assert "training finished (completed)" in result.skip_message


def test_trm_run_creates_trains_and_resumes(trained: Trained, tmp_path: Path) -> None:
    """`make run`'s command: creates the workspace, trains through Dagster, and a second call
    resumes a finished workspace without running anything again."""
    from click.testing import CliRunner

    from trm_assets.cli import main

    ws = tmp_path / "ws"
    args = ["run", "--config", str(trained.config), "--workspace", str(ws)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "SIMULATED world" in res.output and f"workspace {ws} created" in res.output
    assert "each unit of work is a Dagster run" in res.output
    assert "epoch 0 done: val" in res.output and "delivered best" in res.output
    assert "done (completed): 3 Dagster run(s)" in res.output
    assert epoch_summary(ws, 0) == epoch_summary(trained.workspace, 0)
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert "done (completed): 0 Dagster run(s)" in again.output


def test_dagster_path_equals_direct_harness_path(trained: Trained, tmp_path: Path) -> None:
    """`trm train --no-dagster` (units called directly) ends where the Dagster runs end."""
    from click.testing import CliRunner

    from trm_assets.cli.train import train_cmd

    ws = new_workspace(tmp_path / "ws")
    res = CliRunner().invoke(
        train_cmd, ["--workspace", str(ws), "--config", str(trained.config), "--no-dagster"]
    )
    assert res.exit_code == 0, res.output
    assert epoch_summary(ws, 0) == epoch_summary(trained.workspace, 0)
    a, b = read_manifest(ws), read_manifest(trained.workspace)
    assert (a.current, a.best) == (b.current, b.best)
    sa = json.loads((ws / "state.json").read_text())
    sb = json.loads((trained.workspace / "state.json").read_text())
    for key in ("correctness", "history", "final", "rejected_buffer", "budget"):
        assert sa[key] == sb[key], key

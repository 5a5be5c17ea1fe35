"""The Dagster layer on real executions: experiments, exact lineage, the epoch asset, the
slow_update job, the epoch sensor's decisions, `trm run`.

Truth is computed independently of the code under test: versions from the run log's ``runs``
table (DuckDB, read here), hashes from the store's ``_meta.json`` files (read here as JSON).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionRecordStatus,
)

from trm_assets.defs.build import build_experiment
from trm_assets.defs.checks import lineage_check_result
from trm_assets.defs.driver import Executor, drive, harness_lines, register_in
from trm_assets.defs.experiments import EXPERIMENT_TAG, Experiment, code_location_experiments
from trm_assets.defs.ops import AFTER_STOP_TAG, SLOW_NAMES
from trm_assets.defs.partitions import epoch_step_key
from trm_assets.defs.resources import llm_resources
from trm_assets.defs.sensors import IMPLICIT_ASSET_JOB, UNIT_TAG
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.harness.reports.lineage import epoch_summary
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets_tests.truth import evaluated_run, run_accuracy, run_versions

from .conftest import Trained, copy_experiment, new_home, new_workspace, write_config

SUCCEEDED = AssetCheckExecutionRecordStatus.SUCCEEDED

# -- independent truth ---------------------------------------------------------------------------


def meta(ws: Path, store: str, version: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ws / "store" / store / version / "_meta.json").read_text(encoding="utf-8")
    )
    return data


def versions(ws: Path, store: str) -> list[str]:
    found = [p.name for p in (ws / "store" / store).iterdir() if p.name.startswith("v")]
    return sorted(found, key=lambda v: int(v[1:]))


def history(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None
) -> dict[int, dg.AssetMaterialization]:
    flt = dg.AssetRecordsFilter(
        asset_key=key, asset_partitions=[partition] if partition is not None else None
    )
    recs = instance.fetch_materializations(flt, limit=5000).records
    return {r.storage_id: r.asset_materialization for r in recs if r.asset_materialization}


def latest(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str
) -> dg.AssetMaterialization:
    recs = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    assert recs and recs[0].asset_materialization is not None, f"{key} [{partition}]"
    return recs[0].asset_materialization


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """The description of the run's (first) failed op."""
    failure = next(
        e.step_failure_data for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )
    assert failure.user_failure_data is not None, failure
    return str(failure.user_failure_data.description)


def lone_step_failure(
    ex: Executor, instance: dg.DagsterInstance, exp: Experiment, epoch: int, step: int
) -> str:
    """The failure message of the experiment's `gate_step` job run alone on `e<epoch>|s<step>`
    (the UI's single step partition), which must fail."""
    job = ex.defs.resolve_job_def(f"{exp.name}__gate_step")
    result = job.execute_in_process(
        instance=instance, partition_key=epoch_step_key(epoch, step), raise_on_error=False
    )
    assert not result.success
    return failure_text(result)


def tags_of(mat: dg.AssetMaterialization) -> Mapping[str, str]:
    """A recorded materialization's tags (Dagster records its data version among them)."""
    assert mat.tags is not None, mat
    return mat.tags


def table(value: dg.MetadataValue[Any]) -> dg.TableMetadataValue:
    """A table metadata value (``.value`` is the table itself, its rows ``.records``)."""
    assert isinstance(value, dg.TableMetadataValue), value
    return value


def table_rows(value: dg.MetadataValue[Any]) -> list[Mapping[str, Any]]:
    """The rows of a table metadata value (each column holds the type the table was built with:
    the static type of a row's cell is only "some scalar", as a JSON value's is)."""
    return [r.data for r in table(value).value.records]


def metadata_number(value: dg.MetadataValue[Any]) -> float:
    """The number an int or float metadata value holds."""
    v = value.value
    assert isinstance(v, int | float), value
    return v


def metadata_text(value: dg.MetadataValue[Any]) -> str:
    """The text a text metadata value holds."""
    v = value.value
    assert isinstance(v, str), value
    return v


def partitions(mats: Iterable[dg.AssetMaterialization]) -> list[str]:
    """The partitions of materializations of a partitioned asset, sorted."""
    out: list[str] = []
    for m in mats:
        assert m.partition is not None, m
        out.append(m.partition)
    return sorted(out)


def key(exp: Experiment, asset: str) -> dg.AssetKey:
    return dg.AssetKey([exp.name, asset])


def task_types(exp: Experiment) -> list[str]:
    return list(build_experiment(exp).scope.partitions.task_type_keys())


# -- experiments ---------------------------------------------------------------------------------


def test_one_code_location_serves_both_experiments_disjointly(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(trained.home))
    monkeypatch.delenv("TRM_DAGSTER_WORKSPACE", raising=False)
    served = code_location_experiments()
    assert [e.name for e in served] == ["ws", "ws_b"]
    built = [build_experiment(e) for e in served]
    merged = dg.Definitions.merge(
        *(b.definitions for b in built), dg.Definitions(resources=llm_resources())
    )  # what definitions.py builds
    dg.Definitions.validate_loadable(merged)
    keys = [{k.to_user_string() for k in b.bound().resolve_all_asset_keys()} for b in built]
    assert not keys[0] & keys[1]
    for b, ks in zip(built, keys, strict=True):
        assert all(k.startswith(f"{b.scope.name}/") for k in ks)
        assert {j.name for j in b.jobs.all()} == {
            f"{b.scope.name}__{j}" for j in ("gate_step", "slow_update", "epoch", "finalize")
        }
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        runs = {r.run_id: r for r in instance.get_runs()}
        assert len(runs) == len(trained.run_ids)
        for b, ks in zip(built, keys, strict=True):
            for k in ks:
                for mat_run in {
                    r.run_id
                    for r in instance.fetch_materializations(
                        dg.AssetKey.from_user_string(k), limit=5000
                    ).records
                }:
                    assert runs[mat_run].tags[EXPERIMENT_TAG] == b.scope.name, k


def test_every_version_the_loop_created_is_recorded_by_the_run_that_created_it(
    trained: Trained,
) -> None:
    exp, ws = trained.lineage, trained.workspace
    by_file = {skill_file_name(t): t for t in task_types(exp)}
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        runs = {r.run_id: r for r in instance.get_runs()}
        expected: list[tuple[str | None, str, str]] = []  # (partition, version, data version)
        for v in versions(ws, "skills"):
            m = meta(ws, "skills", v)
            parent = meta(ws, "skills", m["parent"])["files"] if m["parent"] else {}
            for f, h in m["files"].items():
                if f in by_file and parent.get(f) != h:
                    expected.append((by_file[f], v, h[:16]))
        recorded = {
            (mat.partition, mat.metadata["version"].value, tags_of(mat)["dagster/data_version"])
            for mat in history(instance, key(exp, "skill_versions")).values()
            if mat.metadata["kind"].value != "delivery"
        }
        assert set(expected) == recorded
        kinds = {
            m.metadata["kind"].value for m in history(instance, key(exp, "skill_versions")).values()
        }
        assert {"init", "accept", "momentum", "delivery"} <= kinds
        # an accept is recorded by the gate_step run of its own step
        for mat_id, mat in history(instance, key(exp, "skill_versions")).items():
            if mat.metadata["kind"].value == "accept":
                reason = str(mat.metadata["reason"].value).split()  # "accept e0 s0 …"
                run_id = next(
                    r.run_id
                    for r in instance.fetch_materializations(
                        dg.AssetRecordsFilter(
                            asset_key=key(exp, "skill_versions"), storage_ids=[mat_id]
                        ),
                        limit=1,
                    ).records
                )
                assert runs[run_id].tags[UNIT_TAG] == f"step:{reason[1]}:{reason[2]}"
        # delivery: the final current (best) version's file content, after the last created one
        current = read_manifest(ws).current
        deliveries = [
            m
            for m in history(instance, key(exp, "skill_versions")).values()
            if m.metadata["kind"].value == "delivery"
        ]
        assert deliveries and all(m.metadata["version"].value == current.skills for m in deliveries)
        prompt_dvs = [
            (m.metadata["version"].value, tags_of(m)["dagster/data_version"])
            for m in history(instance, key(exp, "prompt_versions")).values()
            if m.metadata["kind"].value != "delivery"
        ]
        assert sorted(prompt_dvs) == sorted(
            (v, meta(ws, "prompts", v)["content_hash"][:16]) for v in versions(ws, "prompts")
        )


def test_each_task_types_newest_baseline_cache_record_counts_its_file(trained: Trained) -> None:
    """The newest ``baseline_cache`` materialization of each task type carries its file's entry
    count (the task type read from the entries themselves); no type without a file has one; and
    recording again adds nothing."""
    exp, ws = trained.lineage, trained.workspace
    on_disk: dict[str, int] = {}
    for path in sorted((ws / "baseline_cache").glob("*.json")):
        rows = json.loads(path.read_text(encoding="utf-8"))["entries"]
        owners = {row[0] for row in rows}
        assert len(owners) == 1, path
        on_disk[owners.pop()] = len(rows)
    assert len(on_disk) >= 2  # the lineage run gated several task types
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        newest: dict[str, int] = {}
        for _, mat in sorted(history(instance, key(exp, "baseline_cache")).items(), reverse=True):
            assert mat.partition is not None
            newest.setdefault(mat.partition, int(mat.metadata["entries"].value))  # type: ignore[arg-type]
        # and the recorder knows it: over the finished workspace it has nothing left to record
        recorder = build_experiment(exp).scope.recorder(instance)
        assert [(type(e).__name__, e.asset_key) for e in recorder.new_events()] == []
    assert newest == on_disk


def test_epoch_eval_gates_equal_the_store_and_the_evidence(trained: Trained) -> None:
    """The gates table and the accept/reject counts of every epoch_eval, against the versions
    each accept wrote (their reason names epoch, step, file and verdict) and the wins/losses of
    each gate's question rows (sign +1 / −1) in gate_evidence."""
    exp, ws = trained.lineage, trained.workspace
    accepts_in_store: dict[int, set[tuple[int, str, str, str]]] = {}
    for v in versions(ws, "skills"):
        reason = str(meta(ws, "skills", v).get("reason", ""))
        if reason.startswith("accept e"):  # "accept e0 s1 ocr-problems.md (ACCEPT)"
            ep, st, file, verdict = reason.split()[1:5]
            accepts_in_store.setdefault(int(ep[1:]), set()).add(
                (int(st[1:]), file, v, verdict.strip("()"))
            )
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        signs = {
            g: (int(w), int(los))
            for g, w, los in con.execute(
                "SELECT gate_run_id, count(*) FILTER (WHERE sign = 1), "
                "count(*) FILTER (WHERE sign = -1) FROM gate_evidence "
                "WHERE row_kind = 'question' GROUP BY gate_run_id"
            ).fetchall()
        }
    seen_accepts = 0
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        for e in range(3):
            md = latest(instance, key(exp, "epoch_eval"), f"e{e}").metadata
            gates = table_rows(md["gates"])
            accepted = {
                (g["step"], g["skill_file"], g["new_skills_version"], g["verdict"])
                for g in gates
                if g["action"] == "accept"
            }
            assert accepted == accepts_in_store.get(e, set()), e
            assert md["accepted"].value == len(accepted)
            assert md["rejected"].value == sum(1 for g in gates if g["action"] == "reject")
            for g in gates:
                gate_id = f"train_e{e}_s{g['step']}_gate_{g['skill_file'][: -len('.md')]}"
                assert (g["wins"], g["losses"]) == signs.get(gate_id, (0, 0)), (e, g)
            seen_accepts += len(accepted)
    assert seen_accepts > 0


def test_epoch_eval_probations_equal_the_accepts_and_rollbacks_in_the_store(
    trained: Trained,
) -> None:
    """Every epoch_eval lists one settled probation per task skill the epoch accepted an edit of
    (read from the accept versions' reasons; default-strategy.md opens none), and its ROLLBACK
    rows name exactly the versions the store's rollbacks wrote."""
    exp, ws = trained.lineage, trained.workspace
    accepted: dict[int, set[str]] = {}
    rollbacks: dict[int, dict[str, str]] = {}
    for v in versions(ws, "skills"):
        words = str(meta(ws, "skills", v).get("reason", "")).split()
        if words[:1] == ["accept"] and words[3] != DEFAULT_SKILL_FILE:
            accepted.setdefault(int(words[1][1:]), set()).add(words[3])
        if words[:2] == ["probation", "rollback"]:  # "probation rollback e0 x.md: …"
            rollbacks.setdefault(int(words[2][1:]), {})[words[3].rstrip(":")] = v
    rows_seen = 0
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        for e in range(3):
            md = latest(instance, key(exp, "epoch_eval"), f"e{e}").metadata
            rows = table_rows(md["probations"])
            assert {r["skill_file"] for r in rows} == accepted.get(e, set()), e
            assert {
                r["skill_file"]: r["new_skills_version"] for r in rows if r["verdict"] == "ROLLBACK"
            } == rollbacks.get(e, {}), e
            assert md["rolled_back"].value == len(rollbacks.get(e, {}))
            rows_seen += len(rows)
    assert rows_seen > 0


def test_every_epoch_eval_row_names_exactly_the_evaluated_version(trained: Trained) -> None:
    exp, ws = trained.lineage, trained.workspace
    stale = 0
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        for e in ("e0", "e1", "e2"):
            md = latest(instance, key(exp, "epoch_eval"), e).metadata
            want_run = evaluated_run(ws, int(e[1:]))
            assert md["val_run_id"].value == want_run
            skills, prompts = run_versions(ws, want_run)
            assert md["skills_version"].value == skills
            assert md["prompts_version"].value == prompts
            acc, per_type = run_accuracy(ws, want_run)
            assert acc is not None and abs(metadata_number(md["val_accuracy"]) - acc) < 1e-9
            shown = {
                r["task_type"]: (r["accuracy"], r["n"])
                for r in table_rows(md["per_task_type"])
                if r["task_type"] != "(prompts)"
            }
            assert set(per_type) <= set(shown) == set(task_types(exp))
            for t, (a_shown, n_shown) in shown.items():
                if t not in per_type:  # no scored validation rollout of that type
                    assert (a_shown, n_shown) == (None, 0), t
                    continue
                a, n = per_type[t]
                assert n_shown == n and abs(a_shown - a) < 1e-9, t
            files = meta(ws, "skills", skills)["files"]
            for row in table_rows(md["per_task_type"]):
                if row["task_type"] == "(prompts)":
                    truth = meta(ws, "prompts", prompts)["content_hash"][:16]
                    hist = history(instance, key(exp, "prompt_versions"))
                else:
                    truth = files[row["file"]][:16]
                    hist = history(instance, key(exp, "skill_versions"), row["task_type"])
                assert row["content_hash"] == truth
                assert row["referenced_data_version"] == truth
                event = hist[row["referenced_event"]]  # in the asset's history
                assert tags_of(event)["dagster/data_version"] == truth
                stale += int(row["referenced_event"] != max(hist))
            # Dagster's input provenance: its formula over exactly the evaluated versions
            tags = tags_of(latest(instance, key(exp, "epoch_eval"), e))
            dv = tags[f"dagster/input_data_version/{exp.name}/skill_versions"]
            joined = "".join(files[skill_file_name(t)][:16] for t in sorted(task_types(exp)))
            assert dv == hashlib.sha256(joined.encode()).hexdigest()
            # holdout_report: the four evaluated (skills, prompts) pairs, as state.json says
            holdout = next(
                h["holdout"]
                for h in json.loads((ws / "state.json").read_text())["history"]
                if f"e{h['epoch']}" == e
            )
            hold = latest(instance, key(exp, "holdout_report"), e)
            labelled = table_rows(hold.metadata["evaluated"])
            assert {r["label"] for r in labelled} == set(holdout)
            for row in labelled:
                pair = holdout[row["label"]]
                if row["task_type"] == "(prompts)":
                    assert row["version"] == pair["prompts"]
                    truth = meta(ws, "prompts", pair["prompts"])["content_hash"][:16]
                else:
                    assert row["version"] == pair["skills"]
                    truth = meta(ws, "skills", pair["skills"])["files"][row["file"]][:16]
                assert row["content_hash"] == row["referenced_data_version"] == truth
            prompts_dv = meta(ws, "prompts", holdout["current"]["prompts"])["content_hash"][:16]
            assert (
                tags_of(hold)[f"dagster/input_data_version/{exp.name}/prompt_versions"]
                == prompts_dv
            )
        # the case: an evaluated version that is no longer its partition's latest
        assert stale > 0
        check = dg.AssetCheckKey(key(exp, "epoch_eval"), "epoch_eval_lineage_exact")
        (last,) = instance.event_log_storage.get_asset_check_execution_history(check, limit=1)
        assert last.status == SUCCEEDED


def test_every_step_results_row_is_the_steps_own_rollouts(trained: Trained) -> None:
    """`step_results` showed n = 0 and no accuracy for every task type although the step rolled
    out its batch (hostile review): each row is now the batch run's accuracy for that type."""
    exp, ws = trained.lineage, trained.workspace
    checked, versions = 0, dict[str, set[str]]()
    state = json.loads((ws / "state.json").read_text())
    steps = range(build_experiment(exp).scope.experiment.run_config().steps_per_epoch)
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        for mat in history(instance, key(exp, "step_results")).values():
            e, s = (
                int(metadata_number(mat.metadata["epoch"])),
                int(metadata_number(mat.metadata["step"])),
            )
            run = f"train_e{e}_s{s}"
            assert mat.metadata["rollout_run_id"].value == run
            _, per_type = run_accuracy(ws, run)
            shown = {
                r["task_type"]: (r["accuracy"], r["n"])
                for r in table_rows(mat.metadata["per_task_type"])
                if r["task_type"] != "(prompts)"
            }
            for t, (a, n) in shown.items():
                want_a, want_n = per_type.get(t, (None, 0))
                assert n == want_n and a == (None if want_a is None else pytest.approx(want_a))
            assert sum(n for _, n in shown.values()) == sum(n for _, n in per_type.values()) > 0
            # lineage to the exact batches event of its epoch (it pointed at nothing, with the
            # data version of no data, and two steps shared one data version)
            ((batch_id, batch),) = history(instance, key(exp, "batches"), f"e{e}").items()
            # steps roll out the first ones
            sizes = json.loads(metadata_text(batch.metadata["sizes"]))
            assert sizes[: len(steps)] == batch_sizes(ws, e, len(steps))
            up = key(exp, "batches").to_user_string()
            assert tags_of(mat)[f"dagster/input_event_pointer/{up}"] == str(batch_id)
            batch_dv = tags_of(batch)["dagster/data_version"]
            if e == state["epoch_started"]:  # the checkpoint holds the last epoch's batches
                blob = json.dumps(state["batches"], sort_keys=True, separators=(",", ":"))
                assert batch_dv == hashlib.sha256(blob.encode()).hexdigest()[:16]
            want = hashlib.sha256(batch_dv.encode()).hexdigest()
            assert tags_of(mat)[f"dagster/input_data_version/{up}"] == want
            versions.setdefault(tags_of(mat)["dagster/data_version"], set()).add(run)
            checked += 1
    assert checked >= 2 and all(len(runs) == 1 for runs in versions.values()), versions


def batch_sizes(ws: Path, epoch: int, steps: int) -> list[int]:
    """The questions each step of an epoch rolled out (its batch), from the run log."""
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        return [
            int(
                con.execute(
                    "SELECT count(DISTINCT question_id) FROM predictions WHERE run_id = ?",
                    [f"train_e{epoch}_s{s}"],
                ).fetchone()[0]  # type: ignore[index]
            )
            for s in range(steps)
        ]


def test_lineage_check_fails_on_a_wrong_reference(trained: Trained, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(trained.home, home)
    exp = trained.lineage
    with dg.DagsterInstance.from_config(str(home)) as instance:
        scope = build_experiment(exp).scope
        assert lineage_check_result(instance, scope).passed
        mat = latest(instance, key(exp, "epoch_eval"), "e0")
        rows = [dict(r) for r in table_rows(mat.metadata["per_task_type"])]
        # a task type whose skill changed: its history has another data version to point at
        i, others = next(
            (i, others)
            for i, row in enumerate(rows[:-1])
            if (
                others := [
                    sid
                    for sid, m in history(
                        instance, key(exp, "skill_versions"), row["task_type"]
                    ).items()
                    if tags_of(m)["dagster/data_version"] != row["content_hash"]
                ]
            )
        )
        rows[i]["referenced_event"] = others[0]  # what "take the latest" used to do
        md = dict(mat.metadata)
        md["per_task_type"] = dg.MetadataValue.table(
            [dg.TableRecord(r) for r in rows], schema=table(mat.metadata["per_task_type"]).schema
        )
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=mat.asset_key, partition="e0", metadata=md)
        )
        result = lineage_check_result(instance, scope)
        assert not result.passed
        assert result.metadata["mismatches"].value == 1
        assert rows[i]["task_type"] in str(result.metadata["first_mismatches"].value)


def _fresh(trained: Trained, tmp_path: Path, name: str = "fresh") -> Experiment:
    return Experiment(
        workspace=str(new_workspace(tmp_path / name)), config_path=str(trained.small_config)
    )


def _isolated_copy(trained: Trained, exp: Experiment, tmp_path: Path) -> tuple[Path, Experiment]:
    """A copy of the instance and of one workspace; the copy's registry names the copy."""
    home = tmp_path / "home"
    shutil.copytree(trained.home, home)
    (home / "experiments.yaml").unlink()
    return home, copy_experiment(exp, tmp_path)


def test_republishing_a_finished_epoch_reproduces_the_references(
    trained: Trained, tmp_path: Path
) -> None:
    home, exp = _isolated_copy(trained, trained.lineage, tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        before = latest(instance, key(exp, "epoch_eval"), "e1")
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        for name in ("slow_update", "epoch"):
            job = ex.defs.resolve_job_def(f"{exp.name}__{name}")
            assert job.execute_in_process(instance=instance, partition_key="e1").success
            after = latest(instance, key(exp, "epoch_eval"), "e1")
            assert after.metadata["per_task_type"] == before.metadata["per_task_type"]
            assert _without_code_version(after.tags) == _without_code_version(before.tags)


def _without_code_version(tags: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (tags or {}).items() if k != "dagster/code_version"}


# -- the epoch asset, the slow_update job --------------------------------------------------------


def test_materializing_an_epoch_partition_equals_the_driver_path(
    trained: Trained, tmp_path: Path
) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e0"])
        job = ex.defs.resolve_job_def(f"{exp.name}__epoch")
        result = job.execute_in_process(instance=instance, partition_key="e0")
        assert result.success
        # one op per step and per slow-update function: progress visible op by op in the UI
        ops = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"]
        prefix = f"{exp.name}__epoch_results.{exp.name}__"
        assert ops[:13] == [
            prefix + n for n in ("begin_epoch", "step_0", *SLOW_NAMES, "publish_epoch_outputs")
        ]
        checks = {
            e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        }
        assert checks == {
            "epoch_eval_lineage_exact": True,
            "no_test_pool_leak": True,
            "pools_disjoint": True,
            "skill_paths_inside_skills_dir": True,
        }
        step_mat = latest(instance, key(exp, "step_results"), "e0|s0")
        assert step_mat.metadata["rollout_run_id"].value == "train_e0_s0"
        # materializing again is a no-op for training (idempotent), same numbers
        assert job.execute_in_process(instance=instance, partition_key="e0").success
    small = trained.small.workspace_dir()
    assert epoch_summary(exp.workspace_dir(), 0) == epoch_summary(small, 0)
    a, b = read_manifest(exp.workspace_dir()), read_manifest(small)
    assert (a.current, a.best) == (b.current, b.best)


def test_slow_update_job_in_process_then_an_epoch_past_the_last(
    trained: Trained, tmp_path: Path
) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        drive(exp, instance, max_runs=1)  # init + the only step: the slow update is next
        assert epoch_summary(exp.workspace_dir(), 0) is None
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        job = ex.defs.resolve_job_def(f"{exp.name}__slow_update")
        result = job.execute_in_process(instance=instance, partition_key="e0")
        assert result.success
        ops = [e.node_name for e in result.all_events if e.event_type_value == "STEP_SUCCESS"]
        assert ops == [
            f"{exp.name}__{n}" for n in ("begin_slow_update", *SLOW_NAMES, "publish_epoch")
        ]
        deps = job.graph.dependency_structure
        for prev, nxt in itertools.pairwise(ops):
            assert [o.node_name for o in deps.all_upstream_outputs_from_node(nxt)] == [prev]
        evaluations = [
            e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
        ]
        assert {e.asset_check_evaluation_data.check_name for e in evaluations} == {
            "epoch_eval_lineage_exact",
            "no_test_pool_leak",
        }
        md = latest(instance, key(exp, "epoch_eval"), "e0").metadata
        assert str(md["val_run_id"].value).startswith("train_e0_R")
        # re-running the job on the finished epoch is a no-op that still succeeds
        assert job.execute_in_process(instance=instance, partition_key="e0").success
        # the UI journey "Add partition e1, materialize": not finalized yet → raise `epochs`
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e1"])
        epoch_job = ex.defs.resolve_job_def(f"{exp.name}__epoch")
        failed = epoch_job.execute_in_process(
            instance=instance, partition_key="e1", raise_on_error=False
        )
        assert not failed.success
        (failure,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
        data = failure.step_failure_data
        assert data is not None and data.user_failure_data is not None
        text = str(data.user_failure_data.description)
        assert "e1 is past the last epoch e0" in text
        assert "raise `epochs` to at least 2" in text and str(trained.small_config) in text
        assert "Traceback" not in text and "LookupError" not in text
        assert instance.get_dynamic_partitions(f"{exp.name}__epochs") == ["e0"]  # no junk
        # the same journey through a step of e1 (`gate_step e1|s0`; contract audit): it said
        # "never ran: training stopped before it (early stop)" and kept the partition
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e1"])
        said = lone_step_failure(ex, instance, exp, 1, 0)
        assert said == text, said  # the epoch job's message, word for word
        assert instance.get_dynamic_partitions(f"{exp.name}__epochs") == ["e0"]  # no junk
    state = json.loads((exp.workspace_dir() / "state.json").read_text())
    assert state["epoch"] == 1 and not state["finalized"]


def test_an_epoch_the_rollout_budget_cut_short_materializes_from_the_ui(tmp_path: Path) -> None:
    """The epoch asset when the rollout budget ends e0 after its first step (tiny: 2 steps per
    epoch; review of 2031fbb): the passed-over step is logged, not materialized, the slow update
    runs and publishes e0; e1 (queued by `trm run` with the skip tag) is a no-op, and without the
    tag a failure naming the budget; the sensor then requests finalize (reason budget)."""
    config = write_config(tmp_path, "budget", "epochs=3", "rollout_budget=100")
    exp = Experiment(workspace=str(new_workspace(tmp_path / "ws")), config_path=str(config))
    with dg.instance_for_test() as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e0", "e1"])
        job = ex.defs.resolve_job_def(f"{exp.name}__epoch")
        result = job.execute_in_process(instance=instance, partition_key="e0")
        assert result.success
        state = json.loads((exp.workspace_dir() / "state.json").read_text())
        ledger = state["budget"]["e0"]
        batch = exp.run_config().batch_size
        assert ledger["step_rollouts"]["rollouts"] == batch and "R" in ledger  # one step's batch
        steps = history(instance, key(exp, "step_results"))
        assert partitions(steps.values()) == ["e0|s0"]  # s1 never ran
        assert read_manifest(exp.workspace_dir()).run("train_e0_s1") is None
        logs = [e.message for e in instance.all_logs(result.run_id)]
        assert any("step (epoch 0, step 1) never ran: the rollout budget" in m for m in logs)
        # the step asset on its own (the UI's `e0|s1`): a failure that says why, no traceback
        instance.add_dynamic_partitions(f"{exp.name}__steps", ["s1"])
        text = lone_step_failure(ex, instance, exp, 0, 1)
        assert text.startswith("step (epoch 0, step 1) never ran: the rollout budget")
        assert "Traceback" not in text and "LookupError" not in text
        after = history(instance, key(exp, "step_results"))
        assert partitions(after.values()) == ["e0|s0"]  # nothing new
        md = latest(instance, key(exp, "epoch_eval"), "e0").metadata
        assert str(md["val_run_id"].value) == evaluated_run(exp.workspace_dir(), 0)
        skipped = job.execute_in_process(
            instance=instance, partition_key="e1", tags={AFTER_STOP_TAG: "skip"}
        )
        assert skipped.success and epoch_summary(exp.workspace_dir(), 1) is None
        failed = job.execute_in_process(instance=instance, partition_key="e1", raise_on_error=False)
        assert not failed.success
        text = failure_text(failed)
        assert "rollout budget (`rollout_budget: 100`" in text and "after e0" in text
        assert "Traceback" not in text and "LookupError" not in text
        request = _tick(exp, instance)[0]
        assert isinstance(request, dg.SensorResult) and request.run_requests is not None, request
        assert [r.job_name for r in request.run_requests] == [f"{exp.name}__finalize"]


def test_an_epoch_over_a_checkpoint_of_another_config_fails_with_its_message(
    trained: Trained, tmp_path: Path
) -> None:
    """A checkpoint written under another structural config (here: another seed) is refused
    by the epoch asset's first op with the checkpoint's message."""
    other = write_config(tmp_path, "other", "epochs=3", "steps_per_epoch=1", "seed=99")
    exp = copy_experiment(trained.small, tmp_path).model_copy(update={"config_path": str(other)})
    text = _failed_e1(exp)
    assert "different structural configuration" in text and "Traceback" not in text


def _failed_e1(exp: Experiment) -> str:
    """The failure text of the epoch job's run of e1 (it must fail)."""
    with dg.instance_for_test() as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e1"])
        failed = ex.defs.resolve_job_def(f"{exp.name}__epoch").execute_in_process(
            instance=instance, partition_key="e1", raise_on_error=False
        )
        assert not failed.success
        return failure_text(failed)


def test_an_epoch_over_a_truncated_checkpoint_fails_naming_the_file(
    trained: Trained, tmp_path: Path
) -> None:
    """A ``state.json`` that is not JSON (cut short by hand or by a full disk outside our
    atomic writes) fails the epoch asset's first op with the file and the line, not a
    ``JSONDecodeError`` traceback."""
    exp = copy_experiment(trained.small, tmp_path)
    state = exp.workspace_dir() / "state.json"
    text = state.read_text(encoding="utf-8")
    state.write_text(text[: len(text) // 2], encoding="utf-8")
    text = _failed_e1(exp)
    assert f"{state}: invalid JSON at line" in text
    assert "Traceback" not in text and "JSONDecodeError" not in text


def test_an_epoch_past_a_finalized_training_says_so(trained: Trained, tmp_path: Path) -> None:
    home, exp = _isolated_copy(trained, trained.small, tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e1"])
        failed = ex.defs.resolve_job_def(f"{exp.name}__epoch").execute_in_process(
            instance=instance, partition_key="e1", raise_on_error=False
        )
        assert not failed.success
        text = failure_text(failed)
        assert "training finished after 1 epoch(s) (`epochs: 1`" in text and "finalized" in text
        assert "e1" not in instance.get_dynamic_partitions(f"{exp.name}__epochs")


# -- the epoch sensor ----------------------------------------------------------------------------


def _tick(
    exp: Experiment, instance: dg.DagsterInstance, cursor: str | None = None
) -> tuple[dg.SkipReason | dg.SensorResult, dg.SensorEvaluationContext]:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor)
    result = build_experiment(exp).sensor(ctx)
    assert isinstance(result, dg.SkipReason | dg.SensorResult), result  # what the sensor returns
    return result, ctx


def test_sensor_launches_first_step_with_partitions(trained: Trained, tmp_path: Path) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        result, ctx = _tick(exp, instance)
        assert isinstance(result, dg.SensorResult)
        assert result.run_requests is not None and result.dynamic_partitions_requests is not None
        (req,) = result.run_requests
        assert req.job_name == "fresh__gate_step"
        assert req.partition_key == dg.MultiPartitionKey({"epoch": "e0", "step": "s0"})
        assert req.tags[UNIT_TAG] == "step:e0:s0" and req.tags[EXPERIMENT_TAG] == "fresh"
        added = sorted(
            (r.partitions_def_name, tuple(r.partition_keys))
            for r in result.dynamic_partitions_requests
        )
        assert added == [("fresh__epochs", ("e0",)), ("fresh__steps", ("s0",))]
        assert ctx.cursor is not None and json.loads(ctx.cursor) == {"launched": 1}


def test_sensor_waits_for_its_own_experiment_only(trained: Trained, tmp_path: Path) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        job = build_experiment(trained.small).bound().resolve_job_def("ws_b__finalize")
        other = instance.create_run_for_job(
            job_def=job, run_config={}, tags={EXPERIMENT_TAG: "ws_b"}
        )
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SensorResult)  # another experiment's run does not block
        instance.create_run_for_job(job_def=job, run_config={}, tags={EXPERIMENT_TAG: "fresh"})
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SkipReason) and result.skip_message is not None
        assert (
            "NOT_STARTED" in result.skip_message and "one run per experiment" in result.skip_message
        )
        assert other.run_id not in result.skip_message


def test_sensor_waits_for_an_untagged_catalog_run_of_its_assets(
    trained: Trained, tmp_path: Path
) -> None:
    """Contract audit of issue 8 ("never launches while a mutating run is QUEUED … STARTED"): the
    catalog's Materialize runs the implicit asset job with no tags, and the sensor launched beside
    it. Such a run of another experiment's asset does not block."""
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        defs = Executor(register_in(instance, exp), instance, llm_resources()).defs
        other_defs = build_experiment(trained.small).bound()
        implicit = defs.resolve_implicit_global_asset_job_def()
        assert implicit.name == IMPLICIT_ASSET_JOB  # the name the sensor filters on
        other = instance.create_run_for_job(
            job_def=other_defs.resolve_implicit_global_asset_job_def(),
            run_config={},
            asset_selection=frozenset({dg.AssetKey(["ws_b", "pools"])}),
            status=dg.DagsterRunStatus.STARTED,
        )
        assert EXPERIMENT_TAG not in other.tags
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SensorResult)  # another experiment's catalog run
        mine = instance.create_run_for_job(
            job_def=implicit,
            run_config={},
            asset_selection=frozenset({key(exp, "pools")}),
            status=dg.DagsterRunStatus.STARTED,
        )
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SkipReason) and result.skip_message is not None
        assert result.skip_message == (
            f"run {mine.run_id} ({implicit.name}) of experiment {exp.name} is STARTED: one run "
            "per experiment at a time (a catalog materialization; if its process is gone, "
            "terminate it on the Runs page)"
        )
        instance.report_run_failed(mine)
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SensorResult)  # it ended: the sensor launches again


def test_sensor_skips_while_another_process_holds_the_workspace(
    trained: Trained, tmp_path: Path
) -> None:
    exp = _fresh(trained, tmp_path)
    hold = (
        "import sys, time; from trm_assets.harness.storage.lock import workspace_lock\n"
        "with workspace_lock(sys.argv[1], command='trm train (test)'):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", hold, exp.workspace], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with dg.instance_for_test() as instance:
            result, _ = _tick(exp, instance)
            assert isinstance(result, dg.SkipReason)
            msg = result.skip_message
            assert msg is not None
            assert f"pid {proc.pid}" in msg and "trm train (test)" in msg
            assert "one writer per workspace" in msg
    finally:
        proc.kill()
        proc.wait(timeout=10)
    with dg.instance_for_test() as instance:
        result, _ = _tick(exp, instance)  # released by the kernel with the process
        assert isinstance(result, dg.SensorResult)


def test_sensor_does_not_relaunch_after_a_failure(trained: Trained, tmp_path: Path) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        job = build_experiment(exp).bound().resolve_job_def("fresh__finalize")
        run = instance.create_run_for_job(
            job_def=job, run_config={}, tags={UNIT_TAG: "step:e0:s0", EXPERIMENT_TAG: "fresh"}
        )
        instance.report_run_failed(run)
        result, _ = _tick(exp, instance)
        assert isinstance(result, dg.SkipReason)
        msg = result.skip_message
        assert msg is not None
        assert "FAILURE" in msg and "not relaunching" in msg and "trm train --resume" in msg


def test_sensor_requests_slow_update_then_stops_when_done(trained: Trained, tmp_path: Path) -> None:
    exp = _fresh(trained, tmp_path)
    with dg.instance_for_test() as instance:
        drive(exp, instance, max_runs=1)
        result, _ = _tick(exp, instance, cursor=json.dumps({"launched": 4}))
        assert isinstance(result, dg.SensorResult) and result.run_requests is not None, result
        (req,) = result.run_requests
        assert req.job_name == "fresh__slow_update" and req.partition_key == "e0"
        assert req.run_key is not None and req.run_key.endswith("#5")
    with dg.instance_for_test() as instance:
        result, _ = _tick(trained.small, instance)
        assert isinstance(result, dg.SkipReason) and result.skip_message is not None
        assert "training finished (completed)" in result.skip_message


# -- `trm run` -----------------------------------------------------------------------------------


def test_trm_run_trains_records_pools_and_evaluates_every_check(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run`'s command: creates the workspace, trains through Dagster (pools materialized,
    no asset check left unevaluated), and a second call resumes without running anything."""
    from click.testing import CliRunner

    from trm_assets.cli import main

    home = new_home(tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    ws = tmp_path / "ws_run"
    args = ["run", "--config", str(trained.small_config), "--workspace", str(ws)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "SIMULATED world" in res.output and f"workspace {ws} created" in res.output
    assert "each unit of work is a Dagster run" in res.output
    assert "epoch 0 done: val" in res.output and "delivered best" in res.output
    assert "done (completed): 3 Dagster run(s)" in res.output
    assert "Catalog → folder ws_run (DAGSTER_HOME" in res.output  # the registered name
    assert epoch_summary(ws, 0) == epoch_summary(trained.small.workspace_dir(), 0)
    exp = Experiment(workspace=str(ws))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (pools,) = history(instance, key(exp, "pools")).values()
        assert (
            pools.metadata["fingerprint"].value
            == json.loads((ws / "pools.json").read_text())["fingerprint"]
        )
        checks = (
            build_experiment(exp.model_copy(update={"config_path": str(trained.small_config)}))
            .bound()
            .resolve_asset_graph()
            .asset_check_keys
        )
        for check in checks:
            (rec,) = instance.event_log_storage.get_asset_check_execution_history(check, limit=1)
            assert rec.status == SUCCEEDED, check
        assert all(r.tags[EXPERIMENT_TAG] == "ws_run" for r in instance.get_runs())
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    # a finished workspace: nothing to do, said as such (no Dagster run)
    assert "nothing to do: training finished after" in again.output
    assert "Dagster run(s)" not in again.output


def test_dagster_path_equals_direct_harness_path(trained: Trained, tmp_path: Path) -> None:
    """`trm train --no-dagster` (units called directly) ends where the Dagster runs end."""
    from click.testing import CliRunner

    from trm_assets.cli.train import train_cmd

    ws = new_workspace(tmp_path / "ws")
    res = CliRunner().invoke(
        train_cmd, ["--workspace", str(ws), "--config", str(trained.small_config), "--no-dagster"]
    )
    assert res.exit_code == 0, res.output
    small = trained.small.workspace_dir()
    assert epoch_summary(ws, 0) == epoch_summary(small, 0)
    a, b = read_manifest(ws), read_manifest(small)
    assert (a.current, a.best) == (b.current, b.best)
    sa = json.loads((ws / "state.json").read_text())
    sb = json.loads((small / "state.json").read_text())
    for k in ("correctness", "history", "final", "rejected_buffer", "budget"):
        assert sa[k] == sb[k], k


def test_drive_shows_a_units_lines_while_it_runs_and_once(trained: Trained, tmp_path: Path) -> None:
    """`trm train` through Dagster showed nothing until a unit's run ended (its lines were
    replayed from the run's log after it): now they are echoed as the unit runs, and the replay
    skips what was shown (review of bad inputs)."""
    from trm_assets.defs import ops as ops_mod

    exp = _fresh(trained, tmp_path)
    said: list[tuple[str, bool]] = []
    with dg.instance_for_test() as instance:
        summary = drive(
            exp,
            instance,
            max_runs=1,
            echo=lambda m: said.append((m, ops_mod.LIVE_ECHO is not None)),
        )
        logged = harness_lines(instance, summary.run_ids[0])
    live = [m for m, during in said if during]
    assert live and all(m in logged for m in live)  # shown while the run ran, from the unit
    lines = [m for m, _ in said if not m.startswith("  [")]
    assert sorted(lines) == sorted(logged)  # every logged line said exactly once
    assert ops_mod.LIVE_ECHO is None  # not left behind for the next caller


def test_launches_the_workspace_cannot_run_yet_are_refused(
    trained: Trained, tmp_path: Path
) -> None:
    """`trm launch --epoch 1` before e0, a slow update before its steps, and `--finalize` before
    training were queued (a partition added out of order), then failed in the daemon, and the
    finalize run was even green while it delivered nothing (hostile review)."""
    from trm_assets.cli.launch import _refuse_out_of_order
    from trm_assets.defs.launch import LaunchError
    from trm_assets.harness.loop.plan import Action

    exp = _fresh(trained, tmp_path)  # nothing trained: the next unit is init
    _refuse_out_of_order(exp, Action("step", epoch=0, step=0))  # e0 runs init first: fine
    for first in (
        Action("step", epoch=1, step=0),
        Action("slow_update", epoch=0, slow_step=1),
        Action("finalize"),
    ):
        with pytest.raises(
            LaunchError,
            match=re.escape(f"{first.describe()} cannot run yet; the next unit is init"),
        ):
            _refuse_out_of_order(exp, first)
    with dg.instance_for_test() as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        job = ex.defs.resolve_job_def(f"{exp.name}__finalize")
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
        (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "cannot finalize yet: the next unit is init" in str(failure.step_failure_data)


def test_an_epoch_past_an_overridden_epochs_names_the_override(
    trained: Trained, tmp_path: Path
) -> None:
    """The refusal said "`epochs: 1` in smoke.yaml; raise it in that config" while the file
    said 2 and the 1 was the experiment's own override, which beats any edit (review)."""
    from trm_assets.defs.ops import epoch_bounds

    exp = _fresh(trained, tmp_path).model_copy(update={"overrides": ("epochs=1",)})
    bounds = epoch_bounds(build_experiment(exp).scope, 1)
    assert bounds is not None and bounds[0] == "past"
    assert "(the experiment's override `epochs=1` in experiments.yaml)" in bounds[1]
    assert "--epochs 2" in bounds[1] and "in that config" not in bounds[1]
    plain = epoch_bounds(build_experiment(_fresh(trained, tmp_path, "plain")).scope, 9)
    assert plain is not None and f"in {trained.small_config}" in plain[1]


def test_a_step_partition_past_steps_per_epoch_says_so(trained: Trained, tmp_path: Path) -> None:
    """`gate_step e0|s7` with two steps per epoch said "never ran: training stopped before it
    (early stop)" (false), `e1|s7` "cannot run yet" (it never can), and a malformed key failed
    with a Python stack trace (hostile review)."""
    exp = _fresh(trained, tmp_path)
    steps = build_experiment(exp).scope.experiment.run_config().steps_per_epoch
    with dg.instance_for_test() as instance:
        ex = Executor(register_in(instance, exp), instance, llm_resources())
        instance.add_dynamic_partitions(f"{exp.name}__epochs", ["e0"])
        instance.add_dynamic_partitions(f"{exp.name}__steps", ["s7", "x9"])
        job = ex.defs.resolve_job_def(f"{exp.name}__gate_step")
        said = {}
        for key in ("e0|s7", "e0|x9"):
            result = job.execute_in_process(
                instance=instance, partition_key=key, raise_on_error=False
            )
            assert not result.success
            (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
            data = failure.step_failure_data
            said[key] = data.user_failure_data.description if data.user_failure_data else None
    assert said == {
        "e0|s7": f"s7 is not a step of experiment {exp.name} (`steps_per_epoch: {steps}`: s0 … "
        f"s{steps - 1}); nothing to materialize",
        "e0|x9": "partition key 'x9': expected s<number>, e.g. s0",
    }


def test_units_a_kill_left_unpublished_are_published_on_resume(
    trained: Trained, tmp_path: Path
) -> None:
    """Hostile pass: a kill between a unit's checkpoint and its run's events lost the unit's
    partition for good (`epoch_eval` e0, `step_results` e0|s1: the resume moved on). Here the
    units run outside Dagster — their checkpoints land, no event is written — beside the runs a
    kill leaves (failed), and the next drive publishes exactly those partitions, re-running
    nothing, with the values of the records."""
    from trm_assets.defs.ops import planned_action
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.loop.runner import train
    from trm_assets.llm.factory import build_providers

    two_steps = write_config(tmp_path, "two", "epochs=1", "steps_per_epoch=2")
    exp = Experiment(workspace=str(new_workspace(tmp_path / "ws")), config_path=str(two_steps))
    ws = exp.workspace_dir()
    cfg = exp.run_config()
    with dg.instance_for_test() as instance:
        drive(exp, instance, max_runs=1)  # init and step 0, through Dagster
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            # epoch 0's whole slow update, with no event (its 10th unit, the ladder's refresh,
            # comes after the epoch's report); the planner moves on to epoch 1
            while planned_action(exp).epoch == 0:  # step 1 too
                train(ctx, max_units=1)
            assert epoch_summary(ws, 0) is not None
        rows_before = _run_log_rows(ws)
        assert not instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key(exp, "epoch_eval"), asset_partitions=["e0"]),
            limit=1,
        ).records
        # units with no run in this instance are another record's (--no-dagster): left alone
        assert drive(exp, instance, max_runs=0).run_ids == ()
        # what a kill leaves: the units' runs, started, then marked failed (fail_lost_runs)
        from dagster._core.storage.dagster_run import DagsterRun
        from dagster._core.utils import make_new_run_id

        from trm_assets.defs.recording import run_tags

        registered = register_in(instance, exp)
        for job, unit in (("gate_step", "step:e0:s1"), ("slow_update", "slow:e0:1")):
            instance.add_run(
                DagsterRun(
                    job_name=f"{registered.name}__{job}",
                    run_id=make_new_run_id(),
                    status=dg.DagsterRunStatus.FAILURE,
                    tags={**run_tags(registered), UNIT_TAG: unit},
                )
            )
        lines: list[str] = []
        summary = drive(exp, instance, echo=lines.append, max_runs=0)
        assert len(summary.run_ids) == 2  # step 1 and the epoch; step 0 had its own run
        assert any("published step (epoch 0, step 1)" in ln for ln in lines), lines
        assert any("published epoch 0 (epoch_eval, holdout_report)" in ln for ln in lines), lines
        step = latest(instance, key(exp, "step_results"), epoch_step_key(0, 1)).metadata
        assert step["rollout_run_id"].value == "train_e0_s1"
        assert len(history(instance, key(exp, "step_results"), epoch_step_key(0, 0))) == 1
        md = latest(instance, key(exp, "epoch_eval"), "e0").metadata
        want_run = evaluated_run(ws, 0)
        acc, _ = run_accuracy(ws, want_run)
        assert md["val_run_id"].value == want_run
        assert acc is not None and abs(metadata_number(md["val_accuracy"]) - acc) < 1e-9
        latest(instance, key(exp, "holdout_report"), "e0")
        assert _run_log_rows(ws) == rows_before  # nothing re-ran
        again = drive(exp, instance, max_runs=0)
        assert again.run_ids == ()  # nothing left to publish


def _run_log_rows(ws: Path) -> tuple[Any, ...]:
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        return tuple(
            con.execute(f"SELECT count(*) FROM {t}").fetchone() for t in ("runs", "predictions")
        )


def test_a_resume_of_a_finished_workspace_settles_its_lost_runs(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile pass: a kill right after finalize's checkpoint left the finalize run STARTED for
    good — `trm train --resume` said "nothing to do" before the driver could fail it."""
    import os
    import socket

    from click.testing import CliRunner
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.utils import make_new_run_id

    from trm_assets.cli.train import train_cmd
    from trm_assets.defs.recording import run_tags
    from trm_assets.defs.sensors import HOST_TAG, LOST_TAG, PID_TAG

    home, exp = _isolated_copy(trained, trained.small, tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid nothing runs under any more
    lost = DagsterRun(
        job_name=f"{exp.name}__finalize",
        run_id=make_new_run_id(),
        status=dg.DagsterRunStatus.STARTED,
        tags={**run_tags(exp), PID_TAG: str(gone.pid), HOST_TAG: socket.gethostname()},
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_run(lost)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    res = CliRunner().invoke(
        train_cmd,
        ["--workspace", exp.workspace, "--config", exp.config_path, "--resume"],
        env={"DAGSTER_HOME": str(home), **{k: v for k, v in os.environ.items() if k == "PATH"}},
    )
    assert res.exit_code == 0, res.output
    assert f"run {lost.run_id[:8]} ({lost.job_name}) was left in progress" in res.output
    assert "finalized" in res.output and "published" not in res.output  # nothing unpublished
    with dg.DagsterInstance.from_config(str(home)) as instance:
        after = instance.get_run_by_id(lost.run_id)
    assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
    assert after.tags[LOST_TAG] == "true"


def test_a_finished_no_dagster_workspace_resumes_to_nothing_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: a workspace trained with --no-dagster, resumed through Dagster once finished,
    was registered and got one "catch-up" run per unit. Its past is not this instance's record:
    "nothing to do", with no run and no registration."""
    from click.testing import CliRunner

    from trm_assets.cli.train import train_cmd
    from trm_assets_tests.tiny import tiny_config
    from trm_bench.overhead import new_workspace as tiny_workspace

    ws = tiny_workspace(tmp_path / "ws", tiny_config("epochs=1"))
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    args = ["--workspace", str(ws), "--config", str(ws / "config.yaml")]
    first = CliRunner().invoke(train_cmd, [*args, "--no-dagster"])
    assert first.exit_code == 0, first.output
    res = CliRunner().invoke(train_cmd, [*args, "--resume"])
    assert res.exit_code == 0 and "nothing to do" in res.output, res.output
    assert "published" not in res.output
    assert not (home / "experiments.yaml").exists()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []


def test_a_dagster_unit_holds_the_lock_naming_its_run_from_open_to_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract audit of issue 18.1 ("a clear refusal naming the holder (pid, host, run id)";
    one writer for the whole unit): a unit's Dagster run took the lock inside `run_unit` only,
    without its run id, after opening the context (which writes a missing pools.json) and
    released it before the run log closed. Every holder written is recorded here, and who holds
    the lock when pools.json is written, by the unit and by the `pools` asset. The same unit
    draws a terminal's progress bar (issue 17.4), as `trm train` on a TTY has it draw."""
    import trm_assets.harness.storage.atomic as atomic
    import trm_assets.harness.storage.lock as lock_mod
    import trm_assets.harness.storage.pools as pools_mod

    # 0.35 s per model call: the barriers last past a terminal bar's first second (below)
    # (and no gate barriers: the two the test reads are enough)
    slow = ("sim.latency_ms_mean=350", "sim.latency_ms_jitter=0", "concurrency=64")
    slow_no_gate = (*slow, "gate_policy=accept_all")
    config = write_config(tmp_path, "lock", "epochs=1", "steps_per_epoch=1", *slow_no_gate)
    exp = Experiment(workspace=str(new_workspace(tmp_path / "ws")), config_path=str(config))
    ws = exp.workspace_dir()
    (ws / "pools.json").unlink(missing_ok=True)  # the unit's context writes it
    holders: list[lock_mod.Holder] = []
    at_write: list[lock_mod.Holder | None] = []
    write_holder, write_json = lock_mod._write_holder, atomic.atomic_write_json

    def spy_holder(fd: int, holder: lock_mod.Holder) -> None:
        holders.append(holder)
        write_holder(fd, holder)

    def spy_write(path: Path, data: Any) -> None:
        at_write.append(lock_mod.lock_holder(Path(path).parent))
        write_json(path, data)

    monkeypatch.setattr(lock_mod, "_write_holder", spy_holder)
    monkeypatch.setattr(pools_mod, "atomic_write_json", spy_write)
    drawn: list[tuple[str, int, int, bool]] = []
    said: list[str] = []
    monkeypatch.setenv("TRM_PROGRESS_EVERY_S", "0.5")  # periodic lines in the run's log too
    with dg.instance_for_test() as instance:
        summary = drive(  # init + step 0 in one Dagster run, beside a terminal's bar
            exp,
            instance,
            max_runs=1,
            echo=said.append,
            live=lambda p, final: drawn.append((p.run_id, p.done, p.total, final)),
        )
        (run_id,) = summary.run_ids
        # the bar (`trm train` on a TTY): each barrier drawn, then finished full, once; its
        # periodic lines stay in the run's log, not echoed beside the bar
        finals = [(run, n, total) for run, n, total, final in drawn if final]
        assert [run for run, _, _ in finals] == ["train_init", "train_e0_s0"], drawn
        assert all(n == total for _, n, total in finals)
        logged = [line for line in harness_lines(instance, run_id) if line.startswith("… ")]
        assert logged and not [line for line in said if line.startswith("… ")], said
        assert [(h.command, h.run_id) for h in holders] == [
            ("dagster run of unit step:e0:s0", run_id)
        ]
        assert holders[0].describe().startswith(f"pid {os.getpid()} on ")
        assert f"run {run_id}" in holders[0].describe()
        assert at_write == [holders[0]]  # pools.json written under this run's lock
        # the pools asset on a workspace without pools.json: written under its own run's lock
        (ws / "pools.json").unlink()
        holders.clear()
        at_write.clear()
        pools = Executor(register_in(instance, exp), instance, llm_resources()).defs
        result = dg.materialize([pools.resolve_assets_def(key(exp, "pools"))], instance=instance)
        assert result.success
        assert [(h.command, h.run_id) for h in holders] == [("dagster run of pools", result.run_id)]
        assert at_write == holders and (ws / "pools.json").is_file()
        holders.clear()
        assert dg.materialize([pools.resolve_assets_def(key(exp, "pools"))], instance=instance)
        assert holders == []  # reading the frozen pools takes no lock
    assert lock_mod.lock_holder(ws) is None

"""``trm bench scale`` at a tiny size: the lineage query returns the planted versions, hashes and
accuracies (and the check refuses a wrong answer); the 1×/10× measurement and the JSON contract."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

from trm_assets.domain.question import skill_file_name
from trm_assets.harness.reports.lineage import per_task_accuracy
from trm_assets.harness.storage.runlog import RunLog, RunLogReader
from trm_assets.llm.sim import catalogue
from trm_bench.scale import (
    LineageRow,
    LineageTruth,
    ScaleBenchError,
    build_lineage_db,
    check_lineage,
    cli,
    lineage_query,
    synth_sample,
    synthetic_predictions,
    time_evaluation,
)

ROWS, RUNS, VERSIONS = 10_000, 20, 5


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, LineageTruth]:
    root = tmp_path_factory.mktemp("lineage")
    db, skills = root / "runs.duckdb", root / "skills"
    truth = build_lineage_db(
        db, skills, n_rows=ROWS, n_runs=RUNS, n_versions=VERSIONS, rng=np.random.default_rng(3)
    )
    return db, skills, truth


def _query(lineage: tuple[Path, Path, LineageTruth], run_id: str | None = None) -> list[LineageRow]:
    db, skills, truth = lineage
    with RunLogReader.open(db) as reader:
        return lineage_query(reader, skills, truth.task_types, run_id)


def test_lineage_db_holds_the_rows_and_runs(lineage: tuple[Path, Path, LineageTruth]) -> None:
    db, _, truth = lineage
    with RunLogReader.open(db) as reader:
        assert reader.query("SELECT count(*) AS n FROM predictions") == [{"n": ROWS}]
        runs = reader.runs()
    assert len(runs) == RUNS
    assert {r["run_id"]: r["skills_version"] for r in runs} == truth.run_versions
    assert sorted(set(truth.run_versions.values())) == sorted(f"v{i}" for i in range(1, 6))
    assert all(r["n_rollouts"] == ROWS // RUNS for r in runs)  # finish_run counted them


def test_query_returns_the_planted_accuracies_versions_and_hashes(
    lineage: tuple[Path, Path, LineageTruth],
) -> None:
    db, skills, truth = lineage
    rows = _query(lineage)
    assert len(rows) == RUNS * len(catalogue.TASK_TYPES)
    check_lineage(rows, truth, None)
    # Independently: the product's per-task accuracy and the version's _meta.json on disk.
    run_id = sorted(truth.run_versions)[7]
    per_task = per_task_accuracy(db, run_id)
    version = truth.run_versions[run_id]
    meta = json.loads((skills / version / "_meta.json").read_text(encoding="utf-8"))
    mine = [r for r in rows if r.run_id == run_id]
    assert {r.task_type: (r.n, r.accuracy) for r in mine} == {
        t: (v["n"], v["accuracy"]) for t, v in per_task.items()
    }
    assert {r.skills_version for r in mine} == {version}
    assert all(r.content_hash == meta["files"][skill_file_name(r.task_type)] for r in mine)
    # Versions differ by one edited file each: some task type's hash changed across versions.
    assert any(truth.hashes[("v1", t)] != truth.hashes[("v5", t)] for t in truth.task_types)


def test_one_run_query_returns_that_run_only(lineage: tuple[Path, Path, LineageTruth]) -> None:
    truth = lineage[2]
    run_id = sorted(truth.run_versions)[-1]
    rows = _query(lineage, run_id)
    assert {r.run_id for r in rows} == {run_id}
    assert len(rows) == len(truth.task_types)
    check_lineage(rows, truth, run_id)
    with pytest.raises(ScaleBenchError, match="missing"):
        check_lineage(rows, truth, None)


def test_check_refuses_a_wrong_version_hash_or_count(
    lineage: tuple[Path, Path, LineageTruth],
) -> None:
    truth = lineage[2]
    rows = _query(lineage)
    r = rows[0]
    other = next(v for v in truth.run_versions.values() if v != r.skills_version)
    for bad in (
        dataclasses.replace(r, skills_version=other),
        dataclasses.replace(r, content_hash="0" * 64),
        dataclasses.replace(r, n_correct=r.n_correct + 1),
    ):
        with pytest.raises(ScaleBenchError, match="disagrees"):
            check_lineage([bad, *rows[1:]], truth, None)


def test_query_refuses_a_run_without_skills_version(tmp_path: Path) -> None:
    truth = build_lineage_db(
        tmp_path / "runs.duckdb",
        tmp_path / "skills",
        n_rows=240,
        n_runs=2,
        n_versions=1,
        rng=np.random.default_rng(0),
    )
    with RunLog.open(tmp_path / "runs.duckdb") as log:
        log.begin_run("orphan_eval", kind="eval")
    with (
        RunLogReader.open(tmp_path / "runs.duckdb") as reader,
        pytest.raises(ScaleBenchError, match="orphan_eval"),
    ):
        lineage_query(reader, tmp_path / "skills", truth.task_types)


def test_planted_counts_match_the_rows() -> None:
    runs = ["a", "b", "c"]
    frame, counts = synthetic_predictions(
        runs, 2_000, catalogue.TASK_TYPES, np.random.default_rng(11)
    )
    assert len(frame) == 6_000
    scored = frame[frame["correct"].notna()]
    grouped = scored.groupby(["run_id", "task_type"])["correct"].agg(["count", "sum"])
    assert {k: (int(c), int(s)) for k, (c, s) in grouped.iterrows()} == counts
    infra = frame[frame["correct"].isna()]
    assert len(infra) > 0 and set(infra["failure_kind"]) == {"infra"}
    right = scored[scored["correct"].astype(bool)]
    wrong = scored[~scored["correct"].astype(bool)]
    assert (right["predicted"] == right["truth"]).all()
    assert (wrong["predicted"] != wrong["truth"]).all() and set(wrong["failure_kind"]) == {"task"}


def test_time_evaluation_reads_back_what_it_ran(tmp_path: Path) -> None:
    sample = synth_sample(tmp_path, 20, seed=7)
    run = time_evaluation(sample, 20, work_dir=tmp_path, concurrency=4)
    assert run.questions == 20
    assert run.llm_calls >= 20  # at least one model call per rollout
    assert run.accuracy is not None and 0 <= run.accuracy <= 1
    assert run.wall_s == run.load_s + run.inference_s + run.reads_s > 0
    with pytest.raises(click.UsageError, match="has 21 questions"):
        time_evaluation(sample, 22, work_dir=tmp_path)  # the sample holds 21


@pytest.fixture(scope="module")
def cli_out() -> dict[str, Any]:
    args = ["--questions", "20", "--repeats", "1", "--lineage-rows", str(ROWS)]
    args += ["--lineage-runs", str(RUNS), "--lineage-versions", "3", "--query-repeats", "2"]
    res = CliRunner().invoke(cli, [*args, "--seed", "5", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_json_contract(cli_out: dict[str, Any]) -> None:
    assert set(cli_out) == {"questions", "lineage", "meta"}
    q, lin = cli_out["questions"], cli_out["lineage"]
    assert (q["n_1x"], q["n_10x"], q["target"]) == (20, 200, 10.5)
    assert q["ratio"] > 0
    assert q["ratio"] == pytest.approx(q["wall_10x_s"] / q["wall_1x_s"], rel=1e-3)
    assert q["met"] == (q["ratio"] <= 10.5)
    assert q["llm_calls_10x"] > q["llm_calls_1x"] >= 20
    assert len(q["samples"]["wall_1x_s"]) == 1
    assert (lin["rows"], lin["runs"], lin["versions"]) == (ROWS, RUNS, 3)
    assert lin["result_rows"] == RUNS * len(catalogue.TASK_TYPES)
    assert lin["verified"] is True and lin["target_ms"] == 200
    assert lin["met"] == (lin["query_ms"] < 200)
    assert lin["query_ms"] == pytest.approx(
        statistics.median(lin["samples_ms"]["all_runs_cold"]), abs=0.01
    )
    assert len(lin["samples_ms"]["one_run_warm"]) == 2
    assert cli_out["meta"]["simulated"] is True and cli_out["meta"]["seed"] == 5


def test_markdown_without_json_and_bad_row_split() -> None:
    args = ["--questions", "20", "--repeats", "1", "--lineage-rows", "2400"]
    args += ["--lineage-runs", "2", "--lineage-versions", "2", "--query-repeats", "1"]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "| time ratio 10×/1× |" in res.stdout and "< 200 ms" in res.stdout
    assert res.stdout.count("**met**") + res.stdout.count("**MISSED**") == 2
    bad = CliRunner().invoke(cli, ["--lineage-rows", "1001", "--lineage-runs", "2", "--json"])
    assert bad.exit_code == 2 and "multiple" in bad.output

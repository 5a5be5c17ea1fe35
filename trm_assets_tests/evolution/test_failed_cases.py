"""The diagnosis's cases from a real run log: one read of the run's traces gives each case the
trace of its own (question, replicate), as a read per case does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trm_assets.evolution.diagnosis import failed_cases, summarize_trace
from trm_assets.harness.storage.runlog import RunLog, RunLogReader
from trm_assets_tests.agent.fixtures import question


def _row(run_id: str, qid: str, rep: int, correct: bool | None, kind: str | None) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "question_id": qid,
        "replicate": rep,
        "task_type": "Object Recognition",
        "truth": "A",
        "predicted": "A" if correct else "B",
        "correct": correct,
        "stop_reason": "answer" if kind != "infra" else "error",
        "failure_kind": kind,
        "n_llm_calls": 2,
        "seed": 7,
    }


def _trace(tag: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "seq": i,
            "step": i,
            "role": "tool",
            "tool_name": "search_captions",
            "arguments": f'{{"query": "{tag}-{i}"}}',
            "content": f"{tag} result {i}",
            "result_chars": 10 + i,
        }
        for i in range(n)
    ]


def test_each_case_reads_its_own_trace(tmp_path: Path) -> None:
    qs = {f"00{i}-1": question(qid=f"00{i}-1") for i in range(1, 6)}
    db = tmp_path / "runs.duckdb"
    with RunLog.open(db) as log:
        log.begin_run("r1", kind="step")
        log.begin_run("r2", kind="step")
        # 001: fails on replicate 1 only; 002: fails on both (the first failing one is chosen);
        # 003: correct; 004: infra (left out); 005: fails. Run r2 holds other traces for the
        # same questions, which must not leak in.
        layout = [
            ("001-1", 0, True, None),
            ("001-1", 1, False, "task"),
            ("002-1", 0, False, "task"),
            ("002-1", 1, False, "task"),
            ("003-1", 0, True, None),
            ("004-1", 0, None, "infra"),
            ("005-1", 0, False, "task"),
        ]
        for qid, rep, correct, kind in layout:
            log.add_rollout(_row("r1", qid, rep, correct, kind), _trace(f"r1-{qid}-{rep}", 3))
            log.add_rollout(_row("r2", qid, rep, False, "task"), _trace(f"r2-{qid}-{rep}", 2))
        log.flush()
    with RunLogReader.open(db) as reader:
        cases = failed_cases("r1", qs, reader)
        expected = {
            qid: summarize_trace(reader.traces("r1", qid, rep))
            for qid, rep in (("001-1", 1), ("002-1", 0), ("005-1", 0))
        }
    assert [c.question_id for c in cases] == ["001-1", "002-1", "005-1"]
    assert {c.question_id: c.trace_summary for c in cases} == expected
    assert "r1-001-1-1" in expected["001-1"] and "r2-" not in "".join(expected.values())

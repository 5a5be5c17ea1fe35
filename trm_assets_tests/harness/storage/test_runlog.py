"""The DuckDB run log: schema, idempotent inserts, the pessimistic-row overwrite, readers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trm_assets.harness.storage.runlog import (
    DDL,
    FLAG_VALIDATION,
    RunLog,
    RunLogBusyError,
    RunLogError,
    RunLogReader,
    to_text_field,
)


def pred(qid: str = "q1", rep: int = 0, **kw: Any) -> dict[str, Any]:
    row = {
        "run_id": "run_a",
        "question_id": qid,
        "replicate": rep,
        "task_type": "OCR Problems",
        "truth": "A",
        "predicted": "A",
        "correct": True,
        "stop_reason": "answer",
        "failure_kind": None,
        "n_llm_calls": 2,
        "seed": 123,
    }
    row.update(kw)
    return row


def traces(n: int, tag: str = "x") -> list[dict[str, Any]]:
    return [
        {"seq": i, "step": i // 2, "role": "assistant", "content": f"{tag}{i}"} for i in range(n)
    ]


def flag(name: str = "free_text_answer", detail: Any = None) -> dict[str, Any]:
    return {"kind": FLAG_VALIDATION, "name": name, "detail": detail or {"letter": "A"}}


@pytest.fixture
def log(tmp_path: Path) -> Any:
    with RunLog.open(tmp_path / "runs.duckdb") as lg:
        yield lg


def count(log: RunLog, table: str) -> int:
    n = log.query(f"SELECT count(*) AS n FROM {table}")[0]["n"]
    assert isinstance(n, int), n
    return n


def test_schema_has_primary_keys(log: RunLog) -> None:
    assert set(DDL) == {"schema_info", "runs", "predictions", "traces", "flags"}
    pks = {
        r["table_name"]: r["constraint_column_names"]
        for r in log.query(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
            "WHERE constraint_type = 'PRIMARY KEY'"
        )
    }
    assert pks["predictions"] == ["run_id", "question_id", "replicate"]
    assert pks["traces"] == ["run_id", "question_id", "replicate", "seq"]
    assert pks["flags"] == ["run_id", "question_id", "replicate", "kind", "name"]
    assert pks["runs"] == ["run_id"]


def test_reinserting_a_completed_rollout_is_a_no_op(log: RunLog) -> None:
    log.add_rollout(pred(), traces(3), [flag()])
    log.flush()
    log.add_rollout(
        pred(predicted="C", correct=False, failure_kind="task"), traces(5, "y"), [flag("other")]
    )
    log.flush()
    rows = log.predictions("run_a")
    assert len(rows) == 1 and rows[0]["predicted"] == "A" and rows[0]["correct"] is True
    assert [t["content"] for t in log.traces("run_a")] == ["x0", "x1", "x2"]
    assert [f["name"] for f in log.flags("run_a")] == ["free_text_answer"]


def test_a_pessimistic_row_is_overwritten_with_its_traces(log: RunLog) -> None:
    log.add_rollout(
        pred(
            stop_reason="error",
            correct=None,
            predicted=None,
            failure_kind="infra",
            error="infra: timeout",
        ),
        traces(4, "old"),
    )
    log.flush()
    assert log.correctness("run_a") == {("q1", 0): None}
    log.add_rollout(pred(), traces(2, "new"), [flag()])
    log.flush()
    row = log.predictions("run_a")[0]
    assert (row["stop_reason"], row["correct"], row["failure_kind"], row["error"]) == (
        "answer",
        True,
        None,
        None,
    )
    assert [t["content"] for t in log.traces("run_a")] == ["new0", "new1"]
    assert log.correctness("run_a") == {("q1", 0): True}


def test_buffer_applies_the_same_rule_within_one_batch(log: RunLog) -> None:
    log.add_rollout(pred(stop_reason="error", correct=None))
    log.add_rollout(pred(predicted="B", correct=False, failure_kind="task"))
    log.add_rollout(pred(predicted="C", correct=False, failure_kind="task"))  # completed kept
    assert log.pending == 1
    assert log.flush() == 1 and log.pending == 0
    assert log.predictions("run_a")[0]["predicted"] == "B"


def test_non_string_fields_are_json_and_failure_kind_is_checked(log: RunLog) -> None:
    log.add_rollout(
        pred(evidence={"b": 1, "a": [1, 2]}, skill_files=["x.md"]), [], [flag(detail={"n": 3})]
    )
    log.flush()
    row = log.predictions("run_a")[0]
    assert row["evidence"] == '{"a": [1, 2], "b": 1}' and row["skill_files"] == '["x.md"]'
    assert log.flags("run_a")[0]["detail"] == '{"n": 3}'
    assert to_text_field("plain") == "plain" and to_text_field(None) is None
    with pytest.raises(ValueError, match="failure_kind"):
        log.add_rollout(pred("q2", failure_kind="bogus"))


def test_run_id_is_required(log: RunLog) -> None:
    with pytest.raises(ValueError, match="run_id"):
        log.add_rollout(pred(run_id=""))
    with pytest.raises(ValueError, match="run_id"):
        log.begin_run("  ")


def test_runs_row_versions_and_counters(log: RunLog) -> None:
    log.begin_run("run_a", kind="eval", model="m", skill_mode="task", skills_version="v3")
    log.add_rollout(pred("q1"))
    log.add_rollout(pred("q2", correct=False, predicted="B", failure_kind="task"))
    log.add_rollout(pred("q3", correct=None, stop_reason="error", failure_kind="infra"))
    log.finish_run("run_a", wall_s=1.5)
    run = log.run("run_a")
    assert run is not None
    assert (run["status"], run["n_rollouts"], run["n_correct"]) == ("done", 3, 1)
    assert (run["n_task_failures"], run["n_infra_failures"], run["accuracy"]) == (1, 1, 0.5)
    assert run["skills_version"] == "v3" and run["prompts_version"] is None
    # A second begin (next gate block, resume) keeps versions not given again.
    log.begin_run("run_a", prompts_version="p2")
    run = log.run("run_a")
    assert run is not None
    assert (run["skills_version"], run["prompts_version"]) == ("v3", "p2")
    # Values given again replace the stored ones; a deferred begin lands with the next flush.
    log.begin_run("run_a", skills_version="v4", questions_ref="data/q.json", defer=True)
    run = log.run("run_a")
    assert run is not None
    assert (run["status"], run["skills_version"], run["prompts_version"], run["questions_ref"]) == (
        "running",
        "v4",
        "p2",
        "data/q.json",
    )


def test_run_ids_by_glob(log: RunLog) -> None:
    for rid in ("base_e1_s1", "base_e1_s2", "base_e1_s2_gate_0", "base_e2_s1", "base_e1_slowR"):
        log.add_rollout(pred(run_id=rid))
    log.flush()
    assert log.run_ids("base_e1_s*", exclude_glob="*_gate_*") == [
        "base_e1_s1",
        "base_e1_s2",
        "base_e1_slowR",
    ]
    with pytest.raises(ValueError, match="pattern"):
        log.run_ids("x'; DROP TABLE runs; --")


def test_one_writer_per_process_and_reader_through_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    with RunLog.open(path) as w:
        assert RunLog.open(str(path)) is w
        w.add_rollout(pred())
        with RunLogReader.open(path) as r:  # flushes the writer, reads through its connection
            assert r.correctness("run_a") == {("q1", 0): True}
    with RunLogReader.open(path) as r:  # writer closed: a real read-only connection
        assert len(r.predictions("run_a")) == 1
        with pytest.raises(Exception, match="read-only"):
            r.query("DELETE FROM predictions")
    with pytest.raises(TypeError, match=r"RunLog\.open"):
        RunLog(path)


def test_reader_in_another_process_gets_a_retryable_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    RunLog.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from trm_assets.harness.storage.runlog import RunLog
                log = RunLog.open({str(path)!r})
                print("ready", flush=True)
                sys.stdin.readline()
                log.close()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(
            RunLogBusyError, match=rf"locked for writing by process {holder.pid}"
        ) as ei:
            RunLogReader.open(path, retries=1, wait_s=0.05)
        assert ei.value.retryable
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=20)
    with RunLogReader.open(path) as r:  # released: readable again
        assert r.runs() == []


def test_missing_file_is_explained(tmp_path: Path) -> None:
    with pytest.raises(RunLogError, match="no run log here"):
        RunLogReader.open(tmp_path / "none.duckdb")


# -- run rows: what any sequence of calls and flushes leaves ---------------------------------

_RUNS = ("r1", "r2", "r3")
_GIVEN = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["gate_candidate", "step"]),
        "skills_version": st.sampled_from(["v1", "v2"]),
        "prompts_version": st.sampled_from(["p1", "p2"]),
        "max_steps": st.integers(1, 9),
    },
)
_OUTCOME = st.sampled_from(
    [
        {"correct": True, "stop_reason": "answer", "failure_kind": None},
        {"correct": False, "stop_reason": "answer", "failure_kind": "task"},
        {"correct": None, "stop_reason": "error", "failure_kind": "infra"},
        {"correct": None, "stop_reason": "error", "failure_kind": None},
    ]
)
_CALL = st.one_of(
    st.tuples(st.just("begin"), st.sampled_from(_RUNS), _GIVEN, st.booleans()),
    st.tuples(
        st.just("rollout"),
        st.sampled_from(_RUNS),
        st.sampled_from(["q1", "q2", "q3"]),
        _OUTCOME,
        st.one_of(st.none(), st.integers(0, 500)),
    ),
    st.tuples(
        st.just("finish"),
        st.sampled_from(_RUNS),
        st.sampled_from(["done", "failed"]),
        st.one_of(st.none(), st.sampled_from([0.25, 1.5, 2.0])),
        st.booleans(),
    ),
    st.tuples(st.sampled_from(["flush", "flush_behind"])),
)


class _RunsModel:
    """The runs table, one call at a time: an immediate ``begin_run`` writes its row alone; a
    flush writes the queued run rows, then the rollouts, then the queued finishes."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.preds: dict[tuple[str, str], dict[str, Any]] = {}
        self.begins: list[tuple[str, dict[str, Any]]] = []
        self.buffer: dict[tuple[str, str], dict[str, Any]] = {}
        self.finishes: list[tuple[str, str, float | None]] = []

    def begin(self, run_id: str, values: dict[str, Any]) -> None:
        self.runs.setdefault(run_id, {"finished": False}).update(values, status="running")

    def flush(self) -> None:
        for run_id, values in self.begins:
            self.begin(run_id, values)
        for key, p in self.buffer.items():
            if key not in self.preds or self.preds[key]["stop_reason"] == "error":
                self.preds[key] = p
        for run_id, status, wall_s in self.finishes:
            if run_id not in self.runs:
                continue
            ps = [p for (r, _), p in self.preds.items() if r == run_id]
            graded = [p["correct"] for p in ps if p["correct"] is not None]
            tokens = [p["prompt_tokens"] for p in ps if p["prompt_tokens"] is not None]
            self.runs[run_id].update(
                status=status,
                finished=True,
                wall_s=(self.runs[run_id].get("wall_s") or 0.0) + (wall_s or 0.0),
                n_rollouts=len(ps),
                n_correct=sum(1 for c in graded if c),
                n_task_failures=sum(1 for p in ps if p["failure_kind"] == "task"),
                n_infra_failures=sum(1 for p in ps if p["failure_kind"] == "infra"),
                accuracy=sum(graded) / len(graded) if graded else None,
                prompt_tokens=sum(tokens) if tokens else None,
            )
        self.begins, self.buffer, self.finishes = [], {}, []


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(_CALL, max_size=25))
def test_run_rows_match_the_calls_one_after_another(calls: list[tuple[Any, ...]]) -> None:
    model = _RunsModel()
    with RunLog.open(":memory:") as log:
        for call in calls:
            if call[0] == "begin":
                _, run_id, values, defer = call
                log.begin_run(run_id, defer=defer, **values)
                if defer:
                    model.begins.append((run_id, dict(values)))
                else:  # written at once, alone (the queues wait for the next flush)
                    model.begin(run_id, dict(values))
            elif call[0] == "rollout":
                _, run_id, qid, outcome, tokens = call
                row = pred(qid, run_id=run_id, prompt_tokens=tokens, **outcome)
                log.add_rollout(row)
                key = (run_id, qid)
                old = model.buffer.get(key)
                if old is None or old["stop_reason"] == "error":
                    model.buffer[key] = {**outcome, "prompt_tokens": tokens}
            elif call[0] == "finish":
                _, run_id, status, wall_s, defer = call
                log.finish_run(run_id, status=status, wall_s=wall_s, defer=defer)
                model.finishes.append((run_id, status, wall_s))
                if not defer:
                    model.flush()
            elif call[0] == "flush":
                log.flush()
                model.flush()
            else:
                log.flush_behind()
                model.flush()
        log.flush()
        model.flush()
        got = {r["run_id"]: r for r in log.runs()}
    assert set(got) == set(model.runs)
    columns = ("status", "kind", "skills_version", "prompts_version", "max_steps", "wall_s")
    counters = (
        "n_rollouts",
        "n_correct",
        "n_task_failures",
        "n_infra_failures",
        "accuracy",
        "prompt_tokens",
    )
    for run_id, want in model.runs.items():
        row = got[run_id]
        for c in (*columns, *(counters if want["finished"] else ())):
            assert row[c] == want.get(c), (run_id, c, row[c], want.get(c))
        assert (row["finished_at"] is not None) == want["finished"], run_id


def test_rollouts_written_before_their_run_row_stay_idempotent(log: RunLog) -> None:
    """A run created after rows of its id were written (add_rollout before begin_run) is not
    taken for new: a rollout of an existing key keeps the idempotent path, no duplicate key."""
    log.add_rollout(pred("q1", run_id="late", stop_reason="error", correct=None))
    log.flush()
    log.begin_run("late", kind="eval")
    log.add_rollout(pred("q1", run_id="late"))
    log.flush()
    rows = log.predictions("late")
    assert [(r["question_id"], r["stop_reason"], r["correct"]) for r in rows] == [
        ("q1", "answer", True)
    ]


def test_an_older_run_log_gets_the_served_model_column(tmp_path: Path) -> None:
    """`predictions.served_model` came after the first release: a file without it opens, gets
    the column (NULL on its old rows) and takes new rows that carry it."""
    import duckdb

    db = tmp_path / "runs.duckdb"
    old_ddl = DDL["predictions"].replace("served_model VARCHAR,", "")
    assert old_ddl != DDL["predictions"]
    with RunLog.open(db) as lg, lg.transaction() as con:
        con.execute("DROP TABLE predictions")
        con.execute(old_ddl)
        con.execute(
            "INSERT INTO predictions (run_id, question_id, replicate, model) "
            "VALUES ('run_old', 'q0', 0, 'm')"
        )
    with duckdb.connect(str(db), read_only=True) as con:
        cols = [r[0] for r in con.execute("DESCRIBE predictions").fetchall()]
    assert "served_model" not in cols
    with RunLog.open(db) as lg:
        lg.add_rollout(pred(model="m", served_model="qwen2.5-0.5b-instruct-q4_k_m.gguf"), [], [])
        lg.flush()
        got = lg.query("SELECT run_id, model, served_model FROM predictions ORDER BY run_id")
    assert got == [
        {"run_id": "run_a", "model": "m", "served_model": "qwen2.5-0.5b-instruct-q4_k_m.gguf"},
        {"run_id": "run_old", "model": "m", "served_model": None},
    ]

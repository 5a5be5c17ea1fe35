"""Observation tables: the set-based ``write_rows`` keeps types, NULLs and idempotence."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trm_assets.harness.storage import observation as obs
from trm_assets.harness.storage.observation import read_rows, write_rows
from trm_assets.harness.storage.runlog import RunLog


def _block_row(block: int, verdict: str, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "gate_run_id": "g1",
        "row_kind": "block",
        "block": block,
        "position": -1,
        "verdict": verdict,
        "log_e_plus": 1,  # an int into a DOUBLE column
        "wins": 3,
        "baseline": None,
        "candidate_imputed": False,
        "p_final": None,
    }
    row.update(extra)
    return row


def test_write_rows_types_nulls_last_row_wins_and_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    with RunLog.open(db) as log:
        rows = [_block_row(0, "CONTINUE"), _block_row(1, "CONTINUE"), _block_row(1, "ACCEPT")]
        assert write_rows(log, "gate_evidence", rows) == 3
        write_rows(log, "gate_evidence", rows[1:])  # a resumed unit writes the same rows again
        write_rows(log, "step_report", [{
            "epoch": 0, "step": 0, "skill_file": "a.md", "action": "gate",
            "detail": {"b": [1, 2], "a": "é"},
        }])  # fmt: skip
    got = sorted(read_rows(db, "gate_evidence"), key=lambda r: r["block"])
    assert [(r["block"], r["verdict"]) for r in got] == [(0, "CONTINUE"), (1, "ACCEPT")]
    assert got[1]["log_e_plus"] == 1.0 and isinstance(got[1]["log_e_plus"], float)
    assert got[1]["wins"] == 3 and got[1]["candidate_imputed"] is False
    assert got[1]["baseline"] is None and got[1]["p_final"] is None
    (step,) = read_rows(db, "step_report")
    assert step["detail"] == '{"a": "é", "b": [1, 2]}'


def test_write_rows_rejects_unknown_tables_columns_and_ragged_rows(tmp_path: Path) -> None:
    with RunLog.open(tmp_path / "runs.duckdb") as log:
        with pytest.raises(ValueError, match="unknown observation table"):
            write_rows(log, "nope", [{"a": 1}])
        with pytest.raises(ValueError, match="unknown columns"):
            write_rows(log, "epoch_report", [{"epoch": 0, "bogus": 1}])
        with pytest.raises(ValueError, match="same columns"):
            write_rows(log, "epoch_report", [{"epoch": 0}, {"epoch": 1, "gates": 2}])
        assert write_rows(log, "epoch_report", []) == 0


# ------------------------------------------------------------------------------------------------
# merged batches: the table ends as sequential INSERT OR REPLACE statements would leave it

_COLS_A = ("verdict", "wins")
_COLS_B = ("verdict", "p_final")


def _sequential(
    writes: list[tuple[tuple[str, ...], list[tuple[int, str, int]]]],
) -> dict[int, dict[str, object]]:
    """The model: DuckDB's ``INSERT OR REPLACE`` of some columns sets those columns of an existing
    row and keeps the others; a new row has NULL in the columns not given."""
    table: dict[int, dict[str, object]] = {}
    for cols, rows in writes:
        for block, verdict, value in rows:
            row = table.setdefault(block, {"verdict": None, "wins": None, "p_final": None})
            row.update(zip(cols, (verdict, value if cols is _COLS_A else value / 10), strict=True))
    return table


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([_COLS_A, _COLS_B]),
            st.lists(
                st.tuples(
                    st.integers(0, 4), st.sampled_from(["ACCEPT", "CONTINUE"]), st.integers(0, 9)
                ),
                min_size=1,
                max_size=4,
            ),
            st.sampled_from(["none", "behind", "flush"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_merged_writes_equal_sequential_replaces(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[tuple[str, ...], list[tuple[int, str, int]], str]],
) -> None:
    """Any sequence of calls, with two column sets and behind/foreground flushes in between,
    leaves the rows the statements one by one would."""
    db = tmp_path_factory.mktemp("obs") / "runs.duckdb"
    with RunLog.open(db) as log:
        for cols, rows, flush in writes:
            write_rows(log, "gate_evidence", [
                {"gate_run_id": "g", "row_kind": "block", "block": b, "position": -1,
                 **dict(zip(cols, (v, n if cols is _COLS_A else n / 10), strict=True))}
                for b, v, n in rows
            ])  # fmt: skip
            if flush == "behind":
                log.flush_behind()
            elif flush == "flush":
                log.flush()
    got = {
        r["block"]: {c: r[c] for c in ("verdict", "wins", "p_final")}
        for r in read_rows(db, "gate_evidence")
    }
    assert got == _sequential([(c, r) for c, r, _ in writes])


def test_observation_rows_wait_for_the_foreground_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A behind-flush writes the rollouts and leaves observation rows queued: the blocks of one
    unit become one statement at the unit's checkpoint (the foreground flush)."""
    statements: list[int] = []
    real = obs._PendingRows.write

    def counted(self: obs._PendingRows, con: object) -> None:
        statements.append(len(self.cells))
        real(self, con)  # type: ignore[arg-type]

    monkeypatch.setattr(obs._PendingRows, "write", counted)
    db = tmp_path / "runs.duckdb"
    with RunLog.open(db) as log:
        for b in range(3):
            write_rows(log, "gate_evidence", [_block_row(b, "CONTINUE")])
            log.flush_behind()
        log.flush()
        assert statements == [3]
        write_rows(log, "gate_evidence", [_block_row(3, "ACCEPT")])  # after the flush: a new one
    assert statements == [3, 1]
    assert sorted(r["block"] for r in read_rows(db, "gate_evidence")) == [0, 1, 2, 3]


def test_an_older_run_log_gets_the_columns_added_since(tmp_path: Path) -> None:
    """`epoch_report` gained the pair its val_accuracy is of: a run log written before has the
    table without them, and a resumed run writes its next epoch's row into it."""
    db = tmp_path / "runs.duckdb"
    added = ", val_skills_version VARCHAR, val_prompts_version VARCHAR"
    old_ddl = obs.OBS_DDL["epoch_report"].replace(added, "")
    assert old_ddl != obs.OBS_DDL["epoch_report"]
    with RunLog.open(db) as log, log.transaction() as con:
        con.execute(old_ddl)
        con.execute("INSERT INTO epoch_report (epoch, val_accuracy) VALUES (0, 0.5)")
    with RunLog.open(db) as log:
        row = {"epoch": 1, "val_skills_version": "v2", "val_prompts_version": "v1"}
        write_rows(log, "epoch_report", [row])
    got = sorted(read_rows(db, "epoch_report"), key=lambda r: r["epoch"])
    assert [(r["epoch"], r["val_skills_version"], r["val_prompts_version"]) for r in got] == [
        (0, None, None),
        (1, "v2", "v1"),
    ]
    assert got[0]["val_accuracy"] == 0.5


def test_an_older_step_report_gets_gate_order(tmp_path: Path) -> None:
    """`step_report` gained how each gate's plan was ordered: a run log written before keeps its
    rows (NULL: not recorded), and a resumed run writes the label into the same table."""
    db = tmp_path / "runs.duckdb"
    old_ddl = obs.OBS_DDL["step_report"].replace(" gate_order VARCHAR,", "")
    assert old_ddl != obs.OBS_DDL["step_report"]
    with RunLog.open(db) as log, log.transaction() as con:
        con.execute(old_ddl)
        con.execute(
            "INSERT INTO step_report (epoch, step, skill_file, action) VALUES (0, 0, 'a.md', 'x')"
        )
    with RunLog.open(db) as log:
        row = {"epoch": 0, "step": 1, "skill_file": "a.md", "action": "reject"}
        write_rows(log, "step_report", [{**row, "gate_order": "uniform (real endpoint)"}])
    got = sorted(read_rows(db, "step_report"), key=lambda r: r["step"])
    assert [(r["step"], r["gate_order"]) for r in got] == [
        (0, None),
        (1, "uniform (real endpoint)"),
    ]

"""Observation tables: the set-based ``write_rows`` keeps types, NULLs and idempotence."""

from __future__ import annotations

from pathlib import Path

import pytest

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

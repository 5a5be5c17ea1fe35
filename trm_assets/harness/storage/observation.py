"""Observation tables and step/epoch reports in the workspace's run database (SPEC §6, seed §14).

Tables (created idempotently, primary keys on all, inserts are ``INSERT OR REPLACE`` so writing
the same row twice — a resumed unit of work — leaves one row):

* ``gate_evidence``  one row per question of a gate (``row_kind = 'question'``: ladder position,
  replicate, both outcomes, sign, quadrant, whether the baseline came from the cache) plus one
  per block (``row_kind = 'block'``: E⁺, E⁻, Λ, sign-test p, W, L, verdict): a decision can be
  replayed from it;
* ``quadrant_pair``  after a gate, each visited question's quadrant (the ladder subset);
* ``dual_metric_eval``  the slow update's R: hard accuracy, soft score, mixed score;
* ``shadow_gate``  the mixed-metric shadow of the best argmax (reported, never decides);
* ``holdout_eval``  the four-way held-out report on the test pool (seed, epoch start, current,
  best) — a report only, never an input to a decision;
* ``step_report`` / ``epoch_report``.

**Missing soft/mixed scores are stored as NULL, never 0** (no provider reports a soft score yet).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

import duckdb
import pandas as pd

from trm_assets.harness.storage.runlog import RunLog, RunLogReader

OBS_DDL: Final[dict[str, str]] = {
    "gate_evidence": """
        CREATE TABLE IF NOT EXISTS gate_evidence (
            gate_run_id VARCHAR NOT NULL,
            row_kind VARCHAR NOT NULL CHECK (row_kind IN ('question', 'block')),
            block INTEGER NOT NULL,
            position INTEGER NOT NULL,
            epoch INTEGER, step INTEGER, skill_file VARCHAR, task_type VARCHAR, policy VARCHAR,
            question_id VARCHAR, replicate INTEGER,
            baseline BOOLEAN, candidate BOOLEAN, sign INTEGER, quadrant VARCHAR,
            candidate_imputed BOOLEAN, baseline_source VARCHAR, stop_reason VARCHAR,
            verdict VARCHAR, log_e_plus DOUBLE, log_e_minus DOUBLE, log_sprt DOUBLE,
            p_final DOUBLE, wins INTEGER, losses INTEGER, ties INTEGER, pairs INTEGER,
            positions INTEGER, d_max INTEGER, infra INTEGER, attempted INTEGER,
            infra_rate DOUBLE, candidate_infra_suspect BOOLEAN,
            PRIMARY KEY (gate_run_id, row_kind, block, position)
        )""",
    "quadrant_pair": """
        CREATE TABLE IF NOT EXISTS quadrant_pair (
            gate_run_id VARCHAR NOT NULL, question_id VARCHAR NOT NULL, replicate INTEGER NOT NULL,
            epoch INTEGER, step INTEGER, task_type VARCHAR, quadrant VARCHAR NOT NULL,
            PRIMARY KEY (gate_run_id, question_id, replicate)
        )""",
    "dual_metric_eval": """
        CREATE TABLE IF NOT EXISTS dual_metric_eval (
            epoch INTEGER NOT NULL, run_id VARCHAR NOT NULL,
            skills_version VARCHAR, prompts_version VARCHAR, n INTEGER,
            hard_accuracy DOUBLE, soft_score DOUBLE, mixed_score DOUBLE,
            PRIMARY KEY (epoch, run_id)
        )""",
    "shadow_gate": """
        CREATE TABLE IF NOT EXISTS shadow_gate (
            epoch INTEGER NOT NULL, run_id VARCHAR NOT NULL,
            hard_accuracy DOUBLE, mixed_score DOUBLE, shadow_best_mixed DOUBLE,
            would_replace BOOLEAN, hard_best_accuracy DOUBLE,
            PRIMARY KEY (epoch, run_id)
        )""",
    "holdout_eval": """
        CREATE TABLE IF NOT EXISTS holdout_eval (
            epoch INTEGER NOT NULL, label VARCHAR NOT NULL,
            skills_version VARCHAR, prompts_version VARCHAR, run_id VARCHAR, n INTEGER,
            accuracy DOUBLE, expected_accuracy DOUBLE, simulated BOOLEAN,
            PRIMARY KEY (epoch, label)
        )""",
    "step_report": """
        CREATE TABLE IF NOT EXISTS step_report (
            epoch INTEGER NOT NULL, step INTEGER NOT NULL, skill_file VARCHAR NOT NULL,
            task_type VARCHAR, action VARCHAR NOT NULL, verdict VARCHAR, policy VARCHAR,
            gate_run_id VARCHAR, wins INTEGER, losses INTEGER, blocks INTEGER,
            candidate_rollouts INTEGER, baseline_rollouts INTEGER, cache_hits INTEGER,
            edit_budget INTEGER, n_edits INTEGER, n_applied INTEGER,
            new_skills_version VARCHAR, detail VARCHAR, gate_order VARCHAR,
            PRIMARY KEY (epoch, step, skill_file)
        )""",
    "epoch_report": """
        CREATE TABLE IF NOT EXISTS epoch_report (
            epoch INTEGER PRIMARY KEY,
            val_accuracy DOUBLE, val_run_id VARCHAR, r_accuracy DOUBLE, r2_accuracy DOUBLE,
            r2_kept BOOLEAN, skills_version VARCHAR, prompts_version VARCHAR,
            best_skills_version VARCHAR, best_prompts_version VARCHAR, best_val_accuracy DOUBLE,
            test_accuracy DOUBLE, val_expected_accuracy DOUBLE,
            momentum_updated VARCHAR, system_tool_action VARCHAR, labels VARCHAR,
            accepted INTEGER, rejected INTEGER, rolled_back INTEGER, aborted INTEGER,
            gates INTEGER, expected_false_accepts DOUBLE, rollouts BIGINT, tokens BIGINT,
            infra_failures BIGINT, val_skills_version VARCHAR, val_prompts_version VARCHAR
        )""",
}
OBS_TABLES: Final[tuple[str, ...]] = tuple(OBS_DDL)
#: Columns added after a table's first release (``ALTER TABLE … ADD COLUMN IF NOT EXISTS`` brings
#: an older run log up to date): ``epoch_report``'s ``val_accuracy`` is the accuracy of the
#: pair ``val_run_id`` evaluated, which is not the row's ``skills_version`` / ``prompts_version``
#: (the current pair at the end of the epoch, whose accuracy ``test_accuracy`` is).
#: ``step_report``'s ``gate_order`` is how the gate's plan was ordered (``GatePlan.order``: e.g.
#: ``ladder-warm``, ``uniform (temperature 0)``, ``uniform (real endpoint)``); NULL before it.
_ADDED_COLUMNS: Final[tuple[tuple[str, str, str], ...]] = (
    ("epoch_report", "val_skills_version", "VARCHAR"),
    ("epoch_report", "val_prompts_version", "VARCHAR"),
    ("step_report", "gate_order", "VARCHAR"),
)


# Logs whose observation tables exist already: the DDL runs once per writer, not per insert
# (re-running nine CREATE TABLE IF NOT EXISTS per write cost ~0.2 s each in `trm bench overhead`).
_ENSURED: weakref.WeakSet[RunLog] = weakref.WeakSet()


def ensure_tables(log: RunLog) -> None:
    if log in _ENSURED:
        return
    with log.transaction() as con:
        for ddl in OBS_DDL.values():
            con.execute(ddl)
        for table, column, sql_type in _ADDED_COLUMNS:
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {sql_type}")
    _ENSURED.add(log)


def _cell(value: Any) -> Any:
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


def prepare_tables(log: RunLog) -> None:
    """Create the observation tables and read their schemas now (once per writer), so the first
    write of a table in a unit does not wait for the run log's background writes."""
    ensure_tables(log)
    for table in OBS_DDL:
        _schema(log, table)


def write_rows(log: RunLog, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Idempotent insert (``INSERT OR REPLACE`` on the primary key) of rows with equal keys.

    Validated now, written in the run log's next foreground :meth:`~RunLog.flush` transaction
    (the loop flushes before every checkpoint; the writer flushes before its own reads and on
    close; a :meth:`~RunLog.flush_behind` leaves them queued).
    Consecutive calls for one table with the same columns join one pending batch, written by one
    statement (:class:`_PendingRows`)."""
    if table not in OBS_DDL:
        raise ValueError(f"unknown observation table {table!r}; expected one of {OBS_TABLES}")
    if not rows:
        return 0
    cols = tuple(rows[0])
    for r in rows:
        if tuple(r) != cols:
            raise ValueError(f"{table}: every row needs the same columns {list(cols)}")
    ensure_tables(log)
    types, key = _schema(log, table)
    unknown = [c for c in cols if c not in types]
    if unknown:
        raise ValueError(f"{table}: unknown columns {unknown}; expected some of {list(types)}")
    cells = {tuple(r.get(k) for k in key): [_cell(r[c]) for c in cols] for r in rows}
    pending = _PENDING.setdefault(log, {})
    batch = pending.get(table)
    if batch is None or not batch.merge(cols, cells):
        batch = _PendingRows(table, cols, types, cells)
        pending[table] = batch
        # committed with the unit's next foreground flush (a checkpoint flushes first)
        log.defer(batch.write, behind=False)
    return len(rows)


class _PendingRows:
    """The rows of one observation table waiting for the next flush, by primary key.

    One ``INSERT OR REPLACE`` from a frame costs ≈ 15 ms in DuckDB whether it carries 1 row or
    250, and a gate writes its evidence once per block, so the rows of consecutive calls are
    merged and written by one statement. Merging keeps the last row per key, which is what
    sequential ``INSERT OR REPLACE`` statements leave; a call with other columns (DuckDB then
    sets only those columns of an existing row) starts a new batch after this one, so the table
    sees the same sequence. Once the flush has started writing a batch it is sealed
    and later rows go to a new batch, under the lock (the flush may run behind, on its thread);
    a failed flush re-runs the sealed batch with the same rows."""

    def __init__(
        self,
        table: str,
        cols: tuple[str, ...],
        types: Mapping[str, str],
        cells: dict[tuple[Any, ...], list[Any]],
    ) -> None:
        self.table, self.cols, self.types = table, cols, types
        self.cells = cells
        self.sealed = False
        self.lock = threading.Lock()

    def merge(self, cols: tuple[str, ...], cells: Mapping[tuple[Any, ...], list[Any]]) -> bool:
        with self.lock:
            if self.sealed or cols != self.cols:
                return False
            self.cells.update(cells)
            return True

    def write(self, con: duckdb.DuckDBPyConnection) -> None:
        with self.lock:
            self.sealed = True
            values = list(self.cells.values())
        cols, table = self.cols, self.table
        frame = pd.DataFrame(values, columns=list(cols), dtype=object)
        select = ", ".join(f"CAST({c} AS {self.types[c]}) AS {c}" for c in cols)
        con.register("_obs_rows", frame)
        try:
            con.execute(
                f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) SELECT {select} FROM _obs_rows"
            )
        finally:
            with suppress(duckdb.Error):
                con.unregister("_obs_rows")


# The newest pending batch per table of each writer (a sealed one is replaced on the next call).
_PENDING: weakref.WeakKeyDictionary[RunLog, dict[str, _PendingRows]] = weakref.WeakKeyDictionary()


_SCHEMAS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}


def _schema(log: RunLog, table: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """(column name → SQL type, primary-key columns) of an observation table, read from the
    catalog (the DDL above is the one truth) once per process."""
    if table not in _SCHEMAS:
        where = "WHERE table_name = ? AND database_name = current_database()"
        with log.transaction() as con:
            cols = con.execute(
                f"SELECT column_name, data_type FROM duckdb_columns() {where} "
                "ORDER BY column_index",
                [table],
            ).fetchall()
            key = con.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() "
                f"{where} AND constraint_type = 'PRIMARY KEY'",
                [table],
            ).fetchone()
        if key is None:  # every table of OBS_DDL has one: deduplication below relies on it
            raise RuntimeError(f"{log.path}: observation table {table} has no primary key")
        _SCHEMAS[table] = ({str(n): str(t) for n, t in cols}, tuple(str(c) for c in key[0]))
    return _SCHEMAS[table]


def read_rows(
    run_db: Path | str, table: str, where: str = "", params: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    """Rows of an observation table through the read-only reader ([] if the table is absent)."""
    if table not in OBS_DDL:
        raise ValueError(f"unknown observation table {table!r}; expected one of {OBS_TABLES}")
    with RunLogReader.open(run_db) as reader:
        if not reader.has_table(table):
            return []
        sql = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "")
        return reader.query(sql, list(params))


def nullable_score(value: float | None) -> float | None:
    """Soft/mixed scores: a missing value stays NULL (never 0)."""
    return None if value is None else float(value)


def mixed_score(hard: float | None, soft: float | None) -> float | None:
    """The mixed metric: mean of hard and soft, NULL when either is missing."""
    if hard is None or soft is None:
        return None
    return 0.5 * (hard + soft)

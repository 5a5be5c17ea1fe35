"""The run log: one DuckDB file per workspace with the tables ``runs``, ``predictions``,
``traces`` and ``flags`` (schema: ``docs/run-log-schema.md``; the flags decision:
``docs/decision-run-log-flags.md``).

Writing (SPEC §6, seed §4):

* **one writer per process**: :meth:`RunLog.open` returns the process's single writer of a file
  (opening it twice returns the same object); every statement runs behind a ``threading.Lock``
  (a shared DuckDB connection must not see concurrent statements);
* **batched**: rollouts are buffered by :meth:`RunLog.add_rollout` and written in one transaction
  per :meth:`RunLog.flush` (automatically every ``batch_size`` rollouts is the caller's choice:
  :func:`~trm_assets.harness.loop.rollouts.run_inference` flushes off the event loop);
* **idempotent**: primary keys on every table. A prediction row that already exists is kept,
  except a pessimistic row (``stop_reason = 'error'``), which a later attempt of the same
  (run_id, question_id, replicate) overwrites together with its traces and flags
  (``INSERT … ON CONFLICT … DO UPDATE … WHERE predictions.stop_reason = 'error'``). Re-inserting
  a completed rollout is a no-op.

Reading elsewhere: :meth:`RunLogReader.open` opens the file ``read_only``; when another process
holds the write lock it raises :class:`RunLogBusyError` (retryable, says who holds it) instead of
an unhandled DuckDB lock error. In the writer's own process the reader goes through the writer.

Secrets never reach this module: rows hold model names, never keys, headers or URLs with
credentials.

Why it is long: it is the one owner of the DuckDB run log — schema, the writer's batched idempotent
inserts and upserts, the reader with its lock and busy handling, the workspace identity binding and
the size caps — so every SQL statement and every DuckDB error is translated in one module; a
writer/reader split would split the schema they share.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import RUN_LOG_TEXT_CAP_DEFAULT

SCHEMA_VERSION = 1

#: Flag kinds (one ``flags`` table with a ``kind`` column; see docs/decision-run-log-flags.md).
FLAG_VALIDATION = "validation"  # answer-format problems (free-text answer, no letter, bad letter)
FLAG_ANCHOR = "anchor"  # evidence anchoring (answered without looking at any node)
FLAG_FRAME_HEALTH = "frame_health"  # inspect_frames fell back to stored captions / VLM trouble
FLAG_REUSE = "reuse"  # a temperature-0 outcome served from an earlier rollout of the same prompt
FLAG_KINDS: tuple[str, ...] = (FLAG_VALIDATION, FLAG_ANCHOR, FLAG_FRAME_HEALTH)

RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "kind",
    "status",
    "model",
    "is_simulated",
    "skill_mode",
    "max_steps",
    "concurrency",
    "skills_version",
    "prompts_version",
    "questions_ref",
    "n_rollouts",
    "n_correct",
    "n_task_failures",
    "n_infra_failures",
    "accuracy",
    "prompt_tokens",
    "completion_tokens",
    "wall_s",
    "started_at",
    "finished_at",
    "meta",
)
PREDICTION_COLUMNS: tuple[str, ...] = (
    "run_id",
    "question_id",
    "replicate",
    "video_id",
    "task_type",
    "duration",
    "truth",
    "predicted",
    "correct",
    "stop_reason",
    "failure_kind",
    "error",
    "n_llm_calls",
    "n_tool_calls",
    "n_tool_errors",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "seed",
    "model",
    "skill_files",
    "evidence",
    "final_text",
    "created_at",
    "final_text_bytes",
    "served_model",
)
TRACE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "question_id",
    "replicate",
    "seq",
    "step",
    "role",
    "tool_name",
    "tool_call_id",
    "arguments",
    "content",
    "result_chars",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "error",
    "content_bytes",
)
FLAG_COLUMNS: tuple[str, ...] = (
    "run_id",
    "question_id",
    "replicate",
    "kind",
    "name",
    "detail",
    "created_at",
)


DDL: dict[str, str] = {
    "schema_info": """
        CREATE TABLE IF NOT EXISTS schema_info (
            key VARCHAR PRIMARY KEY,
            value VARCHAR NOT NULL
        )""",
    "runs": """
        CREATE TABLE IF NOT EXISTS runs (
            run_id VARCHAR PRIMARY KEY,
            kind VARCHAR,
            status VARCHAR NOT NULL DEFAULT 'running',
            model VARCHAR,
            is_simulated BOOLEAN,
            skill_mode VARCHAR,
            max_steps INTEGER,
            concurrency INTEGER,
            skills_version VARCHAR,
            prompts_version VARCHAR,
            questions_ref VARCHAR,
            n_rollouts INTEGER,
            n_correct INTEGER,
            n_task_failures INTEGER,
            n_infra_failures INTEGER,
            accuracy DOUBLE,
            prompt_tokens BIGINT,
            completion_tokens BIGINT,
            wall_s DOUBLE,
            started_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            finished_at TIMESTAMP,
            meta VARCHAR
        )""",
    "predictions": """
        CREATE TABLE IF NOT EXISTS predictions (
            run_id VARCHAR NOT NULL,
            question_id VARCHAR NOT NULL,
            replicate INTEGER NOT NULL,
            video_id VARCHAR,
            task_type VARCHAR,
            duration VARCHAR,
            truth VARCHAR,
            predicted VARCHAR,
            correct BOOLEAN,
            stop_reason VARCHAR NOT NULL DEFAULT 'error',
            failure_kind VARCHAR CHECK (failure_kind IS NULL OR failure_kind IN ('task', 'infra')),
            error VARCHAR,
            n_llm_calls INTEGER,
            n_tool_calls INTEGER,
            n_tool_errors INTEGER,
            prompt_tokens BIGINT,
            completion_tokens BIGINT,
            latency_s DOUBLE,
            seed BIGINT,
            model VARCHAR,
            skill_files VARCHAR,
            evidence VARCHAR,
            final_text VARCHAR,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            final_text_bytes BIGINT,
            served_model VARCHAR,
            PRIMARY KEY (run_id, question_id, replicate)
        )""",
    "traces": """
        CREATE TABLE IF NOT EXISTS traces (
            run_id VARCHAR NOT NULL,
            question_id VARCHAR NOT NULL,
            replicate INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            step INTEGER NOT NULL,
            role VARCHAR NOT NULL,
            tool_name VARCHAR,
            tool_call_id VARCHAR,
            arguments VARCHAR,
            content VARCHAR,
            result_chars INTEGER,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            latency_s DOUBLE,
            error VARCHAR,
            content_bytes BIGINT,
            PRIMARY KEY (run_id, question_id, replicate, seq)
        )""",
    "flags": """
        CREATE TABLE IF NOT EXISTS flags (
            run_id VARCHAR NOT NULL,
            question_id VARCHAR NOT NULL,
            replicate INTEGER NOT NULL,
            kind VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            detail VARCHAR,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            PRIMARY KEY (run_id, question_id, replicate, kind, name)
        )""",
}

#: The workspace a run log belongs to (issue 18.6): one row, the manifest's ``workspace_id``.
#: Kept apart from :data:`DDL` (the tables of results): it describes the file, not a run.
IDENTITY_TABLE = "workspace_identity"
IDENTITY_DDL = f"""
    CREATE TABLE IF NOT EXISTS {IDENTITY_TABLE} (
        workspace_id VARCHAR PRIMARY KEY
    )"""

#: Columns added after the first release of the schema: ``ALTER TABLE … ADD COLUMN IF NOT
#: EXISTS`` brings an older file up to date (additive, so the schema version stays 1).
_ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("predictions", "final_text_bytes", "BIGINT"),
    ("predictions", "served_model", "VARCHAR"),
    ("traces", "content_bytes", "BIGINT"),
)

#: Model text is stored up to this many UTF-8 bytes per value (issue 18.7: 1 MB replies made a
#: 540 MB run log); the original size is kept in ``final_text_bytes`` / ``content_bytes``.
DEFAULT_TEXT_CAP_BYTES = RUN_LOG_TEXT_CAP_DEFAULT  # the config's `run_log_text_cap_bytes`
TRUNCATION_MARK = "\n…[cut by the run log: {size} bytes, {cap}-byte cap]"
#: Usage and count columns are clamped into 0..MAX_COUNT before the insert: a provider's
#: nonsense (10**20 tokens) must not crash an INTEGER/BIGINT insert, and sums over a run stay
#: far inside BIGINT.
MAX_COUNT = 2**31 - 1
_COUNT_COLUMNS = frozenset(
    {"n_llm_calls", "n_tool_calls", "n_tool_errors", "prompt_tokens", "completion_tokens"}
)
_TRACE_COUNT_COLUMNS = frozenset({"result_chars", "prompt_tokens", "completion_tokens"})
_TEXT_COLUMNS = ("final_text", "error")  # plain text: cut, with a mark
_JSON_COLUMNS = ("skill_files", "evidence")  # JSON text: replaced whole (a cut is not JSON)
_TRACE_TEXT_COLUMNS = ("arguments", "content", "error")

_log = logging.getLogger(__name__)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def cap_text(text: str | None, cap: int) -> str | None:
    """``text`` if it fits in ``cap`` UTF-8 bytes, else its longest prefix (on a character
    boundary) that fits together with a mark naming the original size."""
    if text is None or len(text) * 4 <= cap:  # fast path: cannot exceed the cap
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return text
    mark = TRUNCATION_MARK.format(size=len(data), cap=cap)
    room = max(0, cap - utf8_size(mark))
    return data[:room].decode("utf-8", "ignore") + mark


def cap_json(text: str | None, cap: int) -> str | None:
    """A JSON text over the cap is replaced by ``{"truncated_bytes": N}`` (still JSON)."""
    if text is None or len(text) * 4 <= cap:
        return text
    size = utf8_size(text)
    return text if size <= cap else json.dumps({"truncated_bytes": size})


def clamp_count(value: Any) -> int | None:
    """A count as an int in 0..MAX_COUNT; None for what is not a finite number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        n = value
    else:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if not math.isfinite(f):
            return None
        n = int(f)
    return min(max(n, 0), MAX_COUNT)


_GLOB_RE = re.compile(r"^[\w\-\*\?\[\]\.]+$")


class RunLogError(TrmError, RuntimeError):
    """A run-log file that cannot be opened or has an unexpected schema."""


class RunLogBusyError(RunLogError):
    """The run log is being written by another process. Retry later (``retryable`` is True)."""

    retryable = True


class ForeignRunLogError(RunLogError):
    """The run log belongs to another workspace (its identity differs from the manifest's)."""


class MissingRunLogError(RunLogError):
    """The run log is missing although the workspace has recorded runs."""


def to_text_field(value: Any) -> str | None:
    """A column value as text: ``str`` as is, None as NULL, anything else as sorted JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


# ----------------------------------------------------------------------------------------------
# reading (shared by the writer and the read-only reader)


class _Queries:
    """Read queries over a connection guarded by ``self._lock``."""

    _con: duckdb.DuckDBPyConnection
    _lock: threading.Lock
    path: Path

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Run a SELECT; rows as dicts."""
        with self._lock:
            try:
                cur = self._con.execute(sql, list(params or []))
                cols = [d[0] for d in cur.description or []]
                return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
            except duckdb.Error as e:
                if is_corrupt(e):
                    raise _unreadable_error(self.path, e) from None
                raise

    def has_table(self, name: str) -> bool:
        """Whether this database holds table ``name`` (an older log may lack a newer one)."""
        rows = self.query(
            "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = ? "
            "AND database_name = current_database()",
            [name],
        )
        return bool(rows and rows[0]["n"])

    def runs(self) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM runs ORDER BY started_at, run_id")

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def run_ids(self, glob: str | None = None, exclude_glob: str | None = None) -> list[str]:
        """Run ids matching a GLOB (``base_e2_s*``), minus those matching ``exclude_glob``.

        Run ids come from both ``runs`` and ``predictions`` (a run without a runs row still counts).
        """
        for g in (glob, exclude_glob):
            if g is not None and not _GLOB_RE.match(g):
                raise ValueError(f"run-id pattern {g!r} may use letters, digits, _-.*?[] only")
        sql = (
            "SELECT DISTINCT run_id FROM "
            "(SELECT run_id FROM runs UNION SELECT run_id FROM predictions)"
        )
        where, params = [], []
        if glob is not None:
            where.append("run_id GLOB ?")
            params.append(glob)
        if exclude_glob is not None:
            where.append("NOT (run_id GLOB ?)")
            params.append(exclude_glob)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [r["run_id"] for r in self.query(sql + " ORDER BY run_id", params)]

    def predictions(self, run_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT * FROM predictions WHERE run_id = ? ORDER BY question_id, replicate", [run_id]
        )

    def correctness(self, run_id: str) -> dict[tuple[str, int], bool | None]:
        """(question_id, replicate) → True / False (task failure) / None (infra or aborted)."""
        return {
            (r["question_id"], r["replicate"]): (
                None if r["failure_kind"] == "infra" else r["correct"]
            )
            for r in self.query(
                "SELECT question_id, replicate, correct, failure_kind FROM predictions "
                "WHERE run_id = ?",
                [run_id],
            )
        }

    def traces(
        self, run_id: str, question_id: str | None = None, replicate: int | None = None
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM traces WHERE run_id = ?"
        params: list[Any] = [run_id]
        if question_id is not None:
            sql += " AND question_id = ?"
            params.append(question_id)
        if replicate is not None:
            sql += " AND replicate = ?"
            params.append(replicate)
        return self.query(sql + " ORDER BY question_id, replicate, seq", params)

    def flags(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM flags WHERE run_id = ?", [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        return self.query(sql + " ORDER BY question_id, replicate, kind, name", params)


# ----------------------------------------------------------------------------------------------
# the writer

_WRITERS: dict[Path, RunLog] = {}
_WRITERS_LOCK = threading.Lock()


#: Buffered rollouts: (run_id, question_id, replicate) → (prediction row, trace rows, flag rows).
Batch = dict[
    tuple[str, str, int], tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]
]


class RunLog(_Queries):
    """The single writer of one run-log file in this process. Use :meth:`open`.

    Also usable as a context manager (``with RunLog.open(path) as log:``), which flushes and
    closes on exit. ``path=":memory:"`` gives a private in-memory log (tests, benchmarks).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        workspace_id: str | None = None,
        must_exist: bool = False,
        text_cap_bytes: int = DEFAULT_TEXT_CAP_BYTES,
        _token: object = None,
    ) -> None:
        if _token is not _OPEN_TOKEN:
            raise TypeError("use RunLog.open(path) (one writer per file per process)")
        if text_cap_bytes < 1024:
            raise ValueError(f"text_cap_bytes: {text_cap_bytes}; expected at least 1024")
        self.path = Path(path)
        self.text_cap_bytes = text_cap_bytes
        self._clamped = 0  # usage values clamped (logged once per writer)
        self._lock = threading.Lock()  # the connection
        self._buf_lock = threading.Lock()  # the rollout buffer
        self._buffer: Batch = {}
        # Statements deferred to the next flush's transaction, in call order: run rows (written
        # before the rollouts; each returns the run id if it created the run) and the rest
        # (finish_run, observation rows; written after). Then the runs this writer created, with
        # the keys it has written for each: rows of other keys are new, so they take the
        # plain-INSERT path of _write_batch.
        # Each entry carries its call number, so rows put back after a failed write (_restore)
        # take their place in call order again.
        self._begins: list[tuple[int, Callable[[duckdb.DuckDBPyConnection], str | None]]] = []
        # deferred statements, each with whether a flush_behind may run it (see defer)
        self._deferred: list[tuple[int, Callable[[duckdb.DuckDBPyConnection], Any], bool]] = []
        self._calls = itertools.count()
        self._fresh: dict[str, set[tuple[str, int]]] = {}
        # the rows of the last runs given, by run: (question id, replicate) → (prediction, traces)
        self._recent: OrderedDict[str, dict[tuple[str, int], tuple[Any, Any]]] = OrderedDict()
        # flush_behind() / commit_behind() tasks not yet joined, on the one writer thread
        self._queued: list[Future[Any]] = []
        self._writer: ThreadPoolExecutor | None = None
        self._behind_error: BaseException | None = None  # set by a failed task, until joined
        self._closed = False
        target = ":memory:" if str(path) == ":memory:" else str(self.path)
        if target != ":memory:":
            if must_exist and not self.path.exists():
                raise MissingRunLogError(
                    f"{self.path}: missing, but the workspace has recorded runs (manifest.json "
                    "history); the run log is never re-created empty, which would drop every "
                    "earlier prediction. Restore it from a backup, or start a new workspace "
                    "(`trm init`)"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = _connect_writer(target, self.path)
        try:
            with self._lock:
                for ddl in (*DDL.values(), IDENTITY_DDL):
                    self._con.execute(ddl)
                for table, column, sql_type in _ADDED_COLUMNS:
                    self._con.execute(
                        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {sql_type}"
                    )
                row = self._con.execute(
                    "SELECT value FROM schema_info WHERE key = 'schema_version'"
                ).fetchone()
                if row is None:
                    self._con.execute(
                        "INSERT INTO schema_info VALUES ('schema_version', ?)",
                        [str(SCHEMA_VERSION)],
                    )
                elif row[0] != str(SCHEMA_VERSION):
                    raise RunLogError(
                        f"{self.path}: run-log schema version {row[0]}, this code writes version "
                        f"{SCHEMA_VERSION}; use a new workspace or migrate the file"
                    )
                self.workspace_id = _bind_identity(self._con, self.path, workspace_id)
        except BaseException as e:
            self._con.close()
            if isinstance(e, duckdb.Error):
                raise _unreadable_error(self.path, e) from None
            raise

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        workspace_id: str | None = None,
        must_exist: bool = False,
        text_cap_bytes: int = DEFAULT_TEXT_CAP_BYTES,
    ) -> RunLog:
        """The process's writer of ``path`` (created with its schema if new).

        ``workspace_id`` (the manifest's): a log that records another workspace's identity is
        refused with :class:`ForeignRunLogError`; a log without one (new, or older than
        identities) is given this one. ``must_exist``: a missing file is
        :class:`MissingRunLogError` instead of a new empty log. ``text_cap_bytes``: the cap on
        each stored model-text value (the first open of a file in a process sets it).
        """
        if str(path) == ":memory:":
            return cls(
                path, workspace_id=workspace_id, text_cap_bytes=text_cap_bytes, _token=_OPEN_TOKEN
            )
        key = Path(path).resolve()
        with _WRITERS_LOCK:
            existing = _WRITERS.get(key)
            if existing is not None and not existing._closed:
                if workspace_id is not None and existing.workspace_id != workspace_id:
                    with existing.transaction() as con:
                        existing.workspace_id = _bind_identity(con, key, workspace_id)
                return existing
            log = _WRITERS[key] = cls(
                key,
                workspace_id=workspace_id,
                must_exist=must_exist,
                text_cap_bytes=text_cap_bytes,
                _token=_OPEN_TOKEN,
            )
            return log

    @staticmethod
    def is_open(path: str | Path) -> bool:
        """Whether this process holds an open writer of ``path``."""
        with _WRITERS_LOCK:
            w = _WRITERS.get(Path(path).resolve())
        return w is not None and not w._closed

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush the buffer and close the connection (idempotent)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            with self._lock:
                self._closed = True
                self._con.close()
            with _WRITERS_LOCK:
                if _WRITERS.get(self.path) is self:
                    del _WRITERS[self.path]

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, locked, inside a transaction (for other tables of the same file)."""
        with self._lock:
            self._check_open()
            self._con.execute("BEGIN TRANSACTION")
            try:
                yield self._con
            except BaseException as e:
                with suppress(duckdb.Error):  # a damaged file may refuse the rollback too
                    self._con.execute("ROLLBACK")
                if isinstance(e, duckdb.Error) and is_corrupt(e):
                    raise _unreadable_error(self.path, e) from None
                raise
            self._con.execute("COMMIT")

    def _check_open(self) -> None:
        if self._closed:
            raise RunLogError(f"{self.path}: the run log is closed")

    # -- runs --------------------------------------------------------------------------------

    def begin_run(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        model: str | None = None,
        is_simulated: bool | None = None,
        skill_mode: str | None = None,
        max_steps: int | None = None,
        concurrency: int | None = None,
        skills_version: str | None = None,
        prompts_version: str | None = None,
        questions_ref: str | None = None,
        meta: Mapping[str, Any] | None = None,
        defer: bool = False,
    ) -> None:
        """Create the run's row, or mark an existing one running again (resume / next block).

        Values that are given replace stored ones; the others are kept. ``defer=True`` writes the
        row in the next :meth:`flush`'s transaction, together with the run's first rollouts (one
        commit instead of two; a run is visible from its first flush).
        """
        _check_run_id(run_id)
        values: dict[str, Any] = {
            "kind": kind,
            "model": model,
            "is_simulated": is_simulated,
            "skill_mode": skill_mode,
            "max_steps": max_steps,
            "concurrency": concurrency,
            "skills_version": skills_version,
            "prompts_version": prompts_version,
            "questions_ref": questions_ref,
            "meta": to_text_field(dict(meta)) if meta is not None else None,
        }
        given = {k: v for k, v in values.items() if v is not None}

        def write(con: duckdb.DuckDBPyConnection) -> str | None:
            sets = "".join(f", {k} = ?" for k in given)
            found = con.execute(
                f"UPDATE runs SET status = 'running'{sets} WHERE run_id = ? RETURNING run_id",
                [*given.values(), run_id],
            ).fetchall()
            if found:
                return None
            cols = ", ".join(("run_id", "status", *given))
            marks = ", ".join("?" for _ in range(len(given) + 2))
            con.execute(
                f"INSERT INTO runs ({cols}) VALUES ({marks})", [run_id, "running", *given.values()]
            )
            # Created by this writer: its rollouts are new keys — unless rollouts were written
            # under this id before its run row (add_rollout without begin_run), which then take
            # the idempotent path instead of a duplicate-key INSERT.
            orphans = con.execute(
                "SELECT count(*) FROM predictions WHERE run_id = ?", [run_id]
            ).fetchall()
            return run_id if orphans[0][0] == 0 else None

        if defer:
            with self._buf_lock:
                self._begins.append((next(self._calls), write))
            return
        self._join_behind()  # after what is queued on the writer thread, as the calls were made
        with self.transaction() as con:
            created = write(con)
        if created is not None:
            self._fresh.setdefault(created, set())

    def finish_run(
        self, run_id: str, *, status: str = "done", wall_s: float | None = None, defer: bool = False
    ) -> None:
        """Mark a run finished; its counters are recomputed from every prediction of the run.

        Written in one transaction with the buffered rollouts; ``defer=True`` leaves it for the
        next :meth:`flush` (whose transaction writes the rollouts first).
        """

        def write(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(
                """
                UPDATE runs SET
                    status = ?,
                    finished_at = current_timestamp,
                    wall_s = COALESCE(runs.wall_s, 0) + COALESCE(?, 0),
                    n_rollouts = s.n, n_correct = s.n_correct, n_task_failures = s.n_task,
                    n_infra_failures = s.n_infra, accuracy = s.acc,
                    prompt_tokens = s.pt, completion_tokens = s.ct
                FROM (
                    SELECT count(*) AS n,
                           count(*) FILTER (WHERE correct) AS n_correct,
                           count(*) FILTER (WHERE failure_kind = 'task') AS n_task,
                           count(*) FILTER (WHERE failure_kind = 'infra') AS n_infra,
                           avg(CASE WHEN correct THEN 1.0 ELSE 0.0 END)
                               FILTER (WHERE correct IS NOT NULL) AS acc,
                           sum(prompt_tokens) AS pt, sum(completion_tokens) AS ct
                    FROM predictions WHERE run_id = ?
                ) AS s
                WHERE runs.run_id = ?
                """,
                [status, wall_s, run_id, run_id],
            )

        self.defer(write)
        if not defer:
            self.flush()

    def defer(
        self, write: Callable[[duckdb.DuckDBPyConnection], Any], *, behind: bool = True
    ) -> None:
        """Run ``write(connection)`` inside the next :meth:`flush`'s transaction, after the
        buffered rollouts (observation rows: one commit per unit of work, not one per table).
        ``behind=False`` leaves it to the next foreground flush (a checkpoint, a read, close):
        a :meth:`flush_behind` writes the rollouts and the other deferred statements and keeps
        it queued, so writes that merge until then cost one statement, not one per barrier."""
        with self._buf_lock:
            self._deferred.append((next(self._calls), write, behind))

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Run a SELECT after writing what is buffered (the writer reads its own writes)."""
        if self.pending or self._begins or self._deferred or self._queued:
            self.flush()
        return super().query(sql, params)

    def flush_behind(self) -> None:
        """Start a :meth:`flush` in the background and return at once (the end of an inference
        run: its last rows are written while the caller goes on). The next :meth:`flush`, read
        or :meth:`close` waits for it first and raises its error, so a checkpoint taken after a
        flush never runs ahead of the rows."""
        self._submit(behind=True)

    def commit_behind(self, then: Callable[[], None]) -> Future[None]:
        """Flush everything buffered (as :meth:`flush`), then run ``then`` (the checkpoint's
        write), on the writer's background thread, after what is still queued there: the thread
        takes its tasks in order, so rows buffered later are written after ``then``. The next
        :meth:`flush`, read or :meth:`close` waits for it and raises its error."""

        return self._submit(behind=False, then=then)

    def _submit(self, *, behind: bool, then: Callable[[], None] | None = None) -> Future[None]:
        """Take what is buffered now and queue its write (then ``then``) on the writer's one
        background thread (started once: a thread start per barrier cost the event loop
        ≈ 0.5 ms of GIL hand-over). An earlier task's error is raised here, before anything is
        taken, if it has already failed; else by the next join. After a task has failed, every
        task queued behind it puts its rows back and fails too (nothing after a failed write —
        a checkpoint least of all — may land ahead of it)."""
        self._raise_finished_failure()
        taken = self._take(behind=behind)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"runlog-{self.path.name}")
        fut = self._writer.submit(self._write_behind, taken, then)
        self._queued.append(fut)
        return fut

    def _raise_finished_failure(self) -> None:
        """Forget the finished tasks and raise the first one's error, without waiting for the
        others (a caller may hold a lock a finishing task's callback needs)."""
        done = [f for f in self._queued if f.done()]  # one read: a task finishing now stays
        if not done:
            return
        self._queued = [f for f in self._queued if not any(f is d for d in done)]
        errors = [e for f in done if (e := f.exception()) is not None]
        if not self._queued:
            self._behind_error = None  # every failed task is accounted for
        if errors:
            raise errors[0]

    def _write_behind(self, taken: _Taken, then: Callable[[], None] | None) -> None:
        """One queued task, on the writer thread."""
        if self._behind_error is not None:
            self._restore(taken)
            raise RunLogError(
                f"{self.path}: not written, an earlier background write of the run log failed "
                f"({type(self._behind_error).__name__}: {_first_line(self._behind_error)})"
            )
        try:
            self._write_taken(taken)
            if then is not None:
                then()
        except BaseException as e:
            self._behind_error = e
            raise

    def _join_behind(self) -> None:
        """Wait for every queued task, then raise the first one's error (the tasks behind a
        failed one have put their rows back; the next write retries them)."""
        queued, self._queued = self._queued, []
        errors = [e for f in queued if (e := f.exception()) is not None]
        self._behind_error = None
        if errors:
            raise errors[0]  # re-raises the background task's error

    # -- rollouts ----------------------------------------------------------------------------

    def add_rollout(
        self,
        prediction: Mapping[str, Any],
        traces: Sequence[Mapping[str, Any]] = (),
        flags: Sequence[Mapping[str, Any]] = (),
    ) -> int:
        """Buffer one rollout (its prediction row with its traces and flags); returns the
        number of buffered rollouts. Nothing is written until :meth:`flush`.

        Within one buffer, a later attempt replaces an earlier pessimistic one of the same key;
        a completed one is kept (the same rule as in the table).
        """
        pred = {c: prediction.get(c) for c in PREDICTION_COLUMNS if c != "created_at"}
        unknown = set(prediction) - set(PREDICTION_COLUMNS)
        if unknown:
            raise ValueError(f"unknown prediction column(s) {sorted(unknown)}")
        _check_run_id(pred["run_id"])
        if not pred["question_id"] or pred["replicate"] is None:
            raise ValueError("a prediction needs question_id and replicate")
        if not pred.get("stop_reason"):
            pred["stop_reason"] = "error"
        if pred["failure_kind"] not in (None, "task", "infra"):
            raise ValueError(
                f"failure_kind must be None, 'task' or 'infra', got {pred['failure_kind']!r}"
            )
        # Bounded before buffering (issue 18.7): neither the file nor the buffer holds more
        # than text_cap_bytes of a value.
        cap = self.text_cap_bytes
        text = to_text_field(pred["final_text"])
        pred["final_text_bytes"] = None if text is None else utf8_size(text)
        pred["final_text"] = cap_text(text, cap)
        pred["error"] = cap_text(to_text_field(pred["error"]), cap)
        for c in _JSON_COLUMNS:
            pred[c] = cap_json(to_text_field(pred[c]), cap)
        for c in _COUNT_COLUMNS:
            pred[c] = self._count(pred[c])
        key = (str(pred["run_id"]), str(pred["question_id"]), int(pred["replicate"]))
        trs = [self._trace_row(t) for t in traces]
        fls = [
            {
                c: cap_json(to_text_field(f.get(c)), cap) if c == "detail" else f.get(c)
                for c in FLAG_COLUMNS
                if c != "created_at"
            }
            for f in flags
        ]
        for r in (*trs, *fls):
            r["run_id"], r["question_id"], r["replicate"] = key
        with self._buf_lock:
            old = self._buffer.get(key)
            if old is None or old[0]["stop_reason"] == "error":
                self._buffer[key] = (pred, trs, fls)
            recent = self._recent.pop(key[0], {})
            self._recent[key[0]] = recent  # the newest run last
            while len(self._recent) > _RECENT_RUNS:
                self._recent.popitem(last=False)
            seen = recent.get(key[1:])
            if seen is None or seen[0]["stop_reason"] == "error":
                recent[key[1:]] = (pred, trs)
            return len(self._buffer)

    def discard_rows(self, run_id: str, task_types: Iterable[str] | None = None) -> None:
        """Delete the rows of ``run_id`` (only those of ``task_types``, if given) with their
        traces and flags, now, after what is buffered, and mark the run ``running``.

        For the re-run of a run whose earlier attempt's rows are not what the re-run decides
        on (another candidate, another sample): without this, the first row of a key would
        stay on record (inserts keep it) while the re-run's outcome is used."""
        types = None if task_types is None else sorted(set(task_types))
        if types == []:
            return
        where = "run_id = ?" + (
            "" if types is None else f" AND task_type IN ({', '.join('?' for _ in types)})"
        )
        params = [run_id, *(types or ())]
        self.flush()
        with self.transaction() as con:
            keys = f"SELECT {_KEY} FROM predictions WHERE {where}"
            for table in ("traces", "flags"):
                con.execute(f"DELETE FROM {table} WHERE ({_KEY}) IN ({keys})", params)
            con.execute(f"DELETE FROM predictions WHERE {where}", params)
            # the run is being re-run: its counts are of rows no longer all there (a kill before
            # the re-run's first rows land must not leave it "done")
            con.execute(
                "UPDATE runs SET status = 'running', n_rollouts = NULL, n_correct = NULL, "
                "n_task_failures = NULL, n_infra_failures = NULL, accuracy = NULL, "
                "prompt_tokens = NULL, completion_tokens = NULL WHERE run_id = ?",
                [run_id],
            )
        with self._buf_lock:
            self._recent.pop(run_id, None)

    def recent(self, run_id: str) -> RecentRows | None:
        """The rows this writer was given for ``run_id`` (one of the last runs it was given rows
        of), as written — without a flush and a read back; None for an older run."""
        with self._buf_lock:
            rows = self._recent.get(run_id)
            return None if rows is None else RecentRows(run_id, dict(rows))

    def _trace_row(self, t: Mapping[str, Any]) -> dict[str, Any]:
        row = {c: t.get(c) for c in TRACE_COLUMNS}
        content = to_text_field(row["content"])
        row["content_bytes"] = None if content is None else utf8_size(content)
        row["content"] = content
        for c in _TRACE_TEXT_COLUMNS:
            row[c] = cap_text(to_text_field(row[c]), self.text_cap_bytes)
        for c in _TRACE_COUNT_COLUMNS:
            row[c] = self._count(row[c])
        return row

    def _count(self, value: Any) -> int | None:
        n = clamp_count(value)
        if n != value and value is not None and not isinstance(value, bool):
            if self._clamped == 0:
                _log.warning(
                    "%s: a usage count %r was clamped to %s (0..%d); the provider reported "
                    "nonsense",
                    self.path,
                    value,
                    n,
                    MAX_COUNT,
                )
            self._clamped += 1
        return n

    @property
    def pending(self) -> int:
        """Buffered rollouts not yet written."""
        with self._buf_lock:
            return len(self._buffer)

    def flush(self) -> int:
        """Write the buffered rollouts, then the deferred statements, in one transaction;
        returns how many rollouts were buffered. On failure everything stays buffered."""
        self._join_behind()
        return self._flush_now()

    def _flush_now(self, *, behind: bool = False) -> int:
        return self._write_taken(self._take(behind=behind))

    def _take(self, *, behind: bool) -> _Taken:
        """What a flush writes, taken from the buffers at once (a flush queued behind writes
        what was buffered when it was queued, not what arrives while it waits)."""
        with self._buf_lock:
            batch, self._buffer = self._buffer, {}
            begins, self._begins = self._begins, []
            if behind:
                deferred = [d for d in self._deferred if d[2]]
                self._deferred = [d for d in self._deferred if not d[2]]
            else:
                deferred, self._deferred = self._deferred, []
        return batch, begins, deferred

    def _restore(self, taken: _Taken) -> None:
        """Put rows taken for a write that did not happen back, for the next flush (newer rows
        of the same key win; statements in call order among those buffered since)."""
        batch, begins, deferred = taken
        with self._buf_lock:
            for k, v in batch.items():
                self._buffer.setdefault(k, v)
            self._begins = sorted([*begins, *self._begins], key=lambda b: b[0])
            self._deferred = sorted([*deferred, *self._deferred], key=lambda d: d[0])

    def _write_taken(self, taken: _Taken) -> int:
        batch, begins, deferred = taken
        if not batch and not begins and not deferred:
            return 0
        created: list[str] = []
        try:
            with self.transaction() as con:
                # Run rows first: a run created here makes its rollouts new keys.
                created = [r for _, w in begins if (r := w(con)) is not None]
                if batch:
                    _write_batch(con, batch, {**{r: set() for r in created}, **self._fresh})
                for _, w, _ in deferred:
                    w(con)
        except duckdb.ConstraintException:
            raise  # a bug in the rows: retrying the same rows cannot succeed
        except BaseException as e:
            self._restore(taken)
            if isinstance(e, duckdb.IOException) and is_disk_full(e):
                raise RunLogError(
                    f"{self.path}: cannot write the run log: disk full ({_first_line(e)}); free "
                    "space on that disk, then resume (`trm train --resume`): the unit of work "
                    "restarts from its last checkpoint"
                ) from None
            raise
        for r in created:
            self._fresh.setdefault(r, set())
        for run_id, qid, rep in batch:
            keys = self._fresh.get(run_id)
            if keys is not None:
                keys.add((qid, rep))
        return len(batch)


_OPEN_TOKEN = object()
_RECENT_RUNS = 2  # runs whose rows a writer keeps in memory (RunLog.recent)


class RecentRows:
    """A run's rows as its writer was given them: the read side the diagnosis needs
    (``predictions``, ``traces``), in the order the table queries return."""

    def __init__(self, run_id: str, rows: Mapping[tuple[str, int], tuple[Any, Any]]) -> None:
        self.run_id = run_id
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def predictions(self, run_id: str) -> list[dict[str, Any]]:
        if run_id != self.run_id:
            raise KeyError(run_id)
        return [dict(self._rows[k][0]) for k in sorted(self._rows)]

    def traces(
        self, run_id: str, question_id: str | None = None, replicate: int | None = None
    ) -> list[dict[str, Any]]:
        if run_id != self.run_id:
            raise KeyError(run_id)
        out = [
            dict(t)
            for k in sorted(self._rows)
            if (question_id is None or k[0] == question_id)
            and (replicate is None or k[1] == replicate)
            for t in sorted(self._rows[k][1], key=lambda t: t["seq"])
        ]
        return out


# a flush's rows: the rollout batch, the queued run rows, the deferred statements
_Taken = tuple[
    "Batch",
    list[tuple[int, Callable[[duckdb.DuckDBPyConnection], "str | None"]]],
    list[tuple[int, Callable[[duckdb.DuckDBPyConnection], Any], bool]],
]

_KEY = "run_id, question_id, replicate"


def _write_batch(
    con: duckdb.DuckDBPyConnection, batch: Batch, fresh: Mapping[str, set[tuple[str, int]]]
) -> None:
    """Insert a batch of rollouts. Keys that are new for certain (runs this writer created, keys
    it has not written yet) take plain INSERTs; otherwise the idempotent path below."""
    pcols = [c for c in PREDICTION_COLUMNS if c != "created_at"]
    fcols = [c for c in FLAG_COLUMNS if c != "created_at"]
    preds = pd.DataFrame([p for p, _, _ in batch.values()], columns=pcols)
    trs = pd.DataFrame([t for _, ts, _ in batch.values() for t in ts], columns=list(TRACE_COLUMNS))
    fls = pd.DataFrame([f for _, _, fs in batch.values() for f in fs], columns=fcols)
    new_keys = all(
        run_id in fresh and (qid, rep) not in fresh[run_id] for run_id, qid, rep in batch
    )
    names = [("_in_pred", preds)]
    if len(trs):
        names.append(("_in_trace", trs))
    if len(fls):
        names.append(("_in_flag", fls))
    for name, frame in names:
        con.register(name, frame)
    try:
        if new_keys:
            _insert_new(con, pcols, fcols, len(trs) > 0, len(fls) > 0)
        else:
            _upsert(con, pcols, fcols, len(trs) > 0, len(fls) > 0)
    finally:
        for name, _ in names:
            with suppress(duckdb.Error):  # an aborted transaction refuses; re-register replaces
                con.unregister(name)


def _insert_new(
    con: duckdb.DuckDBPyConnection, pcols: list[str], fcols: list[str], trs: bool, fls: bool
) -> None:
    for table, cols, source, present in (
        ("predictions", pcols, "_in_pred", True),
        ("traces", list(TRACE_COLUMNS), "_in_trace", trs),
        ("flags", fcols, "_in_flag", fls),
    ):
        if present:
            names = ", ".join(cols)
            casts = ", ".join(_cast(c) for c in cols)
            con.execute(f"INSERT INTO {table} ({names}) SELECT {casts} FROM {source}")


def _upsert(
    con: duckdb.DuckDBPyConnection, pcols: list[str], fcols: list[str], trs: bool, fls: bool
) -> None:
    # Rollouts that will land: new keys, or keys whose stored row is still pessimistic.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _accepted AS
            SELECT i.run_id, i.question_id, CAST(i.replicate AS INTEGER) AS replicate
            FROM _in_pred i LEFT JOIN predictions p
              ON p.run_id = i.run_id AND p.question_id = i.question_id
             AND p.replicate = i.replicate
            WHERE p.run_id IS NULL OR p.stop_reason = 'error'"""
    )
    for table in ("traces", "flags"):
        con.execute(f"DELETE FROM {table} WHERE ({_KEY}) IN (SELECT ({_KEY}) FROM _accepted)")
    updates = ", ".join(f"{c} = excluded.{c}" for c in pcols if c not in _KEY.split(", "))
    con.execute(
        f"""INSERT INTO predictions ({", ".join(pcols)})
            SELECT {", ".join(_cast(c) for c in pcols)} FROM _in_pred
            ON CONFLICT ({_KEY}) DO UPDATE SET {updates}, created_at = now()
            WHERE predictions.stop_reason = 'error'"""
    )
    if trs:
        con.execute(
            f"""INSERT OR IGNORE INTO traces ({", ".join(TRACE_COLUMNS)})
                SELECT {", ".join(_cast(c, "t") for c in TRACE_COLUMNS)} FROM _in_trace t
                SEMI JOIN _accepted a ON a.run_id = t.run_id
                 AND a.question_id = t.question_id AND a.replicate = t.replicate"""
        )
    if fls:
        con.execute(
            f"""INSERT OR IGNORE INTO flags ({", ".join(fcols)})
                SELECT {", ".join(_cast(c, "f") for c in fcols)} FROM _in_flag f
                SEMI JOIN _accepted a ON a.run_id = f.run_id
                 AND a.question_id = f.question_id AND a.replicate = f.replicate"""
        )


_CASTS = {
    "replicate": "INTEGER",
    "seq": "INTEGER",
    "step": "INTEGER",
    "correct": "BOOLEAN",
    "n_llm_calls": "INTEGER",
    "n_tool_calls": "INTEGER",
    "n_tool_errors": "INTEGER",
    "prompt_tokens": "BIGINT",
    "completion_tokens": "BIGINT",
    "result_chars": "INTEGER",
    "latency_s": "DOUBLE",
    "seed": "BIGINT",
    "final_text_bytes": "BIGINT",
    "content_bytes": "BIGINT",
}


def _cast(col: str, alias: str | None = None) -> str:
    """Columns of an all-NULL pandas batch have no type: cast every column explicitly."""
    ref = f"{alias}.{col}" if alias else col
    return f"CAST({ref} AS {_CASTS.get(col, 'VARCHAR')}) AS {col}"


def _bind_identity(
    con: duckdb.DuckDBPyConnection, path: Path, workspace_id: str | None
) -> str | None:
    """The log's workspace identity; record ``workspace_id`` in a log that has none, refuse a
    log that names another workspace."""
    rows = con.execute(f"SELECT workspace_id FROM {IDENTITY_TABLE}").fetchall()
    stored = [str(r[0]) for r in rows]
    if len(stored) > 1:
        raise RunLogError(
            f"{path}: table {IDENTITY_TABLE} names {len(stored)} workspaces ({', '.join(stored)}); "
            "a run log belongs to exactly one — restore this workspace's own run log"
        )
    if stored and workspace_id is not None and stored[0] != workspace_id:
        raise ForeignRunLogError(foreign_message(path, stored[0], workspace_id))
    if not stored and workspace_id is not None:
        con.execute(f"INSERT INTO {IDENTITY_TABLE} VALUES (?)", [workspace_id])
        return workspace_id
    return stored[0] if stored else None


def foreign_message(path: Path, stored: str, expected: str) -> str:
    return (
        f"{path}: this run log belongs to workspace {stored}, not to this one ({expected} in "
        "manifest.json) — copied from another workspace? Its predictions would be reused as "
        "this workspace's. Put this workspace's own runs.duckdb back, or start a new workspace "
        "(`trm init`)"
    )


def is_disk_full(e: BaseException) -> bool:
    """A DuckDB (or other) error whose message says the disk is full."""
    text = str(e).lower()
    return "no space left on device" in text or "disk quota exceeded" in text


def is_corrupt(e: BaseException) -> bool:
    """A DuckDB error that says the file is damaged (checksums, invalid blocks)."""
    text = str(e).lower()
    return "corrupt" in text or "not a valid duckdb database" in text


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _unreadable_error(path: Path, e: Exception) -> RunLogError:
    first = _first_line(e)
    return RunLogError(
        f"{path}: not a readable run log ({first}); the file is damaged or not a DuckDB "
        "database. Restore it from a backup, or move it aside and start a new workspace "
        "(`trm init`) — a workspace never continues with an empty run log"
    )


def _check_run_id(run_id: Any) -> None:
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")


#: How long a writer waits for other processes' connections (a reader — the Dagster UI, a sensor,
#: an asset check — holds the file only for a query) before giving up with RunLogBusyError.
WRITER_WAIT_S = 15.0


def _connect_writer(target: str, path: Path) -> duckdb.DuckDBPyConnection:
    """A read-write connection; while another process holds the file (DuckDB's file lock
    excludes a writer and any reader of another process), retry with a bounded backoff."""
    deadline = time.monotonic() + WRITER_WAIT_S
    delay = 0.05
    while True:
        try:
            return duckdb.connect(target)
        except duckdb.IOException as e:
            if not _is_lock_error(e):
                raise _unreadable_error(path, e) from None
            if time.monotonic() + delay > deadline:
                raise _busy_error(path, e, opening_to_write=True) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        except duckdb.Error as e:
            raise _unreadable_error(path, e) from None


def _is_lock_error(e: Exception) -> bool:
    return "lock" in str(e).lower()


def _busy_error(path: Path, e: Exception, *, opening_to_write: bool = False) -> RunLogBusyError:
    msg = str(e)
    m = re.search(r"PID (\d+)", msg)
    holder = f"process {m.group(1)}" if m else "another process"
    if not _is_lock_error(e):
        return RunLogBusyError(f"{path}: cannot open the run log ({msg.splitlines()[0]})")
    if opening_to_write:  # a reader of another process blocks a writer too
        return RunLogBusyError(
            f"{path}: the run log is locked by {holder} (another writer, or a reader such as the "
            f"Dagster UI or a sensor) for more than {WRITER_WAIT_S:g} s. Retry when it finishes; "
            "this error is retryable."
        )
    return RunLogBusyError(
        f"{path}: the run log is locked for writing by {holder} (a training run or another "
        "writer). Retry when it finishes; this error is retryable."
    )


# ----------------------------------------------------------------------------------------------
# the read-only reader


class RunLogReader(_Queries):
    """Read-only access to a run log. Use :meth:`open`; close with :meth:`close` or ``with``."""

    def __init__(
        self, path: Path, con: duckdb.DuckDBPyConnection, lock: threading.Lock, owned: bool
    ) -> None:
        self.path = path
        self._con = con
        self._lock = lock
        self._owned = owned

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        retries: int = 0,
        wait_s: float = 0.5,
        workspace_id: str | None = None,
    ) -> RunLogReader:
        """Open ``path`` read-only.

        In the process that holds the writer, reads go through the writer (after a flush).
        Elsewhere the file is opened ``read_only``; if a writer in another process holds the lock,
        retry ``retries`` times ``wait_s`` apart, then raise :class:`RunLogBusyError`. With
        ``workspace_id``, a log that names another workspace raises :class:`ForeignRunLogError`.
        """
        p = Path(path).resolve()
        with _WRITERS_LOCK:
            writer = _WRITERS.get(p)
        if writer is not None and not writer._closed:
            writer.flush()
            reader = cls(p, writer._con, writer._lock, owned=False)
        else:
            reader = cls._connect(p, retries, wait_s)
        if workspace_id is not None:
            stored = reader.workspace_id()
            if stored is not None and stored != workspace_id:
                reader.close()
                raise ForeignRunLogError(foreign_message(p, stored, workspace_id))
        return reader

    @classmethod
    def _connect(cls, p: Path, retries: int, wait_s: float) -> RunLogReader:
        if not p.exists():
            raise RunLogError(f"{p}: no run log here (no run has been recorded yet?)")
        for attempt in range(retries + 1):
            try:
                con = duckdb.connect(str(p), read_only=True)
            except duckdb.IOException as e:
                if not _is_lock_error(e):
                    raise _unreadable_error(p, e) from None
                if attempt >= retries:
                    raise _busy_error(p, e) from None
                time.sleep(wait_s)
            except duckdb.Error as e:
                raise _unreadable_error(p, e) from None
            else:
                return cls(p, con, threading.Lock(), owned=True)
        raise AssertionError("unreachable")

    def workspace_id(self) -> str | None:
        """The identity recorded in the log (None in a log older than identities)."""
        if not self.has_table(IDENTITY_TABLE):
            return None
        rows = self.query(f"SELECT workspace_id FROM {IDENTITY_TABLE}")
        return str(rows[0]["workspace_id"]) if len(rows) == 1 else None

    def close(self) -> None:
        if self._owned:
            with self._lock:
                self._con.close()

    def __enter__(self) -> RunLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_meta(value: object) -> Mapping[str, Any]:
    """A ``runs.meta`` value (JSON text, or already parsed) as a mapping; empty when the run
    recorded none."""
    meta = json.loads(value) if isinstance(value, str) and value else value
    return meta if isinstance(meta, Mapping) else {}


def run_decoding(row: Mapping[str, Any]) -> str | None:
    """The decoding hash a ``runs`` row recorded (``meta.decoding``: the model and, with the
    simulator, its world), None when it recorded none."""
    decoding = run_meta(row.get("meta")).get("decoding")
    return decoding if isinstance(decoding, str) else None

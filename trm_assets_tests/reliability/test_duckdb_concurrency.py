"""DuckDB discipline (issue 9, SPEC §6): one writer process at a time; a reader — the UI and
Dagster metadata readers (``lineage``, ``audit``), ``trm report`` — running while a training run
writes gets data or a clear, retryable :class:`RunLogBusyError`, never a raw DuckDB lock error;
and a unit of work that starts while a short-lived reader holds the file waits for it instead of
failing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from trm_assets.cli.report import report_cmd
from trm_assets.harness.reports import audit, lineage
from trm_assets.harness.storage.runlog import RunLog, RunLogBusyError, RunLogReader
from trm_assets_tests.reliability.conftest import child_env
from trm_assets_tests.tiny import REPO, SMOKE_CONFIG, TINY, tiny_config
from trm_bench.overhead import new_workspace
from trm_bench.reliability import train_args

_HOLD_READER = (
    "import sys, time; from trm_assets.harness.storage.runlog import RunLogReader; "
    "r = RunLogReader.open(sys.argv[1]); print('open', flush=True); time.sleep(float(sys.argv[2]));"
    " r.close()"
)


@contextmanager
def _holder(code: str, *args: str, kill: bool) -> Iterator[subprocess.Popen[str]]:
    """A child running ``code`` that prints ``open`` once it holds the database; yielded then.
    At exit it is killed (``kill``) or left to finish, and waited for."""
    holder = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        yield holder
    finally:
        if kill:
            holder.kill()
        holder.wait(timeout=30)


def _read_everything(ws: Path) -> dict[str, object]:
    """One pass of every reader of the run log the UI, sensors and reports use."""
    out: dict[str, object] = {}
    with RunLogReader.open(ws / "runs.duckdb", retries=1, wait_s=0.05) as r:
        out["runs"] = len(r.runs())
    out["step_rows"] = len(lineage.step_rows(ws, 0, 0))
    out["per_task"] = lineage.per_task_accuracy(ws / "runs.duckdb", "train_init")
    out["leaks"] = audit.test_pool_leaks(ws).ok
    return out


def test_readers_during_a_training_run_get_data_or_a_clear_retry(tmp_path: Path) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    proc = subprocess.Popen(
        train_args(ws, SMOKE_CONFIG, TINY, resume=False),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    outcomes: Counter[str] = Counter()
    reports: Counter[int] = Counter()
    deadline = time.monotonic() + 180
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if not (ws / "runs.duckdb").exists():
                time.sleep(0.05)
                continue
            try:
                _read_everything(ws)
                outcomes["data"] += 1
            except RunLogBusyError as e:
                assert "retryable" in str(e) and "runs.duckdb" in str(e)
                outcomes["busy"] += 1
            res = CliRunner().invoke(report_cmd, ["--workspace", str(ws), "--json"])
            reports[res.exit_code] += 1
            if res.exit_code == 0:
                json.loads(res.stdout)  # a complete document (atomic state writes)
            else:  # before the first checkpoint: a clear message, no traceback
                assert res.exit_code == 2 and "no training state yet" in res.output, res.output
            time.sleep(0.2)  # a UI's polling pace; a busy loop starved the writer of its core
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    # readers ran while the writer process lived: each got data or the clear retry (a lock held
    # for the whole `trm train` process gives "busy"; per-unit Dagster runs also give "data")
    assert outcomes["busy"] + outcomes["data"] > 0
    assert reports[0] > 0
    # after the run: every reader gets data
    got = _read_everything(ws)
    assert got["runs"] and got["per_task"] and got["leaks"] is True


def test_a_writer_waits_for_a_short_lived_reader(tmp_path: Path) -> None:
    """A Dagster sensor or the UI holding a read-only connection for a moment must not fail the
    next unit of work: ``RunLog.open`` retries for a bounded time."""
    db = tmp_path / "runs.duckdb"
    RunLog.open(db).close()
    with _holder(_HOLD_READER, str(db), "1.5", kill=False):
        t0 = time.monotonic()
        log = RunLog.open(db)
        waited = time.monotonic() - t0
        log.close()
        assert 0.5 < waited < 15


def test_reader_of_a_locked_file_raises_a_clear_retryable_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    RunLog.open(db).close()
    hold_writer = (
        "import sys, time; from trm_assets.harness.storage.runlog import RunLog; "
        "w = RunLog.open(sys.argv[1]); print('open', flush=True); time.sleep(20); w.close()"
    )
    with _holder(hold_writer, str(db), kill=True) as holder:
        t0 = time.monotonic()
        try:
            RunLogReader.open(db, retries=2, wait_s=0.1)
        except RunLogBusyError as e:
            assert f"process {holder.pid}" in str(e) and "retryable" in str(e)
        else:
            raise AssertionError("a read-only open of a write-locked file must raise")
        assert time.monotonic() - t0 < 5

"""Issue 18.6: a foreign or missing run log is detected.

Before: a ``runs.duckdb`` copied from another workspace was accepted and its predictions reused
(best v7/v3 instead of v5/v2), and a deleted ``runs.duckdb`` was silently re-created, dropping
every earlier row. Now ``trm init`` gives each workspace a random identity, stored in
``manifest.json`` and in the run log's ``workspace_identity`` table; the start of every unit
refuses a log that names another workspace, and a missing log once the manifest records runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from trm_assets.cli.train import train_cmd
from trm_assets.domain.errors import TrmError
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace


def manifest(ws: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((ws / "manifest.json").read_text(encoding="utf-8"))
    return data


def run_ids(db: Path) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]


def trained(path: Path, units: int) -> Path:
    cfg = tiny_config()
    ws = new_workspace(path, cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=units)
    return ws


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Workspace A after init + one step, and another workspace B after init only."""
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)
    root = tmp_path_factory.mktemp("identity")
    a, b = trained(root / "a", 2), trained(root / "b", 1)
    mp.undo()
    return a, b


@pytest.fixture
def a(pair: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(pair[0], tmp_path / "a"))


def next_unit_error(ws: Path) -> str:
    cfg = tiny_config()
    with (
        pytest.raises(TrmError) as ei,
        loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx,
    ):
        train(ctx, max_units=1)
    return str(ei.value)


def test_each_workspace_has_its_own_identity_in_manifest_and_run_log(
    pair: tuple[Path, Path],
) -> None:
    ids = []
    for ws in pair:
        wid = manifest(ws)["workspace_id"]
        assert isinstance(wid, str) and len(wid) == 32
        with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
            assert con.execute("SELECT workspace_id FROM workspace_identity").fetchall() == [(wid,)]
        ids.append(wid)
    assert ids[0] != ids[1]


def test_a_run_log_copied_from_another_workspace_is_refused(
    a: Path, pair: tuple[Path, Path]
) -> None:
    shutil.copy(pair[1] / "runs.duckdb", a / "runs.duckdb")
    before = run_ids(a / "runs.duckdb")
    msg = next_unit_error(a)
    assert str(a / "runs.duckdb") in msg and "belongs to workspace" in msg
    assert str(manifest(pair[1])["workspace_id"]) in msg
    assert run_ids(a / "runs.duckdb") == before  # nothing was added to the foreign log
    res = CliRunner().invoke(
        train_cmd,
        ["--workspace", str(a), "--config", str(a / "config.yaml"), "--resume", "--no-dagster"],
    )
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert [ln for ln in res.output.splitlines() if ln.startswith("error: ")] == [f"error: {msg}"]


def test_a_deleted_run_log_is_refused_not_recreated(a: Path) -> None:
    (a / "runs.duckdb").unlink()
    msg = next_unit_error(a)
    assert str(a / "runs.duckdb") in msg and "missing" in msg
    assert not (a / "runs.duckdb").exists()


def test_the_run_log_exists_before_the_history_records_a_run(tmp_path: Path) -> None:
    """So "history but no run log" always means a lost run log, even after a kill between
    recording a run and writing its first rows."""
    from trm_assets.harness.storage.workspace import read_manifest, record_run

    ws = new_workspace(tmp_path / "ws", tiny_config())
    assert not (ws / "runs.duckdb").exists()
    record_run(ws, "r1")
    assert [r.run_id for r in read_manifest(ws).history] == ["r1"]
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        stored = con.execute("SELECT workspace_id FROM workspace_identity").fetchall()
    assert stored == [(read_manifest(ws).workspace_id,)]


def test_readers_and_writers_check_the_identity(a: Path, pair: tuple[Path, Path]) -> None:
    from trm_assets.harness.storage.runlog import ForeignRunLogError, RunLog, RunLogReader

    db = a / "runs.duckdb"
    other = str(manifest(pair[1])["workspace_id"])
    with pytest.raises(ForeignRunLogError, match="belongs to workspace"):
        RunLogReader.open(db, workspace_id=other)
    with pytest.raises(ForeignRunLogError, match="belongs to workspace"):
        RunLog.open(db, workspace_id=other)
    with RunLogReader.open(db, workspace_id=str(manifest(a)["workspace_id"])) as r:
        assert r.workspace_id() == manifest(a)["workspace_id"]

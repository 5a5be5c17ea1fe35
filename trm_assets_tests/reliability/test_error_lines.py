"""Issue 18.10: user-facing failures are ``error:`` lines with their cause, never a traceback.

Before: a full disk gave a 111-line traceback, a corrupt ``runs.duckdb`` a DuckDB traceback (or a
"busy, retry" message for a file that will never open), a workspace path that is a file and a
``--seeds-dir`` that names a file raw ``NotADirectoryError`` / ``FileExistsError`` tracebacks.
Each case here runs the command in-process and expects exit code 2, exactly one ``error:`` line
naming the file and the cause, and no traceback.

(The Dagster-only cases of the issue — two workspaces on a fresh instance, ``slow_update`` for a
nonexistent epoch — are the Dagster layer's and tested there.)
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner, Result

from trm_assets.cli.init import init_cmd
from trm_assets.cli.support import error_lines
from trm_assets.cli.train import promote_cmd, train_cmd
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)
    cfg = tiny_config()
    ws = new_workspace(tmp_path_factory.mktemp("errors") / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=2)
    mp.undo()
    return ws


@pytest.fixture
def ws(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "ws"))


def one_error_line(res: Result) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, res.output
    return lines[0]


def resume(ws: Path) -> Result:
    return CliRunner().invoke(
        train_cmd,
        ["--workspace", str(ws), "--config", str(ws / "config.yaml"), "--resume", "--no-dagster"],
    )


def disk_full_on(monkeypatch: pytest.MonkeyPatch, wanted: Callable[[str], bool]) -> None:
    """``fsync`` of a file whose path matches raises ENOSPC, as on a full disk."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if wanted(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_while_checkpointing(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = (ws / "state.json").read_bytes()
    disk_full_on(monkeypatch, lambda p: Path(p).name.startswith(".state.json."))
    line = one_error_line(resume(ws))
    assert str(ws / "state.json") in line and "disk full" in line
    assert "--resume" in line  # and how to go on
    assert (ws / "state.json").read_bytes() == state  # the old checkpoint is intact
    assert not list(ws.glob(".state.json.*.tmp"))


def test_disk_full_while_writing_a_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    disk_full_on(monkeypatch, lambda p: "/store/skills/" in p)
    cfg = REPO / "data" / "configs" / "smoke.yaml"
    res = CliRunner().invoke(init_cmd, ["--workspace", str(tmp_path / "w"), "--config", str(cfg)])
    line = one_error_line(res)
    assert str(tmp_path / "w" / "store" / "skills" / "v1") in line and "disk full" in line
    assert not (tmp_path / "w" / "store" / "skills" / "v1").exists()  # no partial version


def test_a_corrupt_run_log(ws: Path) -> None:
    db = ws / "runs.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CHECKPOINT")
    data = bytearray(db.read_bytes())
    data[4096:6096] = bytes((i * 37) % 256 for i in range(2000))  # the header block
    db.write_bytes(bytes(data))
    line = one_error_line(resume(ws))
    assert str(db) in line and "not a readable run log" in line and "backup" in line


def test_a_workspace_path_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "ws"
    f.write_text("not a directory\n")
    cfg = str(REPO / "data" / "configs" / "smoke.yaml")
    for cmd, args in (
        (train_cmd, ["--workspace", str(f), "--config", cfg, "--no-dagster"]),
        (init_cmd, ["--workspace", str(f), "--config", cfg]),
    ):
        line = one_error_line(CliRunner().invoke(cmd, args))
        assert str(f) in line and "not a directory" in line
    assert f.read_text() == "not a directory\n"


def test_a_seeds_dir_that_is_a_file(ws: Path, tmp_path: Path) -> None:
    f = tmp_path / "seeds"
    f.write_text("x\n")
    cfg = str(ws / "config.yaml")
    new = str(tmp_path / "new")
    init = CliRunner().invoke(
        init_cmd,
        ["--workspace", new, "--config", cfg, "--from-seed", "s", "--seeds-dir", str(f)],
    )
    promote = CliRunner().invoke(
        promote_cmd,
        [
            *("--workspace", str(ws), "--version", "v1", "--eval-run", "train_init"),
            *("--name", "s", "--seeds-dir", str(f)),
        ],
    )
    for res in (init, promote):
        line = one_error_line(res)
        assert str(f) in line and "--seeds-dir" in line and "is a file" in line
    assert f.read_text() == "x\n" and not (tmp_path / "new").exists()


def test_os_and_library_disk_errors_become_error_lines() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/data/ws/runs.duckdb.wal")
    assert error_lines(full) == [
        "/data/ws/runs.duckdb.wal: No space left on device (disk full: free space on that disk, "
        "then resume (`trm train --resume`): the unit of work restarts from its last checkpoint)"
    ]
    denied = OSError(errno.EACCES, "Permission denied", "/data/ws/state.json")
    assert error_lines(denied) == ["/data/ws/state.json: Permission denied"]
    lib = duckdb.IOException('IO Error: Could not write file "x.wal": No space left on device')
    got = error_lines(lib)
    assert (
        got is not None and got[0].startswith("IO Error: Could not write") and "disk full" in got[0]
    )
    assert error_lines(KeyError("a bug")) is None  # bugs keep their traceback

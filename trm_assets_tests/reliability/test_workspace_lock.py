"""Issue 18.1: one writer per workspace.

Before: two ``trm train`` on one workspace both ran (11 skill versions instead of 7), and
``trm init`` archived a workspace under a running trainer. Now an OS-level lock
(:mod:`trm_assets.harness.storage.lock`) refuses the second writer, names the holder, and is
released by the kernel when the holder dies.

The holder here is a child process that takes :func:`workspace_lock` the way ``trm train`` does
(command ``trm train``, a run id) and waits; the refusals are checked in other processes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from trm_assets.harness.data.config import config_to_yaml
from trm_assets.harness.storage.lock import (
    LOCK_FILE,
    Holder,
    WorkspaceLockedError,
    lock_holder,
    workspace_lock,
)
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets_tests.reliability.conftest import child_env, run_child, run_cli, snapshot
from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace

HOLD = """
import sys, time
from trm_assets.harness.storage.lock import workspace_lock
with workspace_lock(sys.argv[1], command="trm train", run_id="run-1234"):
    print("held", flush=True)
    time.sleep(300)
"""

TRY = """
import sys
from trm_assets.harness.storage.lock import WorkspaceLockedError, workspace_lock
try:
    with workspace_lock(sys.argv[1], command="trm train", wait_s=0.2):
        print("acquired")
except WorkspaceLockedError as e:
    print(f"refused pid={e.holder.pid if e.holder else None}: {e}")
"""


def child_process(code: str, ws: Path) -> subprocess.Popen[str]:
    """``python -c code ws`` from the repository, its output read line by line."""
    return subprocess.Popen(
        [sys.executable, "-c", code, str(ws)],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def holder_process(ws: Path) -> Iterator[subprocess.Popen[str]]:
    proc = child_process(HOLD, ws)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "held", proc.stderr.read() if proc.stderr else line
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def try_in_child(ws: Path) -> str:
    res = run_child(["-c", TRY, str(ws)], timeout_s=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return new_workspace(tmp_path / "ws", tiny_config())


def test_a_second_process_is_refused_naming_the_holder(ws: Path) -> None:
    with holder_process(ws) as proc:
        out = try_in_child(ws)
        assert out.startswith(f"refused pid={proc.pid}:"), out
        for part in (str(ws), f"pid {proc.pid}", socket.gethostname(), "trm train", "run-1234"):
            assert part in out
        holder = lock_holder(ws)  # another process (this one) sees the same holder
        assert holder is not None
        assert (holder.pid, holder.command, holder.run_id) == (proc.pid, "trm train", "run-1234")
        with (
            pytest.raises(WorkspaceLockedError, match=f"pid {proc.pid}"),
            workspace_lock(ws, command="trm promote", wait_s=0.1),
        ):
            pass
    # the holder is gone (killed on leaving the block): the kernel released its lock
    assert lock_holder(ws) is None
    assert try_in_child(ws) == "acquired"


def test_a_killed_holder_leaves_the_workspace_lockable(ws: Path) -> None:
    with holder_process(ws) as proc:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # the description of the dead holder is still in the file: informative only
        assert str(proc.pid) in (ws / LOCK_FILE).read_text(encoding="utf-8")
        assert lock_holder(ws) is None
        with workspace_lock(ws, command="trm train") as me:
            assert me.pid == os.getpid()
            assert lock_holder(ws) == me
        assert (ws / LOCK_FILE).read_text(encoding="utf-8") == ""  # cleared on release


def _beside_a_trainer(
    ws: Path, tmp_path: Path, command: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], int]:
    """`trm COMMAND --workspace ws --config ws/config.yaml ARGS` while another process holds
    the workspace's lock (as `trm train` does); its result and the holder's pid."""
    with holder_process(ws) as proc:
        argv = [command, "--workspace", str(ws), "--config", str(ws / "config.yaml"), *args]
        return run_cli(argv, child_env(), 120, tmp_path / f"{command}.log"), proc.pid


def test_trm_init_refuses_a_workspace_being_trained(ws: Path, tmp_path: Path) -> None:
    before = snapshot(ws)
    res, holder = _beside_a_trainer(ws, tmp_path, "init")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    err = res.stderr.strip()
    assert err.startswith("error: ") and f"pid {holder}" in err and "trm train" in err
    after = {k: v for k, v in snapshot(ws).items() if k != LOCK_FILE}
    assert after == {k: v for k, v in before.items() if k != LOCK_FILE}
    assert not list(tmp_path.glob("ws.archive-*"))  # nothing moved aside
    # once the trainer is gone, init archives and re-creates as before
    res = run_cli(
        ["init", "--workspace", str(ws), "--config", str(ws / "config.yaml")],
        child_env(),
        120,
        tmp_path / "init2.log",
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "ws.archive-1" / "manifest.json").is_file()
    assert read_manifest(ws).history == []


def test_reentrant_in_one_process_across_threads(ws: Path) -> None:
    """``trm train`` holds the lock and runs units in-process through Dagster, which take it
    again (possibly from another thread): that must not block, and the outer holder stays."""
    with workspace_lock(ws, command="trm train", run_id="outer") as outer:
        seen: list[object] = []

        def inner() -> None:
            with workspace_lock(ws, command="dagster run", run_id="inner") as h:
                seen.append(h)

        t = threading.Thread(target=inner)
        t.start()
        t.join(timeout=10)
        assert seen == [outer]
        assert lock_holder(ws) == outer
        assert try_in_child(ws).startswith(f"refused pid={os.getpid()}:")
    assert lock_holder(ws) is None
    assert try_in_child(ws) == "acquired"


def test_lock_refuses_a_missing_workspace_or_a_file(tmp_path: Path) -> None:
    from trm_assets.harness.storage.lock import WorkspaceLockError

    with (
        pytest.raises(WorkspaceLockError, match="no such workspace"),
        workspace_lock(tmp_path / "nope", command="trm train"),
    ):
        pass
    assert not (tmp_path / "nope").exists()
    f = tmp_path / "file"
    f.write_text("x")
    with (
        pytest.raises(WorkspaceLockError, match="not a directory"),
        workspace_lock(f, command="trm train"),
    ):
        pass


def test_trm_train_refuses_a_workspace_being_trained(ws: Path, tmp_path: Path) -> None:
    res, holder = _beside_a_trainer(ws, tmp_path, "train", "--no-dagster")
    assert res.returncode != 0 and f"pid {holder}" in res.stderr, res.stderr
    assert not (ws / "state.json").exists()


def test_trm_run_refuses_a_workspace_being_trained(ws: Path, tmp_path: Path) -> None:
    """`trm run` froze the pools (wrote pools.json) before `trm train` took the lock: beside a
    process training the workspace it wrote, then failed (review)."""
    assert not (ws / "pools.json").exists()
    res, holder = _beside_a_trainer(ws, tmp_path, "run")
    assert res.returncode == 2 and f"pid {holder}" in res.stderr, res.stderr
    assert "refusing to run trm run" in res.stderr
    assert not (ws / "pools.json").exists()


def test_a_training_process_holds_the_lock_for_its_whole_run(ws: Path, tmp_path: Path) -> None:
    """Issue 18.1: while one `trm train` runs (between its units too), a second process cannot
    take the workspace: the lock is held by the training command itself, not per unit."""
    import subprocess
    import sys
    import time

    from trm_assets.harness.storage.lock import lock_holder

    env = {**child_env(), "TRM_SIM__LATENCY_MS_MEAN": "20"}
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        [sys.executable, "-m", "trm_assets.cli", "train", "--workspace", str(ws),
         "--config", str(ws / "config.yaml"), "--no-dagster"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        holder = None
        while holder is None and time.monotonic() < deadline and first.poll() is None:
            holder = lock_holder(ws)
            time.sleep(0.05)
        assert holder is not None and holder.pid == first.pid and holder.command == "trm train"
    finally:
        first.kill()
        first.wait()
        log.close()
    assert lock_holder(ws) is None  # a killed holder leaves the workspace lockable


def test_a_probe_between_the_lock_and_its_description_names_the_holder(ws: Path) -> None:
    """CI caught `lock_holder` answering ``pid 0 / unknown`` for a `trm train` that had taken
    the lock and not yet written who it is (a loaded machine descheduled it in between). The
    probe waits for the description; here it appears 0.1 s after the lock is taken."""
    import fcntl
    import json
    import time

    fd = os.open(ws / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a holder that is not this process's registry: the probe path
    expected = {"pid": 4242, "host": "h", "command": "trm train", "run_id": "r", "started": "t"}

    def describe_later() -> None:
        time.sleep(0.1)
        os.pwrite(fd, json.dumps(expected).encode(), 0)

    writer = threading.Thread(target=describe_later)
    writer.start()
    try:
        holder = lock_holder(ws)
        assert holder is not None
        assert (holder.pid, holder.command, holder.run_id) == (4242, "trm train", "r")
    finally:
        writer.join()
        os.close(fd)
    assert lock_holder(ws) is None


def test_a_second_init_beside_one_writing_names_the_writer(tmp_path: Path) -> None:
    """Hostile pass: of two concurrent `trm init`, the loser sometimes read the winner's half-
    written directory and said "not empty and not a workspace (no manifest.json)"; it now names
    the init that holds the lock."""
    ws = tmp_path / "ws"
    (ws / "store" / "skills" / "v1").mkdir(parents=True)  # what an init writes before its manifest
    with holder_process(ws) as proc:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(config_to_yaml(tiny_config()), encoding="utf-8")
        res = run_cli(
            ["init", "--workspace", str(ws), "--config", str(cfg)],
            child_env(),
            120,
            tmp_path / "init.log",
        )
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"pid {proc.pid}" in res.stderr and "not a workspace" not in res.stderr, res.stderr


def test_a_re_init_holds_the_moved_lock_until_the_new_one_is_taken(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract audit of issue 18.1: `trm init` over a workspace released the moved workspace's
    lock before taking the new directory's, a moment in which another init could take it. While
    the new workspace is written, both locks are now this process's."""
    import trm_assets.harness.storage.workspace as workspace_mod
    from trm_assets.harness.storage.workspace import init_workspace

    write_new = workspace_mod._write_new
    held: list[tuple[Holder | None, Holder | None]] = []

    def spy(workspace: Path, new: object) -> object:
        held.append((lock_holder(tmp_path / "ws.archive-1"), lock_holder(workspace)))
        return write_new(workspace, new)  # type: ignore[arg-type]

    monkeypatch.setattr(workspace_mod, "_write_new", spy)
    init_workspace(ws, questions_ref=tiny_config().questions)
    ((moved, new),) = held
    assert moved is not None and new is not None, held
    assert (moved.pid, new.pid) == (os.getpid(), os.getpid())
    assert (tmp_path / "ws.archive-1" / "manifest.json").is_file()
    assert lock_holder(ws) is None and lock_holder(tmp_path / "ws.archive-1") is None


WAITER = """
import sys, time
from trm_assets.harness.storage.lock import workspace_lock
print("waiting", flush=True)
with workspace_lock(sys.argv[1], command="waiter", wait_s=30):
    print("held", flush=True)
    time.sleep(300)
"""


def test_a_waiter_never_takes_the_lock_of_a_workspace_moved_aside(ws: Path, tmp_path: Path) -> None:
    """Review: a process waiting on ``ws/.trm.lock`` while `trm init` moved ``ws`` aside got the
    moved directory's lock when it was released, and believed it held ``ws``: a second writer
    could then take the new ``ws``. The waiter now takes the lock file at the path."""
    import time

    with workspace_lock(ws, command="trm init"):
        waiter = child_process(WAITER, ws)
        try:
            assert waiter.stdout is not None and waiter.stdout.readline().strip() == "waiting"
            time.sleep(1.0)  # it has opened the lock file and polls it
            ws.rename(tmp_path / "ws.archive-1")  # the lock file moves with its directory
            ws.mkdir()
        except BaseException:
            waiter.kill()
            raise
    try:
        assert waiter.stdout is not None and waiter.stderr is not None
        assert waiter.stdout.readline().strip() == "held", waiter.stderr.read()
        holder = lock_holder(ws)
        assert holder is not None and (holder.pid, holder.command) == (waiter.pid, "waiter")
        assert lock_holder(tmp_path / "ws.archive-1") is None  # not the moved one
        refused = pytest.raises(WorkspaceLockedError, match=f"pid {waiter.pid}")
        with refused, workspace_lock(ws, command="second writer", wait_s=0.2):
            pass
    finally:
        waiter.kill()
        waiter.wait(timeout=10)

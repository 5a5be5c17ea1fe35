"""Checkpoints that land behind the next unit (issue 14, docs/decision-commit-behind.md): read
from memory until written, written before anything of the next unit is durable, a failure
surfaced; the step's diagnosis reads its rows from memory; new versions synced by the checkpoint.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from trm_assets.agent.tools import Toolbox
from trm_assets.evolution.diagnosis import failed_cases
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop import runner as runner_mod
from trm_assets.harness.loop import session as session_mod
from trm_assets.harness.loop import units as units_mod
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.rollouts import run_inference
from trm_assets.harness.loop.runner import current_action, run_action, train
from trm_assets.harness.loop.session import open_session
from trm_assets.harness.loop.step import evaluate
from trm_assets.harness.storage import checkpoint
from trm_assets.harness.storage.atomic import (
    atomic_write_text,
    deferred_sync,
    json_text,
    take_unsynced,
)
from trm_assets.harness.storage.checkpoint import load_state, wait_for_commits
from trm_assets.harness.storage.lock import workspace_lock
from trm_assets.harness.storage.runlog import RunLog, RunLogError
from trm_assets.harness.storage.versions import write_version
from trm_assets.llm.factory import build_providers
from trm_assets_tests.agent.fixtures import (
    ScriptedLLM,
    explorer,
    kitchen_tree,
    prompts,
    question,
    skills_for,
)
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


def _waiter(event: threading.Event) -> Callable[[], None]:
    """``event.wait`` as a writer task's ``then`` (called with nothing, its result unused)."""

    def wait() -> None:
        event.wait()

    return wait


def _take_and_drop(lock: threading.Lock) -> None:
    """Wait until ``lock`` is free (take it and let it go at once)."""
    lock.acquire()
    lock.release()


def _initialized(tmp_path: Path) -> tuple[Path, RunConfig]:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init, committed at once
    return ws, cfg


def test_a_checkpoint_behind_is_read_from_memory_and_lands_before_the_next_write(
    tmp_path: Path,
) -> None:
    ws, cfg = _initialized(tmp_path)
    state_path = ws / "state.json"
    before = state_path.read_text(encoding="utf-8")
    release = threading.Event()
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        # the writer is busy: the checkpoint queues
        ctx.log._submit(behind=True, then=_waiter(release))
        run_action(ctx, Action("step", epoch=0, step=0), behind=True)
        assert state_path.read_text(encoding="utf-8") == before  # not landed yet
        state = load_state(state_path, cfg)
        assert state is not None and state.next_step == 1  # … but read as committed
        threading.Timer(0.3, release.set).start()
        t0 = time.perf_counter()
        atomic_write_text(ws / "probe.txt", "x")  # a durable write waits for the checkpoint
        assert time.perf_counter() - t0 >= 0.25
        landed = json.loads(state_path.read_text(encoding="utf-8"))
        assert landed["next_step"] == 1 and landed == json.loads(
            json_text(checkpoint.state_to_dict(state))
        )


def _step_whose_checkpoint_cannot_land(
    ctx: LoopContext, monkeypatch: pytest.MonkeyPatch, surface: Callable[[], object]
) -> None:
    """Run step e0 s0 committed behind while ``state.json`` cannot be written (disk full);
    ``surface`` must raise the failure."""

    def full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(checkpoint, "_write_state", full)
        run_action(ctx, Action("step", epoch=0, step=0), behind=True)
        with pytest.raises(OSError, match="No space"):
            surface()


def test_a_checkpoint_that_fails_to_land_is_raised_and_the_old_one_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, cfg = _initialized(tmp_path)
    state_path = ws / "state.json"
    before = state_path.read_text(encoding="utf-8")

    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        _step_whose_checkpoint_cannot_land(ctx, monkeypatch, wait_for_commits)
        assert state_path.read_text(encoding="utf-8") == before
        again = load_state(state_path, cfg)
        assert again is not None and again.next_step == 0  # the step is still to be done
        with pytest.raises(OSError, match="No space"):
            ctx.log.flush()  # the run log's writer raises it too (once)


def test_the_rows_a_writer_was_given_read_as_the_table_returns_them(tmp_path: Path) -> None:
    qs = [question(f"001-{i}", answer="AB"[i % 2]) for i in range(6)]
    with RunLog.open(tmp_path / "runs.duckdb") as log:
        asyncio.run(
            run_inference(
                qs,
                llm=ScriptedLLM(explorer(lambda m: "A")),
                tools=Toolbox({"vidA": kitchen_tree()}),
                log=log,
                run_id="s",
                concurrency=2,
                max_steps=5,
                skills=skills_for(["Object Recognition"]),
                prompts=prompts(),
            )
        )
        recent = log.recent("s")
        assert recent is not None and len(recent) == len(qs)
        log.flush()
        qmap = {q.question_id: q for q in qs}
        from_memory = failed_cases("s", qmap, recent)
        from_table = failed_cases("s", qmap, log)
        assert from_memory == from_table and len(from_table) == 3  # the B answers failed
        cols = ("question_id", "replicate", "correct", "failure_kind", "predicted", "stop_reason")
        assert [{c: r[c] for c in cols} for r in recent.predictions("s")] == [
            {c: r[c] for c in cols} for r in log.predictions("s")
        ]
        keys = ("question_id", "replicate", "seq", "role", "tool_name", "arguments", "content")
        assert [{k: t[k] for k in keys} for t in recent.traces("s")] == [
            {k: t[k] for k in keys} for t in log.traces("s")
        ]
        assert log.recent("other") is None


def test_new_versions_of_a_unit_are_synced_by_its_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_version(root, {"a.md": "1\n"}, parent=None, reason="outside a unit")
    assert take_unsynced() == []  # synced at once
    with deferred_sync():
        files = {"a.md": "2\n", "tools/deep/x.md": "x\n", "tools/y.md": "y\n"}
        meta = write_version(root, files, parent="v1", reason="in a unit")
        queued = take_unsynced()
    done = root / meta.version
    assert queued == [
        done / "a.md",
        done / "tools/deep/x.md",
        done / "tools/y.md",
        done / "_meta.json",
        done / "tools/deep",  # each nested directory's entry, deepest first, before the root's
        done / "tools",
        done,
        root,
    ]
    assert take_unsynced() == []


def _fails_once() -> tuple[list[int], Callable[[duckdb.DuckDBPyConnection], None]]:
    fired: list[int] = []

    def write(con: duckdb.DuckDBPyConnection) -> None:
        if not fired:
            fired.append(1)
            raise duckdb.IOException("IO Error: No space left on device")

    return fired, write


def test_a_checkpoint_does_not_land_behind_a_failed_write_of_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's last rows are written behind (disk full once); the checkpoint queued after
    them must not land: ``train`` raises, ``state.json`` still names the step, and the rows the
    failed write and the skipped checkpoint took are written before the lock is released
    (review of 64afb8c, finding 1)."""
    ws, cfg = _initialized(tmp_path)
    before = json.loads((ws / "state.json").read_text(encoding="utf-8"))
    fired, fail_once = _fails_once()
    orig = session_mod.UnitSession.commit

    def commit(self: session_mod.UnitSession, *, behind: bool = False) -> None:
        self.ctx.log.defer(fail_once)  # with the last barrier's rows
        orig(self, behind=behind)

    monkeypatch.setattr(session_mod.UnitSession, "commit", commit)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        with pytest.raises(RunLogError, match="disk full"):
            train(ctx, max_units=1)
        assert fired == [1]
        after = json.loads((ws / "state.json").read_text(encoding="utf-8"))
        assert after == before and after["next_step"] == 0  # the step is not checkpointed
        assert ctx.log.pending == 0 and not ctx.log._deferred  # written before the unlock:
        runs = ctx.log.query("SELECT run_id, status FROM runs WHERE run_id LIKE 'train_e0_s0%'")
        assert runs and {r["status"] for r in runs} == {"done"}
        n = ctx.log.query("SELECT count(*) AS n FROM predictions WHERE run_id = 'train_e0_s0'")
        assert n[0]["n"] == cfg.batch_size


def test_a_replaced_landing_that_failed_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two checkpoints in flight, the first fails after the second replaced its entry: the
    failure is raised by :func:`wait_for_commits`, the second is not written, and the next
    plan (:func:`load_state`) sees the error, not the older file (review finding 2)."""
    ws, cfg = _initialized(tmp_path)
    before = (ws / "state.json").read_text(encoding="utf-8")
    written: list[str] = []
    real = checkpoint._write_state

    def flaky(path: Path, text: str) -> None:
        written.append(text)
        if len(written) == 1:
            raise OSError(28, "No space left on device")
        real(path, text)

    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        st = load_state(ctx.paths.state, cfg)
        assert st is not None
        release = threading.Event()
        ctx.log._submit(behind=True, then=_waiter(release))
        monkeypatch.setattr(checkpoint, "_write_state", flaky)
        checkpoint.save_state_behind(ctx.paths.state, st, ws, ctx.log)
        st.next_step = 1
        checkpoint.save_state_behind(ctx.paths.state, st, ws, ctx.log)
        release.set()
        with pytest.raises(OSError, match="No space"):
            wait_for_commits()
        assert len(written) == 1  # the second checkpoint did not land behind the failed one
        assert (ws / "state.json").read_text(encoding="utf-8") == before
        with pytest.raises(OSError, match="No space"):
            ctx.log.flush()  # the writer reports its first failure, then works again
        ctx.log.flush()


def test_a_failed_landing_stops_the_next_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A landing that failed while the next unit was being planned: :func:`load_state` raises
    it instead of reading the older file and planning the same unit again in this process;
    another workspace's plan is not stopped by it."""
    ws, cfg = _initialized(tmp_path)
    other, _ = _initialized(tmp_path / "other")

    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        # the landing has failed (the writer reports it)
        _step_whose_checkpoint_cannot_land(ctx, monkeypatch, ctx.log._join_behind)
        unrelated = load_state(other / "state.json", cfg)
        assert unrelated is not None and unrelated.next_step == 0
        with pytest.raises(OSError, match="No space"):
            current_action(ctx)  # not "step e0 s0" again
        assert current_action(ctx) == Action("step", epoch=0, step=0)  # raised once; the file


def test_rows_handed_to_a_failed_writer_are_kept_in_call_order(tmp_path: Path) -> None:
    """After a background write failed, the tasks queued behind it put their statements back
    in call order, the next hand-over raises before it takes anything, and the next flush
    writes everything once, in the order it was called (second review of the fix)."""
    log = RunLog.open(tmp_path / "runs.duckdb")
    try:
        log.begin_run("r", kind="step", defer=False)
        release = threading.Event()
        log._submit(behind=True, then=_waiter(release))
        fired, fail_once = _fails_once()
        log.defer(fail_once)
        log.flush_behind()  # fails on the writer thread
        seen: list[int] = []
        log.defer(lambda con: seen.append(1))
        log.flush_behind()  # queued behind the failure: skipped, put back
        log.defer(lambda con: seen.append(2))
        log.flush_behind()  # skipped too, put back after the first
        release.set()
        concurrent.futures.wait(list(log._queued))
        log.defer(lambda con: seen.append(3))
        with pytest.raises(RunLogError, match="disk full"):
            log.flush_behind()  # raises before taking the new statement
        assert seen == []
        log.flush()
        assert fired == [1] and seen == [1, 2, 3]  # nothing dropped, in call order
    finally:
        with contextlib.suppress(Exception):
            log.close()


def test_a_hand_over_after_a_failure_does_not_wait_for_the_queue(tmp_path: Path) -> None:
    """A hand-over that finds a failed task raises at once, without joining the tasks still
    queued: the checkpoint hands over holding a lock that a finished landing's callback takes
    on the writer thread, so a join there would deadlock (second review of the fix)."""
    log = RunLog.open(tmp_path / "runs.duckdb")
    release, held = threading.Event(), threading.Lock()
    try:
        log._submit(behind=True, then=_waiter(release))
        fired, fail_once = _fails_once()
        log.defer(fail_once)
        log.flush_behind()
        failed = log._queued[-1]
        landing = log._submit(behind=True)  # skipped after the failure; its callback waits …
        landing.add_done_callback(lambda f: _take_and_drop(held))
        log._submit(behind=True)  # … so the writer cannot reach this one yet
        outcome: list[object] = []
        with held:  # as save_state_behind holds _LANDING_LOCK
            release.set()
            concurrent.futures.wait([failed])
            t = threading.Thread(target=lambda: outcome.append(_raised(log.flush_behind)))
            t.start()
            t.join(timeout=5)
            assert not t.is_alive()  # raised at once, no join
        assert isinstance(outcome[0], RunLogError) and fired == [1]
    finally:
        release.set()
        with contextlib.suppress(Exception):
            log.close()


def _raised(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as e:
        return e
    return None


def test_the_test_pool_orders_no_barrier_and_a_failed_units_bookkeeping_is_dropped(
    tmp_path: Path,
) -> None:
    """Review findings 3–4: a held-out run's call counts never reach the longest-first order
    (the test pool must not influence anything, not even a start order), and work queued for
    after the next launch by a unit that failed is dropped when the next unit opens."""
    ws, cfg = _initialized(tmp_path)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        test_qs = ctx.pool_questions("test")
        asyncio.run(evaluate(ctx, "probe_holdout", "v1", "v1", test_qs, "holdout"))
        assert not {q.question_id for q in test_qs} & set(ctx._calls_seen)
        val_qs = ctx.pool_questions("validation")[:4]
        asyncio.run(evaluate(ctx, "probe_val", "v1", "v1", val_qs, "slow_R"))
        assert {q.question_id for q in val_qs} <= set(ctx._calls_seen)
        ctx.drain_later()
        seen: list[int] = []
        ctx.after_next_launch(lambda: seen.append(1))  # left by an attempt that raised
        session = open_session(ctx, current_action(ctx))
        ctx.drain_later()
        assert seen == [] and session.action == Action("step", epoch=0, step=0)


def test_a_failed_units_rows_are_written_before_its_lock_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding 5: a unit run through :func:`run_unit` (the Dagster path) that fails
    writes its buffered rollout rows while it still holds the workspace lock."""
    ws, cfg = _initialized(tmp_path)
    pending_at_release: list[int] = []
    written: list[int] = []
    real_lock = workspace_lock

    @contextlib.contextmanager
    def recording_lock(workspace: Path, *, command: str) -> Iterator[object]:
        with real_lock(workspace, command=command) as holder:
            try:
                yield holder
            finally:
                pending_at_release.append(len(written))

    def boom(self: session_mod.UnitSession, *, behind: bool = False) -> None:
        # something the unit left buffered for the next foreground flush
        self.ctx.log.defer(lambda con: written.append(1), behind=False)
        raise RuntimeError("the unit failed before its commit")

    monkeypatch.setattr(session_mod.UnitSession, "commit", boom)
    monkeypatch.setattr(runner_mod, "workspace_lock", recording_lock)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        with pytest.raises(RuntimeError, match="before its commit"):
            units_mod.run_unit(ctx, Action("step", epoch=0, step=0))
        assert pending_at_release == [1]  # written when the lock was released


def test_a_units_own_error_is_not_replaced_by_a_landing_failure_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step e0 s0's checkpoint fails to land while step e0 s1 fails on its own: ``train``
    raises s1's error (the one to fix first) with the landing failure as a note, which the
    command line prints after it (before: the landing failure replaced it)."""
    from trm_assets.cli.support import error_lines
    from trm_assets.domain.errors import TrmError

    ws, cfg = _initialized(tmp_path)
    unit_failed = threading.Event()
    real_run = runner_mod.run_action

    def late_full(path: Path, text: str) -> None:
        unit_failed.wait(10)
        raise OSError(28, "No space left on device")

    def run(ctx: LoopContext, action: Action, **kw: Any) -> None:
        if action == Action("step", epoch=0, step=0):
            real_run(ctx, action, **kw)
            return
        unit_failed.set()
        raise TrmError(f"{action.describe()}: the provider refused the key")

    monkeypatch.setattr(checkpoint, "_write_state", late_full)
    monkeypatch.setattr(runner_mod, "run_action", run)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        with pytest.raises(TrmError, match="refused the key") as raised:
            train(ctx, max_units=3)
        notes = raised.value.__notes__
        assert len(notes) == 1 and "earlier checkpoint did not land" in notes[0]
        assert "No space left on device" in notes[0]
        assert error_lines(raised.value) == [str(raised.value), notes[0]]
        landed = load_state(ws / "state.json", cfg)
        assert landed is not None and landed.next_step == 0

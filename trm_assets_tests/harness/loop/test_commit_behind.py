"""Checkpoints that land behind the next unit (issue 14, docs/decision-commit-behind.md): read
from memory until written, written before anything of the next unit is durable, a failure
surfaced; the step's diagnosis reads its rows from memory; new versions synced by the checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from trm_assets.agent.tools import Toolbox
from trm_assets.evolution.diagnosis import failed_cases
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.rollouts import run_inference
from trm_assets.harness.loop.runner import current_action, run_action
from trm_assets.harness.storage import checkpoint
from trm_assets.harness.storage.atomic import atomic_write_text, deferred_sync, take_unsynced
from trm_assets.harness.storage.checkpoint import load_state, wait_for_commits
from trm_assets.harness.storage.runlog import RunLog
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
from trm_assets_tests.harness.loop.conftest import new_workspace, tiny_config


def _initialized(tmp_path: Path) -> tuple[Path, object]:
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
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:  # type: ignore[arg-type]
        ctx.log._submit(release.wait)  # the writer thread is busy: the checkpoint must queue
        run_action(ctx, Action("step", epoch=0, step=0), behind=True)
        assert state_path.read_text(encoding="utf-8") == before  # not landed yet
        state = load_state(state_path, cfg)  # type: ignore[arg-type]
        assert state is not None and state.next_step == 1  # … but read as committed
        threading.Timer(0.3, release.set).start()
        t0 = time.perf_counter()
        atomic_write_text(ws / "probe.txt", "x")  # a durable write waits for the checkpoint
        assert time.perf_counter() - t0 >= 0.25
        landed = json.loads(state_path.read_text(encoding="utf-8"))
        assert landed["next_step"] == 1 and landed == json.loads(
            checkpoint.json_text(checkpoint.state_to_dict(state))
        )


def test_a_checkpoint_that_fails_to_land_is_raised_and_the_old_one_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, cfg = _initialized(tmp_path)
    state_path = ws / "state.json"
    before = state_path.read_text(encoding="utf-8")

    def full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:  # type: ignore[arg-type]
        with monkeypatch.context() as mp:
            mp.setattr(checkpoint, "_write_state", full)
            run_action(ctx, Action("step", epoch=0, step=0), behind=True)
            with pytest.raises(OSError, match="No space"):
                wait_for_commits()
        assert state_path.read_text(encoding="utf-8") == before
        again = load_state(state_path, cfg)  # type: ignore[arg-type]
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
        meta = write_version(root, {"a.md": "2\n"}, parent="v1", reason="in a unit")
        queued = take_unsynced()
    done = root / meta.version
    assert set(queued) == {done / "a.md", done / "_meta.json", done, root}
    assert take_unsynced() == []

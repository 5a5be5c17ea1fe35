"""Issue 14: one read of ``state.json`` and of ``manifest.json`` per unit of work.

The step is run as a fresh process would run it (the per-process caches emptied first), with
every ``open`` of the two files counted; and a change made by someone else between two reads
(an atomic replace, a hand edit) is still seen.
"""

from __future__ import annotations

import builtins
import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import current_action, run_action
from trm_assets.harness.storage import checkpoint, workspace
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import (
    _repo_cwd,  # noqa: F401 - autouse, paths are repo-relative
    tiny_config,
)
from trm_bench.overhead import new_workspace

WATCHED = ("state.json", "manifest.json")


def test_one_read_of_state_and_manifest_per_step(tmp_path: Path, monkeypatch: Any) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init
        checkpoint._STATE_CACHE.clear()  # as a fresh process (a Dagster run) starts
        workspace._MANIFEST_CACHE.clear()
        counts: Counter[str] = Counter()
        real = io.open

        def counting(file: Any, *a: Any, **k: Any) -> Any:
            if os.path.basename(str(file)) in WATCHED:
                counts[os.path.basename(str(file))] += 1
            return real(file, *a, **k)

        with monkeypatch.context() as mp:  # undoes only these patches (not the repository cwd)
            mp.setattr(builtins, "open", counting)
            mp.setattr(io, "open", counting)
            action = current_action(ctx)
            assert action.kind == "step"
            run_action(ctx, action)
    assert counts["state.json"] == 1, counts
    assert counts["manifest.json"] == 1, counts
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        assert current_action(ctx).describe() == "step (epoch 0, step 1)"


def test_a_change_by_someone_else_is_seen(tmp_path: Path) -> None:
    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    m = workspace.read_manifest(ws)
    path = workspace.manifest_path(ws)
    raw = json.loads(path.read_text())
    raw["current"]["skills"] = "v1"  # same content: rewrite through another file (new inode)
    raw["history"] = []
    tmp = path.with_suffix(".other")
    tmp.write_text(json.dumps(raw))
    os.replace(tmp, path)
    again = workspace.read_manifest(ws)
    assert again is not m  # re-read, not served from the cache
    assert again.history == []

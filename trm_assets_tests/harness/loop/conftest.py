"""Shared helpers of the training-loop tests: tiny configs on the SIMULATED smoke sample."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.plan import Action
from trm_assets.harness.loop.runner import train
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import (
    REPO,
    _repo_cwd,  # noqa: F401 - registers the autouse fixture here
    tiny_config,
)
from trm_bench.overhead import new_workspace


def run_to_end(
    ws: Path, cfg: RunConfig, on_unit: Callable[[LoopContext, Action], None] | None = None
) -> None:
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        hook = (lambda a: on_unit(ctx, a)) if on_unit is not None else None
        train(ctx, on_unit=hook)


def digest(ws: Path) -> dict[str, str]:
    """What must be identical between an interrupted+resumed run and an uninterrupted one: skill
    and prompt files, version meta (minus its wall-clock time), manifest, state (accuracies
    included), ladder and baseline cache."""
    out: dict[str, str] = {}
    for p in sorted((ws / "store").rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.name == "_meta.json":
            meta = json.loads(data)
            meta.pop("created_at")
            data = json.dumps(meta, sort_keys=True).encode()
        out[str(p.relative_to(ws))] = hashlib.sha256(data).hexdigest()
    manifest = json.loads((ws / "manifest.json").read_bytes())
    manifest.pop("workspace_id", None)  # every workspace has its own random identity
    out["manifest.json"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    for name in ("state.json", "ladder.json"):
        out[name] = hashlib.sha256((ws / name).read_bytes()).hexdigest()
    for p in sorted((ws / "baseline_cache").glob("*.json")):
        out[str(p.relative_to(ws))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Path]]]:
    """One uninterrupted tiny run, with a copy of the workspace after every unit of work."""
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)
    root = tmp_path_factory.mktemp("tiny")
    cfg = tiny_config()
    ws = new_workspace(root / "ws", cfg)
    snaps: list[Path] = []

    def snapshot(ctx: LoopContext, action: Action) -> None:
        ctx.close_log()  # a consistent DuckDB file to copy; reopened lazily by the next unit
        target = root / f"snap{len(snaps):03d}"
        shutil.copytree(ws, target)
        snaps.append(target)

    run_to_end(ws, cfg, snapshot)
    yield ws, snaps
    mp.undo()

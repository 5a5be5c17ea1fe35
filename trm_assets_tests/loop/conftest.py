"""Shared helpers of the training-loop tests: tiny configs on the SIMULATED smoke sample."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trm_assets.harness.config import RunConfig, config_to_yaml, load_config
from trm_assets.harness.context import LoopContext, loop_context
from trm_assets.harness.plan import Action
from trm_assets.harness.runner import train
from trm_assets.harness.workspace import init_workspace

REPO = Path(__file__).resolve().parents[2]
SMOKE_CONFIG = REPO / "data" / "configs" / "smoke.yaml"

# A tiny run (≈ 3 s) with accepts, rejects, a probation rollback, momentum and prompt evolution:
# cue-rich proposals and probation_min_pairs=1 so every fast/slow path is exercised.
TINY = (
    "seed=2",
    "val_size=24",
    "test_size=12",
    "eval_min_per_class=2",
    "batch_size=12",
    "steps_per_epoch=2",
    "epochs=2",
    "gate_passes=4",
    "concurrency=4",
    "probation_min_pairs=1",
    "sim.proposal_mix.cue=0.6",
    "sim.proposal_mix.neutral=0.1",
    "sim.proposal_mix.harmful=0.2",
)


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the configs' data paths are relative to the repository


def tiny_config(*extra: str) -> RunConfig:
    return load_config(SMOKE_CONFIG, (*TINY, *extra), environ={}, dotenv_path=None)


def new_workspace(path: Path, cfg: RunConfig) -> Path:
    init_workspace(
        path,
        questions_ref=cfg.questions,
        config_yaml=config_to_yaml(cfg),
        config_fingerprint=cfg.fingerprint(),
    )
    return path


def run_to_end(
    ws: Path, cfg: RunConfig, on_unit: Callable[[LoopContext, Action], None] | None = None
) -> None:
    with loop_context(ws, cfg) as ctx:
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
    for name in ("manifest.json", "state.json", "ladder.json"):
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

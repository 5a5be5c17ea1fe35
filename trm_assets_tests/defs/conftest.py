"""One tiny trained workspace (smoke sample, 1 epoch × 1 step) driven through real Dagster runs,
shared by the Dagster tests; tests that mutate copy it first."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml

from trm_assets.defs.driver import drive
from trm_assets.defs.resources import TrmResource
from trm_assets.harness.storage.workspace import init_workspace

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "data" / "configs" / "smoke.yaml"


def tiny_config(directory: Path) -> Path:
    """The smoke config shrunk to 1 epoch × 1 step (a real file: subprocesses read it too)."""
    cfg = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    cfg.update(epochs=1, steps_per_epoch=1)
    for key in ("questions", "trees", "ground_truth"):
        cfg[key] = str(ROOT / cfg[key])
    path = directory / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def new_workspace(path: Path) -> Path:
    init_workspace(path, questions_ref=str(ROOT / "data" / "smoke" / "questions.json"))
    return path


def tiny_resource(workspace: Path, config: Path | None = None) -> TrmResource:
    config = config or tiny_config(workspace.parent)
    return TrmResource(workspace=str(workspace), config_path=str(config))


@dataclass(frozen=True)
class Trained:
    workspace: Path
    dagster_home: Path
    trm: TrmResource
    run_ids: tuple[str, ...]
    config: Path


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    base = tmp_path_factory.mktemp("trained")
    home = base / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    ws = new_workspace(base / "ws")
    trm = tiny_resource(ws)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        summary = drive(trm, instance)
    assert summary.last.kind == "done"
    yield Trained(ws, home, trm, summary.run_ids, Path(trm.config_path))


@pytest.fixture
def trained_copy(trained: Trained, tmp_path: Path) -> Trained:
    ws = tmp_path / "ws"
    shutil.copytree(trained.workspace, ws)
    return Trained(ws, trained.dagster_home, tiny_resource(ws, trained.config), trained.run_ids)

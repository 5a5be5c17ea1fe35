"""Two tiny experiments trained through real Dagster runs in ONE instance, shared by the Dagster
tests (tests that mutate copy a workspace first):

* ``ws`` — the tiny SIMULATED setup (``trm_assets_tests/tiny.py``) over 3 epochs × 2 steps: an
  accept, a momentum version made after validation (e1 evaluates it, e0 does not), R2 prompt
  reverts, an early stop and a delivery (current ← best) — every kind of version the lineage must
  name exactly;
* ``ws_b`` — the same world, 1 epoch × 1 step: the reference that path-equality tests compare a
  fresh workspace with.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml

from trm_assets.defs.driver import drive
from trm_assets.defs.experiments import Experiment
from trm_assets.harness.data.config import config_to_yaml, load_config
from trm_assets.harness.storage.workspace import init_workspace
from trm_assets_tests.tiny import SMOKE_CONFIG, TINY

from .servers import postgres  # noqa: F401  (the session's PostgreSQL cluster fixture)

ROOT = Path(__file__).resolve().parents[2]
LINEAGE = ("epochs=3",)  # 3 epochs × 2 steps (TINY's steps_per_epoch)
SMALL = ("epochs=1", "steps_per_epoch=1")


def write_config(directory: Path, name: str, *extra: str) -> Path:
    """The tiny config with ``extra`` overrides as a real file (subprocesses read it too), data
    paths absolute."""
    cfg = yaml.safe_load(
        config_to_yaml(load_config(SMOKE_CONFIG, (*TINY, *extra), environ={}, dotenv_path=None))
    )
    for key in ("questions", "trees", "ground_truth"):
        cfg[key] = str(ROOT / cfg[key])
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def new_workspace(path: Path) -> Path:
    init_workspace(path, questions_ref=str(ROOT / "data" / "smoke" / "questions.json"))
    return path


def new_home(path: Path) -> Path:
    path.mkdir(parents=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", path / "dagster.yaml")
    return path


@dataclass(frozen=True)
class Trained:
    home: Path
    lineage: Experiment  # ``ws``: 3 epochs
    small: Experiment  # ``ws_b``: 1 epoch × 1 step
    small_config: Path
    run_ids: tuple[str, ...]

    @property
    def workspace(self) -> Path:
        return self.lineage.workspace_dir()


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    base = tmp_path_factory.mktemp("trained")
    home = new_home(base / "dagster_home")
    lineage = Experiment(
        workspace=str(new_workspace(base / "ws")),
        config_path=str(write_config(base, "lineage", *LINEAGE)),
    )
    small_config = write_config(base, "small", *SMALL)
    small = Experiment(workspace=str(new_workspace(base / "ws_b")), config_path=str(small_config))
    run_ids: list[str] = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for exp in (lineage, small):
            summary = drive(exp, instance)
            assert summary.last.kind == "done"
            run_ids.extend(summary.run_ids)
    yield Trained(home, lineage, small, small_config, tuple(run_ids))


def copy_experiment(exp: Experiment, directory: Path) -> Experiment:
    """A copy of a trained workspace (same config), under the same experiment name."""
    target = directory / exp.workspace_dir().name
    shutil.copytree(exp.workspace_dir(), target)
    return exp.model_copy(update={"workspace": str(target)})

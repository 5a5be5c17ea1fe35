"""The tiny SIMULATED training setup shared by the loop and reliability tests.

A ≈ 3–4 s 2-epoch run on the smoke sample that still crosses init, steps with gates (accepts and
rejects), a probation, all ten slow-update functions and finalize: cue-rich proposals and
``probation_min_pairs=1`` so every fast/slow path is exercised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trm_assets.harness.data.config import RunConfig, load_config

REPO = Path(__file__).resolve().parents[1]
SMOKE_CONFIG = REPO / "data" / "configs" / "smoke.yaml"

TINY: tuple[str, ...] = (
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


def tiny_config(*extra: str) -> RunConfig:
    return load_config(SMOKE_CONFIG, (*TINY, *extra), environ={}, dotenv_path=None)


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the configs' data paths are relative to the repository

"""Fixtures of the simulated-world tests: the committed smoke sample and a bigger world."""

from __future__ import annotations

from pathlib import Path

import pytest

from trm_assets.llm.sim.generator import build_sample
from trm_assets.llm.sim.oracle import load_skills
from trm_assets.llm.sim.world import SimWorld, load_world, parse_ground_truth

REPO = Path(__file__).resolve().parents[3]
SMOKE = REPO / "data" / "smoke"
DEFAULT = REPO / "data" / "default"
PROMPTS = REPO / "prompts"


@pytest.fixture(scope="session")
def smoke_world() -> SimWorld:
    return load_world(SMOKE)


@pytest.fixture(scope="session")
def big_world() -> SimWorld:
    """600 videos / 1800 questions generated in memory (statistical tests)."""
    _, _, gt = build_sample(videos=600, seed=123)
    return parse_ground_truth(gt, "<big test world>")


@pytest.fixture(scope="session")
def seed_skills() -> dict[str, str]:
    return load_skills(PROMPTS / "skills")

"""Suite-wide isolation: no test writes into the project's own Dagster instance."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# hand-written fixtures of every question format and of the tree schema, for every layer
pytest_plugins = ["trm_assets_tests.data_fixtures"]


@pytest.fixture(autouse=True, scope="session")
def _isolated_dagster_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    mp = pytest.MonkeyPatch()
    mp.setenv("DAGSTER_HOME", str(home))
    yield home
    mp.undo()

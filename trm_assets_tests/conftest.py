"""Suite-wide isolation (no test writes into the project's own Dagster instance) and the order
in which pytest-xdist hands modules to its two workers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# hand-written fixtures of every question format and of the tree schema, for every layer
pytest_plugins = ["trm_assets_tests.data_fixtures"]

#: Modules that take the longest, in seconds on one worker (`pytest --durations=0` on a slow
#: 2-core host, 2026-12-04), summed over their tests. `make test` runs `--dist loadscope
#: --no-loadscope-reorder`: each module goes whole to one worker, in collection order, and this
#: order puts the longest first (LPT scheduling). xdist's own reorder (most tests first) left the
#: 240 s kill test for the end, on one worker while the other sat idle. Only the order changes:
#: a stale figure costs time, never a test.
HEAVY_MODULES: dict[str, int] = {
    "trm_assets_tests/reliability/test_kill_resume.py": 243,
    "trm_assets_tests/defs/test_dagster_training.py": 168,
    "trm_assets_tests/harness/loop/test_loop.py": 141,
    "trm_assets_tests/defs/test_scale_out.py": 150,
    "trm_assets_tests/bench/test_decoding.py": 80,
    "trm_assets_tests/defs/test_launch_and_ui.py": 75,
    "trm_assets_tests/reliability/test_fresh_instance_race.py": 67,
    "trm_assets_tests/domain/test_gate_statistics.py": 61,
    "trm_assets_tests/reliability/test_duckdb_concurrency.py": 61,
    "trm_assets_tests/harness/loop/test_evolve_prefetch.py": 59,
    "trm_assets_tests/reliability/test_llm_faults_and_secrets.py": 54,
    "trm_assets_tests/reliability/test_empty_replies.py": 40,
    "trm_assets_tests/bench/test_optimizer.py": 40,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first, the rest in collection order; each module's tests keep theirs."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::", 1)[0], i)

    def key(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        return (-HEAVY_MODULES.get(module, 0), first[module])

    items.sort(key=key)  # stable: a module's own order is kept


@pytest.fixture(autouse=True, scope="session")
def _isolated_dagster_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    mp = pytest.MonkeyPatch()
    mp.setenv("DAGSTER_HOME", str(home))
    yield home
    mp.undo()

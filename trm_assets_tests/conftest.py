"""Suite-wide isolation (no test writes into the project's own Dagster instance) and the order
in which pytest-xdist hands modules to its two workers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# hand-written fixtures of every question format and of the tree schema, for every layer
pytest_plugins = ["trm_assets_tests.data_fixtures"]

#: Modules that take the longest, in seconds on one worker (`pytest --junitxml` on a slow
#: 2-core host, 2026-12-05, site-packages compiled), summed over their tests. `make test` runs
#: `--dist loadscope --no-loadscope-reorder`: each module goes whole to one worker, in
#: collection order, and this order puts the longest first (LPT scheduling). xdist's own
#: reorder (most tests first) left the 240 s kill test for the end, on one worker while the
#: other sat idle. Only the order changes: a stale figure costs time, never a test.
#: (docs/decision-suite-schedule.md)
HEAVY_MODULES: dict[str, int] = {
    "trm_assets_tests/reliability/test_kill_resume.py": 170,
    "trm_assets_tests/defs/test_dagster_training.py": 153,
    "trm_assets_tests/harness/loop/test_loop.py": 138,
    "trm_assets_tests/defs/test_scale_out.py": 77,
    "trm_assets_tests/domain/test_gate_statistics.py": 74,
    "trm_assets_tests/bench/test_decoding.py": 73,
    "trm_assets_tests/defs/test_launch_and_ui.py": 59,
    "trm_assets_tests/harness/loop/test_evolve_prefetch.py": 49,
    "trm_assets_tests/reliability/test_llm_faults_and_secrets.py": 43,
    "trm_assets_tests/reliability/test_duckdb_concurrency.py": 40,
    "trm_assets_tests/reliability/test_empty_replies.py": 32,
    "trm_assets_tests/bench/test_optimizer.py": 32,
    "trm_assets_tests/reliability/test_fresh_instance_race.py": 25,
}

#: Modules that share an expensive session fixture run on one worker, as one unit: split over
#: two workers, each built it (`trained`, two experiments trained through Dagster, ≈ 45 s;
#: `tiny_run`, ≈ 10 s).
SHARED_FIXTURE_GROUPS: dict[str, str] = {
    "trm_assets_tests/defs/test_dagster_training.py": "trained",
    "trm_assets_tests/defs/test_launch_and_ui.py": "trained",
    "trm_assets_tests/defs/test_scale_out.py": "trained",
    "trm_assets_tests/harness/loop/test_loop.py": "tiny_run",
    "trm_assets_tests/harness/loop/test_old_checkpoints.py": "tiny_run",
}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _unit(nodeid: str) -> str:
    """What one worker runs whole: a module, or its shared-fixture group."""
    module = _module(nodeid)
    group = SHARED_FIXTURE_GROUPS.get(module)
    return f"group:{group}" if group is not None else module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest units first, the rest in collection order; each module's tests keep theirs."""
    first: dict[str, int] = {}
    modules: dict[str, set[str]] = {}
    for i, item in enumerate(items):
        unit, module = _unit(item.nodeid), _module(item.nodeid)
        first.setdefault(unit, i)
        first.setdefault(module, i)
        modules.setdefault(unit, set()).add(module)
    weight = {u: sum(HEAVY_MODULES.get(m, 0) for m in ms) for u, ms in modules.items()}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        unit, module = _unit(item.nodeid), _module(item.nodeid)
        return (-weight[unit], first[unit], first[module])

    items.sort(key=key)  # stable: a module's own order is kept


@pytest.hookimpl(optionalhook=True)  # pytest without xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``: a module's scope, or its shared-fixture group's."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _Scheduler(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return _Scheduler(config, log)


@pytest.fixture(autouse=True, scope="session")
def _isolated_dagster_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    mp = pytest.MonkeyPatch()
    mp.setenv("DAGSTER_HOME", str(home))
    yield home
    mp.undo()

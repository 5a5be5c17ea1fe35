"""The scheduling table of the suite's conftest names modules that exist."""

from __future__ import annotations

from trm_assets_tests.conftest import HEAVY_MODULES, ROOT


def test_every_heavy_module_exists() -> None:
    missing = [m for m in HEAVY_MODULES if not (ROOT / m).is_file()]
    assert missing == []

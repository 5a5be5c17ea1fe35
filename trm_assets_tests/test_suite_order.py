"""The suite's scheduling (conftest): the tables name modules that exist, and the order they give
is the longest unit first, each unit contiguous, each module's own order kept."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trm_assets_tests import conftest
from trm_assets_tests.conftest import HEAVY_MODULES, ROOT, SHARED_FIXTURE_GROUPS


def test_every_module_the_tables_name_exists() -> None:
    named = set(HEAVY_MODULES) | set(SHARED_FIXTURE_GROUPS)
    assert sorted(m for m in named if not (ROOT / m).is_file()) == []


@dataclass
class _Item:
    nodeid: str


def test_longest_unit_first_groups_together_module_order_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "HEAVY_MODULES", {"b.py": 50, "g1.py": 30, "g2.py": 30})
    monkeypatch.setattr(conftest, "SHARED_FIXTURE_GROUPS", {"g1.py": "g", "g2.py": "g"})
    ids = ["a.py::t1", "g1.py::t1", "b.py::t2", "c.py::t1", "g2.py::t1", "a.py::t2", "b.py::t1"]
    items = [_Item(i) for i in ids]
    conftest.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    # group g (30 + 30) before b (50); a and c (no figure) after, in collection order
    assert [i.nodeid for i in items] == [
        "g1.py::t1", "g2.py::t1", "b.py::t2", "b.py::t1", "a.py::t1", "a.py::t2", "c.py::t1",
    ]  # fmt: skip
    assert conftest._unit("g2.py::t1") == conftest._unit("g1.py::t1") != conftest._unit("b.py::x")

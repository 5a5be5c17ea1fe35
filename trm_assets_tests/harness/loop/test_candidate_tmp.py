"""The gate's candidate directory: nothing left behind, even after a killed gate."""

from __future__ import annotations

from pathlib import Path

from trm_assets.harness.loop.gate import _materialize


def test_candidate_materialization_removes_dirs_left_by_a_killed_gate(tmp_path: Path) -> None:
    stale = tmp_path / "tmp" / "cand-action-reasoning-dead1234"
    stale.mkdir(parents=True)
    (stale / "action-reasoning.md").write_text("half-written", encoding="utf-8")
    got = _materialize(tmp_path / "tmp", {"a.md": "A\r\n", "b.md": "B"}, "b.md", "B2")
    assert got == {"a.md": "A\r\n", "b.md": "B2"}
    assert list((tmp_path / "tmp").iterdir()) == []

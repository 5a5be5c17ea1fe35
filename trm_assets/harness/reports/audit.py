"""Invariant audits the Dagster asset checks run: no test-pool question in any gate, ladder or
baseline-cache record, and every skill file inside its skills directory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trm_assets.domain.baseline_cache import cache_from_dict
from trm_assets.domain.edits import resolve_skill_file
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.workspace import resolve_paths


@dataclass
class LeakReport:
    test_pool: int
    gate_rows: int = 0
    ladder_entries: int = 0
    cache_entries: int = 0
    leaks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.leaks.values())


def test_pool_leaks(workspace: str | Path) -> LeakReport:
    """Question ids of the test pool found in gate rollouts, the ladder or the baseline cache."""
    paths = resolve_paths(workspace)
    pools = json.loads(paths.pools.read_text(encoding="utf-8"))
    test = set(pools["test"])
    rep = LeakReport(test_pool=len(test))
    if paths.run_db.exists():
        with RunLogReader.open(paths.run_db, retries=20, wait_s=0.25) as reader:
            rows = reader.query(
                "SELECT DISTINCT question_id FROM predictions WHERE run_id LIKE '%\\_gate\\_%' "
                "ESCAPE '\\'"
            )
        rep.gate_rows = len(rows)
        rep.leaks["gate"] = sorted(test & {r["question_id"] for r in rows})
    if paths.ladder.exists():
        entries = json.loads(paths.ladder.read_text(encoding="utf-8")).get("entries", [])
        rep.ladder_entries = len(entries)
        rep.leaks["ladder"] = sorted(test & {e[0] for e in entries})
    if paths.baseline_cache.is_dir():
        qids: set[str] = set()
        for f in sorted(paths.baseline_cache.glob("*.json")):
            entries = cache_from_dict(json.loads(f.read_text(encoding="utf-8")), str(f))
            rep.cache_entries += len(entries)
            qids |= {k.qid for k in entries}
        rep.leaks["cache"] = sorted(test & qids)
    return rep


def unsafe_skill_paths(workspace: str | Path) -> list[str]:
    """Skill files of the current version that resolve outside the skills directory."""
    paths = resolve_paths(workspace)
    bad = []
    for p in sorted(paths.skills_dir.rglob("*")):
        if p.is_dir() or p.name.startswith("_"):
            continue
        rel = p.relative_to(paths.skills_dir).as_posix()
        try:
            resolve_skill_file(paths.skills_dir, rel)
        except ValueError:
            bad.append(rel)
    return bad

"""Facts the Dagster layer publishes as metadata: which skill version produced which accuracy.

Pure reads of the workspace (state checkpoint, manifest, store meta, run log through a read-only
connection); no training decision depends on anything here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm_assets.domain.question import skill_file_name
from trm_assets.harness.storage.checkpoint import state_from_dict
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.versions import read_meta, read_version_files
from trm_assets.harness.storage.workspace import read_manifest, store_roots


@dataclass(frozen=True)
class SkillFacts:
    task_type: str
    skill_file: str
    skills_version: str
    content_hash: str  # sha256 of the file text, as recorded in the version's meta
    head: str  # the first lines, for the UI


def skill_facts(workspace: str | Path, task_type: str, version: str | None = None) -> SkillFacts:
    """The skill file of ``task_type`` in ``version`` (default: the current skills version)."""
    ws = Path(workspace)
    skills_root, _ = store_roots(ws)
    v = version or read_manifest(ws).current.skills
    name = skill_file_name(task_type)
    meta = read_meta(skills_root, v)
    if name not in meta.files:
        raise KeyError(f"skills version {v} has no {name} (task type {task_type!r})")
    text = read_version_files(skills_root, v).get(name, "")
    head = "\n".join(text.splitlines()[:12])
    return SkillFacts(task_type, name, v, meta.files[name], head)


def load_state_dict(workspace: str | Path) -> dict[str, Any] | None:
    path = Path(workspace) / "state.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def epoch_summary(workspace: str | Path, epoch: int) -> dict[str, Any] | None:
    """The epoch report the slow update wrote into the checkpoint (None before it exists)."""
    raw = load_state_dict(workspace)
    if raw is None:
        return None
    state = state_from_dict(raw, str(Path(workspace) / "state.json"))
    for h in state.history:
        if h["epoch"] == epoch:
            return dict(h)
    return None


def per_task_accuracy(run_db: Path, run_id: str) -> dict[str, dict[str, float | int | None]]:
    """Accuracy per task type of one run (infra failures excluded from the denominator)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with RunLogReader.open(run_db, retries=20, wait_s=0.25) as reader:
        for row in reader.predictions(run_id):
            if row.get("correct") is None:
                continue
            c = counts[str(row["task_type"])]
            c[0] += int(bool(row["correct"]))
            c[1] += 1
    return {t: {"accuracy": (k / n if n else None), "n": n} for t, (k, n) in sorted(counts.items())}


def epoch_eval_facts(workspace: str | Path, epoch: int, task_types: list[str]) -> dict[str, Any]:
    """Everything ``epoch_eval`` shows: accuracies, versions, per-file hashes, budget."""
    ws = Path(workspace)
    summary = epoch_summary(ws, epoch)
    if summary is None:
        raise LookupError(f"{ws}: epoch {epoch} has no slow-update report yet")
    skills_version = summary["val_skills_version"]
    skills = {t: skill_facts(ws, t, skills_version) for t in task_types}
    per_task = per_task_accuracy(ws / "runs.duckdb", summary["val_run_id"])
    return {
        "summary": summary,
        "skills_version": skills_version,
        "prompts_version": summary["val_prompts_version"],
        "skills": skills,
        "per_task": per_task,
    }


def step_rows(workspace: str | Path, epoch: int, step: int) -> list[dict[str, Any]]:
    """The ``step_report`` rows of one step (one per skill considered), sorted by skill file."""
    db = Path(workspace) / "runs.duckdb"
    if not db.exists():
        return []
    with RunLogReader.open(db, retries=20, wait_s=0.25) as reader:
        tables = {r["name"] for r in reader.query("SELECT table_name AS name FROM duckdb_tables()")}
        if "step_report" not in tables:
            return []
        return reader.query(
            "SELECT * FROM step_report WHERE epoch = ? AND step = ? ORDER BY skill_file",
            [epoch, step],
        )

"""Facts the Dagster layer publishes as metadata: which skill version produced which accuracy.

Pure reads of the workspace (state checkpoint, manifest, store meta, run log through a read-only
connection); no training decision depends on anything here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trm_assets.domain.question import skill_file_name
from trm_assets.harness.storage.checkpoint import (
    encode_record,
    parse_state_json,
    read_state_file,
    read_state_text,
)
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.versions import (
    VersionMeta,
    list_versions,
    read_meta,
    read_version_files,
)
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
    return parse_state_json(read_state_text(path), path)


def epoch_summary(workspace: str | Path, epoch: int) -> dict[str, Any] | None:
    """The epoch report the slow update wrote into the checkpoint (None before it exists)."""
    path = Path(workspace) / "state.json"
    if not path.exists():
        return None
    state = read_state_file(path)
    for h in state.history:
        if h.epoch == epoch:
            summary: dict[str, Any] = encode_record(h)
            return summary
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
    return _step_report(workspace, "epoch = ? AND step = ?", [epoch, step], "skill_file")


def _step_report(
    workspace: str | Path, where: str, params: list[Any], order: str
) -> list[dict[str, Any]]:
    """The ``step_report`` rows matching ``where`` (none before the first step wrote the table)."""
    db = Path(workspace) / "runs.duckdb"
    if not db.exists():
        return []
    with RunLogReader.open(db, retries=20, wait_s=0.25) as reader:
        tables = {r["name"] for r in reader.query("SELECT table_name AS name FROM duckdb_tables()")}
        if "step_report" not in tables:
            return []
        return reader.query(f"SELECT * FROM step_report WHERE {where} ORDER BY {order}", params)


# ------------------------------------------------------------------------------------------------
# Exact lineage: the versions the loop created, and which of them a run evaluated

StoreName = Literal["skills", "prompts"]
GATE_ACTIONS = ("accept", "reject", "abort")


def version_kind(reason: str) -> str:
    """The kind of a version from its meta ``reason`` (the harness's own wording)."""
    r = reason.lower()
    for prefix, kind in (("init", "init"), ("accept", "accept"), ("momentum", "momentum")):
        if r.startswith(prefix):
            return kind
    if "rollback" in r:
        return "rollback"
    if "revert" in r:
        return "r2_revert"
    if "evolution" in r:
        return "evolution"
    return "other"


@dataclass(frozen=True)
class VersionEvent:
    """One skill file (``partition`` = its task type) or one prompt set (``partition`` None) as a
    version created it. ``kind`` ``delivery``: current ← best moved to an existing version whose
    content differs from the last created one (the final delivery); ``version`` is then the
    delivered version."""

    store: StoreName
    version: str
    parent: str | None
    kind: str
    reason: str
    partition: str | None
    file: str | None
    content_hash: str  # sha256 of the file text (skills) or of the whole prompt set (prompts)
    created_at: str

    @property
    def data_version(self) -> str:
        return self.content_hash[:16]


def _metas(root: Path) -> list[VersionMeta]:
    return [read_meta(root, v) for v in list_versions(root)]


def skill_version_events(workspace: str | Path, task_types: list[str]) -> list[VersionEvent]:
    """Every skill version the store holds, per task type whose file it changed (creation order),
    then the delivery (if the current version's file is not the last created content)."""
    skills_root, _ = store_roots(Path(workspace))
    metas = _metas(skills_root)
    by_version = {m.version: m for m in metas}
    names = {t: skill_file_name(t) for t in task_types}
    out: list[VersionEvent] = []
    last: dict[str, str] = {}
    for m in metas:
        parent = by_version.get(m.parent) if m.parent else None
        for t, name in names.items():
            h = m.files.get(name)
            if h is None or (parent is not None and parent.files.get(name) == h):
                continue
            kind, at = version_kind(m.reason), m.created_at
            out.append(VersionEvent("skills", m.version, m.parent, kind, m.reason, t, name, h, at))
            last[t] = h
    if metas:
        current = read_manifest(workspace).current.skills
        cur = by_version.get(current)
        for t, name in names.items():
            h = cur.files.get(name) if cur else None
            if h is not None and last.get(t) not in (None, h):
                out.append(
                    VersionEvent(
                        "skills", current, None, "delivery", f"current ← {current}", t, name, h, ""
                    )
                )
    return out


def prompt_version_events(workspace: str | Path) -> list[VersionEvent]:
    """Every prompt-set version (creation order), then the delivery as for skills."""
    _, prompts_root = store_roots(Path(workspace))
    metas = _metas(prompts_root)
    out = [
        VersionEvent(
            "prompts",
            m.version,
            m.parent,
            version_kind(m.reason),
            m.reason,
            None,
            None,
            m.content_hash,
            m.created_at,
        )
        for m in metas
    ]
    if metas:
        current = read_manifest(workspace).current.prompts
        cur = next((m for m in metas if m.version == current), None)
        if cur is not None and cur.content_hash != metas[-1].content_hash:
            out.append(
                VersionEvent(
                    "prompts",
                    current,
                    None,
                    "delivery",
                    f"current ← {current}",
                    None,
                    None,
                    cur.content_hash,
                    "",
                )
            )
    return out


def introduced_in(root: Path, version: str, file: str | None) -> str:
    """The version that created ``file``'s content as ``version`` holds it (the whole set when
    ``file`` is None): walk the parent chain while the content stays the same."""

    def digest(m: VersionMeta) -> str | None:
        return m.content_hash if file is None else m.files.get(file)

    meta = read_meta(root, version)
    target = digest(meta)
    while meta.parent is not None:
        parent = read_meta(root, meta.parent)
        if digest(parent) != target:
            break
        meta = parent
    return meta.version


@dataclass(frozen=True)
class VersionRef:
    """What an evaluation used: the evaluated version, the version that created the content
    (whose ``skill_versions`` / ``prompt_versions`` materialization it references), the hash."""

    store: StoreName
    partition: str | None  # task type (skills) or None (prompts)
    file: str | None
    evaluated: str
    introduced_in: str
    content_hash: str

    @property
    def data_version(self) -> str:
        return self.content_hash[:16]


def skill_refs(workspace: str | Path, version: str, task_types: list[str]) -> list[VersionRef]:
    skills_root, _ = store_roots(Path(workspace))
    meta = read_meta(skills_root, version)
    refs = []
    for t in task_types:
        name = skill_file_name(t)
        if name not in meta.files:
            raise KeyError(f"skills version {version} has no {name} (task type {t!r})")
        origin = introduced_in(skills_root, version, name)
        refs.append(VersionRef("skills", t, name, version, origin, meta.files[name]))
    return refs


def prompt_ref(workspace: str | Path, version: str) -> VersionRef:
    _, prompts_root = store_roots(Path(workspace))
    meta = read_meta(prompts_root, version)
    origin = introduced_in(prompts_root, version, None)
    return VersionRef("prompts", None, None, version, origin, meta.content_hash)


def evaluated_versions(workspace: str | Path, run_id: str) -> tuple[str, str]:
    """(skills, prompts) versions the run log recorded for ``run_id`` (what it evaluated)."""
    db = Path(workspace) / "runs.duckdb"
    with RunLogReader.open(db, retries=20, wait_s=0.25) as reader:
        row = reader.run(run_id)
    if row is None or not row.get("skills_version") or not row.get("prompts_version"):
        raise LookupError(
            f"{db}: run {run_id!r} has no recorded skills/prompts versions (table runs)"
        )
    return str(row["skills_version"]), str(row["prompts_version"])


def gate_rows(workspace: str | Path, epoch: int, step: int | None = None) -> list[dict[str, Any]]:
    """Every gate (accept / reject / abort) of an epoch (or one step), in step and skill order:
    skill, verdict, wins/losses, blocks, rollouts (candidate + baseline), the version it made."""
    where, params = "epoch = ?", [epoch]
    if step is not None:
        where, params = "epoch = ? AND step = ?", [epoch, step]
    where += " AND action IN ('accept', 'reject', 'abort')"
    rows = _step_report(workspace, where, params, "step, skill_file")
    return [
        {
            "step": int(r["step"]),
            "skill_file": str(r["skill_file"]),
            "action": str(r["action"]),
            "verdict": str(r["verdict"] or ""),
            "wins": int(r["wins"] or 0),
            "losses": int(r["losses"] or 0),
            "blocks": int(r["blocks"] or 0),
            "rollouts": int(r["candidate_rollouts"] or 0) + int(r["baseline_rollouts"] or 0),
            "cache_hits": int(r["cache_hits"] or 0),
            "new_skills_version": str(r["new_skills_version"] or ""),
        }
        for r in rows
    ]

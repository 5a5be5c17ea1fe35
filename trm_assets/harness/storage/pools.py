"""``pools.json``: built once from the config's seed, then frozen and reused (SPEC 5.1, seed §8)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.pools import (
    POOL_NAMES,
    Pools,
    check_pools_cover,
    pools_from_dict,
    pools_to_dict,
    split_pools,
)
from trm_assets.domain.question import Question
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.storage.atomic import atomic_write_json, read_json_object


def build_pools(cfg: RunConfig, questions: tuple[Question, ...]) -> Pools:
    try:
        return split_pools(
            questions,
            test_size=cfg.test_size,
            val_size=cfg.val_size,
            eval_min_per_class=cfg.eval_min_per_class,
            rng=rng_for(cfg.seed, "pools"),
        )
    except ValueError as e:
        raise DataFormatError(
            cfg.questions, None, None, f"questions that fit the pools ({e})"
        ) from e


def build_or_load_pools(
    cfg: RunConfig, questions: tuple[Question, ...], path: Path | None
) -> Pools:
    """Reuse ``path`` when it exists (refusing an old/invalid format or unknown ids), else split
    and write it atomically."""
    if path is not None and path.exists():
        return load_pools(path, questions, source=cfg.questions)
    pools = build_pools(cfg, questions)
    if path is not None:
        atomic_write_json(
            path, {**pools_to_dict(pools), QUESTIONS_DIGEST: question_digests(pools, questions)}
        )
    return pools


#: ``pools.json``'s record of the pooled questions as they were frozen (absent in older files).
QUESTIONS_DIGEST = "question_digests"
#: What a rollout reads (the prompt set may show ``domain`` / ``sub_category``) or is scored
#: against; ``url`` and ``language`` are not.
DIGESTED_FIELDS: tuple[str, ...] = (
    "question_id", "video_id", "videoID", "duration", "domain", "sub_category", "task_type",
    "question", "options", "answer",
)  # fmt: skip


def _folded(value: object) -> object:
    """Text as the agent's message shows it (runs of whitespace folded, ends stripped)."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_folded(v) for v in value]
    return value


def question_digests(pools: Pools, questions: tuple[Question, ...]) -> dict[str, str]:
    """Each pooled question as a short hash of :data:`DIGESTED_FIELDS`, by id: a resume on
    other data (an answer, a task type, a text changed) is refused by it, naming the questions;
    a question added to the file, in no pool, changes nothing."""
    pooled = {*pools.test, *pools.validation, *pools.diagnosis}
    out = {}
    for q in questions:
        if q.question_id in pooled:
            fields = {
                k: _folded(v)
                for k, v in q.model_dump(mode="json", include=set(DIGESTED_FIELDS)).items()
            }
            blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            out[q.question_id] = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return dict(sorted(out.items()))


def load_pools(path: Path, questions: tuple[Question, ...], *, source: str | None = None) -> Pools:
    """A workspace's ``pools.json``, read only (refusing an old/invalid format or unknown ids,
    and pooled questions other than those the pools were frozen on)."""
    data = read_json_object(path)
    if data is None:
        raise DataFormatError(str(path), None, None, "an existing pools file")
    pools = pools_from_dict(data, str(path))
    check_pools_cover(pools, questions)
    frozen = data.get(QUESTIONS_DIGEST)
    if frozen is not None:
        if not (
            isinstance(frozen, dict) and frozen and all(isinstance(h, str) for h in frozen.values())
        ):
            raise DataFormatError(str(path), None, QUESTIONS_DIGEST, "question id → digest strings")
        now = question_digests(pools, questions)
        changed = sorted(q for q, h in frozen.items() if now.get(q) != h)
        if changed:
            shown = ", ".join(changed[:5]) + (
                f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            )
            raise DataFormatError(
                str(path),
                None,
                QUESTIONS_DIGEST,
                f"the questions the pools were frozen on; in {source or 'the questions file'}, "
                f"{len(changed)} pooled question(s) changed since ({shown}: what the agent "
                "reads or is scored against — text, options, answer, task type, video): a "
                "workspace trains and reports on one dataset — restore the file, or `trm init` "
                "a new workspace for the new data",
            )
    return pools


def pools_summary(pools: Pools, questions: tuple[Question, ...]) -> dict[str, Any]:
    """Counts per pool and per task type (for the CLI, Dagster metadata and reports)."""
    task = {q.question_id: q.task_type for q in questions}
    per_pool = {name: Counter(task[q] for q in pools.pool(name)) for name in POOL_NAMES}
    types = sorted({*task.values()})
    return {
        "fingerprint": pools.fingerprint,
        "sizes": {name: len(pools.pool(name)) for name in POOL_NAMES},
        "by_task_type": {t: {name: per_pool[name][t] for name in POOL_NAMES} for t in types},
    }


def format_pools_summary(summary: dict[str, Any]) -> str:
    lines = [f"{'task type':<24} {'test':>6} {'val':>6} {'diag':>6}"]
    for t, c in summary["by_task_type"].items():
        lines.append(f"{t:<24} {c['test']:>6} {c['validation']:>6} {c['diagnosis']:>6}")
    s = summary["sizes"]
    lines.append(f"{'total':<24} {s['test']:>6} {s['validation']:>6} {s['diagnosis']:>6}")
    lines.append(f"pools fingerprint {summary['fingerprint']}")
    return "\n".join(lines)

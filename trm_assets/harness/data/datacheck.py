"""``trm data check``: load question files and tree files, summarize them, collect every error."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trm_assets.agent.tree import VideoTree, load_tree
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.question import Question
from trm_assets.harness.data.questions import (
    QUESTION_SUFFIXES,
    load_questions,
    loads_lenient,
)

# Files that live beside the data but are neither questions nor trees.
SIDECAR_NAMES = {"ground_truth.json", "pools.json"}


@dataclass
class CheckReport:
    questions: list[Question] = field(default_factory=list)
    trees: dict[str, VideoTree] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    question_files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _classify_json(path: Path) -> str:
    """'tree' | 'questions' | 'unknown' by a cheap look at the top-level shape."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):  # the loaders say what is wrong with the file
        return "unknown"
    head = text.lstrip()[:1]
    if head == "[":
        return "questions"
    if head == "{":
        try:
            data = loads_lenient(text)
        except (json.JSONDecodeError, RecursionError):
            return "tree"  # let the tree loader report the JSON error with its position
        if isinstance(data, dict) and "nodes" in data:
            return "tree"
        if isinstance(data, dict) and "videos" in data:
            return "questions"
    return "unknown"


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(
                sorted(
                    x for x in p.rglob("*") if x.is_file() and x.suffix.lower() in QUESTION_SUFFIXES
                )
            )
        else:
            out.append(p)
    return out


def check_paths(paths: list[str | Path]) -> CheckReport:
    """Load everything under ``paths`` (files or directories) and cross-check questions ↔ trees."""
    rep = CheckReport()
    for p in _expand([Path(x) for x in paths]):
        if not p.exists():
            rep.errors.append(f"{p}: no such file or directory")
            continue
        if p.name in SIDECAR_NAMES:
            rep.skipped.append(f"{p} (sidecar, not a question or tree file)")
            continue
        kind = "questions" if p.suffix.lower() in (".csv", ".parquet") else _classify_json(p)
        try:
            if kind == "questions":
                rep.questions.extend(load_questions(p))
                rep.question_files.append(str(p))
            elif kind == "tree":
                tree = load_tree(p)
                if tree.video.videoID in rep.trees:
                    rep.errors.append(
                        f"{p}: videoID {tree.video.videoID!r} already loaded from another file"
                    )
                rep.trees[tree.video.videoID] = tree
            else:
                rep.errors.append(
                    f"{p}: not a question file (a JSON list of videos, .csv, .parquet) "
                    "nor a video tree (a JSON object with 'nodes')"
                )
        except DataFormatError as e:
            rep.errors.append(str(e))
    dupes = sorted(q for q, n in Counter(q.question_id for q in rep.questions).items() if n > 1)
    if dupes:
        rep.errors.append(f"question_id repeated across files: {dupes[:5]}")
    if rep.questions and rep.trees:
        missing = sorted({q.tree_key for q in rep.questions} - set(rep.trees))
        if missing:
            rep.errors.append(
                f"{len(missing)} video(s) referenced by questions have no tree file "
                f"(videoID {missing[:5]}); expected trees/<videoID>.json"
            )
    return rep

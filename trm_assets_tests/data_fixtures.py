"""Small hand-written fixtures of every question format and of the tree schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Protocol

import pytest

OPTIONS = ["A. A red kite.", "B. A blue boat.", "C. A green lamp.", "D. Nothing is shown."]


def video(vid: str, n_questions: int = 2, *, old_keys: bool = False) -> dict[str, Any]:
    qs = [
        {
            "question_id": f"{vid}-{i + 1}",
            "task_type": ["Counting Problem", "OCR Problems"][i % 2],
            "question": f"What appears first in video {vid}, item {i + 1}?",
            ("choices" if old_keys else "options"): list(OPTIONS),
            "answer": "ABCD"[i % 4],
        }
        for i in range(n_questions)
    ]
    if old_keys:
        return {
            "video_id": vid,
            "duration_category": "short",
            "video_category": "Knowledge",
            "video_subcategory": "Astronomy",
            "url": f"https://example.invalid/{vid}",
            "questions": qs,
        }
    return {
        "video_id": vid,
        "duration": "medium",
        "domain": "Life Record",
        "sub_category": "Food",
        "videoID": f"vid{vid}",
        "questions": qs,
    }


def flat_rows(videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for v in videos:
        for q in v["questions"]:
            rows.append(
                {
                    "video_id": v["video_id"],
                    "duration": v.get("duration", v.get("duration_category")),
                    "domain": v.get("domain", v.get("video_category")),
                    "sub_category": v.get("sub_category", v.get("video_subcategory")),
                    "url": f"https://example.invalid/{v['video_id']}",
                    "videoID": v.get("videoID", v["video_id"]),
                    "question_id": q["question_id"],
                    "task_type": q["task_type"],
                    "question": q["question"],
                    "options": q.get("options", q.get("choices")),
                    "answer": q["answer"],
                }
            )
    return rows


def tree_dict(video_id: str = "001", videoID: str = "vid001") -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "video": {
            "video_id": video_id,
            "videoID": videoID,
            "duration_sec": 60.0,
            "duration_category": "short",
            "domain": "Knowledge",
            "sub_category": "Astronomy",
            "has_subtitles": True,
        },
        "levels": ["video", "segment", "clip", "frame"],
        "root_id": "v",
        "nodes": {
            "v": {
                "level": "video",
                "parent": None,
                "children": ["s0", "s1"],
                "start": 0.0,
                "end": 60.0,
                "caption": "A talk about comets.",
            },
            "s0": {
                "level": "segment",
                "parent": "v",
                "children": ["s0c0"],
                "start": 0.0,
                "end": 30.0,
                "caption": "Intro.",
            },
            "s0c0": {
                "level": "clip",
                "parent": "s0",
                "children": ["s0c0f0"],
                "start": 0.0,
                "end": 10.0,
                "caption": "A speaker waves.",
                "subtitle_text": "hello",
                "ocr": ["COMET 101"],
            },
            "s0c0f0": {
                "level": "frame",
                "parent": "s0c0",
                "children": [],
                "start": 4.0,
                "end": 4.0,
                "timestamp": 4.0,
                "caption": "A hand.",
            },
            "s1": {
                "level": "segment",
                "parent": "v",
                "children": [],
                "start": 30.0,
                "end": 60.0,
                "caption": "A telescope.",
            },
        },
        "subtitles": [{"start": 1.5, "end": 5.0, "text": "hello"}],
    }


class WriteJson(Protocol):
    """The ``write_json`` fixture: ``obj`` as JSON (or ``text`` verbatim) at ``tmp_path / name``."""

    def __call__(self, name: str, obj: Any, *, text: str | None = None) -> Path: ...


@pytest.fixture
def write_json(tmp_path: Path) -> WriteJson:
    def _write(name: str, obj: Any, *, text: str | None = None) -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text if text is not None else json.dumps(obj), encoding="utf-8")
        return p

    return _write


@pytest.fixture
def tree() -> dict[str, Any]:
    return copy.deepcopy(tree_dict())


@pytest.fixture
def small_dataset(tmp_path: Path) -> Path:
    """20 videos × 2 questions (2 task types) + trees + a config sized for them."""
    root = tmp_path / "ds"
    (root / "trees").mkdir(parents=True)
    videos = [video(f"{i:03d}") for i in range(1, 21)]
    (root / "questions.json").write_text(json.dumps(videos), encoding="utf-8")
    for v in videos:
        t = tree_dict(v["video_id"], v["videoID"])
        (root / "trees" / f"{v['videoID']}.json").write_text(json.dumps(t), encoding="utf-8")
    (root / "config.yaml").write_text(
        f"questions: {root / 'questions.json'}\ntrees: {root / 'trees'}\nground_truth: null\n"
        "test_size: 10\nval_size: 12\neval_min_per_class: 5\nseed: 7\n",
        encoding="utf-8",
    )
    return root

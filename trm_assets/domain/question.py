"""The normalized Video-MME question (one row of the HF parquet, or one nested JSON question).

Loaders for the three on-disk formats live in :mod:`trm_assets.harness.data.questions`;
this module is the pure value they all produce. Task types come from the data: nothing here
enumerates them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Duration = Literal["short", "medium", "long"]
LETTERS = ("A", "B", "C", "D")
_OPTION_RE = re.compile(r"^([A-D])\.\s*(.*)$", re.DOTALL)


class Question(BaseModel):
    """One multiple-choice question. ``options`` are ``"A. text"`` … ``"D. text"`` in order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question_id: str = Field(min_length=1)
    video_id: str = Field(min_length=1)
    duration: Duration
    domain: str = Field(min_length=1)
    sub_category: str = Field(min_length=1)
    task_type: str = Field(min_length=1)
    question: str = Field(min_length=1)
    options: tuple[str, str, str, str]
    answer: Literal["A", "B", "C", "D"]
    url: str | None = None
    videoID: str | None = None
    language: str | None = None

    @field_validator("options")
    @classmethod
    def _options_lettered(cls, v: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
        for i, opt in enumerate(v):
            m = _OPTION_RE.match(opt.strip())
            if m is None or m.group(1) != LETTERS[i]:
                raise ValueError(
                    f"option {i + 1} must start with '{LETTERS[i]}. ' (Video-MME format), "
                    f"got {opt[:40]!r}"
                )
        return v

    @model_validator(mode="after")
    def _video_key(self) -> Question:
        if self.videoID is None:
            # Trees are keyed by videoID (the file stem of the real data); default to video_id.
            object.__setattr__(self, "videoID", self.video_id)
        return self

    @property
    def tree_key(self) -> str:
        """The key joining this question to its video tree file (``trees/{videoID}.json``)."""
        return self.videoID or self.video_id

    def option_text(self, letter: str) -> str:
        """The text of option ``letter`` without its ``"A. "`` prefix."""
        m = _OPTION_RE.match(self.options[LETTERS.index(letter)].strip())
        return m.group(2) if m else ""


DEFAULT_SKILL_FILE = "default-strategy.md"


def skill_file_name(task_type: str) -> str:
    """The skill file of a task type: ``"Counting Problem"`` → ``"counting-problem.md"``."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_type.lower()).strip("-")
    if not slug:
        raise ValueError(f"task type {task_type!r} has no letters or digits to name a skill file")
    return f"{slug}.md"

"""The simulated world's hidden ground truth (``ground_truth.json``) and its loader.

The sidecar holds, per task type, the catalogue of **cues** (each with the phrasings that express
it in a skill file) and of **harmful directives**, and per question its required cue, difficulty,
answer and evidence location. Nothing in it is shown to the agent: the simulator reads it the way a
benchmark author knows the answer key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trm_assets.domain.errors import DataFormatError, describe_validation_error
from trm_assets.llm.sim.draws import normalize_text
from trm_assets.llm.sim_config import world_file

GROUND_TRUTH_KIND: Final = "trm-sim-ground-truth"
EvidenceKind = Literal["caption", "ocr", "subtitle", "summary"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CueTruth(_Frozen):
    cue_id: str = Field(min_length=1)
    summary: str = Field(min_length=1, description="the strategy in plain words")
    phrasings: tuple[str, ...] = Field(min_length=1, description="texts that express the cue")
    weight: float = Field(gt=0, description="share of the task type's questions needing this cue")


class HarmTruth(_Frozen):
    harm_id: str = Field(min_length=1)
    phrasings: tuple[str, ...] = Field(min_length=1)


class TaskTruth(_Frozen):
    skill_file: str
    cues: tuple[CueTruth, ...] = Field(min_length=1)
    harmful: tuple[HarmTruth, ...] = ()


class Evidence(_Frozen):
    kind: EvidenceKind
    node_id: str
    segment_id: str | None = None
    start: float
    end: float
    text: str = Field(description="the tree text that supports the right option")


class QuestionTruth(_Frozen):
    task_type: str
    videoID: str
    answer: Literal["A", "B", "C", "D"]
    cue: str = Field(description="cue_id of the strategy this question needs")
    difficulty: float
    evidence: Evidence


class GeneratorInfo(_Frozen):
    seed: int
    videos: int
    questions_per_video: int
    cues_per_task: int
    generator_version: int
    command: str = Field(description="the exact command that regenerates this sample")


class GroundTruth(_Frozen):
    kind: Literal["trm-sim-ground-truth"] = GROUND_TRUTH_KIND
    format_version: Literal[1] = 1
    simulated: Literal[True] = True
    generator: GeneratorInfo
    task_types: dict[str, TaskTruth]
    neutral_advice: tuple[str, ...] = ()
    questions: dict[str, QuestionTruth]


class GroundTruthError(DataFormatError):
    """A ground-truth sidecar that does not follow the format, or refers to unknown cues."""


_SCAN_MEMO_MAX = 4096
_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(memo: dict[_K, _V], key: _K, value: _V) -> None:
    """Store in a bounded memo (cleared when full: the texts in use are few at any time)."""
    if len(memo) >= _SCAN_MEMO_MAX:
        memo.clear()
    memo[key] = value


@dataclass(frozen=True)
class SimWorld:
    """Ground truth plus the derived lookups the simulator needs (normalized phrasings)."""

    truth: GroundTruth
    source: str = "<memory>"
    _cue_norm: dict[str, dict[str, tuple[str, ...]]] = field(init=False, repr=False)
    _harm_norm: dict[str, tuple[str, ...]] = field(init=False, repr=False)
    # (task type, normalized texts) → the cues / whether a harm is there: a rollout's every
    # turn, and every question of a task type, reads the same few texts (bounded, _remember)
    _cue_memo: dict[tuple[str, tuple[str, ...]], frozenset[str]] = field(
        init=False, repr=False, compare=False
    )
    _harm_memo: dict[tuple[str, tuple[str, ...]], bool] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        cue_norm: dict[str, dict[str, tuple[str, ...]]] = {}
        harm_norm: dict[str, tuple[str, ...]] = {}
        for tt, task in sorted(self.truth.task_types.items()):
            cue_norm[tt] = {
                c.cue_id: tuple(normalize_text(p) for p in c.phrasings) for c in task.cues
            }
            harm_norm[tt] = tuple(normalize_text(p) for h in task.harmful for p in h.phrasings)
        object.__setattr__(self, "_cue_norm", cue_norm)
        object.__setattr__(self, "_harm_norm", harm_norm)
        object.__setattr__(self, "_cue_memo", {})
        object.__setattr__(self, "_harm_memo", {})

    # --- lookups ----------------------------------------------------------------------------

    @property
    def questions(self) -> Mapping[str, QuestionTruth]:
        return self.truth.questions

    @property
    def task_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.truth.task_types))

    @cached_property
    def skill_file_to_task(self) -> dict[str, str]:
        return {t.skill_file: tt for tt, t in sorted(self.truth.task_types.items())}

    def question(self, question_id: str) -> QuestionTruth | None:
        return self.truth.questions.get(question_id)

    def cue(self, task_type: str, cue_id: str) -> CueTruth:
        for c in self.truth.task_types[task_type].cues:
            if c.cue_id == cue_id:
                return c
        raise KeyError(f"cue {cue_id!r} is not in the catalogue of task type {task_type!r}")

    def question_ids(self, task_type: str | None = None) -> list[str]:
        return sorted(
            qid
            for qid, q in self.truth.questions.items()
            if task_type is None or q.task_type == task_type
        )

    # --- what a text expresses ----------------------------------------------------------------

    def cues_expressed(self, task_type: str, texts: Iterable[str]) -> set[str]:
        """Cue ids of ``task_type`` that at least one of ``texts`` expresses."""
        return self.cues_in_normalized(task_type, [normalize_text(t) for t in texts])

    def cues_in_normalized(self, task_type: str, norms: Sequence[str]) -> set[str]:
        """:meth:`cues_expressed` for texts already passed through ``normalize_text``."""
        key = (task_type, tuple(norms))
        hit = self._cue_memo.get(key)
        if hit is None:
            hit = frozenset(
                cue_id
                for cue_id, phrasings in self._cue_norm.get(task_type, {}).items()
                if any(p in n for p in phrasings for n in key[1])
            )
            _remember(self._cue_memo, key, hit)
        return set(hit)

    def expresses_cue(self, task_type: str, cue_id: str, texts: Iterable[str]) -> bool:
        return cue_id in self.cues_expressed(task_type, texts)

    def harm_present(self, task_type: str, texts: Iterable[str]) -> bool:
        """True when one of ``texts`` contains a harmful directive of ``task_type``."""
        return self.harm_in_normalized(task_type, [normalize_text(t) for t in texts])

    def harm_in_normalized(self, task_type: str, norms: Sequence[str]) -> bool:
        """:meth:`harm_present` for texts already passed through ``normalize_text``."""
        key = (task_type, tuple(norms))
        hit = self._harm_memo.get(key)
        if hit is None:
            hit = any(p in n for p in self._harm_norm.get(task_type, ()) for n in key[1])
            _remember(self._harm_memo, key, hit)
        return hit

    def any_catalogue_hit(self, text: str) -> bool:
        """True when ``text`` expresses any cue or harmful directive of any task type."""
        n = normalize_text(text)
        return any(p in n for m in self._cue_norm.values() for ps in m.values() for p in ps) or any(
            p in n for ps in self._harm_norm.values() for p in ps
        )


def parse_ground_truth(data: object, source: str) -> SimWorld:
    """Validate a decoded ``ground_truth.json``; cross-check question cues with the catalogue."""
    if not isinstance(data, dict):
        raise GroundTruthError(source, None, None, "a JSON object at the top level")
    if data.get("kind") != GROUND_TRUTH_KIND:
        raise GroundTruthError(
            source, None, "kind", f"{GROUND_TRUTH_KIND!r} (is this a ground-truth sidecar?)"
        )
    try:
        truth = GroundTruth.model_validate(data)
    except ValidationError as e:
        raise GroundTruthError.from_messages(source, describe_validation_error(e)) from None
    problems: list[str] = []
    for qid, q in sorted(truth.questions.items()):
        task = truth.task_types.get(q.task_type)
        if task is None:
            problems.append(f"question {qid!r}: task_type {q.task_type!r} has no catalogue entry")
        elif q.cue not in {c.cue_id for c in task.cues}:
            problems.append(f"question {qid!r}: cue {q.cue!r} is not a cue of {q.task_type!r}")
        if len(problems) >= 25:
            break
    if problems:
        raise GroundTruthError.from_messages(source, problems)
    return SimWorld(truth=truth, source=source)


def load_world(path: str | Path) -> SimWorld:
    """Load the simulated world from a sample directory or a ``ground_truth.json`` path."""
    p = world_file(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise GroundTruthError(
            str(p), None, None, f"a readable ground-truth file ({e.strerror}); run `trm data synth`"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise GroundTruthError(
            str(p), f"line {e.lineno} column {e.colno}", None, f"valid JSON ({e.msg})"
        ) from None
    return parse_ground_truth(data, str(p))

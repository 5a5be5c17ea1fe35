"""Values exchanged between the harness and the diagnosis/evolution calls (seed §16).

Frozen dataclasses with plain fields, so a checkpoint can store them with :func:`to_jsonable`
and rebuild them with the ``from_dict`` class methods (a missing key raises: corruption, never a
default).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from trm_assets.domain.edit_schema import Edit
from trm_assets.domain.edits import ApplyReport

DiagnosisTarget = Literal["skill", "system", "tool"]
# ok: the model's analysis is attached; malformed: the reply (after one repair) was unusable;
# infra: the call failed for infrastructure reasons; missing: the reply skipped this case.
DiagnosisStatus = Literal["ok", "malformed", "infra", "missing"]
# applied: at least one edit changed the text; no_edit: the model proposed nothing, or its output
# stayed malformed after the repair retry (see ``detail``); not_applied: edits were proposed but
# none applied (see the apply report).
EvolutionStatus = Literal["applied", "no_edit", "not_applied"]
EvolutionTarget = Literal["skill", "system", "tool"]


def text_hash(text: str) -> str:
    """SHA-256 (hex) of a text encoded as UTF-8: the content hash of one file (store, records)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LLMCallRecord:
    """One model call of a diagnosis/evolution step. Never holds a key or the prompt text."""

    role: str  # diagnose | evolve_skill | evolve_system | evolve_tool | momentum
    model: str
    attempt: int  # 1 = first call, 2 = the repair retry
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    outcome: str  # ok | malformed | infra
    detail: str = ""


@dataclass(frozen=True)
class CaseSample:
    """One failed question with what the agent did and, once diagnosed, why it failed."""

    question_id: str
    task_type: str
    skill_file: str
    question: str
    options: tuple[str, ...]
    answer: str  # the correct letter
    predicted: str | None  # the agent's letter, None when it gave none
    stop_reason: str
    trace_summary: str  # tool calls and short results, one line each
    target: DiagnosisTarget = "skill"
    tool_name: str | None = None
    analysis: str | None = None
    missing_strategy: str | None = None
    status: DiagnosisStatus = "missing"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaseSample:
        """The inverse of :func:`to_jsonable` (every field required: a missing key raises)."""
        values = {f.name: d[f.name] for f in fields(cls)}
        return cls(**{**values, "options": tuple(values["options"])})


@dataclass(frozen=True)
class SkillCasePack:
    """The failed cases of one skill file in one step (used immediately by the fast update)."""

    skill_file: str
    task_type: str
    cases: tuple[CaseSample, ...]

    @property
    def question_ids(self) -> tuple[str, ...]:
        """Excluded from the gate's ladder (SPEC 5.3 step 4)."""
        return tuple(c.question_id for c in self.cases)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SkillCasePack:
        return cls(
            d["skill_file"], d["task_type"], tuple(CaseSample.from_dict(c) for c in d["cases"])
        )


@dataclass(frozen=True)
class SystemCasePack:
    """Cases whose diagnosis targets the system prompt; accumulated over an epoch."""

    cases: tuple[CaseSample, ...] = ()

    def merged(self, other: SystemCasePack) -> SystemCasePack:
        return SystemCasePack(_merge_cases(self.cases, other.cases))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SystemCasePack:
        return cls(tuple(CaseSample.from_dict(c) for c in d["cases"]))


@dataclass(frozen=True)
class ToolCasePack:
    """Cases whose diagnosis targets one tool's description; accumulated over an epoch."""

    tool_name: str
    cases: tuple[CaseSample, ...] = ()

    def merged(self, other: ToolCasePack) -> ToolCasePack:
        return ToolCasePack(self.tool_name, _merge_cases(self.cases, other.cases))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolCasePack:
        return cls(d["tool_name"], tuple(CaseSample.from_dict(c) for c in d["cases"]))


def _merge_cases(a: tuple[CaseSample, ...], b: tuple[CaseSample, ...]) -> tuple[CaseSample, ...]:
    """Union keeping the first occurrence of each question id, in arrival order."""
    seen: set[str] = set()
    out: list[CaseSample] = []
    for c in (*a, *b):
        if c.question_id not in seen:
            seen.add(c.question_id)
            out.append(c)
    return tuple(out)


def merge_tool_packs(
    acc: Mapping[str, ToolCasePack], new: Mapping[str, ToolCasePack]
) -> dict[str, ToolCasePack]:
    """Accumulate tool packs over the steps of an epoch (sorted by tool name)."""
    out = dict(acc)
    for name, pack in new.items():
        out[name] = out[name].merged(pack) if name in out else pack
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class DiagnosisResult:
    """``run_diagnosis`` output.

    ``skill_packs`` is keyed by skill file name (sorted) and holds only cases targeted at the
    skill; ``system_pack``/``tool_packs`` hold the others for the slow update. Counts cover the
    failed (non-infra) predictions of the run.
    """

    run_id: str
    skill_packs: dict[str, SkillCasePack]
    system_pack: SystemCasePack
    tool_packs: dict[str, ToolCasePack]
    n_failed: int
    n_diagnosed: int
    n_malformed: int
    n_infra: int
    calls: tuple[LLMCallRecord, ...] = ()


@dataclass(frozen=True)
class DiagnosePrompts:
    """The diagnose template (``prompts/diagnose.md``) and the names it shows the model."""

    diagnose: str
    tool_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvolvePrompts:
    """Templates of the evolve calls (``prompts/evolve_*.md``, ``prompts/momentum.md``)."""

    evolve_skill: str
    evolve_system: str
    evolve_tool: str
    momentum: str


@dataclass(frozen=True)
class EvolutionRecord:
    """One evolve call's result: what the model proposed, what applied, and the candidate.

    ``candidate_text == original_text`` whenever ``status`` is not ``applied``. ``edits`` are the
    validated proposals in model order; ``apply_report`` is None when there was nothing to apply.
    Hashes are SHA-256 of the UTF-8 texts (the same as the store's per-file hashes).
    """

    target: EvolutionTarget
    target_file: str  # skill file name, prompt file path (e.g. agent_system.md, tools/x.md)
    status: EvolutionStatus
    detail: str
    edits: tuple[Edit, ...]
    apply_report: ApplyReport | None
    original_text: str
    candidate_text: str
    original_hash: str
    candidate_hash: str
    budget: int
    repaired: bool  # the first reply was malformed and the repair retry was used
    calls: tuple[LLMCallRecord, ...] = ()

    @property
    def changed(self) -> bool:
        return self.status == "applied" and self.candidate_text != self.original_text

    @property
    def applied_edits(self) -> tuple[Edit, ...]:
        return () if self.apply_report is None else self.apply_report.applied

    def report_rows(self) -> list[dict[str, Any]]:
        """The edits with their apply status, as JSON-ready rows (version meta, reports)."""
        if self.apply_report is None:
            return [
                {"index": i, **e.model_dump(), "status": "not_applied", "detail": self.detail}
                for i, e in enumerate(self.edits)
            ]
        return [
            {"index": r.index, **r.edit.model_dump(), "status": r.status, "detail": r.detail}
            for r in self.apply_report.results
        ]


@dataclass(frozen=True)
class MomentumRecord:
    """One momentum call: the new guidance (or the previous one kept on a parse failure)."""

    skill_file: str
    updated: bool
    detail: str
    previous_guidance: str
    guidance: str
    original_text: str
    candidate_text: str
    calls: tuple[LLMCallRecord, ...] = field(default=())


def to_jsonable(value: Any) -> Any:
    """A dataclass (or a dict/list of them) as plain JSON values (tuples become lists)."""
    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value

"""The momentum call (SPEC 5.6 step 6): per-skill guidance from the epoch's paired outcomes.

Each validation question of the task type is categorized by its (epoch start, now) outcomes with
the kernel's quadrants (REGRESSED shown first), the momentum model writes new guidance, and the
kernel's :func:`~trm_assets.domain.edits.replace_momentum` puts it into the skill's protected
block. A reply that stays malformed after the repair retry (or guidance that contains a momentum
marker) keeps the previous guidance; an ``InfraError`` propagates.

Writing the candidate as a new immutable version is the caller's job (the runner groups the
updates of all skill files into one version).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trm_assets.domain.edits import MOMENTUM_BEGIN, MOMENTUM_END, momentum_inner, replace_momentum
from trm_assets.domain.quadrants import classify_quadrants
from trm_assets.domain.question import Question
from trm_assets.evolution.calls import call_structured
from trm_assets.evolution.evolve import NONE_TEXT, check_skill_file_name
from trm_assets.evolution.protocols import SkillStore
from trm_assets.evolution.schemas import MomentumGuidance
from trm_assets.evolution.templates import render
from trm_assets.evolution.types import MomentumRecord
from trm_assets.llm.protocol import LLMProvider

MAX_PER_CATEGORY = 12


def _question_lines(ids: Sequence[str], questions: Mapping[str, Question], limit: int) -> str:
    if not ids:
        return NONE_TEXT
    lines = []
    for qid in ids[:limit]:
        q = questions.get(qid)
        text = " ".join(q.question.split()) if q is not None else ""
        lines.append(f"- {qid}: {text[:200]}" if text else f"- {qid}")
    if len(ids) > limit:
        lines.append(f"- … and {len(ids) - limit} more")
    return "\n".join(lines)


async def update_momentum(
    skill_file: str,
    task_type: str,
    skills: SkillStore,
    before: Mapping[str, bool | None],
    after: Mapping[str, bool | None],
    questions: Mapping[str, Question],
    *,
    llm: LLMProvider,
    template: str,
    sample: int = 0,
    max_per_category: int = MAX_PER_CATEGORY,
) -> MomentumRecord:
    """New momentum guidance for one skill file.

    ``before``/``after``: per-question correctness at the epoch start and now (None = infra,
    excluded); only questions of ``task_type`` should be passed. ``template`` is
    ``prompts/momentum.md``.
    """
    name = check_skill_file_name(skill_file)
    current = skills.read(name)
    previous = momentum_inner(current) or ""
    quadrants = classify_quadrants(before, after)
    prompt = render(
        template,
        source="momentum.md",
        task_type=task_type,
        skill_file=name,
        skill_text=current.strip(),
        previous_guidance=previous.strip() or NONE_TEXT,
        regressed=_question_lines(quadrants.regressed, questions, max_per_category),
        improved=_question_lines(quadrants.improved, questions, max_per_category),
        persistent_fail=_question_lines(quadrants.persistent_fail, questions, max_per_category),
        stable_success=_question_lines(quadrants.stable_success, questions, max_per_category),
    )
    res = await call_structured(llm, prompt, MomentumGuidance, role="momentum", sample=sample)

    def keep(detail: str) -> MomentumRecord:
        return MomentumRecord(name, False, detail, previous, previous, current, current, res.calls)

    if res.value is None:
        return keep(f"previous guidance kept: {res.detail}")
    guidance = res.value.guidance.strip()
    if MOMENTUM_BEGIN in guidance or MOMENTUM_END in guidance:
        return keep("previous guidance kept: the new guidance contains a momentum marker")
    if not guidance:
        return keep("previous guidance kept: the model returned empty guidance")
    candidate = replace_momentum(current, guidance + "\n")
    return MomentumRecord(
        name, True, "guidance updated", previous, guidance, current, candidate, res.calls
    )

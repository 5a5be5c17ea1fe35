"""The evolve calls (SPEC 5.3 step 4, 5.6 step 7): one skill file, the system prompt, one tool.

Each call: render the template (``prompts/evolve_*.md``) with the case pack, the current text, the
edit budget and the rejected buffer → the evolve model → the edit JSON, validated with pydantic
(:class:`~trm_assets.domain.edit_schema.EditProposal`) → one repair retry on malformed output →
otherwise "no edit" (never a crash; an ``InfraError`` propagates as infra) → the kernel's
:func:`~trm_assets.domain.edits.apply_edits` → an :class:`EvolutionRecord`.

The protected momentum block travels inside the current text; the template tells the model not to
touch it and ``apply_edits`` refuses any edit that would (``conflict`` in the apply report).

The rejected buffer shows the model every rejected edit of the file with its verdict
(:func:`render_rejected`, issue 15): verified-harmful ones first as "do not" lines, the others as
"already tested, not shown to help" — showing only REJECT_HARM let every other rejection be
proposed and re-tested again, one more α-level chance each time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, Required, TypedDict, Unpack

from trm_assets.agent.messages import SYSTEM_PROMPT_FILE, TOOLS_DIR
from trm_assets.domain.edit_schema import Edit, EditProposal
from trm_assets.domain.edits import ApplyReport, RejectedEdit, apply_edits, resolve_skill_file
from trm_assets.domain.gate import VERIFIED_HARMFUL
from trm_assets.evolution.calls import call_structured
from trm_assets.evolution.protocols import PromptStore, SkillStore
from trm_assets.evolution.templates import render
from trm_assets.evolution.types import (
    CaseSample,
    EvolutionRecord,
    EvolutionStatus,
    EvolutionTarget,
    EvolvePrompts,
    LLMCallRecord,
    SkillCasePack,
    SystemCasePack,
    ToolCasePack,
    text_hash,
)
from trm_assets.llm.protocol import LLMProvider

EVOLVE_TEMPLATE_FILES = {
    "evolve_skill": "evolve_skill.md",
    "evolve_system": "evolve_system.md",
    "evolve_tool": "evolve_tool.md",
    "momentum": "momentum.md",
}
MAX_CASES_IN_PROMPT = 12
_TOOL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
NONE_TEXT = "(none)"


def load_evolve_prompts(store: PromptStore) -> EvolvePrompts:
    """The four evolve templates from a prompt store (a missing one raises, naming the file)."""
    return EvolvePrompts(**{k: store.read(v) for k, v in EVOLVE_TEMPLATE_FILES.items()})


# ------------------------------------------------------------------------------------------------
# Rendering


MAX_REJECTED_SHOWN: Final = 20


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def do_not_line(r: RejectedEdit) -> str:
    """A rejected edit as an instruction the model can follow, with the gate's verdict: a
    verified-harmful edit is a "do not"; any other rejection was tested and not shown better
    (GATE §4.3: never phrased as "verified ineffective"), so it is not worth proposing again."""
    where = f' in section "{r.section}"' if r.section else ""
    if r.op == "add":
        what = f'add "{_one_line(r.text)}"{where}'
    elif r.op == "replace":
        what = f'replace "{_one_line(r.anchor or "")}" with "{_one_line(r.text)}"{where}'
    else:
        what = f'delete "{_one_line(r.anchor or "")}"{where}'
    if r.tag == VERIFIED_HARMFUL:
        return f"- Do not {what} (verified harmful: {r.verdict}, W={r.wins} L={r.losses})."
    return (
        f"- Already tested, not shown to help ({r.verdict}, W={r.wins} L={r.losses}); "
        f"do not propose again: {what}."
    )


def render_rejected(rejected: Iterable[RejectedEdit], target_file: str) -> str:
    """The ``$rejected_edits`` block: every rejected edit of ``target_file`` with its verdict,
    verified-harmful ones first (issue 15: showing only REJECT_HARM let every other rejected edit
    be proposed and re-tested again — one more α-level chance each time)."""
    mine = [r for r in rejected if r.skill_file == target_file]
    # the most recent MAX_REJECTED_SHOWN (a long run must not overflow a small model's context),
    # verified-harmful first (stable: then in order)
    mine = mine[-MAX_REJECTED_SHOWN:]
    mine.sort(key=lambda r: r.tag != VERIFIED_HARMFUL)
    lines: list[str] = []
    for r in mine:
        line = do_not_line(r)
        if line not in lines:
            lines.append(line)
    return "\n".join(lines) if lines else NONE_TEXT


def render_case(case: CaseSample, *, with_diagnosis: bool = True, with_trace: bool = True) -> str:
    """One ``<case>`` block. Line labels avoid the template's own ``Key:`` lines (Task type, Skill
    file), which a reader of the whole prompt looks up by their first occurrence."""
    predicted = case.predicted or "no answer"
    lines = [
        f'<case question_id="{case.question_id}">',
        f"Task: {case.task_type} (skill file {case.skill_file})",
        f"Question: {_one_line(case.question, 500)}",
        "Options:",
        *(_one_line(o, 200) for o in case.options),
        f"Correct answer: {case.answer}. The agent answered: {predicted} "
        f"(stop reason: {case.stop_reason}).",
    ]
    if with_trace and case.trace_summary:
        lines += ["What the agent did:", case.trace_summary]
    if with_diagnosis and case.analysis:
        lines.append(f"Diagnosis: {_one_line(case.analysis, 600)}")
    if with_diagnosis and case.missing_strategy:
        lines.append(f"Missing strategy: {_one_line(case.missing_strategy, 300)}")
    lines.append("</case>")
    return "\n".join(lines)


def render_cases(cases: Sequence[CaseSample], *, limit: int = MAX_CASES_IN_PROMPT) -> str:
    """Cases in question-id order (diagnosed ones first), at most ``limit``."""
    ordered = sorted(cases, key=lambda c: (c.status != "ok", c.question_id))[:limit]
    return "\n\n".join(render_case(c) for c in ordered) if ordered else NONE_TEXT


# ------------------------------------------------------------------------------------------------
# The shared call


class EvolveOptions(TypedDict, total=False):
    """The keyword arguments every evolve call takes: ``template`` is the target's
    ``prompts/evolve_*.md``; ``budget`` comes from :func:`~trm_assets.domain.edits.edit_budget_at`;
    ``rejected`` may hold every buffer entry (only the target file's are shown); ``sample`` is the
    model's sample index (the repair retry uses ``sample + 1``)."""

    llm: Required[LLMProvider]
    template: Required[str]
    budget: Required[int]
    rejected: Sequence[RejectedEdit]
    sample: int


async def _evolve(
    target: EvolutionTarget,
    target_file: str,
    current: str,
    cases: Sequence[CaseSample],
    fields: Mapping[str, str],
    *,
    llm: LLMProvider,
    template: str,
    budget: int,
    rejected: Sequence[RejectedEdit] = (),
    sample: int = 0,
) -> EvolutionRecord:
    """Render the target's template (its own ``fields`` plus the cases, the rejected buffer and
    the budget), call the evolve model and apply its edits to ``current``."""
    role = f"evolve_{target}"
    prompt = render(
        template,
        source=EVOLVE_TEMPLATE_FILES[role],
        **fields,
        cases=render_cases(cases),
        rejected_edits=render_rejected(rejected, target_file),
        max_edits=str(budget),
    )
    if budget < 1:
        raise ValueError(f"edit budget must be >= 1, got {budget}")
    result = await call_structured(llm, prompt, EditProposal, role=role, sample=sample)
    calls: tuple[LLMCallRecord, ...] = result.calls
    h = text_hash(current)

    def record(
        status: EvolutionStatus,
        detail: str,
        edits: tuple[Edit, ...] = (),
        report: ApplyReport | None = None,
        text: str = current,
    ) -> EvolutionRecord:
        return EvolutionRecord(
            target=target,
            target_file=target_file,
            status=status,
            detail=detail,
            edits=edits,
            apply_report=report,
            original_text=current,
            candidate_text=text,
            original_hash=h,
            candidate_hash=text_hash(text),
            budget=budget,
            repaired=result.repaired,
            calls=calls,
        )

    if result.value is None:
        return record("no_edit", result.detail)
    edits = tuple(result.value.edits)
    if not edits:
        return record("no_edit", "the model proposed no edit")
    report = apply_edits(current, edits, budget=budget)
    n = report.n_applied
    if not report.changed:
        statuses = ", ".join(f"{r.index}:{r.status}" for r in report.results)
        return record("not_applied", f"no edit applied ({statuses})", edits, report)
    return record("applied", f"{n} of {len(edits)} edit(s) applied", edits, report, report.text)


# ------------------------------------------------------------------------------------------------
# Public calls


def check_skill_file_name(name: str) -> str:
    """Refuse a hostile skill file name before anything is read or sent (pure name check; the
    store resolves the real path)."""
    resolve_skill_file(Path("skills"), name)
    return name


def tool_file(tool_name: str) -> str:
    """``tools/<name>.md`` for a plain tool name; anything else (paths, ``..``) is refused."""
    if not isinstance(tool_name, str) or not _TOOL_NAME_RE.match(tool_name):
        raise ValueError(
            f"tool name {tool_name!r}: expected lower-case letters, digits and '_' (a tool of the "
            f"tool pack, e.g. get_ocr); refusing to build a file path from it"
        )
    return f"{TOOLS_DIR}/{tool_name}.md"


async def evolve_single_skill(
    pack: SkillCasePack, skills: SkillStore, **options: Unpack[EvolveOptions]
) -> EvolutionRecord:
    """Propose and apply edits to one skill file (``pack.skill_file``) from its failed cases
    (fast update; ``rejected``: only this file's entries are shown)."""
    name = check_skill_file_name(pack.skill_file)
    current = skills.read(name)
    fields = {"task_type": pack.task_type, "skill_file": name, "skill_text": current.strip()}
    return await _evolve("skill", name, current, pack.cases, fields, **options)


async def evolve_system_prompt(
    pack: SystemCasePack, prompts: PromptStore, **options: Unpack[EvolveOptions]
) -> EvolutionRecord:
    """Propose and apply edits to the agent system prompt (``agent_system.md``) from the cases
    accumulated for it over the epoch (slow update, ``budget`` = the end-of-run budget)."""
    current = prompts.read(SYSTEM_PROMPT_FILE)
    fields = {"system_prompt": current.strip()}
    return await _evolve("system", SYSTEM_PROMPT_FILE, current, pack.cases, fields, **options)


async def evolve_single_tool(
    pack: ToolCasePack, prompts: PromptStore, **options: Unpack[EvolveOptions]
) -> EvolutionRecord:
    """Propose and apply edits to one tool description (``tools/<tool_name>.md``)."""
    path = tool_file(pack.tool_name)
    files = prompts.list_files()
    if path not in files:
        known = [f for f in files if f.startswith(f"{TOOLS_DIR}/")]
        raise ValueError(
            f"tool {pack.tool_name!r} has no description {path} in prompts version "
            f"{prompts.version}; known: {known}"
        )
    current = prompts.read(path)
    fields = {"tool_name": pack.tool_name, "tool_description": current.strip()}
    return await _evolve("tool", path, current, pack.cases, fields, **options)

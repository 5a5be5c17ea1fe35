"""Diagnosis (SPEC 5.3 step 3): the failed predictions of a run → case packs.

Each task failure of the run (``correct`` is False and the failure was not infra: an infra failure
says nothing about the skill) becomes a :class:`CaseSample` with the question, the agent's answer
and a summary of its trace. Cases are grouped by skill file and sent to the diagnose model in
chunks (``prompts/diagnose.md``, several cases per call, calls run ``concurrency`` at a time).
The model's analysis and target (skill / system / tool) are attached; the result has one
:class:`SkillCasePack` per skill file (used at once by the fast update) and the system and tool
packs (accumulated for the slow update).

Error policy: a malformed reply (after its one repair retry) or an infra failure of one call
leaves that chunk's cases undiagnosed (``status`` ``malformed`` / ``infra``) — they still enter
their skill pack, with the trace but without analysis. When *every* call failed for infra the
last :class:`~trm_assets.llm.protocol.InfraError` is raised: the endpoint is down, the step should
stop rather than evolve on nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from trm_assets.agent.messages import TOOLS_DIR
from trm_assets.domain.errors import DataFormatError
from trm_assets.domain.question import Question, skill_file_name
from trm_assets.evolution.calls import call_structured
from trm_assets.evolution.evolve import render_case
from trm_assets.evolution.protocols import PromptStore, SkillStore
from trm_assets.evolution.schemas import Diagnosis, DiagnosisReport
from trm_assets.evolution.templates import render
from trm_assets.evolution.types import (
    CaseSample,
    DiagnosePrompts,
    DiagnosisResult,
    DiagnosisStatus,
    LLMCallRecord,
    SkillCasePack,
    SystemCasePack,
    ToolCasePack,
)
from trm_assets.llm.protocol import InfraError, LLMProvider

DIAGNOSE_TEMPLATE_FILE = "diagnose.md"
MAX_CASES_PER_CALL = 8
MAX_TRACE_LINES = 14


class RunLogPort(Protocol):
    """The read side of the run log the diagnosis needs (``RunLog`` and ``RunLogReader`` fit)."""

    def predictions(self, run_id: str) -> list[dict[str, Any]]: ...

    def traces(
        self, run_id: str, question_id: str | None = None, replicate: int | None = None
    ) -> list[dict[str, Any]]: ...


def load_diagnose_prompts(store: PromptStore) -> DiagnosePrompts:
    """The diagnose template and the tool names (from ``tools/*.md``) of a prompt store."""
    tools = tuple(
        sorted(
            f[len(TOOLS_DIR) + 1 : -3]
            for f in store.list_files()
            if f.startswith(f"{TOOLS_DIR}/") and f.endswith(".md") and f.count("/") == 1
        )
    )
    return DiagnosePrompts(diagnose=store.read(DIAGNOSE_TEMPLATE_FILE), tool_names=tools)


# ------------------------------------------------------------------------------------------------
# Cases from the run log


def _short(value: Any, limit: int) -> str:
    text = " ".join(str(value).split()) if value is not None else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_trace(rows: Sequence[Mapping[str, Any]], limit: int = MAX_TRACE_LINES) -> str:
    """One line per tool call (name, arguments, result size or error), in order; the model's
    free text is left out except a final message. At most ``limit`` lines (the last ones kept)."""
    lines: list[str] = []
    for r in sorted(rows, key=lambda r: int(r.get("seq") or 0)):
        if r.get("role") == "tool":
            args = _short(r.get("arguments") or "{}", 120)
            if r.get("error"):
                outcome = f"error: {_short(r['error'], 120)}"
            else:
                outcome = (
                    f"{int(r.get('result_chars') or 0)} chars: {_short(r.get('content'), 160)}"
                )
            lines.append(f"step {r.get('step')}: {r.get('tool_name')}({args}) → {outcome}")
        elif r.get("role") == "assistant" and r.get("content") and not r.get("arguments"):
            lines.append(f"step {r.get('step')}: said {_short(r.get('content'), 160)}")
    if len(lines) > limit:
        lines = [f"({len(lines) - limit} earlier steps omitted)", *lines[-limit:]]
    return "\n".join(lines) if lines else "(no tool call)"


def failed_cases(
    run_id: str, questions: Mapping[str, Question], run_log: RunLogPort
) -> list[CaseSample]:
    """Task failures of ``run_id`` as undiagnosed cases (first failing replicate per question,
    sorted by question id). Infra failures are left out: they say nothing about the text."""
    rows = run_log.predictions(run_id)
    chosen: dict[str, Mapping[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (str(r["question_id"]), int(r["replicate"]))):
        if r.get("correct") is False and r.get("failure_kind") != "infra":
            chosen.setdefault(str(r["question_id"]), r)
    wanted = {(qid, int(r["replicate"])) for qid, r in chosen.items()}
    traces: dict[tuple[str, int], list[dict[str, Any]]] = {}
    if wanted:  # one read of the run's traces, not one per case (a scan each on a large log)
        for t in run_log.traces(run_id):
            key = (str(t["question_id"]), int(t["replicate"]))
            if key in wanted:
                traces.setdefault(key, []).append(t)
    cases: list[CaseSample] = []
    for qid in sorted(chosen):
        q = questions.get(qid)
        if q is None:
            raise DataFormatError(
                f"run log, run {run_id!r}",
                f"question {qid!r}",
                None,
                "every question of the run among the loaded questions (is the workspace's "
                "question file the one the run used?)",
            )
        row = chosen[qid]
        trace = traces.get((qid, int(row["replicate"])), [])
        cases.append(
            CaseSample(
                question_id=qid,
                task_type=q.task_type,
                skill_file=skill_file_name(q.task_type),
                question=q.question,
                options=tuple(q.options),
                answer=q.answer,
                predicted=row.get("predicted") or None,
                stop_reason=str(row.get("stop_reason") or ""),
                trace_summary=summarize_trace(trace),
            )
        )
    return cases


# ------------------------------------------------------------------------------------------------
# Diagnose calls


def _attach(
    case: CaseSample, d: Diagnosis | None, status: DiagnosisStatus, tool_names: Sequence[str]
) -> CaseSample:
    if d is None:
        return replace(case, status=status)
    target, tool = d.target, d.tool_name
    if target == "tool" and tool not in tool_names:
        target, tool = "skill", None  # an unknown tool: keep the case with its skill
    return replace(
        case,
        target=target,
        tool_name=tool if target == "tool" else None,
        analysis=d.analysis.strip() or None,
        missing_strategy=d.missing_strategy.strip() or None,
        status="ok",
    )


_ChunkResult = tuple[list[CaseSample], tuple[LLMCallRecord, ...], str]


async def _diagnose_chunk(
    chunk: Sequence[CaseSample],
    *,
    llm: LLMProvider,
    template: str,
    skill_files: str,
    tool_names: Sequence[str],
    sample: int,
) -> _ChunkResult:
    prompt = render(
        template,
        source=DIAGNOSE_TEMPLATE_FILE,
        skill_files=skill_files,
        tool_names=", ".join(tool_names) or "(none)",
        cases="\n\n".join(render_case(c, with_diagnosis=False) for c in chunk),
    )
    res = await call_structured(llm, prompt, DiagnosisReport, role="diagnose", sample=sample)
    if res.value is None:
        return [_attach(c, None, "malformed", tool_names) for c in chunk], res.calls, "malformed"
    by_id: dict[str, Diagnosis] = {}
    for d in res.value.diagnoses:
        by_id.setdefault(d.question_id, d)
    out = [_attach(c, by_id.get(c.question_id), "missing", tool_names) for c in chunk]
    return out, res.calls, "ok"


async def run_diagnosis(
    run_id: str,
    questions: Sequence[Question] | Mapping[str, Question],
    trees: Mapping[str, Any] | None,
    llm: LLMProvider,
    run_log: RunLogPort,
    skill_store: SkillStore,
    prompts: DiagnosePrompts,
    concurrency: int,
    *,
    max_cases_per_call: int = MAX_CASES_PER_CALL,
    sample: int = 0,
) -> DiagnosisResult:
    """Diagnose the task failures of ``run_id`` (see the module docstring).

    ``questions`` must contain every question of the run; ``trees`` is accepted for the seed's
    contract and reserved for richer cases (the trace already names the nodes visited);
    ``skill_store`` lists the skill files shown to the model; ``sample`` is the first sample
    index (chunk ``i`` uses ``sample + 2*i``, its repair ``+1``), so a run is reproducible.
    """
    del trees
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    qmap = questions if isinstance(questions, Mapping) else {q.question_id: q for q in questions}
    cases = failed_cases(run_id, qmap, run_log)
    by_skill: dict[str, list[CaseSample]] = {}
    for c in cases:
        by_skill.setdefault(c.skill_file, []).append(c)
    chunks = [
        group[i : i + max_cases_per_call]
        for _, group in sorted(by_skill.items())
        for i in range(0, len(group), max_cases_per_call)
    ]
    skill_files = ", ".join(skill_store.list_files())
    sem = asyncio.Semaphore(concurrency)
    infra_errors: list[InfraError] = []

    async def one(i: int, chunk: list[CaseSample]) -> _ChunkResult:
        async with sem:
            try:
                return await _diagnose_chunk(
                    chunk,
                    llm=llm,
                    template=prompts.diagnose,
                    skill_files=skill_files,
                    tool_names=prompts.tool_names,
                    sample=sample + 2 * i,
                )
            except InfraError as e:
                infra_errors.append(e)
                return [replace(c, status="infra") for c in chunk], (), "infra"

    results = await asyncio.gather(*(one(i, ch) for i, ch in enumerate(chunks)))
    if chunks and len(infra_errors) == len(chunks):
        raise infra_errors[-1]
    diagnosed = [c for out, _, _ in results for c in out]
    calls = tuple(rec for _, recs, _ in results for rec in recs)

    skill_packs: dict[str, SkillCasePack] = {}
    system_cases: list[CaseSample] = []
    tool_cases: dict[str, list[CaseSample]] = {}
    for c in sorted(diagnosed, key=lambda c: (c.skill_file, c.question_id)):
        if c.target == "system":
            system_cases.append(c)
        elif c.target == "tool" and c.tool_name:
            tool_cases.setdefault(c.tool_name, []).append(c)
        else:
            pack = skill_packs.get(c.skill_file)
            cs = (*pack.cases, c) if pack else (c,)
            skill_packs[c.skill_file] = SkillCasePack(c.skill_file, c.task_type, cs)
    return DiagnosisResult(
        run_id=run_id,
        skill_packs=dict(sorted(skill_packs.items())),
        system_pack=SystemCasePack(tuple(sorted(system_cases, key=lambda c: c.question_id))),
        tool_packs={
            name: ToolCasePack(name, tuple(sorted(cs, key=lambda c: c.question_id)))
            for name, cs in sorted(tool_cases.items())
        },
        n_failed=len(cases),
        n_diagnosed=sum(1 for c in diagnosed if c.status == "ok"),
        n_malformed=sum(1 for c in diagnosed if c.status == "malformed"),
        n_infra=sum(1 for c in diagnosed if c.status == "infra"),
        calls=calls,
    )


def case_pack_json(result: DiagnosisResult) -> str:
    """The result as deterministic JSON (for reports and debugging)."""
    from trm_assets.evolution.types import to_jsonable

    return json.dumps(to_jsonable(result), sort_keys=True, ensure_ascii=False, indent=2)

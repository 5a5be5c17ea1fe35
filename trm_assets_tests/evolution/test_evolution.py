"""Diagnosis, evolution and momentum calls: the simulated provider for real behaviour, a scripted
provider (returns given strings) for the exact malformed / repair / protected-block paths."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from trm_assets.domain.edits import MOMENTUM_BEGIN, RejectedEdit, UnsafeSkillPathError
from trm_assets.domain.question import Question, skill_file_name
from trm_assets.evolution.diagnosis import load_diagnose_prompts, run_diagnosis
from trm_assets.evolution.evolve import (
    evolve_single_skill,
    evolve_single_tool,
    evolve_system_prompt,
    load_evolve_prompts,
    render_rejected,
)
from trm_assets.evolution.momentum import update_momentum
from trm_assets.evolution.types import (
    CaseSample,
    SkillCasePack,
    SystemCasePack,
    ToolCasePack,
    to_jsonable,
)
from trm_assets.harness.data.questions import load_questions
from trm_assets.harness.storage.workspace import (
    init_workspace,
    prompt_store,
    resolve_paths,
    skill_store,
)
from trm_assets.llm.protocol import InfraError
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.world import SimWorld, load_world
from trm_assets.llm.sim_config import ProposalMix, SimConfig
from trm_assets_tests.agent.fixtures import ScriptedLLM

SMOKE = Path(__file__).resolve().parents[2] / "data" / "smoke"
TASK = "Counting Problem"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def world() -> SimWorld:
    return load_world(SMOKE)


@pytest.fixture(scope="module")
def questions() -> dict[str, Question]:
    return {q.question_id: q for q in load_questions(SMOKE / "questions.json")}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "q.json").write_text("[]")
    init_workspace(tmp_path / "ws", questions_ref=str(tmp_path / "q.json"))
    return tmp_path / "ws"


def _cases(questions: dict[str, Question], task: str = TASK, n: int = 4) -> tuple[CaseSample, ...]:
    qs = sorted((q for q in questions.values() if q.task_type == task), key=lambda q: q.question_id)
    return tuple(
        CaseSample(
            question_id=q.question_id,
            task_type=q.task_type,
            skill_file=skill_file_name(q.task_type),
            question=q.question,
            options=q.options,
            answer=q.answer,
            predicted="A" if q.answer != "A" else "B",
            stop_reason="answer",
            trace_summary="step 0: get_overview({}) → 800 chars: ...",
            analysis="The agent answered from the overview.",
            missing_strategy="Look closer.",
            status="ok",
        )
        for q in qs[:n]
    )


def _pack(questions: dict[str, Question], skill_file: str | None = None) -> SkillCasePack:
    return SkillCasePack(skill_file or skill_file_name(TASK), TASK, _cases(questions))


def _edits(*edits: dict[str, Any]) -> str:
    return json.dumps({"edits": list(edits)})


GOOD = {
    "op": "add",
    "section": "Strategy",
    "anchor": None,
    "text": "- Count twice.",
    "rationale": "r",
}


# ------------------------------------------------------------------------------------------------
# evolve_single_skill


def test_good_edit_from_the_simulated_model_applies(
    ws: Path, world: SimWorld, questions: dict[str, Question], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trm_assets.evolution")
    paths = resolve_paths(ws)
    prompts = load_evolve_prompts(prompt_store(paths))
    mix = ProposalMix(cue=1.0, neutral=0.0, harmful=0.0, malformed=0.0)
    llm = SimulatedProvider(world, SimConfig(proposal_mix=mix), inject_faults=False)
    pack = _pack(questions)
    rec = run(
        evolve_single_skill(
            pack, skill_store(paths), llm=llm, template=prompts.evolve_skill, budget=2
        )
    )
    assert rec.status == "applied" and rec.changed and not rec.repaired
    assert rec.apply_report is not None and rec.apply_report.n_applied == 1
    assert rec.original_hash != rec.candidate_hash
    needed = {world.questions[c.question_id].cue for c in pack.cases}
    assert world.cues_expressed(TASK, [rec.candidate_text]) & needed
    assert rec.candidate_text.count(MOMENTUM_BEGIN) == 1
    assert [(c.role, c.outcome) for c in rec.calls] == [("evolve_skill", "ok")]
    assert rec.calls[0].prompt_tokens > 0
    assert rec.report_rows()[0]["status"] == "applied"
    logged = [r.getMessage() for r in caplog.records]
    assert any(
        "role=evolve_skill" in m and "prompt_tokens=" in m and "latency_s=" in m for m in logged
    )
    # deterministic: the same prompt and sample give the same candidate
    again = run(
        evolve_single_skill(
            pack, skill_store(paths), llm=llm, template=prompts.evolve_skill, budget=2
        )
    )
    assert again.candidate_text == rec.candidate_text


def test_malformed_output_gets_one_repair_then_no_edit(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    llm = ScriptedLLM.replying(["I would add a step.", '{"edits": [{"op": "insert"}]}'])
    rec = run(
        evolve_single_skill(
            _pack(questions), skill_store(paths), llm=llm, template=template, budget=2, sample=5
        )
    )
    assert rec.status == "no_edit" and rec.repaired and not rec.changed
    assert "after one repair" in rec.detail
    assert rec.candidate_text == rec.original_text and rec.apply_report is None
    assert [c.outcome for c in rec.calls] == ["malformed", "malformed"]
    (first, _, seed1), (second, _, seed2) = llm.calls
    assert (seed1, seed2) == (5, 6)
    assert second[0] == first[0] and second[1]["role"] == "assistant"
    assert "could not be used" in second[2]["content"]


def test_repair_that_succeeds_is_used(ws: Path, questions: dict[str, Question]) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    llm = ScriptedLLM.replying(["```json\n{not json\n```", "Here you go:\n" + _edits(GOOD)])
    rec = run(
        evolve_single_skill(
            _pack(questions), skill_store(paths), llm=llm, template=template, budget=1
        )
    )
    assert rec.status == "applied" and rec.repaired
    assert "- Count twice." in rec.candidate_text


def test_simulated_malformed_proposals_end_as_no_edit(
    ws: Path, world: SimWorld, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    mix = ProposalMix(cue=0.0, neutral=0.0, harmful=0.0, malformed=1.0)
    llm = SimulatedProvider(world, SimConfig(proposal_mix=mix), inject_faults=False)
    rec = run(
        evolve_single_skill(
            _pack(questions), skill_store(paths), llm=llm, template=template, budget=2
        )
    )
    assert rec.status == "no_edit" and rec.repaired and len(rec.calls) == 2


def test_edit_aimed_at_the_protected_block_is_refused(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    attack = {
        "op": "replace",
        "section": None,
        "anchor": MOMENTUM_BEGIN,
        "text": "- ignore the momentum",
        "rationale": "r",
    }
    llm = ScriptedLLM.replying([_edits(attack, GOOD)])
    rec = run(
        evolve_single_skill(
            _pack(questions), skill_store(paths), llm=llm, template=template, budget=2
        )
    )
    assert rec.apply_report is not None
    assert [r.status for r in rec.apply_report.results] == ["conflict", "applied"]
    assert rec.status == "applied"
    orig_block = rec.original_text[rec.original_text.index(MOMENTUM_BEGIN) :]
    assert rec.candidate_text.endswith(orig_block)
    llm = ScriptedLLM.replying([_edits(attack)])
    only = run(
        evolve_single_skill(
            _pack(questions), skill_store(paths), llm=llm, template=template, budget=2
        )
    )
    assert only.status == "not_applied" and only.candidate_text == only.original_text


def test_hostile_file_names_are_refused_before_any_call(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    prompts = load_evolve_prompts(prompt_store(paths))
    llm = ScriptedLLM.replying([])
    for bad in ("../../etc/passwd.md", "/tmp/x.md", "sub/x.md", "..", ".hidden.md"):
        with pytest.raises(UnsafeSkillPathError):
            run(
                evolve_single_skill(
                    _pack(questions, bad),
                    skill_store(paths),
                    llm=llm,
                    template=prompts.evolve_skill,
                    budget=1,
                )
            )
    for bad_tool in ("../agent_system", "tools/get_ocr", "get_ocr.md", ""):
        with pytest.raises(ValueError, match="refusing to build a file path"):
            run(
                evolve_single_tool(
                    ToolCasePack(bad_tool, _cases(questions)),
                    prompt_store(paths),
                    llm=llm,
                    template=prompts.evolve_tool,
                    budget=1,
                )
            )
    assert llm.calls == []


def test_infra_error_propagates(ws: Path, questions: dict[str, Question]) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    llm = ScriptedLLM.replying([InfraError("timeout", "simulated")])
    with pytest.raises(InfraError):
        run(
            evolve_single_skill(
                _pack(questions), skill_store(paths), llm=llm, template=template, budget=1
            )
        )


def _rejected(skill_file: str, text: str, tag: str) -> RejectedEdit:
    return RejectedEdit(skill_file, "add", "Strategy", None, text, "r", "REJECT", tag, 1, 5)


def test_prompt_shows_every_rejection_of_the_file_with_its_verdict(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).evolve_skill
    name = skill_file_name(TASK)
    rejected = [
        _rejected(name, "- Answer at once.", "verified_harmful"),
        _rejected(name, "- Maybe helpful.", "not_verified"),
        _rejected("other.md", "- Elsewhere.", "verified_harmful"),
    ]
    llm = ScriptedLLM.replying([_edits()])
    rec = run(
        evolve_single_skill(
            _pack(questions),
            skill_store(paths),
            llm=llm,
            template=template,
            budget=3,
            rejected=rejected,
        )
    )
    assert rec.status == "no_edit" and rec.detail == "the model proposed no edit"
    prompt = llm.calls[0][0][0]["content"]
    block = prompt.split("<rejected_edits>")[1].split("</rejected_edits>")[0].strip().splitlines()
    assert block == [
        '- Do not add "- Answer at once." in section "Strategy" (verified harmful: REJECT, '
        "W=1 L=5).",
        "- Already tested, not shown to help (REJECT, W=1 L=5); do not propose again: "
        'add "- Maybe helpful." in section "Strategy".',
    ]  # verified harmful first; another file's rejection is not shown
    assert "Elsewhere" not in prompt
    assert "at most 3 edits" in prompt and "$" not in prompt.split("<cases>")[0]
    assert render_rejected([], name) == "(none)"


def test_system_and_tool_evolution(ws: Path, questions: dict[str, Question]) -> None:
    paths = resolve_paths(ws)
    prompts = load_evolve_prompts(prompt_store(paths))
    add = {"op": "add", "section": None, "anchor": None, "text": "Check times.", "rationale": "r"}
    sysrec = run(
        evolve_system_prompt(
            SystemCasePack(_cases(questions)),
            prompt_store(paths),
            llm=ScriptedLLM.replying([_edits(add)]),
            template=prompts.evolve_system,
            budget=1,
        )
    )
    assert sysrec.target_file == "agent_system.md" and sysrec.status == "applied"
    assert sysrec.candidate_text.rstrip().endswith("Check times.")
    toolrec = run(
        evolve_single_tool(
            ToolCasePack("get_ocr", _cases(questions)),
            prompt_store(paths),
            llm=ScriptedLLM.replying([_edits(add)]),
            template=prompts.evolve_tool,
            budget=1,
        )
    )
    assert toolrec.target_file == "tools/get_ocr.md" and toolrec.status == "applied"
    with pytest.raises(ValueError, match="no description"):
        run(
            evolve_single_tool(
                ToolCasePack("no_such_tool", ()),
                prompt_store(paths),
                llm=ScriptedLLM.replying([]),
                template=prompts.evolve_tool,
                budget=1,
            )
        )


# ------------------------------------------------------------------------------------------------
# run_diagnosis


class FakeRunLog:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def predictions(self, run_id: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["run_id"] == run_id]

    def traces(
        self, run_id: str, question_id: str | None = None, replicate: int | None = None
    ) -> list[dict[str, Any]]:
        return [
            {"question_id": r["question_id"], "replicate": r["replicate"], **t}
            for r in self.predictions(run_id)
            if question_id in (None, r["question_id"]) and replicate in (None, r["replicate"])
            for t in (
                {"seq": 0, "step": 0, "role": "assistant", "content": None, "arguments": "x"},
                {
                    "seq": 1,
                    "step": 0,
                    "role": "tool",
                    "tool_name": "get_overview",
                    "arguments": "{}",
                    "content": '{"video": "..."}',
                    "result_chars": 812,
                },
            )
        ]


def _run_rows(questions: dict[str, Question]) -> list[dict[str, Any]]:
    rows = []
    for i, qid in enumerate(sorted(questions)[:30]):
        kind = ("task", None, "infra")[i % 3]
        rows.append(
            {
                "run_id": "base_e0_s0",
                "question_id": qid,
                "replicate": 0,
                "predicted": "B",
                "correct": {"task": False, None: True, "infra": None}[kind],
                "failure_kind": kind,
                "stop_reason": "answer" if kind != "infra" else "error",
            }
        )
    return rows


def test_diagnosis_builds_skill_system_and_tool_packs(
    ws: Path, world: SimWorld, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    cfg = SimConfig(diagnose_system_prob=0.2, diagnose_tool_prob=0.2)
    llm = SimulatedProvider(world, cfg, inject_faults=False)
    rows = _run_rows(questions)

    def diagnose(qs: Sequence[Question] | Mapping[str, Question], concurrency: int) -> Any:
        return run(
            run_diagnosis(
                "base_e0_s0",
                qs,
                None,
                llm,
                FakeRunLog(rows),
                skill_store(paths),
                load_diagnose_prompts(prompt_store(paths)),
                concurrency=concurrency,
                max_cases_per_call=2,
            )
        )

    res = diagnose(list(questions.values()), concurrency=3)
    failed = sorted(r["question_id"] for r in rows if r["failure_kind"] == "task")
    assert res.n_failed == len(failed) == 10
    got = [c.question_id for p in res.skill_packs.values() for c in p.cases]
    got += [c.question_id for c in res.system_pack.cases]
    got += [c.question_id for p in res.tool_packs.values() for c in p.cases]
    assert sorted(got) == failed
    assert res.n_diagnosed == 10 and res.n_malformed == 0 and res.n_infra == 0
    for name, pack in res.skill_packs.items():
        assert name == skill_file_name(pack.task_type)
        assert all(c.status == "ok" and c.analysis for c in pack.cases)
        assert all(c.skill_file == name for c in pack.cases)
    assert list(res.skill_packs) == sorted(res.skill_packs)
    assert set(res.tool_packs) <= set(load_diagnose_prompts(prompt_store(paths)).tool_names)
    assert all(c.role == "diagnose" for c in res.calls)
    again = diagnose(questions, concurrency=1)
    assert again.skill_packs == res.skill_packs and again.tool_packs == res.tool_packs


def test_diagnosis_keeps_cases_when_replies_are_malformed_and_raises_when_all_infra(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    rows = _run_rows(questions)
    prompts = load_diagnose_prompts(prompt_store(paths))
    bad = ScriptedLLM.replying(["nope"] * 40)
    res = run(
        run_diagnosis(
            "base_e0_s0", questions, None, bad, FakeRunLog(rows), skill_store(paths), prompts, 2
        )
    )
    assert res.n_failed == 10 and res.n_malformed == 10 and res.n_diagnosed == 0
    assert sum(len(p.cases) for p in res.skill_packs.values()) == 10
    down = ScriptedLLM.replying([InfraError("connection", "refused")] * 40)
    with pytest.raises(InfraError):
        run(
            run_diagnosis(
                "base_e0_s0",
                questions,
                None,
                down,
                FakeRunLog(rows),
                skill_store(paths),
                prompts,
                2,
            )
        )


# ------------------------------------------------------------------------------------------------
# momentum


def test_momentum_updates_the_protected_block_or_keeps_the_previous_guidance(
    ws: Path, questions: dict[str, Question]
) -> None:
    paths = resolve_paths(ws)
    template = load_evolve_prompts(prompt_store(paths)).momentum
    qids = sorted(q.question_id for q in questions.values() if q.task_type == TASK)[:4]
    before = dict(zip(qids, [True, True, False, False], strict=True))
    after = dict(zip(qids, [False, True, True, False], strict=True))

    def momentum(llm: ScriptedLLM) -> Any:
        return run(
            update_momentum(
                skill_file_name(TASK),
                TASK,
                skill_store(paths),
                before,
                after,
                questions,
                llm=llm,
                template=template,
            )
        )

    llm = ScriptedLLM.replying(['{"guidance": "- Keep counting twice."}'])
    rec = momentum(llm)
    assert rec.updated and "- Keep counting twice." in rec.candidate_text
    prompt = llm.calls[0][0][0]["content"]
    assert prompt.index(qids[0]) < prompt.index(qids[2])  # regressions shown first
    kept = momentum(ScriptedLLM.replying(["no json", "still none"]))
    assert not kept.updated and kept.candidate_text == kept.original_text


def test_case_packs_round_trip_through_json(questions: dict[str, Question]) -> None:
    pack = _pack(questions)
    data = json.loads(json.dumps(to_jsonable(pack)))
    assert SkillCasePack.from_dict(data) == pack
    sys_pack = SystemCasePack(_cases(questions))
    assert SystemCasePack.from_dict(json.loads(json.dumps(to_jsonable(sys_pack)))) == sys_pack
    merged = sys_pack.merged(SystemCasePack(_cases(questions, n=6)))
    assert [c.question_id for c in merged.cases] == [c.question_id for c in _cases(questions, n=6)]

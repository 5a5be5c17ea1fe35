"""Every message shape the loop sends passes a strictly validating server (issue 17.3).

The real functions (agent loop with tools, the VLM behind ``inspect_frames``, diagnosis, the three
evolve calls, momentum) run through the real :class:`OpenAICompatProvider` over HTTP against
:mod:`trm_assets_tests.llm.strict_server`, which refuses what llama-cpp-python's request models
refuse (``"content": null`` → HTTP 500 "Input should be a valid string") and what the OpenAI API
refuses (unknown fields, unanswered tool calls).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from trm_assets.agent.loop import AgentLoop, AgentOutcome
from trm_assets.agent.tools import Toolbox
from trm_assets.agent.tree import parse_tree
from trm_assets.domain.question import Question, skill_file_name
from trm_assets.evolution.diagnosis import load_diagnose_prompts, run_diagnosis
from trm_assets.evolution.evolve import (
    evolve_single_skill,
    evolve_single_tool,
    evolve_system_prompt,
    load_evolve_prompts,
)
from trm_assets.evolution.momentum import update_momentum
from trm_assets.evolution.types import SkillCasePack, SystemCasePack, ToolCasePack
from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets_tests.agent.fixtures import (
    PROMPTS_DIR,
    kitchen_tree,
    prompts,
    question,
    skills_for,
)
from trm_assets_tests.llm.strict_server import AGENT_TURNS, StrictOpenAI, strict_openai

T = TypeVar("T")


def provider(url: str) -> OpenAICompatProvider:
    return OpenAICompatProvider(
        base_url=url,
        model="strict-model",
        timeout_s=5.0,
        max_retries=0,
        backoff_base_s=0.01,
        rng=random.Random(0),
    )


def run_with(url: str, make: Callable[[OpenAICompatProvider], Awaitable[T]]) -> T:
    async def go() -> T:
        llm = provider(url)
        try:
            return await make(llm)
        finally:
            await llm.aclose()

    return asyncio.run(go())


class DictStore:
    """A read-only skill/prompt store over a dict (the evolution ports)."""

    def __init__(self, files: dict[str, str], version: str = "v1") -> None:
        self.files, self._version = files, version

    @property
    def version(self) -> str:
        return self._version

    def list_files(self) -> list[str]:
        return sorted(self.files)

    def read(self, name: str) -> str:
        return self.files[name]


def prompt_files() -> DictStore:
    return DictStore(
        {
            p.relative_to(PROMPTS_DIR).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(PROMPTS_DIR.rglob("*.md"))
            if not p.relative_to(PROMPTS_DIR).as_posix().startswith("skills/")
        }
    )


def toolbox_with_a_frame(tmp_path: Path) -> Toolbox:
    data = kitchen_tree().model_dump(mode="json")
    data["nodes"]["f3"]["image"] = "vidA/000105.jpg"
    (tmp_path / "vidA").mkdir()
    (tmp_path / "vidA" / "000105.jpg").write_bytes(b"\xff\xd8fakejpeg")
    return Toolbox({"vidA": parse_tree(data, "kitchen")}, frames_dir=tmp_path)


def test_the_strict_server_refuses_null_content_as_llama_cpp_does() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,  # what ChatResponse.as_message sent before issue 17
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "x", "content": "{}"},
    ]
    with strict_openai() as srv:
        r = httpx.post(srv.url + "/chat/completions", json={"model": "m", "messages": messages})
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "internal_server_error"
    assert error["message"].startswith("1 validation error:\n  {'type': 'string_type', 'loc': (")
    assert (
        "'messages', 1, 'assistant', 'content'), 'msg': 'Input should be a valid string'"
        in (error["message"])
    )
    assert srv.accepted == [] and len(srv.rejected) == 1


def _agent(srv: StrictOpenAI, tmp_path: Path) -> AgentOutcome:
    box = toolbox_with_a_frame(tmp_path)
    q = question(answer="A")

    async def go(llm: OpenAICompatProvider) -> AgentOutcome:
        box.vlm = llm  # the VLM behind inspect_frames talks to the same strict server
        loop = AgentLoop(llm, prompts(), max_steps=6)
        return await loop.run(
            q, tools=box.session(q), skills=skills_for([q.task_type]), skill_mode="task", seed=7
        )

    return run_with(srv.url, go)


def test_agent_loop_multi_turn_with_tool_calls_passes(tmp_path: Path) -> None:
    with strict_openai() as srv:
        out = _agent(srv, tmp_path)
    assert srv.rejected == []
    assert (out.letter, out.stop_reason, out.infra_error) == ("B", "answer", None)
    assert out.n_llm_calls == len(AGENT_TURNS) == 4 and out.n_tool_errors == 1
    assert out.inspect_sources == ("vlm",)
    agent_requests = [r for r in srv.accepted if r.tools]
    vlm_requests = [r for r in srv.accepted if not r.tools]
    assert len(agent_requests) == 4 and len(vlm_requests) == 1
    last = agent_requests[-1].model_dump()["messages"]
    assert [m["role"] for m in last] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant", "tool",
    ]  # fmt: skip
    # the server saw "" (not null) for the turns that only called tools
    assert [m["content"] for m in last if m["role"] == "assistant"] == [
        "",
        "Two calls at once.",
        "",
    ]
    assert [(m["tool_call_id"], m["name"]) for m in last if m["role"] == "tool"] == [
        ("call_0", "get_overview"),
        ("call_10", "search_captions"),
        ("call_11", "inspect_frames"),
        ("call_20", "answer"),
    ]
    parts = vlm_requests[0].model_dump()["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]


def _case_pack(out: AgentOutcome, q: Question) -> Any:
    """A run log holding the one (wrong) rollout, in the shape the diagnosis reads."""
    rows = [
        {
            "run_id": "r",
            "question_id": q.question_id,
            "replicate": 0,
            "predicted": out.letter,
            "correct": out.letter == q.answer,
            "failure_kind": "task",
            "stop_reason": out.stop_reason,
        }
    ]
    traces = [
        {"question_id": q.question_id, "replicate": 0, **dataclasses.asdict(s)} for s in out.steps
    ]

    class RunLog:
        def predictions(self, run_id: str) -> list[dict[str, Any]]:
            return rows

        def traces(self, run_id: str, qid: str | None = None, rep: int | None = None) -> Any:
            return traces

    return RunLog()


def test_diagnosis_evolve_and_momentum_calls_pass(tmp_path: Path) -> None:
    q = question(answer="A")
    store = prompt_files()
    skill_name = skill_file_name(q.task_type)
    skills = DictStore(skills_for([q.task_type]))
    with strict_openai() as srv:
        out = _agent(srv, tmp_path)
        assert out.letter == "B"  # wrong: a task failure to diagnose
        n_agent = len(srv.accepted)
        diag = run_with(
            srv.url,
            lambda llm: run_diagnosis(
                "r", [q], None, llm, _case_pack(out, q), skills, load_diagnose_prompts(store), 1
            ),
        )
        ev = load_evolve_prompts(store)
        case = dataclasses.replace(diag.skill_packs[skill_name].cases[0], status="ok")
        skill_rec = run_with(
            srv.url,
            lambda llm: evolve_single_skill(
                SkillCasePack(skill_name, q.task_type, (case,)),
                skills,
                llm=llm,
                template=ev.evolve_skill,
                budget=2,
            ),
        )
        system_rec = run_with(
            srv.url,
            lambda llm: evolve_system_prompt(
                SystemCasePack((case,)), store, llm=llm, template=ev.evolve_system, budget=1
            ),
        )
        tool_rec = run_with(
            srv.url,
            lambda llm: evolve_single_tool(
                ToolCasePack("get_ocr", (case,)), store, llm=llm, template=ev.evolve_tool, budget=1
            ),
        )
        momentum = run_with(
            srv.url,
            lambda llm: update_momentum(
                skill_name,
                q.task_type,
                skills,
                {q.question_id: True},
                {q.question_id: False},
                {q.question_id: q},
                llm=llm,
                template=ev.momentum,
            ),
        )
    assert srv.rejected == []
    # each of the five structured calls was answered in prose first and repaired once
    structured = srv.accepted[n_agent:]
    assert [len(r.messages) for r in structured] == [1, 3] * 5
    for r in structured[1::2]:
        assert [m.role for m in r.messages] == ["user", "assistant", "user"]
        assert r.messages[1].content == "Here is my analysis, in prose instead of JSON."
    assert diag.n_failed == 1 and diag.n_infra == 0 and diag.n_malformed == 0
    assert [c.outcome for c in diag.calls] == ["malformed", "ok"]
    for rec in (skill_rec, system_rec, tool_rec):
        assert rec.status == "no_edit", rec
        assert [c.outcome for c in rec.calls] == ["malformed", "ok"]
    assert momentum.updated and momentum.guidance == "- Count each object once."
    assert [c.outcome for c in momentum.calls] == ["malformed", "ok"]


@pytest.mark.parametrize("style", ["fastapi", "openai"])
def test_other_styles_reply_with_their_own_status(style: Any) -> None:
    with strict_openai(style=style) as srv:
        r = httpx.post(
            srv.url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": None}]},
        )
    assert r.status_code == {"fastapi": 422, "openai": 400}[style]
    assert "Input should be a valid string" in r.text

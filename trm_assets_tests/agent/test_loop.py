"""AgentLoop: stop conditions, tracing, infra vs task outcomes, seeds."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from trm_assets.agent.loop import AgentLoop, AgentOutcome, rollout_seed
from trm_assets.agent.tools import Toolbox
from trm_assets.llm.protocol import ChatResponse, ContextLengthExceeded, Message, Usage
from trm_assets_tests.agent.fixtures import (
    ScriptedLLM,
    explorer,
    failing,
    kitchen_tree,
    n_assistant_turns,
    prompts,
    question,
    skills_for,
    tool_response,
)

SKILLS = skills_for(["Object Recognition"])


def run(llm: ScriptedLLM, max_steps: int = 6, seed: int | None = 7) -> AgentOutcome:
    loop = AgentLoop(llm, prompts(), max_steps=max_steps)
    q = question()
    tools = Toolbox({"vidA": kitchen_tree()}).session(q)
    return asyncio.run(loop.run(q, tools=tools, skills=SKILLS, skill_mode="task", seed=seed))


def test_answer_tool_ends_the_loop_and_every_step_is_traced() -> None:
    llm = ScriptedLLM(explorer(lambda m: "A"))
    out = run(llm)
    assert (out.letter, out.stop_reason) == ("A", "answer")
    assert out.n_llm_calls == 3 and out.n_tool_calls == 3 and out.n_tool_errors == 0
    assert [(s.role, s.tool_name) for s in out.steps] == [
        ("assistant", None),
        ("tool", "get_overview"),
        ("assistant", None),
        ("tool", "search_captions"),
        ("assistant", None),
        ("tool", "answer"),
    ]
    assert [s.seq for s in out.steps] == list(range(6))
    assert out.steps[1].result_chars > 100 and out.steps[0].prompt_tokens == 10
    assert out.usage == Usage(30, 6)
    assert "s0c0" in out.visited_nodes
    # The conversation sent to the model: system, user, then assistant/tool pairs in order.
    last_messages = llm.calls[-1][0]
    assert [m["role"] for m in last_messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert last_messages[3]["tool_call_id"] == "c0"
    assert json.loads(last_messages[3]["content"])["video"]["video_id"] == "vidA"
    # The same seed on every call of the rollout; tools offered every time.
    assert {c[2] for c in llm.calls} == {7}
    assert all(c[1] and len(c[1]) == 8 for c in llm.calls)


def test_free_text_reply_uses_the_official_extraction() -> None:
    out = run(ScriptedLLM(lambda m, s: ChatResponse(content="The best answer is C.")))
    assert (out.letter, out.stop_reason, out.final_text) == (
        "C",
        "final_text",
        "The best answer is C.",
    )
    out = run(ScriptedLLM(lambda m, s: ChatResponse(content=None)))
    assert (out.letter, out.stop_reason) == ("", "final_text")


def test_max_steps_is_a_task_failure_without_letter() -> None:
    llm = ScriptedLLM(lambda m, s: tool_response(("get_overview", {})))
    out = run(llm, max_steps=3)
    assert (out.letter, out.stop_reason, out.n_llm_calls) == ("", "max_steps", 3)
    assert out.infra_error is None


def test_bad_tool_arguments_are_returned_to_the_model_and_the_loop_continues() -> None:
    def script(messages: list[Message], seed: int | None) -> ChatResponse:
        step = n_assistant_turns(messages)
        if step == 0:
            return tool_response(("expand_node", {"node_id": "zzz"}))
        if step == 1:
            assert "does not exist" in json.loads(messages[-1]["content"])["error"]
            return tool_response(("answer", {"letter": "maybe B"}))
        return tool_response(("answer", {"letter": "B"}))

    out = run(ScriptedLLM(script))
    assert (out.letter, out.stop_reason, out.n_tool_errors) == ("B", "answer", 2)
    assert [s.error is not None for s in out.steps if s.role == "tool"] == [True, True, False]


def test_infra_error_returns_an_infra_outcome_with_the_partial_trace() -> None:
    calls = {"n": 0}

    def script(messages: list[Message], seed: int | None) -> ChatResponse:
        calls["n"] += 1
        if calls["n"] == 2:
            return failing("timeout")(messages, seed)
        return tool_response(("get_overview", {}))

    out = run(ScriptedLLM(script))
    assert out.stop_reason == "error" and out.is_infra_failure
    assert "timeout" in (out.infra_error or "")
    assert len(out.steps) == 2  # the first turn and its tool call are kept


def test_context_overflow_is_a_task_failure() -> None:
    def script(messages: list[Message], seed: int | None) -> Any:
        raise ContextLengthExceeded("HTTP 400: maximum context length", status=400)

    out = run(ScriptedLLM(script))
    assert (out.stop_reason, out.letter, out.infra_error) == ("context_length", "", None)


def test_bugs_propagate() -> None:
    def script(messages: list[Message], seed: int | None) -> Any:
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        run(ScriptedLLM(script))


def test_rollout_seed_is_deterministic_and_distinct() -> None:
    s = rollout_seed("run1", "001-1", 0)
    assert s == rollout_seed("run1", "001-1", 0) and 0 <= s < 2**31
    assert (
        len({rollout_seed(r, q, k) for r in ("a", "b") for q in ("1", "2") for k in (0, 1, 2)})
        == 12
    )
    assert s == 1819774343  # stable across processes and Python versions (sha256)


def test_every_turn_sent_is_in_the_strict_shape() -> None:
    # Issue 17.2: strict servers refuse "content": null on the assistant's tool-call turn, and
    # llama-cpp-python's tool message model requires "name". Every value sent is a string.
    llm = ScriptedLLM(explorer(lambda m: "A"))
    run(llm)
    sent = llm.calls[-1][0]
    assert sent[2] == {
        "role": "assistant",
        "content": "Overview first.",
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": "get_overview", "arguments": "{}"},
            }
        ],
    }
    assert sent[4]["content"] == ""  # a turn that only calls tools (ChatResponse.content None)
    assert [(m["tool_call_id"], m["name"]) for m in sent if m["role"] == "tool"] == [
        ("c0", "get_overview"),
        ("c0", "search_captions"),
    ]
    for m in sent:
        assert all(isinstance(v, str) for k, v in m.items() if k != "tool_calls"), m


def test_as_message_never_sends_null_content() -> None:
    resp = tool_response(("answer", {"letter": "B"}))
    assert resp.content is None and resp.as_message()["content"] == ""
    assert ChatResponse(content="x").as_message() == {"role": "assistant", "content": "x"}

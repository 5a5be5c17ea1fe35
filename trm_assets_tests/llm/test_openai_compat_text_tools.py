"""TRM_LLM_TOOL_MODE=text: tools described in the system prompt, calls read from the reply text,
the letter of a plain-text answer extracted (issue 17.2). End to end over a strict server."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from trm_assets.agent.loop import AgentLoop, AgentOutcome
from trm_assets.agent.tools import Toolbox
from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import ToolCall
from trm_assets.llm.text_tools import TOOL_PROTOCOL, parse_reply, render_conversation
from trm_assets_tests.agent.fixtures import kitchen_tree, prompts, question, skills_for
from trm_assets_tests.llm.strict_server import (
    AssistantMessage,
    ChatRequest,
    SystemMessage,
    strict_openai,
)
from trm_assets_tests.llm.test_openai_compat_server import completion

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_overview",
            "description": "The video's  top levels.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "answer",
            "description": "Give the answer.",
            "parameters": {"type": "object", "properties": {"letter": {"type": "string"}}},
        },
    },
]


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_conversation_is_rendered_as_plain_alternating_turns() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Q?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("a", "get_overview", "{}"), call("b", "answer", '{"letter": "x"}')],
        },
        {"role": "tool", "tool_call_id": "a", "name": "get_overview", "content": '{"video": 1}'},
        {"role": "tool", "tool_call_id": "b", "name": "answer", "content": '{"error": "bad"}'},
    ]  # fmt: skip
    out = render_conversation(messages, TOOLS)
    assert out == [
        {
            "role": "system",
            "content": "You are an agent.\n\n" + TOOL_PROTOCOL + "\n"
            "- get_overview: The video's top levels.\n"
            '  arguments (JSON schema): {"properties": {}, "type": "object"}\n'
            "- answer: Give the answer.\n"
            '  arguments (JSON schema): {"properties": {"letter": {"type": "string"}}, '
            '"type": "object"}',
        },
        {"role": "user", "content": "Q?"},
        {
            "role": "assistant",
            "content": '{"tool": "get_overview", "arguments": {}}\n'
            '{"tool": "answer", "arguments": {"letter": "x"}}',
        },
        {
            "role": "user",
            "content": 'Result of get_overview (call a):\n{"video": 1}\n\n'
            'Result of answer (call b):\n{"error": "bad"}',
        },
    ]
    assert messages[0]["content"] == "You are an agent."  # the caller's list is not changed


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ('{"tool": "get_overview", "arguments": {}}', None, [("get_overview", "{}")]),
        (
            'Let me look.\n```json\n{"tool": "answer", "arguments": {"letter": "B"}}\n```',
            "Let me look.",
            [("answer", '{"letter": "B"}')],
        ),
        (
            '{"name": "answer", "parameters": {"letter": "C"}}',
            None,
            [("answer", '{"letter": "C"}')],
        ),
        ('{"name": "elsewhere", "arguments": {}} is JSON', None, []),  # not an offered tool
        ('{"tool": "zoom", "arguments": {"x": 1}}', None, [("zoom", '{"x": 1}')]),  # explicit
        ("The best answer is C.", "The best answer is C.", []),
        ('{"tool": "answer", "arguments": {"letter": ', None, []),  # cut JSON: no call
        (
            '{"tool": "get_overview"}\n{"tool": "answer", "arguments": "{\\"letter\\": \\"A\\"}"}',
            None,
            [("get_overview", "{}"), ("answer", '{"letter": "A"}')],
        ),
    ],
)
def test_calls_are_read_from_the_reply_text(
    text: str, content: str | None, calls: list[tuple[str, str]]
) -> None:
    got_content, got_calls = parse_reply(text, TOOLS, turn=3)
    assert [(c.name, c.arguments) for c in got_calls] == calls
    assert [c.id for c in got_calls] == [f"text_3_{i}" for i in range(len(calls))]
    assert got_content == (content if calls else text)


def text_model(turns: list[str]) -> Any:
    """A server-side model without tool calling: turn k of the agent replies ``turns[k]``."""

    def script(req: ChatRequest) -> dict[str, Any]:
        assert req.tools is None and req.tool_choice is None
        k = sum(1 for m in req.messages if isinstance(m, AssistantMessage))
        return completion(turns[k], usage=(40, 4))

    return script


def run_text_mode(turns: list[str]) -> tuple[AgentOutcome, list[ChatRequest], list[Any]]:
    with strict_openai(text_model(turns)) as srv:
        llm = OpenAICompatProvider(
            base_url=srv.url, model="m", tool_mode="text", max_retries=0, rng=random.Random(0)
        )
        q = question(answer="A")
        loop = AgentLoop(llm, prompts(), max_steps=5)
        tools = Toolbox({"vidA": kitchen_tree()}).session(q)
        out = asyncio.run(loop.run(q, tools=tools, skills=skills_for([q.task_type]), seed=1))
    return out, srv.accepted, srv.rejected


def test_text_mode_answer_in_plain_text_is_extracted() -> None:
    out, accepted, rejected = run_text_mode(
        [
            '{"tool": "get_overview", "arguments": {}}',
            '```json\n{"tool": "search_captions", "arguments": {"query": "onions"}}\n```',
            "The chef chops red onions. The best answer is A.",
        ]
    )
    assert rejected == []
    assert (out.letter, out.stop_reason, out.n_tool_calls) == ("A", "final_text", 2)
    assert [s.tool_name for s in out.steps if s.role == "tool"] == [
        "get_overview",
        "search_captions",
    ]
    last = accepted[-1].messages
    assert [m.role for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    system = last[0]
    assert isinstance(system, SystemMessage) and TOOL_PROTOCOL in system.content
    assert "- search_captions: " in system.content and "- answer: " in system.content
    result, call = last[3].content, last[4].content
    assert isinstance(result, str) and isinstance(call, str)
    assert result.startswith("Result of get_overview (call text_0_0):\n")
    assert json.loads(call) == {
        "tool": "search_captions",
        "arguments": {"query": "onions"},
    }


def test_text_mode_answer_tool_call_ends_the_rollout() -> None:
    out, _, rejected = run_text_mode(['{"tool": "answer", "arguments": {"letter": "(b)"}}'])
    assert rejected == [] and (out.letter, out.stop_reason) == ("B", "answer")


def test_an_unknown_tool_mode_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="TRM_LLM_TOOL_MODE"):
        OpenAICompatProvider(base_url="http://x/v1", model="m", tool_mode="json")  # type: ignore[arg-type]


def test_native_tool_calls_from_the_server_are_kept_in_text_mode() -> None:
    native = ToolCall("x", "answer", '{"letter": "D"}')

    def script(req: ChatRequest) -> dict[str, Any]:
        return completion('{"tool": "get_overview"}', [call("x", "answer", native.arguments)])

    with strict_openai(script) as srv:
        llm = OpenAICompatProvider(base_url=srv.url, model="m", tool_mode="text")
        resp = asyncio.run(llm.chat([{"role": "user", "content": "q"}], tools=TOOLS))
    assert resp.tool_calls == (native,)

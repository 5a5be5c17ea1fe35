"""Issue 17.2: a request the server rejects deterministically stops the unit; transient failures
are retried; a server without tool calling is refused with the setting to change.

Against llama-cpp-python, every rollout's second call was answered HTTP 500 "Input should be a
valid string"; the provider retried each call 5 times as an outage and the run produced nothing
but infra failures. On the code before this fix the first test below raised ``InfraError`` after
5 requests (not ``ProviderRejectsRequests`` after 2) and the tools-unsupported cases raised a
``ProviderRequestError`` (400) or an ``InfraError`` (500) that never named TRM_LLM_TOOL_MODE.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from trm_assets.agent.loop import AgentLoop
from trm_assets.agent.tools import Toolbox
from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import (
    InfraError,
    Message,
    ProviderRejectsRequests,
    ProviderRequestError,
    ToolCallingUnsupported,
)
from trm_assets_tests.agent.fixtures import kitchen_tree, prompts, question, skills_for
from trm_assets_tests.llm.providers import http_provider
from trm_assets_tests.llm.strict_server import strict_openai
from trm_assets_tests.llm.test_openai_compat_server import Reply, completion, fake_openai

TOOLS = [{"type": "function", "function": {"name": "answer", "parameters": {"type": "object"}}}]
OLD_SHAPE: list[Message] = [  # the tool-call turn as the loop sent it before issue 17
    {"role": "user", "content": "q"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "answer", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "name": "answer", "content": "{}"},
]


provider = partial(http_provider, max_retries=4)


def chats(p: OpenAICompatProvider, n: int, messages: list[Message], **kw: Any) -> list[Any]:
    """``n`` sequential calls; each result is the reply or the exception raised."""

    async def go() -> list[Any]:
        out: list[Any] = []
        for _ in range(n):
            try:
                out.append(await p.chat(messages, **kw))
            except Exception as e:
                out.append(e)
        await p.aclose()
        return out

    return asyncio.run(go())


def test_the_same_validation_500_stops_after_two_requests_not_five() -> None:
    with strict_openai() as srv:
        (err,) = chats(provider(srv.url), 1, OLD_SHAPE, tools=TOOLS)
    assert isinstance(err, ProviderRejectsRequests) and not isinstance(err, InfraError)
    assert isinstance(err, ProviderRequestError)  # what the harness already lets propagate
    assert (err.status, err.repeats, len(srv.rejected)) == (500, 2, 2)
    msg = str(err)
    assert msg.startswith("HTTP 500 from http://127.0.0.1:")
    assert "same validation error 2 times" in msg and "TRM_LLM_TOOL_MODE=text" in msg
    # the server is quoted (shortened): its own words are in the message
    said = msg.split("Server said: ", 1)[1]
    assert "Input should be a valid string" in said and len(said) <= 301


def test_without_retries_the_second_call_with_the_same_body_stops() -> None:
    with strict_openai() as srv:
        first, second, third = chats(provider(srv.url, max_retries=0), 3, OLD_SHAPE)
    assert isinstance(first, InfraError) and first.status == 500  # once may be a fluke
    assert isinstance(second, ProviderRejectsRequests) and second.repeats == 2
    assert isinstance(third, ProviderRejectsRequests) and third.repeats == 3
    assert len(srv.rejected) == 3


def test_the_agent_loop_lets_the_rejection_propagate() -> None:
    # A server that refuses the second turn of every rollout (here: any request with a tool turn).
    body = {
        "error": {"message": "1 validation error:\n  {'msg': 'Input should be a valid string'}"}
    }
    first_turn = completion(
        None,
        [{"id": "c0", "type": "function", "function": {"name": "get_overview", "arguments": "{}"}}],
    )
    replies = [Reply(body=first_turn), Reply(500, body)]
    with fake_openai(*replies) as srv:
        q = question()
        loop = AgentLoop(provider(srv.url), prompts(), max_steps=4)
        tools = Toolbox({"vidA": kitchen_tree()}).session(q)
        with pytest.raises(ProviderRejectsRequests):
            asyncio.run(loop.run(q, tools=tools, skills=skills_for([q.task_type]), seed=1))
    assert len(srv.requests) == 3  # one good turn, then the same 500 twice


@pytest.mark.parametrize(
    ("status", "bodies"),
    [
        (500, ["Internal Server Error"]),  # no validation body: an outage
        (500, [b""]),  # empty body
        (
            500,
            [{"error": f"validation error #{i}"} for i in range(5)],
        ),  # a different body each time
        (503, [{"error": "validation error"}]),  # gateway statuses are transient whatever they say
        (502, [{"error": "Input should be a valid string"}]),
        (429, [{"error": "rate limited"}]),
    ],
    ids=["500-plain", "500-empty", "500-varying", "503-validation", "502-validation", "429"],
)
def test_transient_failures_stay_retried_as_infra(status: int, bodies: list[Any]) -> None:
    replies = [Reply(status, bodies[i % len(bodies)]) for i in range(5)]
    with fake_openai(*replies, Reply(body=completion("B"))) as srv:
        (err,) = chats(provider(srv.url, max_retries=4), 1, [{"role": "user", "content": "q"}])
    assert isinstance(err, InfraError) and err.status == status, err
    assert len(srv.requests) == 5 and "gave up after 5 attempt(s)" in str(err)


def test_a_transient_failure_then_success_is_not_counted_as_rejection() -> None:
    body = {"error": "validation error"}
    with fake_openai(Reply(500, body), Reply(body=completion("B"))) as srv:
        replies = chats(provider(srv.url, max_retries=1), 2, [{"role": "user", "content": "q"}])
    assert [r.content for r in replies] == ["B", "B"] and len(srv.requests) == 3


def test_400_and_422_stop_at_the_first_call() -> None:
    for status in (400, 422):
        body = {"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]}
        with fake_openai(Reply(status, body)) as srv:
            (err,) = chats(provider(srv.url), 1, [{"role": "user", "content": "q"}])
        assert type(err) is ProviderRequestError and err.status == status
        assert len(srv.requests) == 1 and "Field required" in str(err)


VLLM = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
TOOLS_UNSUPPORTED = [
    (400, {"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools"}}),
    (400, {"object": "error", "message": VLLM, "type": "BadRequestError", "code": 400}),
    (500, {"error": {"code": 500, "message": "tools param requires --jinja flag"}}),
    (
        400,
        {"error": {"message": "Unsupported parameter: 'tools' is not supported with this model"}},
    ),
]


@pytest.mark.parametrize(
    ("status", "body"), TOOLS_UNSUPPORTED, ids=["ollama", "vllm", "llama.cpp", "openai"]
)
def test_a_server_without_tool_calling_names_the_text_mode(status: int, body: Any) -> None:
    with fake_openai(Reply(status, body)) as srv:
        (err,) = chats(provider(srv.url), 1, [{"role": "user", "content": "q"}], tools=TOOLS)
    assert isinstance(err, ToolCallingUnsupported) and err.status == status
    assert "TRM_LLM_TOOL_MODE=text" in str(err) and len(srv.requests) == 1
    # without tools in the request the same words are an ordinary refusal / outage
    with fake_openai(Reply(status, body)) as srv:
        (err,) = chats(provider(srv.url, max_retries=0), 1, [{"role": "user", "content": "q"}])
    assert not isinstance(err, ToolCallingUnsupported)

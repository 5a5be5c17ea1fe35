"""The OpenAI-compatible provider over real HTTP against a local server (127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import (
    ContextLengthExceeded,
    InfraError,
    LLMProvider,
    ProviderRequestError,
    Usage,
)
from trm_assets_tests.llm.providers import chat_once, http_provider
from trm_assets_tests.llm.test_openai_compat_server import Reply, completion, fake_openai

SECRET = "sk-test-DO-NOT-LEAK-7f3a9c"


provider = partial(
    http_provider,
    model="test-model",
    key=SECRET,
    max_retries=3,
    max_concurrency=4,
    backoff_base_s=0.01,
    backoff_max_s=0.05,
)


def test_success_sends_a_chat_completion_and_counts_usage() -> None:
    with fake_openai(Reply(body=completion("B", usage=(12, 3)))) as srv:
        p = provider(srv.url, price_prompt_per_1k=1.0, price_completion_per_1k=2.0)
        assert isinstance(p, LLMProvider) and not p.is_simulated
        resp = chat_once(p, temperature=0.2, max_tokens=50, seed=42)
    assert resp.content == "B" and resp.tool_calls == () and resp.finish_reason == "stop"
    assert resp.usage == Usage(12, 3) and p.usage == Usage(12, 3)
    assert p.cost_usd == pytest.approx((12 * 1.0 + 3 * 2.0) / 1000)
    req = srv.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert req["json"] == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "max_tokens": 50,
        "seed": 42,
    }


def test_tool_call_round_trip() -> None:
    tool_calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_overview", "arguments": "{}"},
        },
        # Some servers send arguments as an object: normalized to JSON text.
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "answer", "arguments": {"letter": "C"}},
        },
    ]
    tools = [
        {"type": "function", "function": {"name": "answer", "description": "d", "parameters": {}}}
    ]
    with fake_openai(Reply(body=completion(None, tool_calls))) as srv:
        p = provider(srv.url)
        resp = chat_once(p, tools=tools)
    assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [
        ("call_1", "get_overview", "{}"),
        ("call_2", "answer", '{"letter": "C"}'),
    ]
    assert srv.requests[0]["json"]["tools"] == tools
    assert srv.requests[0]["json"]["tool_choice"] == "auto"
    msg = resp.as_message()
    assert msg["tool_calls"][1]["function"] == {"name": "answer", "arguments": '{"letter": "C"}'}


def test_retries_503_and_429_then_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with fake_openai(
        Reply(503, {"error": {"message": "overloaded"}}),
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"}),
        Reply(body=completion("A")),
    ) as srv:
        p = provider(srv.url)
        resp = chat_once(p)
    assert resp.content == "A" and len(srv.requests) == 3
    assert p.stats().retries == 2 and p.stats().calls == 1
    assert "HTTP 503" in caplog.text and "retrying" in caplog.text
    assert SECRET not in caplog.text and "Bearer" not in caplog.text


def test_gives_up_after_max_retries_with_an_infra_error() -> None:
    with fake_openai(Reply(502, {"error": "bad gateway"})) as srv:
        p = provider(srv.url, max_retries=2)
        with pytest.raises(InfraError) as ei:
            chat_once(p)
    assert ei.value.kind == "http_status" and ei.value.status == 502
    assert "gave up after 3 attempt(s)" in str(ei.value)
    assert len(srv.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_4xx_are_not_retried_and_not_infra(status: int) -> None:
    # The server echoes the key in its error: it is masked in the exception.
    with fake_openai(
        Reply(status, {"error": {"message": f"bad request with key {SECRET}"}})
    ) as srv:
        p = provider(srv.url)
        with pytest.raises(ProviderRequestError) as ei:
            chat_once(p)
    assert not isinstance(ei.value, InfraError) and not isinstance(ei.value, ContextLengthExceeded)
    assert ei.value.status == status and len(srv.requests) == 1
    assert SECRET not in str(ei.value) and f"HTTP {status}" in str(ei.value)


def test_a_redirect_names_where_it_points() -> None:
    """Hostile pass: an http:// URL for an https:// endpoint (a 307) said "the server refused the
    request", with no Location. It is still not followed (a POST is not re-sent elsewhere
    unasked), and never retried; the credentials a Location may carry are not shown."""
    to = "https://bob:hunter2-long-pw@api.example.com/v1/chat/completions?token=SECRETTOKEN123"
    body = f'Redirecting to <a href="{to}">{to}</a>'  # what Flask/Express write (review)
    with fake_openai(Reply(307, body, headers={"Location": to})) as srv:
        with pytest.raises(ProviderRequestError) as ei:
            chat_once(provider(srv.url))
        assert len(srv.requests) == 1
    msg = str(ei.value)
    assert "HTTP 307" in msg and "redirects to https://api.example.com/v1/chat/completions:" in msg
    assert "TRM_LLM_BASE_URL" in msg and "hunter2" not in msg and SECRET not in msg
    assert "SECRETTOKEN123" not in msg  # a query may carry a token (review)


def test_a_reply_larger_than_a_completion_can_be_is_an_infra_error() -> None:
    """Hostile pass: a 20 MB reply was parsed and masked on the event loop for 15 s, holding
    every other rollout; a reply over MAX_REPLY_BYTES is an invalid response (retried, counted
    as infra), not parsed."""
    from trm_assets.llm.openai_compat import MAX_REPLY_BYTES

    huge = completion("x" * (MAX_REPLY_BYTES + 1))
    with fake_openai(Reply(body=huge), Reply(body=completion("B"))) as srv:
        resp = chat_once(provider(srv.url, max_retries=1))  # the retry gets a normal reply
        assert resp.content == "B" and len(srv.requests) == 2
    with fake_openai(Reply(body=huge)) as srv, pytest.raises(InfraError) as ei:
        chat_once(provider(srv.url, max_retries=0))
    assert ei.value.kind == "invalid_response" and "MiB" in str(ei.value)


def test_context_overflow_is_its_own_error() -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens",
            "code": "context_length_exceeded",
        }
    }
    with fake_openai(Reply(400, body)) as srv:
        with pytest.raises(ContextLengthExceeded):
            chat_once(provider(srv.url))
        assert len(srv.requests) == 1


def test_timeout_is_an_infra_error() -> None:
    with fake_openai(Reply(body=completion("A"), delay_s=1.0)) as srv:
        p = provider(srv.url, timeout_s=0.2, max_retries=1)
        with pytest.raises(InfraError) as ei:
            chat_once(p)
    assert ei.value.kind == "timeout" and len(srv.requests) == 2


def test_connection_refused_is_an_infra_error() -> None:
    with fake_openai() as srv:
        url = srv.url
    with pytest.raises(InfraError) as ei:  # the server is gone
        chat_once(provider(url, max_retries=1))
    assert ei.value.kind == "connection"


@pytest.mark.parametrize("body", [b"<html>oops</html>", {"choices": []}, {"object": "list"}])
def test_a_200_that_is_not_a_chat_completion_is_infra_after_retries(body: Any) -> None:
    with fake_openai(Reply(200, body)) as srv:
        with pytest.raises(InfraError) as ei:
            chat_once(provider(srv.url, max_retries=1))
        assert len(srv.requests) == 2
    assert ei.value.kind == "invalid_response"


def test_concurrency_is_limited() -> None:
    with fake_openai(Reply(body=completion("A"), delay_s=0.1)) as srv:
        p = provider(srv.url, max_concurrency=2)

        async def go() -> float:
            t0 = asyncio.get_running_loop().time()
            await asyncio.gather(*(p.chat([{"role": "user", "content": str(i)}]) for i in range(6)))
            await p.aclose()
            return asyncio.get_running_loop().time() - t0

        elapsed = asyncio.run(go())
        # 6 requests, 2 at a time, 0.1 s each: at least 3 waves.
        assert elapsed >= 0.28
        # Reusable across event loops (each asyncio.run gets its own pool and semaphore).
        assert chat_once(p).content == "A"


def test_the_key_never_shows_in_repr_or_errors() -> None:
    p = provider("http://127.0.0.1:9/v1", max_retries=0)
    assert SECRET not in repr(p) and "api_key=set" in repr(p) and SECRET not in str(p.stats())
    with pytest.raises(InfraError) as ei:
        chat_once(p)
    assert SECRET not in str(ei.value) and SECRET not in repr(ei.value)
    with pytest.raises(TypeError, match="SecretStr"):
        OpenAICompatProvider(base_url="http://x/v1", model="m", api_key=SECRET)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http"):
        OpenAICompatProvider(base_url="localhost:8000", model="m")


@pytest.mark.parametrize(
    ("reported", "expected"),
    [("qwen2.5-0.5b-instruct-q4_k_m.gguf", "qwen2.5-0.5b-instruct-q4_k_m.gguf"), (None, "")],
)
def test_the_response_model_is_what_the_server_reported(
    reported: str | None, expected: str
) -> None:
    """Provenance (`predictions.served_model`): a server that names no model is not taken to
    confirm the requested one."""
    body = completion("B")
    if reported is None:
        del body["model"]
    else:
        body["model"] = reported
    with fake_openai(Reply(body=body)) as srv:
        resp = chat_once(provider(srv.url))
    assert srv.requests[0]["json"]["model"] == "test-model"
    assert resp.model == expected

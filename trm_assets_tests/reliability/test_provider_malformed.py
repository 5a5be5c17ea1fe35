"""Issue 18.3 (provider part): garbage 200s are infra and never crash; a key that cannot go into
an HTTP header is refused when the provider is built; connection refused is infra.

On the code before this fix: a ``usage`` that is not an object, a tool call whose ``function`` is
not an object and a deeply nested body crashed the call with ``AttributeError`` /
``RecursionError`` (a bug, not infra); a key with a trailing newline or a non-ASCII character was
accepted, and every request then failed on the client ("LocalProtocolError", retried as a
connection failure, or a ``UnicodeEncodeError`` traceback).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from trm_assets.domain.errors import TrmError
from trm_assets.llm.protocol import ApiKeyFormatError, InfraError
from trm_assets_tests.llm.providers import chat_once, http_provider
from trm_assets_tests.llm.test_openai_compat_server import Reply, completion, fake_openai

KEY = "sk-trm-good-Z8qW3eR5tY7uI9oP"


provider = partial(http_provider, key=KEY, max_retries=1)
chat = partial(chat_once, content="q")


def with_message(message: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


GARBAGE = [
    ("empty-choices", {"choices": []}, "the 'choices' list is empty"),
    ("no-choices", {"id": "x", "object": "chat.completion"}, "no 'choices' list"),
    ("choices-not-a-list", {"choices": {"0": {}}}, "no 'choices' list"),
    ("no-message", {"choices": [{"index": 0, "finish_reason": "stop"}]}, "has no 'message'"),
    ("message-null", with_message(None), "has no 'message'"),
    ("message-a-string", with_message("B"), "has no 'message'"),
    ("choice-a-string", {"choices": ["B"]}, "has no 'message'"),
    ("body-a-list", [1, 2], "the body is a JSON list"),
    ("body-null", None, "the body is a JSON NoneType"),
    ("body-a-string", "B", "the body is a JSON str"),
    ("tool-calls-a-string", with_message({"content": None, "tool_calls": "x"}), "not a list"),
    ("tool-call-a-string", with_message({"tool_calls": ["x"]}), "tool_calls[0] has no function"),
    ("function-a-string", with_message({"tool_calls": [{"function": "f"}]}), "no function name"),
    ("function-no-name", with_message({"tool_calls": [{"function": {}}]}), "no function name"),
    ("not-json", b"<html>502 Bad Gateway</html>", "not JSON"),
    ("deeply-nested", b"[" * 200_000, "not JSON"),
    ("not-utf8", b'{"choices": "\xff\xfe"}', "not JSON"),
]


@pytest.mark.parametrize(("body", "why"), [g[1:] for g in GARBAGE], ids=[g[0] for g in GARBAGE])
def test_a_200_that_is_not_a_chat_completion_is_infra_and_never_crashes(
    body: Any, why: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with fake_openai(Reply(200, raw)) as srv:
        with pytest.raises(InfraError) as ei:
            chat(provider(srv.url))
        assert len(srv.requests) == 2  # retried once, then given up
    assert ei.value.kind == "invalid_response" and why in str(ei.value)
    assert "gave up after 2 attempt(s)" in str(ei.value)


@pytest.mark.parametrize(
    "usage",
    [[1, 2], "lots", 7, {"prompt_tokens": "many"}, {"prompt_tokens": {"n": 1}}],
    ids=["list", "string", "number", "string-count", "object-count"],
)
def test_odd_usage_does_not_turn_a_good_reply_into_a_failure(usage: Any) -> None:
    body = completion("B")
    body["usage"] = usage
    with fake_openai(Reply(body=body)) as srv:
        resp = chat(provider(srv.url))
        assert len(srv.requests) == 1
    assert resp.content == "B"


def test_empty_content_is_a_task_outcome_not_infra() -> None:
    with fake_openai(Reply(body=with_message({"role": "assistant", "content": None}))) as srv:
        resp = chat(provider(srv.url))
    assert resp.content is None and resp.tool_calls == ()


BAD_KEYS = [
    ("trailing-newline", KEY + "\n", "a newline at its end"),
    ("trailing-crlf", KEY + "\r\n", "a carriage return at character"),
    ("leading-space", " " + KEY, "a space at its start"),
    ("inner-space", KEY[:10] + " " + KEY[10:], "a space at character 11 of"),
    ("tab", KEY + "\t", "a tab at its end"),
    ("non-ascii", KEY[:5] + "é" + KEY[5:], "a non-ASCII character at character 6 of"),
    ("nul", KEY + "\x00", "a control character at its end"),
    ("smart-quotes", "“" + KEY + "”", "a non-ASCII character at its start (2 such characters"),
]


@pytest.mark.parametrize(("key", "why"), [b[1:] for b in BAD_KEYS], ids=[b[0] for b in BAD_KEYS])
def test_a_key_that_cannot_go_into_a_header_is_refused_when_built(key: str, why: str) -> None:
    with fake_openai() as srv:
        with pytest.raises(ApiKeyFormatError) as ei:
            provider(srv.url, key=key)
        assert srv.requests == []  # nothing was sent
    msg = str(ei.value)
    assert isinstance(ei.value, TrmError)  # shown as an error line, not a traceback
    assert why in msg and "TRM_LLM_API_KEY" in msg and "OPENAI_API_KEY" in msg
    low = msg.lower()
    assert not [KEY[i : i + 6] for i in range(len(KEY) - 5) if KEY[i : i + 6].lower() in low]


def test_an_empty_key_means_no_key() -> None:
    with fake_openai(Reply(body=completion("B"))) as srv:
        assert chat(provider(srv.url, key="")).content == "B"
    assert "Authorization" not in srv.requests[0]["headers"]


def test_connection_refused_on_every_call_is_infra() -> None:
    with fake_openai() as srv:
        url = srv.url
    p = provider(url, max_retries=0)
    for _ in range(3):
        with pytest.raises(InfraError) as ei:
            chat(p)
        assert ei.value.kind == "connection" and "ConnectError" in str(ei.value)
    assert p.stats().infra_errors == 3

"""Issue 18.2: no fragment of the API key (or of URL credentials) leaves the provider.

A corpus of hostile error bodies, served over real HTTP, each answered by the real provider: the
key echoed in headers, the key at every position around the 300-character excerpt cut, the
``sk-...`` prefix + last 8 characters of OpenAI's 401 body, the key upper-cased or split across
lines, base64 in an echoed ``Authorization: Basic`` header, a base URL with ``user:password@``.
Every output — the exception's ``str`` and ``repr``, every log record (retry lines included), the
provider's ``repr`` and ``base_url``, the returned reply — must hold no run of >= 6 consecutive
characters of a secret (case-insensitive) nor of its base64 form.

On the code before this fix the excerpt was cut to 300 characters first and masked second (only
the whole key): the cut-position cases leaked up to len(KEY) - 1 characters, the 401, upper-case,
split and base64 cases leaked, and a URL's credentials were printed verbatim.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.redact import MIN_FRAGMENT, excerpt, redact, redact_url
from trm_assets_tests.llm.providers import chat_once, http_provider
from trm_assets_tests.llm.test_openai_compat_server import Reply, completion, fake_openai

KEY = "sk-trm-Q7vXk2LmZp9RtW4yBn6HcJ8dF3gS5aE1uV0o"  # 43 characters, fake
PASSWORD = "Tr0ub4dor-and-3-horses"
CUT = 300  # openai_compat._BODY_EXCERPT


def grams(secret: str) -> set[str]:
    low = secret.lower()
    return {low[i : i + MIN_FRAGMENT] for i in range(len(low) - MIN_FRAGMENT + 1)}


def b64_grams(secret: str, prefix: bytes = b"") -> set[str]:
    """6-grams of the base64 of ``secret`` at each byte alignment (edge characters excluded)."""
    out: set[str] = set()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + secret.encode())
        stable = enc.decode()[4:-4]
        out |= {stable[i : i + MIN_FRAGMENT] for i in range(len(stable) - MIN_FRAGMENT + 1)}
    return out


NEEDLES = {
    "key": grams(KEY),
    "password": grams(PASSWORD),
}
B64_NEEDLES = b64_grams(KEY) | b64_grams(PASSWORD)


def leaks(text: str) -> list[str]:
    low = text.lower()
    found = [g for gs in NEEDLES.values() for g in gs if g in low]
    found += [g for g in B64_NEEDLES if g in text]
    return sorted(found)


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def corpus() -> Iterator[tuple[str, int, Any]]:
    """(case id, HTTP status, body) — bytes bodies are sent as they are."""
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    for status in (400, 401, 403, 404, 422, 500):
        yield f"echoed-headers-{status}", status, {"error": "bad request", "headers": headers}
    # the key at every position around the cut (the body is the text after "Server said: ")
    for p in range(CUT - len(KEY) - 2, CUT + 3):
        yield f"cut-at-{p}", 400, ("x" * p + KEY + "z" * 80).encode()
    yield (
        "openai-401-prefix-and-last-8",
        401,
        {
            "error": {
                "message": f"Incorrect API key provided: {KEY[:8]}{'*' * 27}{KEY[-8:]}. You can "
                "find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
    )
    yield "prefix-only", 401, {"error": f"key {KEY[:10]}... rejected"}
    yield "last-8-only", 401, {"error": f"key ending in ...{KEY[-8:]} rejected"}
    yield "upper-cased", 400, {"error": f"KEY {KEY.upper()} IS INVALID"}
    yield "split-across-lines", 400, f"key: {KEY[:20]}\n{KEY[20:]}\n".encode()
    yield "base64-basic", 401, f"Authorization: Basic {basic('me', KEY)}".encode()
    yield "base64-bare", 401, base64.b64encode(KEY.encode())
    yield "json-escaped-in-text", 500, json.dumps({"detail": json.dumps({"key": KEY})}).encode()
    yield "retried-503", 503, {"error": f"overloaded; your key {KEY}"}
    yield "huge-body", 400, (KEY + "." * 2_000_000 + KEY).encode()


CASES = list(corpus())


provider = partial(http_provider, model="test-model", key=KEY, timeout_s=5.0, max_retries=1)


def outputs_of(p: OpenAICompatProvider, caplog: pytest.LogCaptureFixture) -> list[str]:
    try:
        resp = chat_once(p)
    except Exception as e:  # every error path: InfraError, ProviderRequestError, ...
        out = [str(e), repr(e), *map(str, e.args)]
    else:
        out = [repr(resp)]
    return [*out, caplog.text, *(r.getMessage() for r in caplog.records), repr(p), p.base_url]


def test_no_key_fragment_in_any_output(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # One server for the whole corpus: a retried status (5xx) is answered twice (max_retries=1).
    replies = [Reply(status, body) for _, status, body in CASES for _ in range(1 + (status >= 500))]
    found: dict[str, list[list[str]]] = {}
    with fake_openai(*replies, Reply(599, "end of corpus")) as srv:
        for case, status, _ in CASES:
            caplog.clear()
            texts = outputs_of(provider(srv.url), caplog)
            assert f"HTTP {status} from http://127.0.0.1:" in texts[0], (case, texts[0])
            if any(leaks(t) for t in texts):
                found[case] = [leaks(t) for t in texts]
    assert len(srv.requests) == len(replies)
    assert found == {}


def test_a_reply_that_echoes_the_key_is_returned_masked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tool_calls = [
        {"id": "c1", "type": "function", "function": {"name": "answer", "arguments": KEY}}
    ]
    with fake_openai(Reply(body=completion(f"my key is {KEY}", tool_calls))) as srv:
        p = provider(srv.url)
        resp = chat_once(p)
    assert leaks(resp.content or "") == [] and resp.content == "my key is **********"
    assert leaks(resp.tool_calls[0].arguments) == []
    assert leaks(caplog.text) == []


def test_credentials_in_the_base_url_are_redacted_everywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    echoed = {
        "error": {
            "message": "upstream said no",
            "url": "http://alice:" + PASSWORD + "@upstream/v1",
            "authorization": "Basic " + basic("alice", PASSWORD),
        }
    }
    with fake_openai(Reply(502, echoed)) as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
        p = provider(url, api_key=None)
        assert p.base_url == srv.url.replace("http://", "http://***@")
        texts = outputs_of(p, caplog)
    sent = srv.requests[0]["headers"]["Authorization"]
    assert sent == "Basic " + basic("alice", PASSWORD)  # httpx sends the URL's credentials
    assert "http://***@127.0.0.1:" in texts[0] and "gave up after 2 attempt(s)" in texts[0]
    assert [leaks(t) for t in texts] == [[] for _ in texts]


def test_credentials_in_the_url_beside_an_api_key_say_which_is_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hostile pass: with both, httpx's basic auth replaced the Bearer header: the key was never
    sent, and a 401 read "the API key was rejected". Both still work together (an
    OPENAI_API_KEY exported for other tools beside a basic-auth proxy is a working setup; a
    review found the first fix, a refusal, broke it): the provider says once that the key is
    not sent, and a 401 names the URL's credentials."""
    caplog.set_level(logging.DEBUG)
    with fake_openai(Reply(401, {"error": {"message": "bad credentials"}})) as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
        p = provider(url, max_retries=0)  # and the key
        provider(url), provider(url)  # a unit builds three (agent, evolve, diagnose)
        told = caplog.text.count("is not sent")
        texts = outputs_of(p, caplog)
    assert told == 1  # once per process, not per provider (review: 39 lines in one training)
    assert srv.requests[0]["headers"]["Authorization"] == "Basic " + basic("alice", PASSWORD)
    assert "the API key (TRM_LLM_API_KEY or OPENAI_API_KEY) is not sent" in caplog.text
    assert "credentials in TRM_LLM_BASE_URL (user:password@) were rejected" in texts[0]
    assert "check TRM_LLM_API_KEY" not in texts[0]
    assert [leaks(t) for t in texts] == [[] for _ in texts]


def test_a_refused_connection_names_the_redacted_url(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with fake_openai() as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
    p = provider(url, api_key=None, max_retries=0)  # the server is gone: connection refused
    texts = outputs_of(p, caplog)
    assert texts[0].startswith("connection: ConnectError talking to http://***@127.0.0.1:")
    assert [leaks(t) for t in texts] == [[] for _ in texts]


@pytest.mark.parametrize("p", range(CUT - len(KEY) - 2, CUT + 3))
def test_excerpt_masks_before_it_cuts(p: int) -> None:
    text = "x" * p + KEY + "z" * 80
    out = excerpt(text, [KEY], CUT)
    assert leaks(out) == [] and len(out) <= CUT + 1 and out.endswith("…")
    assert out.startswith("x" * min(p, CUT))


def test_redact_keeps_ordinary_text_and_masks_fragments() -> None:
    assert redact("nothing secret here: sk-other-key", [KEY]) == "nothing secret here: sk-other-key"
    assert redact(f"a {KEY[5:11]} b", [KEY]) == "a ********** b"  # exactly 6 characters
    assert redact(f"a {KEY[5:10]} b", [KEY]) == f"a {KEY[5:10]} b"  # 5: left alone
    assert redact_url("see https://u:p%40ss@h.example/v1 and http://h/v1") == (
        "see https://***@h.example/v1 and http://h/v1"
    )

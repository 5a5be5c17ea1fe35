"""Issue 18.7 (provider part): usage numbers are checked before anything stores them.

``usage.prompt_tokens = 10**20`` crashed a DuckDB BIGINT insert later with a traceback; negative,
fractional and string counts went through as they were (or failed the whole reply). Now every
count is an integer in 0..10**9 and a clamped one marks the usage unreliable, with a log line.
On the code before this fix these tests fail: 10**20 and -5 are returned as such (and the insert
raises), "12" and 12.7 come back unflagged, "lots" fails the reply as infra.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import duckdb
import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import MAX_TOKENS_PER_CALL, InfraError, Usage
from trm_assets_tests.llm.test_openai_compat_server import Reply, completion, fake_openai

CASES = [
    ("huge", 10**20, MAX_TOKENS_PER_CALL, True),
    ("huger-than-bigint", 10**40, MAX_TOKENS_PER_CALL, True),
    ("negative", -5, 0, True),
    ("fraction", 12.7, 12, True),
    ("integral-float", 12.0, 12, False),
    ("numeric-string", "12", 12, True),
    ("word", "lots", 0, True),
    ("bool", True, 0, True),
    ("object", {"n": 3}, 0, True),
    ("null", None, 0, False),
    ("normal", 1234, 1234, False),
    ("limit", MAX_TOKENS_PER_CALL, MAX_TOKENS_PER_CALL, False),
]


def chat_usage(body: dict[str, Any] | bytes) -> Any:
    with fake_openai(Reply(body=body)) as srv:

        async def go() -> Any:
            p = OpenAICompatProvider(
                base_url=srv.url, model="m", max_retries=0, rng=random.Random(0)
            )
            try:
                return await p.chat([{"role": "user", "content": "q"}]), p.usage
            finally:
                await p.aclose()

        return asyncio.run(go())


@pytest.mark.parametrize(
    ("reported", "stored", "unreliable"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_reported_count_is_clamped_and_flagged(
    reported: Any, stored: int, unreliable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trm_assets.llm.openai_compat")
    body = completion("B")
    body["usage"] = {"prompt_tokens": reported, "completion_tokens": 3, "total_tokens": 0}
    resp, total = chat_usage(body)
    assert resp.content == "B"  # the reply itself is good
    assert resp.usage == Usage(stored, 3, unreliable) == total
    assert ("marked unreliable" in caplog.text) is unreliable
    # what a run log does with it later: a BIGINT insert
    con = duckdb.connect()
    con.execute("CREATE TABLE calls (prompt_tokens BIGINT, completion_tokens BIGINT)")
    con.execute(
        "INSERT INTO calls VALUES (?, ?)", [resp.usage.prompt_tokens, resp.usage.completion_tokens]
    )
    assert con.execute("SELECT prompt_tokens FROM calls").fetchone() == (stored,)


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1" * 5000])
def test_non_finite_and_giant_json_numbers(raw: bytes) -> None:
    body = (
        b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "B"}}], '
        b'"usage": {"prompt_tokens": ' + raw + b', "completion_tokens": 1}}'
    )
    if len(raw) > 100:  # beyond Python's int-parsing limit: the body is not usable JSON (infra)
        with pytest.raises(InfraError, match="not JSON"):
            chat_usage(body)
        return
    resp, _ = chat_usage(body)
    expected = MAX_TOKENS_PER_CALL if raw == b"Infinity" else 0
    assert resp.usage == Usage(expected, 1, True)


def test_usage_that_is_not_an_object_is_flagged_and_sums_keep_the_flag() -> None:
    body = completion("B")
    body["usage"] = [10, 2]
    resp, _ = chat_usage(body)
    assert resp.usage == Usage(0, 0, True)
    assert (Usage(5, 1) + resp.usage + Usage(2, 2)) == Usage(7, 3, True)
    assert Usage(1, 1) + Usage(2, 2) == Usage(3, 3, False)

"""A server that accepts requests and never answers costs each call its deadline × attempts.

Against a hung endpoint the outage streak (52 lost rollouts in a row at the defaults) took
≈ 33 minutes: every rollout's call waited out five 60 s attempts. Once the endpoint has answered
none of the provider's last ``silent_limit`` attempts (2 × ``max_concurrency``), a timed-out
attempt is no longer retried, until any response resets the count. Over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import InfraError
from trm_assets_tests.llm.providers import chat_once, http_provider
from trm_assets_tests.llm.test_openai_compat_server import completion, local_server

TIMEOUT_S = 0.3
HANG = None  # a script's answer for "hold the request, send nothing"


@contextmanager
def scripted_server(
    script: Callable[[int], tuple[int, bytes] | None],
) -> Iterator[tuple[str, list[int]]]:
    """A local server whose n-th request (from 1) gets ``script(n)``: ``(status, JSON body)``,
    or ``HANG`` to hold the connection without a byte. Yields the base URL and a one-element
    request counter."""
    served = [0]
    lock, stop = threading.Lock(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                served[0] += 1
                reply = script(served[0])
            if reply is HANG:
                stop.wait(10)
                return
            status, body = reply
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with local_server(Handler) as origin:
        try:
            yield f"{origin}/v1", served
        finally:
            stop.set()  # free the held handlers before the server shuts down


ANSWER = (200, json.dumps(completion("B")).encode())


def _provider(url: str, max_concurrency: int) -> OpenAICompatProvider:
    return http_provider(url, timeout_s=TIMEOUT_S, max_retries=4, max_concurrency=max_concurrency)


def _call(p: OpenAICompatProvider) -> tuple[float, InfraError | None]:
    t0 = time.monotonic()
    try:
        chat_once(p, "q")
    except InfraError as e:
        return time.monotonic() - t0, e
    return time.monotonic() - t0, None


def test_a_hung_endpoint_stops_being_retried_until_it_answers() -> None:
    answers = [False]
    with scripted_server(lambda n: ANSWER if answers[0] else HANG) as (url, served):
        p = _provider(url, max_concurrency=2)
        assert p.silent_limit == 4
        # the first call: four silent attempts reach the limit, the fifth is not made
        elapsed, err = _call(p)
        assert err is not None and err.kind == "timeout"
        assert "answered none of the last 4 attempts" in str(err)
        assert "gave up after 4 attempt(s)" in str(err)
        assert served[0] == 4
        assert 4 * TIMEOUT_S <= elapsed < 4 * TIMEOUT_S + 0.8, elapsed
        # still hung: one attempt per call
        elapsed, err = _call(p)
        assert err is not None and "gave up after 1 attempt(s)" in str(err)
        assert served[0] == 5 and TIMEOUT_S <= elapsed < TIMEOUT_S + 0.5, elapsed
        # it answers again: the count starts over
        answers[0] = True
        assert _call(p)[1] is None and served[0] == 6
        answers[0] = False
        elapsed, err = _call(p)
        assert err is not None and "gave up after 4 attempt(s)" in str(err)
        assert served[0] == 10


@pytest.mark.parametrize("status", [503, 200])
def test_any_response_keeps_the_retries(status: int) -> None:
    """A server that answers — even with an error — is not hung: its timeouts in between do not
    add up to the limit. Here every other attempt answers 503 (retried), so a call makes all
    its attempts; with 200 the call succeeds at its second attempt."""
    reply = ANSWER if status == 200 else (503, b'{"error": "busy"}')
    # odd requests hang; silent_limit 2: two timeouts in a row would trip it
    with scripted_server(lambda n: HANG if n % 2 else reply) as (url, served):
        _, err = _call(_provider(url, max_concurrency=1))
    if status == 200:
        assert err is None and served[0] == 2
    else:
        assert err is not None and "gave up after 5 attempt(s)" in str(err)
        assert "answered none" not in str(err) and served[0] == 5


def test_a_proxy_504_counts_as_no_answer() -> None:
    """A hung backend behind a proxy: every attempt comes back as the proxy's 504 after its own
    deadline. Those are not answers from the model; they count towards the limit like a
    timeout (a 503 or any other response resets it: the previous test)."""
    gateway = (504, b"<html>504 Gateway Time-out</html>")
    with scripted_server(lambda n: gateway) as (url, served):
        p = _provider(url, max_concurrency=1)  # silent_limit 2
        _, first = _call(p)
        _, second = _call(p)
    assert first is not None and first.status == 504
    assert "answered none of the last 2 attempts" in str(first)
    assert "gave up after 2 attempt(s)" in str(first)
    assert second is not None and "gave up after 1 attempt(s)" in str(second)
    assert served[0] == 3

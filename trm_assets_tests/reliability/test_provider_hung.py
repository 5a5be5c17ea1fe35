"""A server that accepts requests and never answers costs each call its deadline × attempts.

Against a hung endpoint the outage streak (52 lost rollouts in a row at the defaults) took
≈ 33 minutes: every rollout's call waited out five 60 s attempts. Once the endpoint has answered
none of the provider's last ``silent_limit`` attempts (2 × ``max_concurrency``), a timed-out
attempt is no longer retried, until any response resets the count. Over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import InfraError
from trm_assets_tests.llm.providers import chat_once
from trm_assets_tests.llm.test_openai_compat_server import completion
from trm_assets_tests.reliability.test_provider_deadline import _read_request

TIMEOUT_S = 0.3


class _Switch:
    """Whether the server answers (True) or holds every request without a byte (False)."""

    def __init__(self) -> None:
        self.answers = False
        self.requests = 0


@contextmanager
def hung_server(switch: _Switch) -> Iterator[str]:
    body = json.dumps(completion("B")).encode()
    reply = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)

    def serve(conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            switch.requests += 1
            if switch.answers:
                conn.sendall(reply)
            else:
                stop.wait(10)  # hold the connection: no status line, no byte

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _call(p: OpenAICompatProvider) -> tuple[float, InfraError | None]:
    t0 = time.monotonic()
    try:
        chat_once(p, "q")
    except InfraError as e:
        return time.monotonic() - t0, e
    return time.monotonic() - t0, None


def test_a_hung_endpoint_stops_being_retried_until_it_answers() -> None:
    switch = _Switch()
    with hung_server(switch) as url:
        p = OpenAICompatProvider(
            base_url=url,
            model="m",
            timeout_s=TIMEOUT_S,
            max_retries=4,
            max_concurrency=2,  # silent_limit 4
            backoff_base_s=0.01,
            backoff_max_s=0.01,
            rng=random.Random(0),
        )
        assert p.silent_limit == 4
        # the first call: four silent attempts reach the limit, the fifth is not made
        elapsed, err = _call(p)
        assert err is not None and err.kind == "timeout"
        assert "answered none of the last 4 attempts" in str(err)
        assert "gave up after 4 attempt(s)" in str(err)
        assert switch.requests == 4
        assert 4 * TIMEOUT_S <= elapsed < 4 * TIMEOUT_S + 0.8, elapsed
        # still hung: one attempt per call
        elapsed, err = _call(p)
        assert err is not None and "gave up after 1 attempt(s)" in str(err)
        assert switch.requests == 5 and TIMEOUT_S <= elapsed < TIMEOUT_S + 0.5, elapsed
        # it answers again: the count starts over
        switch.answers = True
        assert _call(p)[1] is None and switch.requests == 6
        switch.answers = False
        elapsed, err = _call(p)
        assert err is not None and "gave up after 4 attempt(s)" in str(err)
        assert switch.requests == 10


@pytest.mark.parametrize("status", [503, 200])
def test_any_response_keeps_the_retries(status: int) -> None:
    """A server that answers — even with an error — is not hung: its timeouts in between do not
    add up to the limit. Here every other attempt answers 503 (retried), so a call makes all
    its attempts; with 200 the call succeeds at its second attempt."""
    served = {"n": 0}
    body = json.dumps(completion("B")).encode()

    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)

    def serve(conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            served["n"] += 1
            if served["n"] % 2:  # odd requests hang
                stop.wait(10)
                return
            payload = body if status == 200 else b'{"error": "busy"}'
            conn.sendall(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n".encode()
                + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        p = OpenAICompatProvider(
            base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
            model="m",
            timeout_s=TIMEOUT_S,
            max_retries=4,
            max_concurrency=1,  # silent_limit 2: two timeouts in a row would trip it
            backoff_base_s=0.01,
            backoff_max_s=0.01,
            rng=random.Random(0),
        )
        _, err = _call(p)
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    if status == 200:
        assert err is None and served["n"] == 2
    else:
        assert err is not None and "gave up after 5 attempt(s)" in str(err)
        assert "answered none" not in str(err) and served["n"] == 5


def test_a_proxy_504_counts_as_no_answer() -> None:
    """A hung backend behind a proxy: every attempt comes back as the proxy's 504 after its own
    deadline. Those are not answers from the model; they count towards the limit like a
    timeout (a 503 or any other response resets it: the previous test)."""
    served = {"n": 0}
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)

    def serve(conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            served["n"] += 1
            payload = b"<html>504 Gateway Time-out</html>"
            conn.sendall(
                b"HTTP/1.1 504 Gateway Time-out\r\nContent-Type: text/html\r\n"
                + f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        p = OpenAICompatProvider(
            base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
            model="m",
            max_retries=4,
            max_concurrency=1,  # silent_limit 2
            backoff_base_s=0.01,
            backoff_max_s=0.01,
            rng=random.Random(0),
        )
        _, first = _call(p)
        _, second = _call(p)
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert first is not None and first.status == 504
    assert "answered none of the last 2 attempts" in str(first)
    assert "gave up after 2 attempt(s)" in str(first)
    assert second is not None and "gave up after 1 attempt(s)" in str(second)
    assert served["n"] == 3

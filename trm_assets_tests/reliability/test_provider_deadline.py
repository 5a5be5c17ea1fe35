"""Issue 18.4: ``timeout_s`` is a wall-clock deadline per attempt, not a per-read timeout.

A server that sends its response one byte every half second never trips httpx's per-read
timeout: on the code before this fix the call below was held until the server gave up (8 s here;
"still waiting after 40 s" in the issue) instead of ending after 1 s as an infra timeout.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import InfraError
from trm_assets_tests.llm.providers import chat_once
from trm_assets_tests.llm.test_openai_compat_server import completion

DRIP_S = 0.5  # seconds between two bytes
SERVER_GIVES_UP_S = 8.0  # so that the old code ends too (with a failure, late)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@contextmanager
def slow_drip(headers_too: bool) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers a valid completion one byte per DRIP_S."""
    body = json.dumps(completion("B")).encode()
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)

    def serve(conn: socket.socket) -> None:
        with conn:
            _read_request(conn)
            t0 = time.monotonic()
            try:
                if not headers_too:
                    conn.sendall(head)
                for b in (head if headers_too else b"") + body:
                    if stop.wait(DRIP_S) or time.monotonic() - t0 > SERVER_GIVES_UP_S:
                        return
                    conn.sendall(bytes([b]))
            except OSError:  # the client hung up: what the deadline does
                return

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


def timed_call(url: str, **kw: Any) -> tuple[float, Exception | None]:
    p = OpenAICompatProvider(
        base_url=url, model="m", backoff_base_s=0.01, backoff_max_s=0.01, rng=random.Random(0), **kw
    )
    t0 = time.monotonic()
    try:
        chat_once(p, "q")
    except Exception as e:  # the test inspects what came out
        return time.monotonic() - t0, e
    return time.monotonic() - t0, None


@pytest.mark.parametrize("headers_too", [False, True], ids=["body-drip", "headers-drip"])
def test_a_slow_drip_is_cut_at_the_timeout(headers_too: bool) -> None:
    with slow_drip(headers_too) as url:
        elapsed, err = timed_call(url, timeout_s=1.0, max_retries=0)
    assert isinstance(err, InfraError) and err.kind == "timeout", err
    assert "within 1 s" in str(err)
    assert 0.9 <= elapsed < 1.5, elapsed


def test_each_retry_gets_its_own_deadline() -> None:
    with slow_drip(False) as url:
        elapsed, err = timed_call(url, timeout_s=0.6, max_retries=1)
    assert isinstance(err, InfraError) and err.kind == "timeout"
    assert "gave up after 2 attempt(s)" in str(err)
    assert 1.1 <= elapsed < 1.8, elapsed

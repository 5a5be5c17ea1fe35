"""A tiny OpenAI-compatible HTTP server for the provider tests (stdlib, 127.0.0.1, ephemeral port).

A helper module (no tests here); named with the test_openai_compat prefix of its owner.

Each request pops the next scripted reply ``(status, body, delay_s, headers)`` (the last one
repeats); every request's headers and JSON body are recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def completion(
    content: str | None = "B",
    tool_calls: list[dict[str, Any]] | None = None,
    usage: tuple[int, int] = (12, 3),
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


@dataclass
class FakeOpenAI:
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    handler: Any = None

    def next_reply(self) -> Reply:
        if len(self.replies) > 1:
            return self.replies.pop(0)
        return self.replies[0] if self.replies else Reply(body=completion())


@contextmanager
def fake_openai(*replies: Reply) -> Iterator[FakeOpenAI]:
    state = FakeOpenAI(replies=list(replies))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            with lock:
                state.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "json": json.loads(raw or b"{}"),
                    }
                )
                reply = state.next_reply()
            if reply.delay_s:
                time.sleep(reply.delay_s)
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with local_server(Handler) as origin:
        state.url = f"{origin}/v1"
        yield state


@contextmanager
def local_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served by threads on 127.0.0.1 (an ephemeral port); yields the origin URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

"""A recording HTTP proxy between the loop and the model server (``trm bench real-model``).

The bench measures what crossed the wire instead of trusting the loop's own accounting: every
request and response between ``trm train`` / ``trm eval`` and the llama.cpp server goes through
:class:`RecordingProxy`, which forwards it unchanged and keeps one :class:`WireCall` per exchange
(status, request body, response body, timing). Protocol errors (the server rejecting a request),
the role of each call and the structured replies' parse outcomes are all read from these records.

The ``Authorization`` header is forwarded but never recorded; bodies hold prompts and model
output only (the loop never puts a key in a body).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

_FORWARDED_HEADERS = ("Content-Type", "Accept", "Authorization")
UPSTREAM_TIMEOUT_S = 900.0
ERROR_EXCERPT = 600


@dataclass(frozen=True)
class WireCall:
    """One request/response exchange. ``request``/``response`` are the parsed JSON bodies (None
    when absent or not JSON); ``error_excerpt`` is the start of a non-200 body."""

    seq: int
    method: str
    path: str
    status: int
    t_start: float
    t_end: float
    request: Any
    response: Any
    error_excerpt: str | None = None
    rewrite: str | None = None  # what the bench's rewrite hook changed (None: sent unchanged)

    @property
    def latency_s(self) -> float:
        return self.t_end - self.t_start


def _json_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


class RecordingProxy:
    """Forward ``127.0.0.1:port`` → ``upstream`` (``http://127.0.0.1:P``), recording every call.

    A context manager: entering starts a threaded server (one thread per connection, so the
    loop's concurrent requests reach the upstream concurrently), leaving stops it. Records are
    kept in memory (:meth:`calls`) and appended to ``record_path`` as JSON lines as they happen.

    ``rewrite``, when given, sees each parsed JSON request body and returns ``None`` (forward it
    unchanged) or ``(new_body, note)``: the new body is forwarded, the record keeps the body the
    client sent and the note (so a report can say exactly what the bench changed).
    """

    def __init__(
        self,
        upstream: str,
        record_path: Path,
        port: int,
        rewrite: Callable[[Any], tuple[Any, str] | None] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.rewrite = rewrite
        self.record_path = record_path
        self.port = port
        self._lock = threading.Lock()
        self._calls: list[WireCall] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def calls(self) -> list[WireCall]:
        with self._lock:
            return list(self._calls)

    def _record(self, **fields: Any) -> None:
        with self._lock:
            call = WireCall(seq=len(self._calls), **fields)
            self._calls.append(call)
            with self.record_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(call), ensure_ascii=False) + "\n")

    def exchange(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        """Send one request upstream and record it (a transport failure is a 502 record);
        returns what to send back: status, body, content type."""
        assert self._client is not None, "use RecordingProxy as a context manager"
        request = _json_or_none(body)
        note: str | None = None
        changed = (
            self.rewrite(request) if self.rewrite is not None and request is not None else None
        )
        if changed is not None:
            new_body, note = changed
            body = json.dumps(new_body, ensure_ascii=False).encode("utf-8")
        t0 = time.time()
        try:
            resp = self._client.request(method, self.upstream + path, content=body, headers=headers)
            status, raw = resp.status_code, resp.content
            ctype = resp.headers.get("content-type", "application/json")
        except httpx.HTTPError as e:
            status, ctype = 502, "application/json"
            raw = json.dumps({"error": f"proxy: upstream {type(e).__name__}"}).encode()
        t1 = time.time()
        ok = status == 200
        self._record(
            method=method,
            path=path,
            status=status,
            t_start=t0,
            t_end=t1,
            request=request,
            response=_json_or_none(raw) if ok else None,
            error_excerpt=None if ok else raw[:ERROR_EXCERPT].decode("utf-8", "replace"),
            rewrite=note,
        )
        return status, raw, ctype

    def __enter__(self) -> RecordingProxy:
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        self.record_path.write_text("", encoding="utf-8")
        self._client = httpx.Client(timeout=httpx.Timeout(UPSTREAM_TIMEOUT_S))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # the records are the log

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {h: v for h in _FORWARDED_HEADERS if (v := self.headers.get(h))}
                status, raw, ctype = proxy.exchange(self.command, self.path, body, headers)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its own timeout); the record stays

            do_GET = _handle
            do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="real-model-proxy", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._client is not None:
            self._client.close()
            self._client = None

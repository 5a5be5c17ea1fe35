"""``trm sim-serve``: the simulated world as an OpenAI-compatible HTTP server (stdlib only).

Endpoints: ``POST /v1/chat/completions`` (tools, tool_calls, usage; no streaming),
``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health``. Fault injection produces real
failures a client must survive: HTTP 503/500 with an OpenAI-style error body, and real timeouts
(the handler sleeps ``timeout_sleep_s`` before answering 504, beyond any sane client timeout).
Binds 127.0.0.1 by default; the ``Authorization`` header is accepted and ignored (never logged).
The agent honours the body's ``temperature`` (0–2); a body without one is decoded at the profile's
``sim.agent_temperature``, like a real server's configured default.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trm_assets.llm.sim.provider import (
    AttemptCounter,
    SimulatedProvider,
    draw_fault,
    faults_possible,
    latency_ms,
    reply_payload,
    request_digest,
)
from trm_assets.llm.sim.roles import content_text

MAX_BODY_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ServeOptions:
    """Server-side fault behaviour (rates and latency come from the provider's ``SimConfig``)."""

    timeout_sleep_s: float = 60.0
    fault_statuses: tuple[int, ...] = (503, 500)
    log_requests: bool = False


class _Handler(BaseHTTPRequestHandler):
    server_version = "trm-sim-serve/1 (SIMULATED)"
    protocol_version = "HTTP/1.1"

    @property
    def sim(self) -> SimServer:
        return self.server.sim  # type: ignore[attr-defined,no-any-return]

    # -- helpers ---------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Simulated", "true")
        self.end_headers()
        # The client may have given up already (e.g. its timeout): nothing left to tell it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send_json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": status}}
        )

    def log_message(self, format: str, *args: Any) -> None:
        if self.sim.options.log_requests:
            sys.stderr.write(f"[sim-serve] {self.address_string()} {format % args}\n")

    # -- routes ----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        model = self.sim.provider.model
        card = {"id": model, "object": "model", "created": 0, "owned_by": "trm-assets-simulator"}
        if path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [card]})
        elif path in (f"/v1/models/{model}", f"/models/{model}"):
            self._send_json(200, card)
        elif path == "/health":
            self._send_json(200, {"status": "ok", "simulated": True, "model": model})
        else:
            self._error(404, f"no route GET {path}")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route POST {path}")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self._error(400, "missing or invalid Content-Length")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as e:
            self._error(400, f"request body is not valid JSON: {e.msg}")
            return
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("messages"), list)
            or not body["messages"]
        ):
            self._error(400, "'messages' must be a non-empty list")
            return
        if body.get("stream"):
            self._error(400, "streaming is not supported by the simulated server")
            return
        messages = [
            {**m, "content": content_text(m.get("content"))}
            if isinstance(m, dict)
            else {"role": "user", "content": str(m)}
            for m in body["messages"]
        ]
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        seed = body.get("seed") if isinstance(body.get("seed"), int) else None
        temperature = body.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 2
        ):
            self._error(400, f"'temperature' must be a number from 0 to 2, got {temperature!r}")
            return
        self._complete(messages, tools, seed, temperature)

    def _complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        seed: int | None,
        temperature: float | None,
    ) -> None:
        sim = self.sim
        config = sim.provider.config
        request = request_digest(messages, tools, seed)
        attempt = sim.attempts.next(request) if faults_possible(config) else 0
        fault = draw_fault(config, request, attempt, sim.options.fault_statuses)
        if fault is not None and fault[0] == "timeout":
            time.sleep(sim.options.timeout_sleep_s)  # a real timeout: the client gives up first
            self._error(504, "simulated upstream timeout", "server_error")
            return
        delay = latency_ms(config, request, attempt)
        if delay > 0:
            time.sleep(delay / 1000.0)
        if fault is not None:
            status = fault[1] or 503
            self._error(status, f"simulated HTTP {status} (fault injection)", "server_error")
            return
        resp = sim.provider.respond(messages, tools, seed, temperature)
        self._send_json(200, reply_payload(resp, request, created=int(time.time())))


class _ThreadingHTTPServerV6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _server_class(host: str) -> type[ThreadingHTTPServer]:
    """IPv4 unless ``host`` is, or resolves only to, IPv6 (``::1`` failed: "address family for
    hostname not supported")."""
    if ":" in host:
        return _ThreadingHTTPServerV6
    try:
        families = {i[0] for i in socket.getaddrinfo(host, None)} if host else set()
    except OSError:
        families = set()  # the bind says what is wrong with it
    return _ThreadingHTTPServerV6 if families == {socket.AF_INET6} else ThreadingHTTPServer


def _loopback_address(text: str) -> bool:
    a = ipaddress.ip_address(text.split("%", 1)[0])
    mapped = getattr(a, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return a.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine: every address it resolves to
    is a loopback one (``127.1``, ``LOCALHOST`` were called "reachable beyond this machine";
    ``""`` binds every interface)."""
    if not host:
        return False
    try:
        return _loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(_loopback_address(str(i[4][0])) for i in infos)


class SimServer:
    """A running (or startable) sim server. Use :meth:`start` for a background thread (tests)."""

    def __init__(
        self,
        provider: SimulatedProvider,
        host: str = "127.0.0.1",
        port: int = 0,
        options: ServeOptions | None = None,
    ) -> None:
        self.provider = provider
        self.options = options or ServeOptions()
        self.attempts = AttemptCounter()
        self.httpd = _server_class(host)((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.sim = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self.httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        return f"http://{host}:{self.port}/v1"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> SimServer:
        self._thread = threading.Thread(target=self.serve_forever, name="sim-serve", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

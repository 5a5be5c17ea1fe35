"""The real LLM path: any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, Ollama,
llama.cpp server, OpenAI …), implementing :class:`~trm_assets.llm.protocol.LLMProvider`.

Built on ``httpx`` directly (not the openai SDK): see ``docs/decision-openai-client.md``.

Error policy (GATE.md §2; the protocol module states the contract):

================================================  ==========================================
outcome                                           raised / returned
================================================  ==========================================
200 with a valid chat completion                  :class:`ChatResponse` (even if the text is
                                                  empty or wrong: judging it is the caller's)
*transient*: 429, 408, 409, 425, 502, 503, 504,   retried with exponential backoff + jitter
a 500 whose body is not a validation error (or    (``Retry-After`` honoured, capped); after
is empty), connection refused/reset, timeout,     ``max_retries`` → :class:`InfraError`
200 that is not a chat completion
a 5xx whose body is a request-validation error    retried like a transient 5xx the first time;
(pydantic/FastAPI: "Input should be a valid       when the same status + body has come back
string", "Field required", "validation error",    ``reject_after`` (2) times — on the retry of
"Extra inputs are not permitted" …)               one call or on any two calls of this provider
                                                  — :class:`ProviderRejectsRequests`, not
                                                  retried: the server refuses the request
                                                  *shape* deterministically (llama-cpp-python
                                                  answers HTTP 500 for that), the unit stops
any 4xx/5xx (not transient) to a request with     :class:`ToolCallingUnsupported` at once:
``tools`` whose body says tools are unsupported   set ``TRM_LLM_TOOL_MODE=text``
400 "context length exceeded"                     :class:`ContextLengthExceeded`, not retried:
                                                  the conversation is too long for the model,
                                                  a *task* failure of this rollout
any other 4xx (400, 401, 403, 404, 422 …)         :class:`ProviderRequestError`, not retried:
                                                  a systemic/configuration error (bad key,
                                                  model name, URL or request) that must stop
                                                  the run, not be scored as data
================================================  ==========================================

A 200 that is not a chat completion (not JSON, not an object, no or an empty ``choices`` list, no
``message`` object, a tool call without a function name) is *infrastructure* (GATE.md §2: the
server answered garbage, the model was not asked), retried, then :class:`InfraError`
``invalid_response`` naming what was wrong; it never raises anything else. A well-formed reply
with empty text is a *task* outcome (returned). Connection refused on every call is infra too;
the harness's failure budget decides when a unit of infra failures is no result.

Timeouts: ``timeout_s`` (``TRM_LLM_TIMEOUT_S``) is a wall-clock deadline per attempt — connect,
upload and the whole response — enforced with :func:`asyncio.timeout` around the request, since
httpx's timeout only bounds each read (a server sending one byte per second never trips it). An
attempt cut by the deadline is an :class:`InfraError` ``timeout`` and retried like any other.
Waiting for a concurrency slot is not part of the deadline.

A key that cannot be sent in an HTTP header (a trailing newline, whitespace, non-ASCII or control
characters) is :class:`ApiKeyFormatError` when the provider is built, before any request; an
empty key means no key.

Why a validation 500 is retried once before it counts as deterministic: a server may fail to read
a truncated upload the same way; twice the same body for the same bytes is not an outage. A 500
with another body, or the same body on one call only, stays infra. Every message quotes the server
(masked, cut to 300 characters).

Secrets (issue 18.2): the API key is a :class:`pydantic.SecretStr`, turned into an
``Authorization`` header per request and never stored elsewhere; ``repr``, log lines and exception
messages show only whether a key is set. Every string that leaves the provider — exception
messages, retry log lines, the reply's text, tool calls and model name — goes through
:func:`trm_assets.llm.redact.redact` with the key and the base URL's credentials as secrets:
every fragment of >= 6 characters of a secret (also base64/percent-encoded) is masked *before*
any cut to the excerpt length, and URL credentials (``http://user:KEY@host/v1``) are shown as
``http://***@host/v1`` (:attr:`OpenAICompatProvider.base_url` is that redacted form).

Tool mode (``tool_mode``, the ``TRM_LLM_TOOL_MODE`` setting): ``"native"`` (default) sends the
tools as OpenAI ``tools``; ``"text"`` describes them in the system prompt and reads the calls from
the reply's text (:mod:`trm_assets.llm.text_tools`), for servers or models without tool calling.
A native-mode request refused because tools are unsupported raises
:class:`ToolCallingUnsupported`, whose message names ``TRM_LLM_TOOL_MODE=text``.

Usage (issue 18.7): every reported token count is checked (:func:`checked_usage`): an integer in
``0..MAX_TOKENS_PER_CALL`` is taken as is; anything else is clamped, the :class:`Usage` is marked
``unreliable`` and a warning is logged — a count never fails a good reply, nor a later insert.

Concurrency: at most ``max_concurrency`` requests in flight per provider (an ``asyncio.Semaphore``
per event loop; the provider can be reused across ``asyncio.run`` calls, each loop gets its own
connection pool and semaphore). Usage and cost are accumulated over the provider's life.

Why it is long: retries, error classification, deadlines, redaction and the two tool modes are the
provider's one contract with real servers and are tested together over real HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
import random
import ssl
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from pydantic import SecretStr

from trm_assets.llm.protocol import (
    MAX_TOKENS_PER_CALL,
    ApiKeyFormatError,
    ChatResponse,
    ContextLengthExceeded,
    InfraError,
    Message,
    ProviderRejectsRequests,
    ProviderRequestError,
    ToolCall,
    ToolCallingUnsupported,
    ToolSpec,
    Usage,
)
from trm_assets.llm.redact import excerpt, redact, redact_url, url_secrets
from trm_assets.llm.text_tools import TOOL_MODES, ToolMode, parse_reply, render_conversation

log = logging.getLogger(__name__)
#: The largest reply body parsed: a chat completion is kilobytes; a 20 MB one held the event loop
#: (every other rollout) for 15 s while it was parsed and masked (hostile pass).
MAX_REPLY_BYTES: Final = 8 * 2**20
#: Base URLs (as shown) whose "the API key is not sent" was logged in this process.
_TOLD: set[str] = set()

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})  # plus every 5xx
_GATEWAY_STATUS = frozenset({502, 503, 504})  # a proxy in the way: transient whatever the body
REJECT_AFTER = 2  # the same validation body this many times: the server rejects our requests
# A 5xx body with one of these is the server's request validation, not an outage (lower case).
_VALIDATION_MARKERS = (
    "validation error",
    "input should be",
    "field required",
    "extra inputs are not permitted",
    "extra_forbidden",
    "string_type",
    "missing required",
    "is not valid under",
    "invalid_request_error",
    "unprocessable",
    "failed to parse",
)
# A refusal of a request with tools that says the server/model has no tool calling (lower case):
# Ollama "… does not support tools", vLLM "'auto' tool choice requires
# --enable-auto-tool-choice …", llama.cpp "tools param requires --jinja flag", OpenAI
# "'tools' is not supported with this model".
_TOOLS_UNSUPPORTED_MARKERS = (
    "does not support tools",
    "does not support tool",
    "tools is not supported",
    "tools are not supported",
    "'tools' is not supported",
    "tool calling is not supported",
    "tool use is not supported",
    "function calling is not supported",
    "does not support function calling",
    "tools param requires",
    "enable-auto-tool-choice",
    "tool choice requires",
)
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "prompt is too long",
    "exceeds the context",
)
_BODY_EXCERPT = 300


@dataclass(frozen=True)
class ProviderStats:
    """Counters of one provider (for logs and reports; no secrets)."""

    calls: int
    retries: int
    infra_errors: int
    usage: Usage
    cost_usd: float | None


class _LoopState:
    def __init__(self, client: httpx.AsyncClient, max_concurrency: int) -> None:
        self.client = client
        self.semaphore = asyncio.Semaphore(max_concurrency)


class OpenAICompatProvider:
    """Chat completions with tools over HTTP. See the module docstring for the error policy.

    ``base_url`` is the API root (``http://127.0.0.1:8000/v1``); requests go to
    ``{base_url}/chat/completions``. ``timeout_s`` bounds one HTTP attempt by the wall clock
    (connect + upload + the whole response, not one read);
    ``max_retries`` counts retries after the first attempt. Prices, when given, are per 1000
    tokens and feed :attr:`cost_usd`. ``tool_mode`` is ``TRM_LLM_TOOL_MODE`` (``"native"`` or
    ``"text"``); ``reject_after`` is how many identical validation-error bodies make a
    :class:`ProviderRejectsRequests` (module docstring).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: SecretStr | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        max_concurrency: int = 16,
        price_prompt_per_1k: float | None = None,
        price_completion_per_1k: float | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        rng: random.Random | None = None,
        extra_body: dict[str, Any] | None = None,
        reject_after: int = REJECT_AFTER,
        tool_mode: ToolMode = "native",
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                "base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                f"got {redact_url(base_url)!r}"
            )
        if not model:
            raise ValueError("model must be a non-empty model name")
        if api_key is not None and not isinstance(api_key, SecretStr):
            raise TypeError("api_key must be a pydantic SecretStr (or None), never a plain str")
        if api_key is not None and api_key.get_secret_value() == "":
            api_key = None  # an empty TRM_LLM_API_KEY= means no key (a local server needs none)
        if api_key is not None:
            problem = api_key_problem(api_key.get_secret_value())
            if problem is not None:
                raise ApiKeyFormatError(problem)
        if timeout_s <= 0 or max_retries < 0 or max_concurrency < 1 or reject_after < 1:
            raise ValueError(
                "timeout_s must be > 0, max_retries >= 0, max_concurrency >= 1 and "
                f"reject_after >= 1 (got {timeout_s}, {max_retries}, {max_concurrency}, "
                f"{reject_after})"
            )
        self._base_url = base_url.rstrip("/")
        # Credentials in the URL go to httpx as basic auth (what httpx does with a URL's userinfo)
        # and out of the URL it requests and logs ("HTTP Request: POST <url>" at INFO).
        self._auth, request_root = _split_userinfo(self._base_url)
        self._url = request_root + "/chat/completions"
        # What messages show: the URL without its credentials (issue 18.2).
        self._shown_base_url = redact_url(self._base_url)
        self._shown_url = self._shown_base_url + "/chat/completions"
        if self._auth is not None and api_key is not None and self._shown_base_url not in _TOLD:
            # one Authorization header: the URL's basic auth replaces the Bearer key (httpx), so
            # the key is never sent; said once per process (every unit builds three providers),
            # and by a 401 (it said "the API key was rejected"). Not refused: an OPENAI_API_KEY
            # exported for other tools beside a basic-auth proxy is a working setup.
            _TOLD.add(self._shown_base_url)
            log.warning(
                "TRM_LLM_BASE_URL carries credentials (user:password@): they are sent as basic "
                "auth, and the API key (TRM_LLM_API_KEY or OPENAI_API_KEY) is not sent"
            )
        self._secrets: tuple[str, ...] = (
            *((api_key.get_secret_value(),) if api_key is not None else ()),
            *url_secrets(self._base_url),
        )
        self._model = model
        self._api_key = api_key
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.price_prompt_per_1k = price_prompt_per_1k
        self.price_completion_per_1k = price_completion_per_1k
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()
        self._extra_body = dict(extra_body or {})
        self.reject_after = int(reject_after)
        if tool_mode not in TOOL_MODES:
            raise ValueError(
                f"tool mode must be one of {', '.join(TOOL_MODES)} (TRM_LLM_TOOL_MODE), "
                f"got {tool_mode!r}"
            )
        self.tool_mode: ToolMode = tool_mode
        self._rejections: dict[tuple[int, str], int] = {}  # (status, body excerpt) -> times
        self._lock = threading.Lock()
        self._usage = Usage()
        self._calls = 0
        self._retries = 0
        self._infra_errors = 0
        # attempts in a row (over every call of this provider) that the model did not answer (a
        # timeout, a proxy's 504); any other response resets it. Past ``silent_limit`` the
        # endpoint is taken as hung and such an attempt is not retried until it answers again.
        self._silent = 0
        self.silent_limit = 2 * self.max_concurrency
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    # -- LLMProvider -------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._model

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    @property
    def is_simulated(self) -> bool:
        return False

    @property
    def base_url(self) -> str:
        """The API root as it may be shown: credentials in the URL replaced by ``***``."""
        return self._shown_base_url

    @property
    def cost_usd(self) -> float | None:
        """Accumulated cost from the configured prices, or None when no price is set."""
        if self.price_prompt_per_1k is None and self.price_completion_per_1k is None:
            return None
        u = self.usage
        return (
            u.prompt_tokens * (self.price_prompt_per_1k or 0.0)
            + u.completion_tokens * (self.price_completion_per_1k or 0.0)
        ) / 1000.0

    def stats(self) -> ProviderStats:
        with self._lock:
            calls, retries, infra, usage = (
                self._calls,
                self._retries,
                self._infra_errors,
                self._usage,
            )
        return ProviderStats(calls, retries, infra, usage, self.cost_usd)

    def __repr__(self) -> str:
        key = "set" if self._api_key is not None else "unset"
        return (
            f"OpenAICompatProvider(model={self._model!r}, base_url={self._shown_base_url!r}, "
            f"api_key={key}, timeout_s={self.timeout_s}, max_retries={self.max_retries}, "
            f"max_concurrency={self.max_concurrency})"
        )

    __str__ = __repr__

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        text_tools = self.tool_mode == "text"
        if text_tools:  # the tools travel in the system prompt (trm_assets.llm.text_tools)
            messages = render_conversation(messages, tools or [])
        body: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": temperature,
        }
        if tools and not text_tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if seed is not None:
            body["seed"] = seed
        body.update(self._extra_body)
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        state = self._state()
        async with state.semaphore:
            out = await self._post_with_retries(
                state.client, payload, has_tools=bool(tools) and not text_tools
            )
        if text_tools and tools and not out.tool_calls:
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            content, calls = parse_reply(out.content, tools, turn)
            if calls:
                out = dataclasses.replace(
                    out, content=content, tool_calls=calls, finish_reason="tool_calls"
                )
        return out

    # -- lifecycle ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop (others close with their loop)."""
        loop = asyncio.get_running_loop()
        state = self._loops.pop(loop, None)
        if state is not None:
            await state.client.aclose()

    async def __aenter__(self) -> OpenAICompatProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals ---------------------------------------------------------------------------

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            limits = httpx.Limits(
                max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency
            )
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=limits,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                follow_redirects=False,
                verify=_ssl_context(),
                auth=self._auth,
            )
            state = self._loops[loop] = _LoopState(client, self.max_concurrency)
        return state

    def _headers(self) -> dict[str, str]:
        if self._api_key is None:
            return {}
        return {"Authorization": "Bearer " + self._api_key.get_secret_value()}

    def _mask(self, text: str) -> str:
        """``text`` without any fragment of the key or of the URL's credentials."""
        return redact(text, self._secrets)

    def _infra(self, kind: str, message: str, *, status: int | None = None) -> InfraError:
        return InfraError(kind, self._mask(message), status=status)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = float(min(self.backoff_max_s, self.backoff_base_s * (2**attempt)))
        delay = delay * (0.5 + 0.5 * self._rng.random())  # "equal jitter": [d/2, d)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay

    async def _post_with_retries(
        self, client: httpx.AsyncClient, payload: bytes, *, has_tools: bool
    ) -> ChatResponse:
        attempts = self.max_retries + 1
        last: InfraError | None = None
        for attempt in range(attempts):
            t0 = time.perf_counter()
            retry_after: float | None = None
            silent = 0  # > 0: this attempt got no answer from the model (the count so far)
            try:
                # One wall-clock deadline for the whole attempt (connect, upload, every byte of
                # the response): httpx's own timeout is per read, so a server dripping one byte
                # a second would hold the call for ever (issue 18.4).
                async with asyncio.timeout(self.timeout_s):
                    resp = await client.post(self._url, content=payload, headers=self._headers())
            except (httpx.TimeoutException, TimeoutError):
                silent = self._count_silence(True)
                last = self._infra(
                    "timeout",
                    f"no complete response from {self._shown_url} within {self.timeout_s:g} s "
                    "(TRM_LLM_TIMEOUT_S bounds the whole attempt)",
                )
            except httpx.DecodingError:  # a body that cannot be decoded (bad gzip, charset)
                self._count_silence(False)
                last = self._infra(
                    "invalid_response", f"{self._shown_url} sent a body that cannot be decoded"
                )
            except httpx.TransportError as e:  # connect errors, resets, protocol errors
                detail = excerpt(str(e), self._secrets, 200)
                last = self._infra(
                    "connection",
                    f"{type(e).__name__} talking to {self._shown_url}"
                    + (f" ({detail})" if detail else ""),
                )
            else:
                # a 504 is a proxy's timeout: its upstream answered nothing either
                silent = self._count_silence(resp.status_code == 504)
                latency = time.perf_counter() - t0
                status = resp.status_code
                if status == 200:
                    try:
                        out = self._parse(resp.content, latency)
                    except InfraError as e:
                        last = e
                    else:
                        if out.usage.unreliable:
                            log.warning(
                                "usage from %s is not a valid token count (%s): counted as "
                                "%d prompt + %d completion tokens, marked unreliable",
                                self._shown_url,
                                excerpt(_usage_text(resp.content), self._secrets, 120),
                                out.usage.prompt_tokens,
                                out.usage.completion_tokens,
                            )
                        with self._lock:
                            self._calls += 1
                            self._usage = self._usage + out.usage
                        log.debug(
                            "chat %s: %d+%d tokens in %.3f s",
                            self._model,
                            out.usage.prompt_tokens,
                            out.usage.completion_tokens,
                            latency,
                        )
                        return out
                else:
                    body = self._excerpt(resp)
                    refusal = self._refusal(
                        status, body, has_tools=has_tools, location=resp.headers.get("location")
                    )
                    if refusal is not None:
                        raise refusal
                    retry_after = _retry_after(resp.headers.get("retry-after"))
                    last = self._infra(
                        "http_status",
                        f"HTTP {status} from {self._shown_url}: {body}",
                        status=status,
                    )
            if silent >= self.silent_limit and last is not None:
                # a hung server costs every call its deadline × attempts: 52 rollouts in a row
                # (the outage streak) took ≈ 33 min at the defaults; not retried, ≈ 10
                attempts = attempt + 1
                last = self._infra(
                    last.kind,
                    f"{_strip_kind(last)}; the endpoint answered none of the last {silent} "
                    "attempts, so such an attempt is not retried until it answers again",
                    status=last.status,
                )
                break
            if attempt + 1 < attempts:
                delay = self._backoff(attempt, retry_after)
                with self._lock:
                    self._retries += 1
                log.warning(
                    "%s (attempt %d/%d); retrying in %.2f s", last, attempt + 1, attempts, delay
                )
                await asyncio.sleep(delay)
        assert last is not None
        with self._lock:
            self._infra_errors += 1
        raise self._infra(
            last.kind,
            f"{_strip_kind(last)} (gave up after {attempts} attempt(s))",
            status=last.status,
        )

    def _count_silence(self, silent: bool) -> int:
        """Count an attempt the model did not answer (a timeout, a proxy's 504), or reset the
        count on any other response; the count after it (shared by every call)."""
        with self._lock:
            self._silent = self._silent + 1 if silent else 0
            return self._silent

    def _excerpt(self, resp: httpx.Response) -> str:
        """The start of the body, masked before it is cut (issue 18.2), on one line."""
        return excerpt(resp.text, self._secrets, _BODY_EXCERPT) or "(empty body)"

    def _refusal(
        self, status: int, body: str, *, has_tools: bool, location: str | None = None
    ) -> ProviderRequestError | None:
        """The error that stops the call for a non-200 answer, or None if it is transient (see
        the module docstring's table)."""
        transient = status in RETRYABLE_STATUS or status in _GATEWAY_STATUS
        lowered = body.lower()
        if has_tools and not transient and any(m in lowered for m in _TOOLS_UNSUPPORTED_MARKERS):
            return ToolCallingUnsupported(
                self._mask(
                    f"HTTP {status} from {self._shown_url}: the server does not support tool "
                    f"calling for model {self._model!r}. Set TRM_LLM_TOOL_MODE=text (the tools "
                    "are then described in the system prompt and the model answers with a JSON "
                    "tool call or in plain text), or start the server with tool calling enabled "
                    "(llama.cpp: --jinja; vLLM: --enable-auto-tool-choice --tool-call-parser; "
                    f"llama-cpp-python: --chat_format chatml-function-calling). Server said: {body}"
                ),
                status=status,
            )
        if transient:
            return None
        if status < 500:
            return self._request_error(status, body, location)
        if not any(m in lowered for m in _VALIDATION_MARKERS):
            return None
        key = (status, body)
        with self._lock:
            if key not in self._rejections and len(self._rejections) >= 64:
                self._rejections.clear()  # bounded memory; a repeat is found again at once
            n = self._rejections[key] = self._rejections.get(key, 0) + 1
        if n < self.reject_after:
            return None
        return ProviderRejectsRequests(
            self._mask(
                f"HTTP {status} from {self._shown_url}: the server rejected our request with the "
                f"same validation error {n} times: it refuses the shape of the request, it is not "
                "down, so the run stops instead of retrying it as an infrastructure failure. "
                f"Check that {self._shown_base_url} is an OpenAI-compatible chat-completions "
                f"server for model {self._model!r}; for a server without tool calling set "
                f"TRM_LLM_TOOL_MODE=text. Server said: {body}"
            ),
            status=status,
            repeats=n,
        )

    def _request_error(
        self, status: int, body: str, location: str | None = None
    ) -> ProviderRequestError:
        lowered = body.lower()
        if status in (400, 413) and any(m in lowered for m in _CONTEXT_MARKERS):
            return ContextLengthExceeded(
                self._mask(
                    f"HTTP {status} from {self._shown_url}: the conversation exceeds the context "
                    f"window of model {self._model!r}: {body}"
                ),
                status=status,
            )
        if 300 <= status < 400:  # not followed: a POST must not be re-sent elsewhere unasked
            # scheme, host and path only, and not the body (frameworks quote the target there):
            # its user:password@ or ?token= may be a secret
            where = _bare_url(location) if location else "(no Location header)"
            return ProviderRequestError(
                self._mask(
                    f"HTTP {status} from {self._shown_url}: the server redirects to {where}: set "
                    "TRM_LLM_BASE_URL to the address it answers on (often https:// for http://, "
                    "or a missing /v1)"
                ),
                status=status,
            )
        unsent = "; the API key is not sent beside them" if self._api_key is not None else ""
        who = "credentials in TRM_LLM_BASE_URL are" if self._auth is not None else "API key is"
        hint = {
            401: f"the credentials in TRM_LLM_BASE_URL (user:password@) were rejected{unsent}"
            if self._auth is not None
            else "the API key was rejected: check TRM_LLM_API_KEY",
            403: f"the {who} not allowed to use this model or endpoint",
            404: f"no such endpoint or model: check the base URL ({self._shown_base_url}) and the "
            f"model name ({self._model!r})",
        }.get(status, "the server refused the request; it will not succeed on retry")
        return ProviderRequestError(
            self._mask(f"HTTP {status} from {self._shown_url}: {hint}. Server said: {body}"),
            status=status,
        )

    def _parse(self, raw: bytes, latency: float) -> ChatResponse:
        """A 200's body as a :class:`ChatResponse`, or :class:`InfraError` ``invalid_response``
        naming what is wrong (GATE.md §2: a server that answers garbage is infrastructure)."""
        if len(raw) > MAX_REPLY_BYTES:  # parsed and masked on the event loop: bounded
            raise self._infra(
                "invalid_response",
                f"{self._shown_url} returned a reply of {len(raw) / 2**20:.1f} MiB (more than "
                f"{MAX_REPLY_BYTES // 2**20} MiB; a chat completion is kilobytes)",
            )
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, a 5000-digit number
            raise self._infra(
                "invalid_response", f"{self._shown_url} returned a body that is not JSON"
            ) from None
        try:
            reply = _read_completion(data)
        except _NotACompletion as e:
            raise self._infra(
                "invalid_response",
                f"{self._shown_url} returned a 200 that is not a chat completion: {e}",
            ) from None
        content, calls, usage, model, finish = reply
        mask = self._mask
        return ChatResponse(
            content=mask(content) if content is not None else None,
            tool_calls=tuple(
                ToolCall(id=mask(c.id), name=mask(c.name), arguments=mask(c.arguments))
                for c in calls
            ),
            usage=usage,
            model=mask(model),  # "" when the server names none (not the request's name)
            finish_reason=mask(finish or "stop"),
            latency_s=latency,
        )


class _NotACompletion(ValueError):
    """Why a decoded 200 body is not a chat completion (for the InfraError message)."""


def _read_completion(
    data: Any,
) -> tuple[str | None, list[ToolCall], Usage, str, str]:
    """``(content, tool calls, usage, model, finish_reason)`` of a decoded chat completion.

    Raises :class:`_NotACompletion` for every shape that is not one (never another exception):
    not an object, no/empty ``choices``, a choice without a ``message`` object, ``tool_calls``
    that is not a list of ``{"function": {"name": str, ...}}``.
    """
    if not isinstance(data, dict):
        raise _NotACompletion(f"the body is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise _NotACompletion("no 'choices' list")
    if not choices:
        raise _NotACompletion("the 'choices' list is empty")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise _NotACompletion("choices[0] has no 'message' object")
    message = choice["message"]
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = _content_text(content)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _NotACompletion("message.tool_calls is not a list")
    calls = []
    for i, c in enumerate(raw_calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _NotACompletion(f"message.tool_calls[{i}] has no function name")
        args = fn.get("arguments")
        if args is None:
            args = "{}"
        elif not isinstance(args, str):  # some servers send an object
            args = json.dumps(args, ensure_ascii=False)
        call_id = c.get("id")
        calls.append(
            ToolCall(
                id=str(call_id) if call_id else f"call_{i}_{uuid.uuid4().hex[:8]}",
                name=fn["name"],
                arguments=args,
            )
        )
    usage = checked_usage(data.get("usage"))
    model = data.get("model")
    finish = choice.get("finish_reason")
    return (
        content,
        calls,
        usage,
        model if isinstance(model, str) else "",
        finish if isinstance(finish, str) else "",
    )


def checked_count(value: Any) -> tuple[int, bool]:
    """``(count, reliable)``: a token count clamped into ``0..MAX_TOKENS_PER_CALL`` (issue 18.7).

    An integer in range (or an integral float) is reliable; anything else — out of range,
    negative, fractional, NaN/infinite, a numeric string, a bool, another type — is clamped
    (non-numbers count 0) and marked unreliable. Missing (None) is 0 and reliable.
    """
    if value is None:
        return 0, True
    if isinstance(value, bool):
        return 0, False
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return 0, False
        n, _ = checked_count(value)
        return n, False
    if isinstance(value, float):
        if math.isnan(value):
            return 0, False
        if math.isinf(value):
            return (MAX_TOKENS_PER_CALL if value > 0 else 0), False
        reliable = value.is_integer()
        n, in_range = checked_count(int(value))
        return n, reliable and in_range
    if isinstance(value, int):
        if 0 <= value <= MAX_TOKENS_PER_CALL:
            return value, True
        return (MAX_TOKENS_PER_CALL if value > 0 else 0), False
    return 0, False


def checked_usage(u: Any) -> Usage:
    """The ``usage`` object of a completion as a checked :class:`Usage` (never raises)."""
    if u is None:
        return Usage()
    if not isinstance(u, dict):
        return Usage(unreliable=True)
    prompt, p_ok = checked_count(u.get("prompt_tokens"))
    completion, c_ok = checked_count(u.get("completion_tokens"))
    return Usage(prompt, completion, unreliable=not (p_ok and c_ok))


_KEY_CHARACTER_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}


def api_key_problem(secret: str) -> str | None:
    """Why ``secret`` cannot go into an ``Authorization`` header, or None. Never shows the key.

    Allowed: visible ASCII (``!`` … ``~``). Anything else makes every request fail on the client
    (httpx/h11 refuse the header: "LocalProtocolError", or a ``UnicodeEncodeError``), so it is
    refused once, when the provider is built.
    """
    bad = [(i, ch) for i, ch in enumerate(secret) if not ("!" <= ch <= "~")]
    if not bad:
        return None
    i, ch = bad[0]
    what = _KEY_CHARACTER_NAMES.get(ch) or (
        "a non-ASCII character" if ord(ch) > 127 else "a control character"
    )
    where = (
        "at its end"
        if i == len(secret) - 1
        else "at its start"
        if i == 0
        else f"at character {i + 1} of {len(secret)}"
    )
    more = f" ({len(bad)} such characters in all)" if len(bad) > 1 else ""
    return (
        f"the API key (TRM_LLM_API_KEY, or OPENAI_API_KEY) contains {what} {where}{more}: an HTTP "
        "header cannot carry it, so every request would fail before reaching the server. Set the "
        "key again without it (a key pasted with its line break, or written with `echo` into a "
        "file, often ends with a newline). The key itself is not shown."
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once: loading the CA bundle costs ≈ 0.1 s, paid
    by every client otherwise (one per event loop, i.e. per ``asyncio.run``)."""
    return httpx.create_ssl_context()


def _bare_url(url: str) -> str:
    """``url`` as scheme://host[:port]/path: no credentials, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return urlunsplit((parts.scheme, host + port, parts.path, "", "")) or "(unreadable)"


def _split_userinfo(url: str) -> tuple[httpx.BasicAuth | None, str]:
    """``(basic auth from the URL's user:password, the URL without them)``."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return None, url
    auth = httpx.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
    return auth, urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _usage_text(raw: bytes) -> str:
    """The reported ``usage`` of a body, for the unreliable-usage log line."""
    try:
        return json.dumps(json.loads(raw).get("usage"))[:200]
    except (ValueError, AttributeError, RecursionError, TypeError):
        return "?"


def _content_text(content: Any) -> str:
    """Join the text parts of a list-of-parts content (some servers return that shape)."""
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return str(content)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: ignore, the backoff applies


def _strip_kind(e: InfraError) -> str:
    text = str(e)
    prefix = f"{e.kind}: "
    return text[len(prefix) :] if text.startswith(prefix) else text

"""The single integration point between trm-assets and any language model.

Contract (in the spirit of GEPA's adapter protocol):

* ``chat(messages, tools=..., ...)`` sends one OpenAI-style chat completion request and returns one
  :class:`ChatResponse`. ``messages`` are plain dicts in the OpenAI chat format, in the shapes a
  strict server accepts (``trm_assets_tests/llm/strict_server.py`` checks them over HTTP):
  ``{"role": "system"|"user", "content": str}`` (a user turn may carry a list of content parts);
  ``{"role": "assistant", "content": str, "tool_calls": [...]}`` with ``content`` a string, never
  ``null`` (``""`` for a turn that only calls tools, :meth:`ChatResponse.as_message`), each call
  ``{"id": str, "type": "function", "function": {"name": str, "arguments": str}}``;
  ``{"role": "tool", "tool_call_id": str, "name": str, "content": str}``. No value is ``None``.
  ``tools`` are OpenAI function-tool specs.
* The provider is stateless across calls except for usage accounting and connection pools.
* ``model`` names the model that answers; ``usage`` accumulates tokens over the provider's life.

Error policy (GATE.md §2): a provider **never** raises for a well-formed answer that happens to be
wrong, empty or unparsable — that is a *task* failure, judged by the caller from the content.
It raises :class:`InfraError` (after its own bounded retries) only for failures of the
infrastructure: timeouts, connection errors, HTTP 429/5xx, a response that is not a valid chat
completion. Callers record InfraError as an infra failure (the gate drops baseline infra failures
and imputes candidate infra failures as wrong). A request the server refuses and will refuse again
raises :class:`ProviderRequestError` (bad key, model, URL), or its subclasses
:class:`ProviderRejectsRequests` (the same validation error repeated: the request shape is wrong
for this server) and :class:`ToolCallingUnsupported` (set ``TRM_LLM_TOOL_MODE=text``): systemic,
the unit stops. :class:`ContextLengthExceeded` is the one refusal that is a task failure. Any
other exception is a bug and must propagate. No message of any of these contains an API key, a
fragment of it or URL credentials (:func:`trm_assets.llm.redact.redact`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trm_assets.domain.errors import TrmError

Message = dict[str, Any]
ToolSpec = dict[str, Any]


class InfraError(RuntimeError):
    """An infrastructure failure (timeout, connection, 429/5xx, invalid response envelope).

    ``kind`` is one of ``timeout``, ``connection``, ``http_status``, ``invalid_response``.
    """

    def __init__(self, kind: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.status = status


class ProviderRequestError(TrmError, RuntimeError):
    """The endpoint refused the request (4xx other than 429): a configuration or systemic error.

    Not an :class:`InfraError`: retrying cannot help and the gate must not score it as data.
    ``status`` is the HTTP status.
    """

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ContextLengthExceeded(ProviderRequestError):
    """HTTP 400 because the conversation exceeds the model's context window (a task failure)."""


class ProviderRejectsRequests(ProviderRequestError):
    """The server rejects our requests deterministically: the same validation error body came back
    ``repeats`` times (e.g. llama-cpp-python's HTTP 500 "Input should be a valid string").

    Not an :class:`InfraError`: the request shape, not the server's health, is the problem, and
    retrying it as an outage only burns the run. The unit must stop (the message quotes the
    server, masked and shortened). Subclass of :class:`ProviderRequestError`, so every caller that
    lets a refused request propagate lets this one through too.
    """

    def __init__(self, message: str, *, status: int, repeats: int = 1) -> None:
        super().__init__(message, status=status)
        self.repeats = repeats


class ToolCallingUnsupported(ProviderRejectsRequests):
    """The server refused a request *with tools* saying tool calling is unsupported.

    The fix is a setting: ``TRM_LLM_TOOL_MODE=text`` (tools described in the system prompt, the
    model replies with a JSON tool call or its answer in plain text), or a server started with
    tool calling enabled. The message names both.
    """


class ApiKeyFormatError(TrmError, ValueError):
    """The API key cannot be sent in an HTTP header (a trailing newline, a space, a non-ASCII or
    control character): a client-side, deterministic error raised when the provider is built,
    before the first rollout. The message names the settings and the position, never the key."""


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by the model (OpenAI ``tool_calls[i]``)."""

    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model produced it


#: The largest token count one call may report (issue 18.7): a server's ``10**20`` would crash a
#: DuckDB BIGINT column later; larger, negative or non-integer counts are clamped and flagged.
MAX_TOKENS_PER_CALL = 10**9


@dataclass(frozen=True)
class Usage:
    """Token counts. ``unreliable`` is True when a server reported a count that is not an
    integer in ``0..MAX_TOKENS_PER_CALL`` (clamped; sums keep the flag)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    unreliable: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.unreliable or other.unreliable,
        )


@dataclass(frozen=True)
class ChatResponse:
    """One chat completion: the assistant's text and/or tool calls, plus usage and latency."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"
    latency_s: float = 0.0

    def as_message(self) -> Message:
        """The assistant message to append to the conversation (OpenAI format).

        ``content`` is always a string (``""`` for a turn that only calls tools): strict servers
        (llama-cpp-python's request models) reject ``null`` with "Input should be a valid string".
        """
        msg: Message = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return msg


@runtime_checkable
class LLMProvider(Protocol):
    """Async chat completion with tools. See the module docstring for the error policy."""

    @property
    def model(self) -> str: ...

    @property
    def usage(self) -> Usage:
        """Tokens used by all calls so far."""
        ...

    @property
    def is_simulated(self) -> bool:
        """True for the simulated world (labelled as such in every report and metadata)."""
        ...

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse: ...


class DelegatingProvider:
    """An :class:`LLMProvider` that passes everything to ``inner``; a subclass overrides
    :meth:`chat` (or a property) to change one thing (call slots, a test's fault)."""

    def __init__(self, inner: LLMProvider) -> None:
        self._inner = inner

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def usage(self) -> Usage:
        return self._inner.usage

    @property
    def is_simulated(self) -> bool:
        return self._inner.is_simulated

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        return await self._inner.chat(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, seed=seed
        )

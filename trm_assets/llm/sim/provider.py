"""``SimulatedProvider``: the simulated world behind the project's ``LLMProvider`` protocol.

Deterministic given (sim seed, messages, tools, ``seed``, ``temperature``): the role is read from
the conversation (:mod:`.roles`), the reply computed by :mod:`.agent` or :mod:`.evolver`. Only the
agent honours ``temperature`` (at 0 its reply ignores ``seed``; a request naming none is decoded
at ``sim.agent_temperature``); the evolve/diagnose/momentum roles keep drawing per ``seed``. The
temperature is not part of the request digest, so latency and fault draws do not depend on it.
Faults follow GATE.md §2:

* **infra** — a timeout (``InfraError("timeout")``) or an HTTP 5xx (``InfraError("http_status",
  status=503|500)``), drawn per request *attempt* (an identical retry draws again, so a retry can
  succeed; the attempt counter is per request digest, hence independent of concurrency);
* **task** — malformed content (``fault_malformed_rate``): a well-formed reply whose text is not a
  usable answer/JSON. Never raised, judged by the caller.

Latency (``latency_ms_mean`` ± ``latency_ms_jitter``) is the time a call takes as the caller sees
it, like a remote server's: the reply is computed first and only the rest of the latency is slept
(``asyncio.sleep``), so the simulator's own CPU time is not added on top of the latency
(``docs/decision-sim-latency-includes-compute.md``). A failing attempt sleeps its full latency.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from trm_assets.llm.protocol import ChatResponse, InfraError, Message, ToolCall, ToolSpec, Usage
from trm_assets.llm.sim.agent import agent_reply
from trm_assets.llm.sim.draws import digest, unit
from trm_assets.llm.sim.evolver import diagnose_reply, evolve_reply, momentum_reply, unknown_reply
from trm_assets.llm.sim.latency import wake_at
from trm_assets.llm.sim.roles import SimReply, detect_role
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import SimConfig

SIM_MODEL = "sim-videomme-1"
FAULT_STATUSES: tuple[int, ...] = (503, 500)


class EncodedRequest(NamedTuple):
    """One chat request as canonical JSON (sorted keys), computed once per call: the request
    digest, the agent's conversation key and the prompt's token count all read it."""

    messages: tuple[str, ...]  # one per message
    tools: str  # the tool list

    @property
    def prompt_chars(self) -> int:
        """Characters of the request as JSON (messages, then tools): what usage counts as the
        prompt. Key order does not change a JSON text's length, so the sorted encoding serves."""
        items = sum(len(x) for x in self.messages) + 2 * max(len(self.messages) - 1, 0)
        return 2 + items + len(self.tools)


def encode_request(messages: Sequence[Message], tools: Sequence[ToolSpec] | None) -> EncodedRequest:
    return EncodedRequest(
        tuple(json.dumps(m, sort_keys=True, default=str) for m in messages),
        _encode_tools(tools),
    )


# The last tool list encoded: (that list, a deep copy of it then, its JSON). An agent sends the
# same list object with every call of a run; encoding it each time took a third of the decoding
# probe's CPU (18.0 s, 11.8-12.4 s with this; docs/decision-sim-tools-encoding.md).
_LAST_TOOLS: tuple[Sequence[ToolSpec], list[ToolSpec], str] | None = None


def _encode_tools(tools: Sequence[ToolSpec] | None) -> str:
    """``json.dumps(list(tools), sort_keys=True)``, reused for the same, unchanged list object.
    The copy catches a list changed in place since, with one blind spot of ``==``: a value
    replaced in place by an equal one of another JSON type (``True`` by ``1``) keeps the old
    text. Nothing changes tool specs in place (the agent builds its list once per run); a
    strict comparison cost more than the encoding it saves (160 against 110 µs)."""
    global _LAST_TOOLS
    items = list(tools or ())
    last = _LAST_TOOLS
    if last is not None and tools is last[0] and items == last[1]:
        return last[2]
    text = json.dumps(items, sort_keys=True, default=str)
    if tools is not None:
        _LAST_TOOLS = (tools, copy.deepcopy(items), text)
    return text


def request_digest(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] | None,
    seed: int | None,
    *,
    encoded: EncodedRequest | None = None,
) -> str:
    """A stable digest of one chat request (messages, tools, seed; not the temperature): of
    ``json.dumps(list(messages), sort_keys=True)``, the tools' and the seed. ``encoded`` (the
    request's :func:`encode_request`) gives the same strings without encoding again (a list
    encodes as its items joined by ``", "``)."""
    enc = encode_request(messages, tools) if encoded is None else encoded
    return digest("[" + ", ".join(enc.messages) + "]", enc.tools, seed)


def draw_fault(
    config: SimConfig, request: str, attempt: int, statuses: Sequence[int] = FAULT_STATUSES
) -> tuple[str, int | None] | None:
    """``("timeout", None)``, ``("http_status", one of statuses)`` or None for one attempt."""
    u = unit(config.seed, "fault", request, attempt)
    if u < config.fault_timeout_rate:
        return "timeout", None
    if u < config.fault_timeout_rate + config.fault_http_5xx_rate:
        i = int(unit(config.seed, "status", request, attempt) * len(statuses))
        return "http_status", statuses[i]
    return None


def faults_possible(config: SimConfig) -> bool:
    """Whether infra faults can occur (otherwise attempts need not be counted)."""
    return config.fault_timeout_rate > 0 or config.fault_http_5xx_rate > 0


def latency_ms(config: SimConfig, request: str, attempt: int) -> float:
    if config.latency_ms_mean <= 0 and config.latency_ms_jitter <= 0:
        return 0.0
    u = unit(config.seed, "latency", request, attempt)
    return max(0.0, config.latency_ms_mean + config.latency_ms_jitter * (2.0 * u - 1.0))


def count_tokens(text: str) -> int:
    """A rough token count (4 characters per token), good enough for usage accounting."""
    return (len(text) + 3) // 4


class AttemptCounter:
    """How often each request digest was seen (thread-safe): the attempt index of fault draws."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, request: str) -> int:
        with self._lock:
            n = self._seen.get(request, 0)
            self._seen[request] = n + 1
            return n


def simulate(
    world: SimWorld,
    config: SimConfig,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] | None = None,
    seed: int | None = None,
    temperature: float | None = None,
    *,
    encoded: EncodedRequest | None = None,
) -> SimReply:
    """The simulated model's reply to one request (no faults, no latency): a pure function.

    ``encoded``: the request's :func:`encode_request`, when the caller has it already."""
    sample = int(seed) if seed is not None else 0
    role, text = detect_role(messages)
    if role == "agent":
        conv_key = digest(
            *(encode_request(messages, tools) if encoded is None else encoded).messages
        )
        return agent_reply(world, config, messages, tools, sample, temperature, conv_key=conv_key)
    if role == "diagnose":
        return diagnose_reply(world, config, text, sample)
    if role in ("evolve_skill", "evolve_system", "evolve_tool"):
        return evolve_reply(world, config, role, text, sample)
    if role == "momentum":
        return momentum_reply(world, config, text, sample)
    return unknown_reply(text)


def to_chat_response(
    reply: SimReply,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] | None,
    model: str,
    request: str,
    *,
    encoded: EncodedRequest | None = None,
) -> ChatResponse:
    calls = tuple(
        ToolCall(id="call_" + digest(request, i, name)[:24], name=name, arguments=args)
        for i, (name, args) in enumerate(reply.tool_calls)
    )
    chars = (encode_request(messages, tools) if encoded is None else encoded).prompt_chars
    completion_text = (reply.content or "") + "".join(n + a for n, a in reply.tool_calls)
    return ChatResponse(
        content=reply.content,
        tool_calls=calls,
        usage=Usage((chars + 3) // 4, count_tokens(completion_text) + 1),
        model=model,
        finish_reason="tool_calls" if calls else "stop",
    )


class Attempt(NamedTuple):
    """One decided call: the latency the caller sees (ms), the fault drawn (``None`` when the
    call succeeds), and the reply (``None`` for a fault)."""

    delay_ms: float
    fault: tuple[str, int | None] | None
    response: ChatResponse | None


async def complete(attempt: Attempt, t0: float, config: SimConfig, model: str) -> ChatResponse:
    """Wait out ``attempt`` of ``model`` as the caller sees it (``t0``: when the call started),
    then return its reply or raise its fault. The compute before is part of the latency: only
    the rest is slept. A timeout waits ``timeout_sleep_s``; an HTTP fault its full latency."""
    fault, resp = attempt.fault, attempt.response
    if fault is not None and fault[0] == "timeout":
        if config.timeout_sleep_s > 0:
            await asyncio.sleep(config.timeout_sleep_s)
        raise InfraError("timeout", f"simulated timeout of model {model}")
    if fault is not None:
        if attempt.delay_ms > 0:
            await asyncio.sleep(attempt.delay_ms / 1000.0)
        raise InfraError(
            "http_status", f"simulated HTTP {fault[1]} from model {model}", status=fault[1]
        )
    assert resp is not None
    await wake_at(t0 + attempt.delay_ms / 1000.0)
    return dataclasses.replace(resp, latency_s=time.perf_counter() - t0)


class SimProviderBase:
    """What the simulated providers share: their model name, the tokens of their calls so far
    (thread-safe), that they are simulated, and :meth:`chat` — a call is decided by
    :meth:`_decide` (in process, or in a worker) and waited out by :func:`complete`."""

    config: SimConfig

    def __init__(self, model: str) -> None:
        self._model = model
        self._usage = Usage()
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def usage(self) -> Usage:
        return self._usage

    @property
    def is_simulated(self) -> bool:
        return True

    def _count(self, usage: Usage) -> None:
        with self._lock:
            self._usage = self._usage + usage

    async def _decide(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        seed: int | None,
        temperature: float | None,
    ) -> Attempt:
        raise NotImplementedError

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        """``temperature`` None → ``sim.agent_temperature``; ``seed`` is the sample index."""
        del max_tokens
        t0 = time.perf_counter()
        attempt = await self._decide(messages, tools, seed, temperature)
        return await complete(attempt, t0, self.config, self._model)


class SimulatedProvider(SimProviderBase):
    """The simulated world as an :class:`~trm_assets.llm.protocol.LLMProvider` (in-process).

    ``world``: the ground truth (:func:`~trm_assets.llm.sim.world.load_world`). ``config``: the
    knobs (``RunConfig.sim``). ``inject_faults=False`` disables infra faults and latency (the HTTP
    server injects its own, as real HTTP errors and real timeouts).
    """

    def __init__(
        self,
        world: SimWorld,
        config: SimConfig | None = None,
        *,
        model: str = SIM_MODEL,
        inject_faults: bool = True,
    ) -> None:
        super().__init__(model)
        self.world = world
        self.config = config or SimConfig()
        self.inject_faults = inject_faults
        self._attempts = AttemptCounter()

    def respond(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        seed: int | None = None,
        temperature: float | None = None,
    ) -> ChatResponse:
        """The reply without faults or latency (used by the HTTP server)."""
        encoded = encode_request(messages, tools)
        request = request_digest(messages, tools, seed, encoded=encoded)
        return self._respond(messages, tools, seed, temperature, request, encoded)

    def _respond(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        seed: int | None,
        temperature: float | None,
        request: str,
        encoded: EncodedRequest,
    ) -> ChatResponse:
        reply = simulate(
            self.world, self.config, messages, tools, seed, temperature, encoded=encoded
        )
        resp = to_chat_response(reply, messages, tools, self._model, request, encoded=encoded)
        self._count(resp.usage)
        return resp

    def attempt(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        seed: int | None,
        temperature: float | None,
    ) -> Attempt:
        """One call decided, without waiting: its latency, its fault draw, and the reply when
        it does not fail (the compute of :meth:`chat`, also run by the worker process)."""
        encoded = encode_request(messages, tools)
        request = request_digest(messages, tools, seed, encoded=encoded)
        delay: float = 0.0
        fault: tuple[str, int | None] | None = None
        if self.inject_faults:
            attempt = self._attempts.next(request) if faults_possible(self.config) else 0
            delay = latency_ms(self.config, request, attempt)
            fault = draw_fault(self.config, request, attempt)
        if fault is not None:
            return Attempt(delay, fault, None)
        return Attempt(
            delay, None, self._respond(messages, tools, seed, temperature, request, encoded)
        )

    async def _decide(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        seed: int | None,
        temperature: float | None,
    ) -> Attempt:
        return self.attempt(messages, tools, seed, temperature)

    def __repr__(self) -> str:
        n = len(self.world.questions)
        return f"SimulatedProvider(model={self._model!r}, SIMULATED, {n} questions)"


def reply_payload(resp: ChatResponse, request: str, created: int = 0) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object for ``resp`` (used by the HTTP server)."""
    message: dict[str, Any] = {"role": "assistant", "content": resp.content}
    if resp.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in resp.tool_calls
        ]
    return {
        "id": "chatcmpl-sim-" + request[:24],
        "object": "chat.completion",
        "created": created,
        "model": resp.model,
        "system_fingerprint": "simulated",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": resp.finish_reason}
        ],
        "usage": {
            "prompt_tokens": resp.usage.prompt_tokens,
            "completion_tokens": resp.usage.completion_tokens,
            "total_tokens": resp.usage.total_tokens,
        },
    }

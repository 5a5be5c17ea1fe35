"""The agent loop: prompt + active skills + question → tool calls over the video tree → a letter.

Conversation contract: see :mod:`trm_assets.agent.messages` (rendering) and
:mod:`trm_assets.agent.tools` (tools). The loop ends when

* the model calls ``answer`` with a valid letter → ``stop_reason="answer"``;
* the model replies with content and no tool call → ``"final_text"``; the letter is extracted with
  the Video-MME rule (:func:`~trm_assets.agent.answer.extract_answer_letter`, possibly ``""``);
* ``max_steps`` model calls were made without an answer → ``"max_steps"`` (a task failure);
* the prompt outgrew the model's context window (HTTP 400 "context length") →
  ``"context_length"`` (a task failure: the agent's own conversation is too long);
* an :class:`~trm_assets.llm.protocol.InfraError` (model or VLM) → ``"error"`` with
  ``infra_error`` set: an infra failure (GATE.md §2).

A :class:`~trm_assets.llm.protocol.ProviderRequestError` other than the context-length one —
a bad key or model, :class:`~trm_assets.llm.protocol.ProviderRejectsRequests` (the server refuses
the request shape), :class:`~trm_assets.llm.protocol.ToolCallingUnsupported` — is systemic and
propagates: the unit stops. Any other exception is a bug and propagates too.

Every turn the loop sends is in the shape strict servers accept (the protocol module lists
them): the assistant's tool-call turn with ``content`` a string (``""``, never ``null``), each
tool result ``{"role": "tool", "tool_call_id", "name", "content"}`` (:func:`tool_message`).

Every model call and every tool call is traced (:class:`TraceStep`).

**Seed.** ``seed`` is passed unchanged to every ``llm.chat`` call of one rollout. The caller
derives it from (run_id, question_id, replicate) (:func:`rollout_seed`), so replicated rollouts
differ reproducibly; the simulated model uses it as its sample index, a real server as its
sampling seed (ignored at temperature 0 by most servers).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trm_assets.agent.answer import extract_answer_letter
from trm_assets.agent.messages import AgentPrompts, SkillMode, build_messages
from trm_assets.agent.tools import ANSWER_TOOL, TOOL_NAMES, VideoTools, tool_specs
from trm_assets.domain.question import Question
from trm_assets.llm.protocol import (
    ContextLengthExceeded,
    InfraError,
    LLMProvider,
    Message,
    ToolCall,
    ToolSpec,
    Usage,
)

STOP_ANSWER = "answer"
STOP_FINAL_TEXT = "final_text"
STOP_MAX_STEPS = "max_steps"
STOP_CONTEXT_LENGTH = "context_length"
STOP_ERROR = "error"  # the pessimistic default; stays only when the rollout did not complete
STOP_REASONS: tuple[str, ...] = (
    STOP_ANSWER,
    STOP_FINAL_TEXT,
    STOP_MAX_STEPS,
    STOP_CONTEXT_LENGTH,
    STOP_ERROR,
)

#: How much of each tool result / assistant text a trace row keeps (the size is always recorded).
TRACE_TEXT_LIMIT = 4000


def rollout_seed(run_id: str, question_id: str, replicate: int) -> int:
    """The ``seed`` of every chat call of one rollout: a 31-bit hash of (run, question, replicate).

    Deterministic across processes and Python versions (sha256, not ``hash()``), non-negative and
    below 2**31 so every OpenAI-compatible server accepts it.
    """
    key = f"{run_id}\x1f{question_id}\x1f{int(replicate)}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class TraceStep:
    """One traced event of a rollout.

    ``role="assistant"``: one model call (``content`` = its text, ``tool_name`` = None,
    ``arguments`` = the names of the tools it called, tokens and latency of the call).
    ``role="tool"``: one tool call (``tool_name``, raw ``arguments``, ``content`` = the result,
    truncated to :data:`TRACE_TEXT_LIMIT`; ``result_chars`` its full size; ``error`` for a bad
    call).
    """

    seq: int
    step: int
    role: str
    tool_name: str | None = None
    tool_call_id: str | None = None
    arguments: str | None = None
    content: str | None = None
    result_chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class AgentOutcome:
    """What one rollout produced. ``letter`` is ``""`` when there is no answer."""

    letter: str
    stop_reason: str
    steps: tuple[TraceStep, ...]
    usage: Usage
    n_llm_calls: int
    n_tool_calls: int
    n_tool_errors: int
    skill_files: tuple[str, ...]
    final_text: str | None = None
    infra_error: str | None = None
    context_error: str | None = None
    visited_nodes: tuple[str, ...] = ()
    inspect_sources: tuple[str, ...] = ()
    latency_s: float = 0.0
    # the model names the server reported on this rollout's replies, in first-seen order (a
    # server may serve another model than the request names: llama.cpp answers any name)
    served_models: tuple[str, ...] = ()

    @property
    def is_infra_failure(self) -> bool:
        return self.infra_error is not None

    @property
    def is_empty_reply(self) -> bool:
        """Ended on a reply with no text and no tool call (a server that loses the output
        answers every rollout this way)."""
        return (
            self.infra_error is None
            and self.stop_reason == STOP_FINAL_TEXT
            and not (self.final_text or "").strip()
        )


@dataclass
class _Trace:
    steps: list[TraceStep] = field(default_factory=list)

    def add(self, **kw: Any) -> None:
        self.steps.append(TraceStep(seq=len(self.steps), **kw))

    def add_tool(self, step: int, call: ToolCall, t0: float, **kw: Any) -> None:
        """A tool turn: the call (arguments clipped), its latency since ``t0``, then ``kw``."""
        self.add(
            step=step,
            role="tool",
            tool_name=call.name,
            tool_call_id=call.id,
            arguments=_clip(call.arguments),
            latency_s=time.perf_counter() - t0,
            **kw,
        )


def tool_message(call_id: str, name: str, content: str) -> Message:
    """The tool-result turn, in the shape strict servers accept: every field a string.

    ``name`` is required by llama-cpp-python's request model (``ChatCompletionRequestToolMessage``)
    and accepted by OpenAI; ``tool_call_id`` pairs the result with the assistant's call.
    """
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= TRACE_TEXT_LIMIT:
        return text
    return text[:TRACE_TEXT_LIMIT] + f"… [{len(text) - TRACE_TEXT_LIMIT} more characters]"


class AgentLoop:
    """Runs one question through the tool-calling loop. Stateless across rollouts; reusable.

    ``prompts`` carries the system prompt, the user template and the tool descriptions;
    ``max_steps`` bounds the number of model calls of one rollout.
    """

    def __init__(
        self,
        llm: LLMProvider,
        prompts: AgentPrompts,
        *,
        max_steps: int = 8,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        tool_names: tuple[str, ...] = TOOL_NAMES,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.llm = llm
        self.prompts = prompts
        self.max_steps = max_steps
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_specs: list[ToolSpec] = tool_specs(prompts.tool_descriptions, tool_names)

    async def run(
        self,
        question: Question,
        *,
        tools: VideoTools,
        skills: Mapping[str, str],
        skill_mode: SkillMode = "task",
        seed: int | None = None,
    ) -> AgentOutcome:
        """One rollout. Returns for task outcomes and infra failures; raises only for bugs."""
        t_start = time.perf_counter()
        messages, skill_files = build_messages(self.prompts, question, skills, skill_mode)
        msgs: list[Message] = list(messages)
        trace = _Trace()
        usage = Usage()
        n_calls = n_tools = n_errors = 0
        visited: dict[str, None] = {}
        served: dict[str, None] = {}
        sources: list[str] = []

        def outcome(letter: str, stop: str, **kw: Any) -> AgentOutcome:
            return AgentOutcome(
                letter=letter,
                stop_reason=stop,
                steps=tuple(trace.steps),
                usage=usage,
                n_llm_calls=n_calls,
                n_tool_calls=n_tools,
                n_tool_errors=n_errors,
                skill_files=skill_files,
                visited_nodes=tuple(visited),
                inspect_sources=tuple(sources),
                latency_s=time.perf_counter() - t_start,
                served_models=tuple(served),
                **kw,
            )

        for step in range(self.max_steps):
            try:
                resp = await self.llm.chat(
                    msgs,
                    tools=self.tool_specs,
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                    seed=seed,
                )
            except ContextLengthExceeded as e:
                return outcome("", STOP_CONTEXT_LENGTH, context_error=str(e))
            except InfraError as e:
                return outcome("", STOP_ERROR, infra_error=str(e))
            n_calls += 1
            usage = usage + resp.usage
            if resp.model:
                served[resp.model] = None
            trace.add(
                step=step,
                role="assistant",
                arguments=",".join(c.name for c in resp.tool_calls) or None,
                content=_clip(resp.content),
                result_chars=len(resp.content or ""),
                prompt_tokens=resp.usage.prompt_tokens,
                completion_tokens=resp.usage.completion_tokens,
                latency_s=resp.latency_s,
            )
            if not resp.tool_calls:
                text = resp.content or ""
                return outcome(extract_answer_letter(text), STOP_FINAL_TEXT, final_text=text)
            msgs.append(resp.as_message())
            for call in resp.tool_calls:
                t0 = time.perf_counter()
                try:
                    result = await tools.call(call.name, call.arguments)
                except InfraError as e:  # the VLM behind inspect_frames
                    trace.add_tool(step, call, t0, error=f"infra: {e}")
                    return outcome("", STOP_ERROR, infra_error=str(e))
                n_tools += 1
                if result.error is not None:
                    n_errors += 1
                if result.source is not None:
                    sources.append(result.source)
                visited.update(dict.fromkeys(result.node_ids))
                trace.add_tool(
                    step,
                    call,
                    t0,
                    content=_clip(result.content),
                    result_chars=len(result.content),
                    error=result.error,
                )
                if call.name == ANSWER_TOOL and result.letter is not None:
                    return outcome(result.letter, STOP_ANSWER, final_text=resp.content)
                msgs.append(tool_message(call.id, call.name, result.content))
        return outcome("", STOP_MAX_STEPS)

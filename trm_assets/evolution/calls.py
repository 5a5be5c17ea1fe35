"""One structured model call: prompt → reply → JSON validated with pydantic → one repair retry.

Shared by diagnosis, evolution and momentum. Policy (GATE.md §2, the provider's error policy):

* a reply that is not the requested JSON is a *task* failure: we ask once more (the repair
  retry, with the reason and a new sample index), then give up and return ``None`` — never raise;
* an :class:`~trm_assets.llm.protocol.InfraError` is an *infrastructure* failure and propagates
  (the provider already retried); the caller records it as infra;
* every call is logged (role, model, tokens, latency, outcome) on the ``trm_assets.evolution``
  logger and returned as :class:`LLMCallRecord`; prompts and keys are never logged.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from trm_assets.domain.errors import describe_validation_error
from trm_assets.evolution.types import LLMCallRecord
from trm_assets.llm.protocol import InfraError, LLMProvider, Message

log = logging.getLogger("trm_assets.evolution")

T = TypeVar("T", bound=BaseModel)

REPAIR_INSTRUCTION = (
    "Your reply could not be used: {reason}. Reply again with exactly one JSON object in the "
    "output format stated above, and nothing else (no prose, no code fence)."
)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_json_reply(content: str | None, model: type[T]) -> tuple[T | None, str]:
    """``(value, "")`` or ``(None, reason)``; tolerates a code fence or prose around one object."""
    if content is None or not content.strip():
        return None, "the reply was empty"
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None, "the reply contains no JSON object"
    try:
        raw = json.loads(text[start : end + 1])
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg} at character {e.pos})"
    try:
        return model.model_validate(raw), ""
    except ValidationError as e:
        problems = describe_validation_error(e)
        return None, "the JSON does not follow the schema: " + "; ".join(problems[:3])


@dataclass(frozen=True)
class CallResult(Generic[T]):
    value: T | None
    calls: tuple[LLMCallRecord, ...]
    repaired: bool  # the first reply was malformed
    detail: str  # why value is None ("" when it is not)
    raw: str | None  # the last reply's text (audit; never the prompt)


async def call_structured(
    llm: LLMProvider,
    prompt: str,
    model: type[T],
    *,
    role: str,
    sample: int = 0,
    max_tokens: int | None = None,
) -> CallResult[T]:
    """Send ``prompt`` as one user message, parse the reply as ``model``, repair once."""
    messages: list[Message] = [{"role": "user", "content": prompt}]
    calls: list[LLMCallRecord] = []
    reason = ""
    raw: str | None = None
    for attempt in (1, 2):
        t0 = time.perf_counter()
        try:
            resp = await llm.chat(messages, temperature=0.0, max_tokens=max_tokens, seed=sample)
        except InfraError as e:
            rec = LLMCallRecord(
                role, llm.model, attempt, 0, 0, time.perf_counter() - t0, "infra", e.kind
            )
            _log(rec)
            raise
        latency = resp.latency_s or (time.perf_counter() - t0)
        raw = resp.content
        value, reason = parse_json_reply(resp.content, model)
        rec = LLMCallRecord(
            role=role,
            model=resp.model or llm.model,
            attempt=attempt,
            prompt_tokens=resp.usage.prompt_tokens,
            completion_tokens=resp.usage.completion_tokens,
            latency_s=round(latency, 6),
            outcome="ok" if value is not None else "malformed",
            detail=reason[:200],
        )
        _log(rec)
        calls.append(rec)
        if value is not None:
            return CallResult(value, tuple(calls), attempt > 1, "", raw)
        # SPEC 5.3: one repair retry; a new sample index so a sampling model draws again.
        messages = [
            *messages[:1],
            {"role": "assistant", "content": resp.content or ""},
            {"role": "user", "content": REPAIR_INSTRUCTION.format(reason=reason)},
        ]
        sample += 1
    return CallResult(None, tuple(calls), True, f"malformed output after one repair: {reason}", raw)


def _log(rec: LLMCallRecord) -> None:
    log.info(
        "llm call role=%s model=%s attempt=%d prompt_tokens=%d completion_tokens=%d "
        "latency_s=%.3f outcome=%s%s",
        rec.role,
        rec.model,
        rec.attempt,
        rec.prompt_tokens,
        rec.completion_tokens,
        rec.latency_s,
        rec.outcome,
        f" detail={rec.detail}" if rec.detail else "",
    )

"""The real OpenAI-compatible provider as the HTTP tests build and call it (127.0.0.1 servers)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic import SecretStr

from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.protocol import ChatResponse, LLMProvider, Message, ToolSpec, Usage


def http_provider(url: str, *, key: str | None = None, **settings: Any) -> OpenAICompatProvider:
    """A provider for a local test server: short timeouts and backoff, seeded jitter.

    ``key`` becomes the API key (``None``: no key); ``settings`` override any constructor argument.
    """
    args: dict[str, Any] = {
        "base_url": url,
        "model": "m",
        "api_key": None if key is None else SecretStr(key),
        "timeout_s": 2.0,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.002,
        "rng": random.Random(0),
    }
    return OpenAICompatProvider(**{**args, **settings})


def chat_once(p: OpenAICompatProvider, content: str = "hi", **kw: Any) -> Any:
    """One chat call with a single user turn (``kw`` go to ``chat``); then the provider closes."""

    async def go() -> Any:
        try:
            return await p.chat([{"role": "user", "content": content}], **kw)
        finally:
            await p.aclose()

    return asyncio.run(go())


class Delegating:
    """An :class:`LLMProvider` that passes everything to ``inner``: a test subclass overrides
    :meth:`chat` (or a property) to change what one part of a run sees."""

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

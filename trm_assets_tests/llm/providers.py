"""The real OpenAI-compatible provider as the HTTP tests build and call it (127.0.0.1 servers)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic import SecretStr

from trm_assets.llm.openai_compat import OpenAICompatProvider


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

"""What the temperature-0 reuse key holds besides the prompt texts (hostile pass): the tool
protocol. ``TRM_LLM_TOOL_MODE=text`` sends another system prompt and reads tool calls from the
reply's text, so a question answers differently; the key did not hold the mode, and a text-mode
`trm eval` on a native-mode workspace served all 72 native outcomes (0.403, 0 model calls) where
text mode measures 0.500."""

from __future__ import annotations

from types import MethodType, SimpleNamespace
from typing import Any

import pytest

from trm_assets.harness.loop.context import LoopContext
from trm_assets.llm.openai_compat import OpenAICompatProvider
from trm_assets.llm.text_tools import ToolMode
from trm_assets_tests.tiny import tiny_config

SKILLS = {"default-strategy.md": "look first", "object-recognition.md": "name the object"}


def _context(tool_mode: ToolMode) -> Any:
    cfg = tiny_config("llm_provider=openai", "agent_model=m", "evolve_model=m", "gate_passes=1")
    agent = OpenAICompatProvider(base_url="http://127.0.0.1:9/v1", model="m", tool_mode=tool_mode)
    fake: Any = SimpleNamespace(cfg=cfg, providers=SimpleNamespace(agent=agent, simulated=False))
    for name in ("_decoding", "decoding_hash", "context_hash", "prompt_key"):
        setattr(fake, name, MethodType(getattr(LoopContext, name), fake))
    return fake


@pytest.mark.parametrize("call", ["decoding_hash", "prompt_key"])
def test_the_tool_mode_is_part_of_what_a_rollout_reads(call: str) -> None:
    def key(mode: ToolMode) -> str:
        ctx = _context(mode)
        if call == "decoding_hash":
            return str(ctx.decoding_hash())
        return str(ctx.prompt_key("Object Recognition", SKILLS, "v1"))

    assert key("text") != key("native")
    assert key("text") == key("text") and key("native") == key("native")


def test_native_mode_keeps_the_key_it_had() -> None:
    """Workspaces trained in native mode keep their reuse: the mode enters only when it is
    text."""
    ctx = _context("native")
    assert "tool_mode" not in ctx._decoding()
    assert _context("text")._decoding()["tool_mode"] == "text"

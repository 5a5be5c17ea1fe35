"""How the simulated model tells its role from the conversation, exactly as a real model would:
from the text of the rendered prompt templates (their first heading line) or, for the agent, from
the agent conversation contract (the ``Question id:`` line of the user message). No hidden channel.

Also small helpers that read the parts of a rendered template the simulator needs (tagged blocks
such as ``<cases>…</cases>`` and ``Key: value`` lines). They are tolerant: a missing part is ``""``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

Role = Literal[
    "agent", "diagnose", "evolve_skill", "evolve_system", "evolve_tool", "momentum", "unknown"
]

# The first line of each template in prompts/ (a test keeps these in sync with the files).
TEMPLATE_HEADINGS: dict[str, Role] = {
    "# Diagnose failed video question answers": "diagnose",
    "# Improve a skill file of a video question answering agent": "evolve_skill",
    "# Improve the system prompt of a video question answering agent": "evolve_system",
    "# Improve a tool description of a video question answering agent": "evolve_tool",
    "# Write momentum guidance for a skill file": "momentum",
}
TEMPLATE_FILES: dict[Role, str] = {
    "diagnose": "diagnose.md",
    "evolve_skill": "evolve_skill.md",
    "evolve_system": "evolve_system.md",
    "evolve_tool": "evolve_tool.md",
    "momentum": "momentum.md",
}
_QUESTION_ID_LINE = re.compile(r"^\s*Question id:\s*(\S+)\s*$", re.MULTILINE)
_QID_TOKEN = re.compile(r"(?<![\w-])(\d+-\d+)(?![\w-])")


def content_text(content: Any) -> str:
    """A message ``content`` as text (strings, or OpenAI content parts with ``text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)
    return str(content)


# what str.splitlines() splits on
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (``""`` when none): what
    ``next(ln.strip() for ln in text.splitlines() if ln.strip())`` gives, without splitting a
    whole skill text (every line break is whitespace, so the blank lines go with ``lstrip``)."""
    rest = text.lstrip()
    m = _LINE_BREAK.search(rest)
    return (rest if m is None else rest[: m.start()]).rstrip()


def detect_role(messages: Sequence[dict[str, Any]]) -> tuple[Role, str]:
    """(role, the text of the message that revealed it)."""
    for m in messages:
        if m.get("role") not in ("system", "user", "developer"):
            continue
        text = content_text(m.get("content"))
        role = TEMPLATE_HEADINGS.get(first_line(text))
        if role is not None:
            return role, text
    for m in messages:
        if m.get("role") == "user":
            text = content_text(m.get("content"))
            if _QUESTION_ID_LINE.search(text):
                return "agent", text
    return "unknown", ""


def line_value(text: str, key: str) -> str:
    """The value of the first ``Key: value`` line, stripped (``""`` when absent)."""
    m = re.search(rf"^\s*{re.escape(key)}:[ \t]*(.*?)\s*$", text, re.MULTILINE)
    return m.group(1) if m else ""


def block(text: str, tag: str) -> str:
    """The inside of the first ``<tag …>…</tag>`` block, stripped (``""`` when absent)."""
    m = re.search(rf"<{re.escape(tag)}(?:\s[^>]*)?>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    return m.group(1).strip() if m else ""


def question_ids_in(text: str, known: Iterable[str] | None = None) -> list[str]:
    """Question-id-like tokens (``123-2``) of ``text`` in order of appearance, deduplicated.

    With ``known``, only ids in that collection are kept.
    """
    allowed = set(known) if known is not None else None
    out: dict[str, None] = {}
    for m in _QID_TOKEN.finditer(text):
        qid = m.group(1)
        if allowed is None or qid in allowed:
            out[qid] = None
    return list(out)


def question_id_of_agent_prompt(messages: Sequence[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            hit = _QUESTION_ID_LINE.search(content_text(m.get("content")))
            if hit:
                return hit.group(1)
    return ""


class SimReply:
    """What the simulated model says: text and/or tool calls ``(name, JSON arguments)``.

    ``label`` records why (e.g. ``"agent:answer:correct"``, ``"evolve_skill:cue"``) for tests and
    debugging; it is never sent to the client.
    """

    __slots__ = ("content", "label", "tool_calls")

    def __init__(
        self, content: str | None, tool_calls: Sequence[tuple[str, str]] = (), *, label: str = ""
    ) -> None:
        self.content = content
        self.tool_calls = tuple(tool_calls)
        self.label = label

    def __repr__(self) -> str:
        calls = self.tool_calls
        return f"SimReply(label={self.label!r}, content={self.content!r}, tool_calls={calls!r})"

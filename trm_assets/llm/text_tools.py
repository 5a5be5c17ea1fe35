"""Tool calling in plain text, for servers or models without native tool calling (issue 17.2).

``TRM_LLM_TOOL_MODE=text`` (the provider's ``tool_mode="text"``) keeps the
:class:`~trm_assets.llm.protocol.LLMProvider` contract — the caller still passes OpenAI tool specs
and gets :class:`~trm_assets.llm.protocol.ToolCall`\\ s back — but nothing tool-specific goes on
the wire:

* **request**: no ``tools`` / ``tool_choice``; the tools (name, description, JSON schema of the
  arguments) and the reply protocol are appended to the system message
  (:data:`TOOL_PROTOCOL`); earlier tool-call turns become assistant text (one JSON object per
  call), tool results become one user message per turn (``Result of NAME (call ID): …``), so the
  roles still alternate as strict chat templates require;
* **reply**: every JSON object ``{"tool": NAME, "arguments": {...}}`` in the text (also
  ``{"name": NAME, "arguments"|"parameters": {...}}`` when NAME is an offered tool; code fences
  allowed) is a tool call, the rest of the text is the content. A reply without one is the final
  answer in plain text: the agent loop extracts the letter from it with the Video-MME rule
  (:func:`trm_assets.agent.answer.extract_answer_letter`).

Call ids are ``text_<turn>_<i>`` (deterministic, so a replayed rollout sends the same bytes).

Rejected: a grammar/JSON mode to force the call format (not available on every server, and it
would also force the final answer into JSON); putting the protocol in an evolvable prompt file
(it is an adapter to the transport, not agent behaviour, and must match the parser here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from trm_assets.llm.protocol import Message, ToolCall, ToolSpec

ToolMode = Literal["native", "text"]
TOOL_MODES: tuple[str, ...] = ("native", "text")

TOOL_PROTOCOL = """## Tools

You can use the tools below. To call a tool, reply with only this JSON object and nothing else:
{"tool": "<tool name>", "arguments": {<the arguments, as the tool's schema says>}}
The tool's result comes back in the next message. Call one tool per reply.
When you know the final answer, call the answer tool if there is one, or reply in plain text
with the final answer.

Available tools:"""

_FENCE = re.compile(r"```[a-zA-Z]*")


def tool_names(tools: Sequence[ToolSpec]) -> tuple[str, ...]:
    return tuple(str(t.get("function", {}).get("name", "")) for t in tools)


def describe_tools(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt block: the protocol, then one entry per tool with its argument schema."""
    lines = [TOOL_PROTOCOL]
    for t in tools:
        fn = t.get("function", {})
        schema = json.dumps(fn.get("parameters") or {}, ensure_ascii=False, sort_keys=True)
        desc = " ".join(str(fn.get("description") or "").split())
        lines.append(f"- {fn.get('name')}: {desc}\n  arguments (JSON schema): {schema}")
    return "\n".join(lines)


def _call_text(name: str, arguments: str) -> str:
    try:
        args: Any = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        args = arguments  # what the model wrote, kept as a string
    return json.dumps({"tool": name, "arguments": args}, ensure_ascii=False)


def render_conversation(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """The conversation as plain system/user/assistant turns (see the module docstring)."""
    out: list[Message] = []
    names: dict[str, str] = {}
    results_at = -1  # index of the user turn collecting the current tool results
    block = describe_tools(tools) if tools else ""
    placed = not block
    for m in messages:
        role = m.get("role")
        if role == "system" and not placed:
            out.append({"role": "system", "content": f"{_text(m.get('content'))}\n\n{block}"})
            placed = True
        elif role == "assistant":
            parts = [_text(m.get("content"))] if m.get("content") else []
            for c in m.get("tool_calls") or []:
                fn = c.get("function", {})
                names[str(c.get("id"))] = str(fn.get("name"))
                parts.append(_call_text(str(fn.get("name")), str(fn.get("arguments") or "")))
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            cid = str(m.get("tool_call_id"))
            name = m.get("name") or names.get(cid, "tool")
            result = f"Result of {name} (call {cid}):\n{_text(m.get('content'))}"
            if results_at == len(out) - 1 >= 0:
                out[-1]["content"] += "\n\n" + result
            else:
                out.append({"role": "user", "content": result})
                results_at = len(out) - 1
        else:
            out.append(dict(m))
    if not placed:
        out.insert(0, {"role": "system", "content": block})
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def parse_reply(
    text: str | None, tools: Sequence[ToolSpec], turn: int
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """``(content without the calls, tool calls)`` of a text-mode reply (module docstring)."""
    if not text:
        return text, ()
    offered = set(tool_names(tools))
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    keep: list[str] = []
    pos = 0
    i = text.find("{")
    while i >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        call = _as_call(obj, offered, f"text_{turn}_{len(calls)}")
        if call is None:
            i = text.find("{", end)
            continue
        calls.append(call)
        keep.append(text[pos:i])
        pos = end
        i = text.find("{", end)
    if not calls:
        return text, ()
    keep.append(text[pos:])
    rest = _FENCE.sub("", "".join(keep)).replace("```", "").strip()
    return (rest or None), tuple(calls)


def _as_call(obj: Any, offered: set[str], call_id: str) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("tool"), str):
        name = obj["tool"]  # explicit: a call even to an unknown tool (the loop answers an error)
    elif isinstance(obj.get("name"), str) and obj["name"] in offered:
        name = obj["name"]
    else:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        arguments = args
    else:
        arguments = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return ToolCall(id=call_id, name=name, arguments=arguments)

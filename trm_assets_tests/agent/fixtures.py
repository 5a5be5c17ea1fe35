"""Small hand-built trees, questions and a scripted LLM provider for the agent and inference tests.

Shared by ``trm_assets_tests/agent`` and the inference/run-log tests in
``trm_assets_tests/harness`` (imported, not a conftest, so other test modules are unaffected).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trm_assets.agent.messages import AgentPrompts, load_agent_prompts
from trm_assets.agent.tree import VideoTree, parse_tree
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question, skill_file_name
from trm_assets.llm.protocol import ChatResponse, InfraError, Message, ToolCall, ToolSpec, Usage

REPO = Path(__file__).resolve().parents[2]
PROMPTS_DIR = REPO / "prompts"


def _node(
    level: str, parent: str | None, start: float, end: float, caption: str, **kw: Any
) -> dict[str, Any]:
    return {
        "level": level,
        "parent": parent,
        "children": [],
        "start": start,
        "end": end,
        "caption": caption,
        **kw,
    }


def kitchen_tree(video_id: str = "001", videoID: str = "vidA") -> VideoTree:
    """A 120 s cooking video: 2 segments × 2 clips × 1 frame, with OCR and subtitles."""
    nodes = {
        "v": _node("video", None, 0, 120, "A chef cooks onions and serves a dish; a cat visits."),
        "s0": _node("segment", "v", 0, 60, "The chef prepares onions."),
        "s1": _node("segment", "v", 60, 120, "A cat appears, then the dish is served."),
        "s0c0": _node(
            "clip",
            "s0",
            0,
            30,
            "A chef chops red onions on a wooden board.",
            ocr=["RECIPE 3: ONION SOUP"],
            subtitle_text="First we chop three onions.",
        ),
        "s0c1": _node("clip", "s0", 30, 60, "The chef adds the onions to a hot pan."),
        "s1c0": _node("clip", "s1", 60, 90, "A grey cat jumps onto the kitchen counter."),
        "s1c1": _node(
            "clip", "s1", 90, 120, "The chef serves the soup on a blue plate.", ocr=["ENJOY"]
        ),
        "f0": _node(
            "frame", "s0c0", 15, 15, "Close-up of a knife and red onion slices.", timestamp=15.0
        ),
        "f1": _node("frame", "s0c1", 45, 45, "Onions sizzling in a black pan.", timestamp=45.0),
        "f2": _node("frame", "s1c0", 75, 75, "A grey cat sitting next to a bowl.", timestamp=75.0),
        "f3": _node(
            "frame", "s1c1", 105, 105, "A blue plate with soup.", timestamp=105.0, ocr=["ENJOY"]
        ),
    }
    children = {
        "v": ["s0", "s1"],
        "s0": ["s0c0", "s0c1"],
        "s1": ["s1c0", "s1c1"],
        "s0c0": ["f0"],
        "s0c1": ["f1"],
        "s1c0": ["f2"],
        "s1c1": ["f3"],
    }
    for k, v in children.items():
        nodes[k]["children"] = v
    data = {
        "schema_version": "1.0",
        "video": {
            "video_id": video_id,
            "videoID": videoID,
            "duration_sec": 120.0,
            "duration_category": "short",
            "domain": "Life Record",
            "sub_category": "Food",
            "has_subtitles": True,
        },
        "root_id": "v",
        "nodes": nodes,
        "subtitles": [
            {"start": 2.0, "end": 6.0, "text": "First we chop three onions."},
            {"start": 95.0, "end": 99.0, "text": "And the soup is ready."},
        ],
    }
    return parse_tree(data, f"<fixture {videoID}>")


OPTIONS = ("A. Red onions.", "B. Carrots.", "C. Potatoes.", "D. Garlic.")


def question(
    qid: str = "001-1",
    task_type: str = "Object Recognition",
    answer: str = "A",
    videoID: str = "vidA",
) -> Question:
    return Question(
        question_id=qid,
        video_id="001",
        videoID=videoID,
        duration="short",
        domain="Life Record",
        sub_category="Food",
        task_type=task_type,
        question="What vegetable does the chef chop?",
        options=OPTIONS,
        answer=answer,
    )


def skills_for(task_types: Sequence[str]) -> dict[str, str]:
    out = {DEFAULT_SKILL_FILE: "# Default strategy\nLook before you answer."}
    for t in task_types:
        out[skill_file_name(t)] = f"# {t}\nSearch for the object named in the question."
    return out


def prompts() -> AgentPrompts:
    return load_agent_prompts(PROMPTS_DIR)


def tool_response(
    *calls: tuple[str, dict[str, Any] | str],
    content: str | None = None,
    tokens: tuple[int, int] = (10, 2),
) -> ChatResponse:
    tcs = tuple(
        ToolCall(id=f"c{i}", name=n, arguments=a if isinstance(a, str) else json.dumps(a))
        for i, (n, a) in enumerate(calls)
    )
    return ChatResponse(content=content, tool_calls=tcs, usage=Usage(*tokens), model="scripted")


Script = Callable[[list[Message], int | None], ChatResponse]


class ScriptedLLM:
    """An LLMProvider whose turns come from a function of (messages, seed); records every call
    as (a copy of the messages, tools, seed)."""

    is_simulated = True

    def __init__(self, script: Script, *, latency_s: float = 0.0, model: str = "scripted") -> None:
        self.script = script
        self.latency_s = latency_s
        self.model = model
        self.usage = Usage()
        self.calls: list[tuple[list[Message], list[ToolSpec] | None, int | None]] = []

    @classmethod
    def replying(cls, replies: Sequence[str | Exception]) -> ScriptedLLM:
        """Each call takes the next of ``replies``: a string is the reply's content (100 prompt
        and 20 completion tokens), an exception is raised."""
        queue = list(replies)

        def script(messages: list[Message], seed: int | None) -> ChatResponse:
            reply = queue.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return ChatResponse(
                content=reply, usage=Usage(100, 20), model="scripted", latency_s=0.01
            )

        return cls(script)

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        self.calls.append((list(messages), tools, seed))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        resp = self.script(messages, seed)
        self.usage = self.usage + resp.usage
        return resp


def n_assistant_turns(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant")


def explorer(letter_of: Callable[[list[Message]], str] = lambda m: "A") -> Script:
    """overview → search → answer(letter_of(messages))."""

    def script(messages: list[Message], seed: int | None) -> ChatResponse:
        step = n_assistant_turns(messages)
        if step == 0:
            return tool_response(("get_overview", {}), content="Overview first.")
        if step == 1:
            return tool_response(("search_captions", {"query": "chef chops onions", "k": 3}))
        return tool_response(("answer", {"letter": letter_of(messages)}))

    return script


def failing(kind: str = "timeout") -> Script:
    def script(messages: list[Message], seed: int | None) -> ChatResponse:
        raise InfraError(kind, "simulated outage")

    return script

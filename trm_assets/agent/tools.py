"""The agent's tools over a video tree: OpenAI function-tool specs and their dispatch.

Descriptions are *prompts* (``prompts/tools/<name>.md``, an evolvable "tool pack", carried by
:class:`~trm_assets.agent.messages.AgentPrompts`); the JSON parameter schemas below are *code*,
because the dispatcher depends on them.

Error policy (GATE.md §2): a bad call by the model (unknown tool, arguments that are not JSON, a
missing node, an inverted time range) is a *task-level* event: the result is a JSON object with an
``"error"`` field and the conversation continues. :class:`~trm_assets.llm.protocol.InfraError`
from the VLM behind ``inspect_frames`` propagates (infra failure). Anything else is a bug.

Results are JSON text. A node is shown as ``{"node_id", "level", "start", "end", "caption"}`` plus
``subtitle_text`` / ``ocr`` when present and ``n_children`` for inner nodes. Lists longer than
``max_nodes`` are evenly subsampled and say so (``"truncated": {"shown": n, "total": m}``).

Why it is long: the video-tree tools, their JSON schemas, argument validation and result rendering
form one catalogue the agent and the prompt set must agree on.
"""

from __future__ import annotations

import base64
import json
import math
import mimetypes
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from trm_assets.agent.answer import normalize_letter_argument
from trm_assets.agent.tree import Node, VideoTree
from trm_assets.domain.errors import TrmError, describe_validation_error
from trm_assets.domain.question import Question
from trm_assets.llm.protocol import LLMProvider, ToolSpec

TOOL_NAMES: tuple[str, ...] = (
    "get_overview",
    "expand_node",
    "get_captions",
    "search_captions",
    "get_subtitles",
    "get_ocr",
    "inspect_frames",
    "answer",
)
ANSWER_TOOL = "answer"

_TIME = {"type": "number", "description": "seconds from the start of the video"}
TOOL_PARAMETERS: dict[str, dict[str, Any]] = {
    "get_overview": {"type": "object", "properties": {}, "required": []},
    "expand_node": {
        "type": "object",
        "properties": {"node_id": {"type": "string", "description": "a node_id seen in a result"}},
        "required": ["node_id"],
    },
    "get_captions": {
        "type": "object",
        "properties": {
            "start": _TIME,
            "end": _TIME,
            "level": {"type": "string", "enum": ["segment", "clip", "frame"], "default": "clip"},
        },
        "required": ["start", "end"],
    },
    "search_captions": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "keywords to look for"},
            "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        },
        "required": ["query"],
    },
    "get_subtitles": {
        "type": "object",
        "properties": {"start": _TIME, "end": _TIME},
        "required": ["start", "end"],
    },
    "get_ocr": {
        "type": "object",
        "properties": {"start": _TIME, "end": _TIME},
        "required": ["start", "end"],
    },
    "inspect_frames": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "what to look for in the frames"},
            "start": _TIME,
            "end": _TIME,
        },
        "required": ["question", "start", "end"],
    },
    "answer": {
        "type": "object",
        "properties": {"letter": {"type": "string", "enum": ["A", "B", "C", "D"]}},
        "required": ["letter"],
    },
}


class ToolPackError(TrmError, ValueError):
    """A tool pack (descriptions) that does not cover the tools, or a question without a tree."""


def tool_specs(
    descriptions: Mapping[str, str], names: Sequence[str] = TOOL_NAMES
) -> list[ToolSpec]:
    """OpenAI function-tool specs: the schema from code, the description from the tool pack."""
    missing = [n for n in names if not descriptions.get(n, "").strip()]
    if missing:
        raise ToolPackError(
            f"the tool pack has no description for {missing}; add prompts/tools/<name>.md"
        )
    unknown = [n for n in names if n not in TOOL_PARAMETERS]
    if unknown:
        raise ToolPackError(f"unknown tool name(s) {unknown}; known tools: {list(TOOL_NAMES)}")
    return [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": descriptions[n].strip(),
                "parameters": TOOL_PARAMETERS[n],
            },
        }
        for n in names
    ]


# ----------------------------------------------------------------------------------------------
# argument models


def _parse_time(v: Any) -> Any:
    """Accept seconds (number or numeric string) and ``"HH:MM:SS"`` / ``"MM:SS"`` strings."""
    if isinstance(v, str) and ":" in v:
        parts = v.strip().split(":")
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            return v
        total = 0.0
        for x in nums:
            total = total * 60 + x
        return total
    return v


Seconds = Annotated[float, BeforeValidator(_parse_time), Field(ge=0, allow_inf_nan=False)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _NodeArgs(_Args):
    node_id: str = Field(min_length=1)


class _RangeArgs(_Args):
    start: Seconds
    end: Seconds


class _CaptionArgs(_RangeArgs):
    level: Literal["segment", "clip", "frame"] = "clip"


class _SearchArgs(_Args):
    query: str = Field(min_length=1)
    k: int = Field(5, ge=1, le=20)


class _InspectArgs(_RangeArgs):
    question: str = Field(min_length=1)


class _AnswerArgs(_Args):
    letter: str


# ----------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class ToolResult:
    """One tool call's result.

    ``content`` is the JSON text sent back to the model; ``error`` is set for a task-level error
    (bad arguments, unknown node); ``letter`` is set only by a valid ``answer`` call.
    """

    name: str
    content: str
    error: str | None = None
    letter: str | None = None
    node_ids: tuple[str, ...] = ()
    source: str | None = None  # inspect_frames: "vlm" | "stored_captions"


class _ToolArgError(Exception):
    """Raised inside a tool for a bad call; becomes an ``{"error": ...}`` result."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _t(x: float) -> float:
    return round(float(x), 2)


def node_view(node_id: str, n: Node) -> dict[str, Any]:
    """A node as the model sees it."""
    d: dict[str, Any] = {
        "node_id": node_id,
        "level": n.level,
        "start": _t(n.start),
        "end": _t(n.end),
        "caption": n.caption,
    }
    if n.subtitle_text:
        d["subtitle_text"] = n.subtitle_text
    if n.ocr:
        d["ocr"] = list(n.ocr)
    if n.children:
        d["n_children"] = len(n.children)
    return d


def _subsample(items: Sequence[Any], limit: int) -> tuple[list[Any], dict[str, int] | None]:
    if len(items) <= limit:
        return list(items), None
    idx = (
        sorted({round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)})
        if limit > 1
        else [0]
    )
    return [items[i] for i in idx], {"shown": len(idx), "total": len(items)}


def _overlaps(n: Node, start: float, end: float) -> bool:
    return n.start <= end and n.end >= start


_WORD_RE = re.compile(r"[0-9a-z]+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "them",
        "there",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
    ]
)


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(text.lower()) if w not in _STOPWORDS]


class _KeywordIndex:
    """BM25 over every node's caption, subtitle text and OCR (embeddings are optional, not used)."""

    def __init__(self, tree: VideoTree) -> None:
        self.ids: list[str] = []
        self.tfs: list[Counter[str]] = []
        self.lens: list[int] = []
        df: Counter[str] = Counter()
        for nid, n in tree.iter_nodes():
            toks = _tokens(" ".join([n.caption, n.subtitle_text or "", *n.ocr]))
            tf = Counter(toks)
            self.ids.append(nid)
            self.tfs.append(tf)
            self.lens.append(len(toks))
            df.update(tf.keys())
        n_docs = max(len(self.ids), 1)
        self.avg_len = (sum(self.lens) / n_docs) or 1.0
        self.idf = {w: math.log(1 + (n_docs - c + 0.5) / (c + 0.5)) for w, c in df.items()}

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        terms = set(_tokens(query))
        if not terms:
            return []
        k1, b = 1.2, 0.75
        scored: list[tuple[float, int]] = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            for w in terms:
                f = tf.get(w)
                if f:
                    s += (
                        self.idf[w]
                        * f
                        * (k1 + 1)
                        / (f + k1 * (1 - b + b * self.lens[i] / self.avg_len))
                    )
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [(self.ids[i], round(s, 3)) for s, i in scored[:k]]


_VLM_SYSTEM = (
    "You look at frames sampled from a video and answer a question about what is visible. "
    "Describe only what the frames show (people, objects, actions, on-screen text), with the "
    "timestamp of each frame you rely on. If the frames do not show the answer, say so."
)


class VideoTools:
    """The tools of one conversation, bound to one video tree. Create one per rollout."""

    def __init__(
        self,
        tree: VideoTree,
        *,
        index: Callable[[], _KeywordIndex] | None = None,
        vlm: LLMProvider | None = None,
        frames_dir: Path | None = None,
        max_nodes: int = 40,
        max_frames: int = 8,
        memo: _ToolMemo | None = None,
    ) -> None:
        self.tree = tree
        self._memo = memo
        self._index_factory = index
        self._index: _KeywordIndex | None = None
        self.vlm = vlm
        self.frames_dir = frames_dir
        self.max_nodes = max_nodes
        self.max_frames = max_frames

    async def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> ToolResult:
        """Run one tool call. Bad calls give an ``error`` result; InfraError (VLM) propagates.

        Every tool but ``inspect_frames`` (a model call) is a function of the tree and the
        arguments, so with a ``memo`` (the :class:`Toolbox`'s, keyed by video) a call whose
        arguments text was seen before for this video returns the stored result."""
        memo = self._memo
        if memo is None or name == "inspect_frames" or not isinstance(arguments, str):
            return await self._call(name, arguments)
        key = (self.tree.video.videoID, name, arguments)
        hit = memo.get(key)
        if hit is None:
            hit = await self._call(name, arguments)
            memo.put(key, hit)
        return hit

    async def _call(self, name: str, arguments: str | Mapping[str, Any] | None) -> ToolResult:
        handler = _HANDLERS.get(name)
        if handler is None:
            return self._error(
                name, f"unknown tool {name!r}; the available tools are {', '.join(TOOL_NAMES)}"
            )
        try:
            args = _decode_arguments(arguments)
            model_cls = _ARG_MODELS[name]
            try:
                parsed = model_cls.model_validate(args)
            except ValidationError as e:
                raise _ToolArgError(f"{name}: " + "; ".join(describe_validation_error(e))) from None
            result: ToolResult = await handler(self, parsed)
            return result
        except _ToolArgError as e:
            return self._error(name, str(e))

    @staticmethod
    def _error(name: str, message: str) -> ToolResult:
        return ToolResult(name=name, content=_dumps({"error": message}), error=message)

    # -- tools --------------------------------------------------------------------------------

    async def _overview(self, _: _Args) -> ToolResult:
        t = self.tree
        root = t.nodes[t.root_id]
        counts = Counter(n.level for n in t.nodes.values())
        children = [node_view(c, t.nodes[c]) for c in root.children]
        shown, trunc = _subsample(children, self.max_nodes)
        out: dict[str, Any] = {
            "video": {
                "video_id": t.video.videoID,
                "duration_sec": _t(t.video.duration_sec),
                "has_subtitles": bool(t.video.has_subtitles or t.subtitles),
                "levels": list(t.levels),
                "node_counts": {lv: counts.get(lv, 0) for lv in t.levels},
            },
            "root": node_view(t.root_id, root),
            "children": shown,
        }
        if trunc:
            out["truncated"] = trunc
        ids = (t.root_id, *(c["node_id"] for c in shown))
        return ToolResult("get_overview", _dumps(out), node_ids=ids)

    async def _expand(self, a: _NodeArgs) -> ToolResult:
        t = self.tree
        n = t.nodes.get(a.node_id.strip())
        if n is None:
            raise _ToolArgError(
                f"expand_node: node {a.node_id!r} does not exist in this video; use a node_id from "
                "a previous result (get_overview lists the top-level nodes)"
            )
        nid = a.node_id.strip()
        children = [node_view(c, t.nodes[c]) for c in n.children]
        shown, trunc = _subsample(children, self.max_nodes)
        out: dict[str, Any] = {"node": node_view(nid, n), "children": shown}
        if not n.children:
            out["note"] = f"{nid!r} is a {n.level} node without children"
        if trunc:
            out["truncated"] = trunc
        return ToolResult(
            "expand_node", _dumps(out), node_ids=(nid, *(c["node_id"] for c in shown))
        )

    def _range(self, name: str, a: _RangeArgs) -> tuple[float, float]:
        if a.end < a.start:
            raise _ToolArgError(f"{name}: 'end' ({a.end}) is before 'start' ({a.start})")
        dur = self.tree.video.duration_sec
        if a.start > dur + 1.0:
            raise _ToolArgError(
                f"{name}: 'start' ({a.start}) is after the end of the video ({_t(dur)} s)"
            )
        return a.start, a.end

    def _nodes_in(self, level: str, start: float, end: float) -> list[tuple[str, Node]]:
        return [
            (nid, n)
            for nid, n in self.tree.iter_nodes()
            if n.level == level and _overlaps(n, start, end)
        ]

    async def _captions(self, a: _CaptionArgs) -> ToolResult:
        start, end = self._range("get_captions", a)
        if a.level not in self.tree.levels:
            raise _ToolArgError(
                f"get_captions: this video has no {a.level!r} level "
                f"(levels: {list(self.tree.levels)})"
            )
        nodes = [node_view(nid, n) for nid, n in self._nodes_in(a.level, start, end)]
        shown, trunc = _subsample(nodes, self.max_nodes)
        out: dict[str, Any] = {"range": [_t(start), _t(end)], "level": a.level, "nodes": shown}
        if trunc:
            out["truncated"] = trunc
            out["hint"] = "narrow the time range to see every node"
        return ToolResult("get_captions", _dumps(out), node_ids=tuple(x["node_id"] for x in shown))

    async def _search(self, a: _SearchArgs) -> ToolResult:
        if self._index is None:
            self._index = self._index_factory() if self._index_factory else _KeywordIndex(self.tree)
        hits = self._index.search(a.query, a.k)
        nodes = []
        for nid, score in hits:
            v = node_view(nid, self.tree.nodes[nid])
            v["score"] = score
            nodes.append(v)
        out: dict[str, Any] = {"query": a.query, "results": nodes}
        if not nodes:
            out["note"] = "no node matches these keywords; try synonyms or get_overview"
        return ToolResult("search_captions", _dumps(out), node_ids=tuple(nid for nid, _ in hits))

    async def _subtitles(self, a: _RangeArgs) -> ToolResult:
        start, end = self._range("get_subtitles", a)
        t = self.tree
        if t.subtitles:
            cues = [
                {"start": _t(c.start), "end": _t(c.end), "text": c.text}
                for c in t.subtitles
                if c.start <= end and c.end >= start
            ]
        else:  # trees without parsed cues may still carry per-node subtitle text
            cues = [
                {"start": _t(n.start), "end": _t(n.end), "text": n.subtitle_text}
                for _, n in self._nodes_in("clip", start, end)
                if n.subtitle_text
            ]
        shown, trunc = _subsample(cues, self.max_nodes * 2)
        out: dict[str, Any] = {"range": [_t(start), _t(end)], "cues": shown}
        if not cues:
            out["note"] = "no subtitles in this range" + (
                "" if (t.video.has_subtitles or t.subtitles) else " (this video has no subtitles)"
            )
        if trunc:
            out["truncated"] = trunc
        return ToolResult("get_subtitles", _dumps(out))

    async def _ocr(self, a: _RangeArgs) -> ToolResult:
        start, end = self._range("get_ocr", a)
        items = [
            {
                "node_id": nid,
                "level": n.level,
                "start": _t(n.start),
                "end": _t(n.end),
                "text": list(n.ocr),
            }
            for nid, n in self.tree.iter_nodes()
            if n.ocr and n.level in ("clip", "frame") and _overlaps(n, start, end)
        ]
        shown, trunc = _subsample(items, self.max_nodes)
        out: dict[str, Any] = {"range": [_t(start), _t(end)], "ocr": shown}
        if not items:
            out["note"] = "no on-screen text was recorded in this range"
        if trunc:
            out["truncated"] = trunc
        return ToolResult("get_ocr", _dumps(out), node_ids=tuple(x["node_id"] for x in shown))

    async def _inspect(self, a: _InspectArgs) -> ToolResult:
        start, end = self._range("inspect_frames", a)
        frames = self._nodes_in("frame", start, end)
        picked, _ = _subsample(frames, self.max_frames)
        images = self._frame_images(picked) if self.vlm is not None else []
        if self.vlm is not None and images:
            content: list[dict[str, Any]] = [
                {
                    "type": "text",
                    "text": f"Question: {a.question}\nFrames from {_t(start)} s to {_t(end)} s, "
                    f"at: {', '.join(f'{_t(ts)} s' for ts, _ in images)}.",
                },
                *({"type": "image_url", "image_url": {"url": url}} for _, url in images),
            ]
            resp = await self.vlm.chat(
                [{"role": "system", "content": _VLM_SYSTEM}, {"role": "user", "content": content}],
                temperature=0.0,
                max_tokens=512,
            )
            out = {
                "source": "vlm",
                "range": [_t(start), _t(end)],
                "frames": [_t(ts) for ts, _ in images],
                "answer": resp.content or "",
            }
            return ToolResult(
                "inspect_frames",
                _dumps(out),
                node_ids=tuple(nid for nid, _ in picked),
                source="vlm",
            )
        # No VLM (or no frame images): the stored frame and clip descriptions of the range.
        clips = [node_view(nid, n) for nid, n in self._nodes_in("clip", start, end)]
        clips_shown, trunc = _subsample(clips, self.max_nodes)
        stored: dict[str, Any] = {
            "source": "stored_captions",
            "note": "no vision model is configured; these are the stored descriptions of the range",
            "question": a.question,
            "range": [_t(start), _t(end)],
            "frames": [node_view(nid, n) for nid, n in picked],
            "clips": clips_shown,
        }
        if trunc:
            stored["truncated"] = trunc
        ids = tuple(nid for nid, _ in picked) + tuple(c["node_id"] for c in clips_shown)
        return ToolResult("inspect_frames", _dumps(stored), node_ids=ids, source="stored_captions")

    def _frame_images(self, frames: Iterable[tuple[str, Node]]) -> list[tuple[float, str]]:
        """(timestamp, data URL) of the frames whose image file exists under ``frames_dir``."""
        if self.frames_dir is None:
            return []
        out = []
        for _, n in frames:
            if not n.image:
                continue
            p = (self.frames_dir / n.image).resolve()
            if not p.is_relative_to(self.frames_dir.resolve()) or not p.is_file():
                continue
            mime = mimetypes.guess_type(p.name)[0] or "image/jpeg"
            data = base64.b64encode(p.read_bytes()).decode("ascii")
            out.append(
                (n.timestamp if n.timestamp is not None else n.start, f"data:{mime};base64,{data}")
            )
        return out

    async def _answer(self, a: _AnswerArgs) -> ToolResult:
        letter = normalize_letter_argument(a.letter)
        if letter is None:
            raise _ToolArgError(
                f"answer: 'letter' must be a bare option letter A, B, C or D, got {a.letter[:40]!r}"
            )
        return ToolResult("answer", _dumps({"ok": True, "letter": letter}), letter=letter)


def _decode_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    text = arguments.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise _ToolArgError(
            f"the arguments are not valid JSON ({e.msg} at character {e.pos}); "
            'send an object such as {"start": 0, "end": 30}'
        ) from None
    if not isinstance(value, dict):
        raise _ToolArgError(f"the arguments must be a JSON object, got {type(value).__name__}")
    return value


_ARG_MODELS: dict[str, type[_Args]] = {
    "get_overview": _Args,
    "expand_node": _NodeArgs,
    "get_captions": _CaptionArgs,
    "search_captions": _SearchArgs,
    "get_subtitles": _RangeArgs,
    "get_ocr": _RangeArgs,
    "inspect_frames": _InspectArgs,
    "answer": _AnswerArgs,
}


class _ToolMemo:
    """Results of the deterministic tools by (video, tool, arguments text), shared by the
    rollouts of a :class:`Toolbox`: the loop re-runs the same questions (gates, R, R2), and
    their agents open with the same calls. Bounded: at most :attr:`MAX_ENTRIES` results of at
    most :attr:`MAX_CHARS` characters each; full, it starts over."""

    MAX_ENTRIES = 4096
    MAX_CHARS = 16_384

    def __init__(self) -> None:
        self._results: dict[tuple[str, str, str], ToolResult] = {}

    def get(self, key: tuple[str, str, str]) -> ToolResult | None:
        return self._results.get(key)

    def put(self, key: tuple[str, str, str], result: ToolResult) -> None:
        if len(result.content) > self.MAX_CHARS:
            return
        if len(self._results) >= self.MAX_ENTRIES:
            self._results.clear()
        self._results[key] = result


_HANDLERS: dict[str, Any] = {
    "get_overview": VideoTools._overview,
    "expand_node": VideoTools._expand,
    "get_captions": VideoTools._captions,
    "search_captions": VideoTools._search,
    "get_subtitles": VideoTools._subtitles,
    "get_ocr": VideoTools._ocr,
    "inspect_frames": VideoTools._inspect,
    "answer": VideoTools._answer,
}


@dataclass
class Toolbox:
    """The trees and services behind the tools, shared by every rollout of a run.

    ``trees`` maps ``videoID`` (a question's :attr:`~Question.tree_key`) to its tree. ``vlm`` is
    the optional vision model behind ``inspect_frames``; ``frames_dir`` is where the trees'
    ``image`` paths are resolved (frames outside it are never read). Search indexes are built once
    per tree, on first use.
    """

    trees: Mapping[str, VideoTree]
    vlm: LLMProvider | None = None
    frames_dir: Path | None = None
    max_nodes: int = 40
    max_frames: int = 8
    _indexes: dict[str, _KeywordIndex] = field(default_factory=dict, init=False, repr=False)
    _memo: _ToolMemo = field(default_factory=_ToolMemo, init=False, repr=False)

    def check_questions(self, questions: Iterable[Question]) -> None:
        """Refuse (before any rollout) questions whose video tree is missing."""
        missing = sorted({q.tree_key for q in questions if q.tree_key not in self.trees})
        if missing:
            shown = ", ".join(missing[:10]) + (" …" if len(missing) > 10 else "")
            raise ToolPackError(
                f"{len(missing)} video(s) have questions but no tree: {shown}. Build or copy "
                f"trees/<videoID>.json for them, or drop their questions."
            )

    def session(self, question: Question) -> VideoTools:
        """The tools of one rollout of ``question``."""
        key = question.tree_key
        tree = self.trees.get(key)
        if tree is None:
            raise ToolPackError(f"question {question.question_id}: no tree for video {key!r}")
        return VideoTools(
            tree,
            index=lambda: self._index_for(key, tree),
            vlm=self.vlm,
            frames_dir=self.frames_dir,
            max_nodes=self.max_nodes,
            max_frames=self.max_frames,
            memo=self._memo,
        )

    def _index_for(self, key: str, tree: VideoTree) -> _KeywordIndex:
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = _KeywordIndex(tree)
        return index

"""Video tree model and loader (schema documented in ``data/README.md``).

A tree is a flat ``nodes`` map keyed by id, with parent/children ids, levels
video → segment → clip → frame, and float-second time ranges. :func:`load_tree` validates the
structure (one root, acyclic, references exist, children inside the parent's range, siblings sorted)
and raises :class:`TreeFormatError` naming the file, the node id and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trm_assets.domain.errors import DataFormatError, describe_validation_error

Level = Literal["video", "segment", "clip", "frame"]
SCHEMA_VERSION = "1.0"
_TIME_EPS = 1e-6


class TreeFormatError(DataFormatError):
    """A video tree file that does not follow the schema."""


class VideoMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    video_id: str = Field(min_length=1)
    videoID: str = Field(min_length=1)
    url: str | None = None
    duration_sec: float = Field(gt=0)
    duration_category: Literal["short", "medium", "long"]
    domain: str
    sub_category: str
    fps_sampled: float | None = None
    has_subtitles: bool = False


class Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    level: Level
    parent: str | None
    children: tuple[str, ...] = ()
    start: float = Field(ge=0)
    end: float = Field(ge=0)
    caption: str = ""
    subtitle_text: str | None = None
    ocr: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    timestamp: float | None = None
    frame_index: int | None = None
    image: str | None = None
    keyframe_ts: float | None = None
    relevance: float | None = None


class SubtitleCue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    start: float = Field(ge=0)
    end: float = Field(ge=0)
    text: str


class VideoTree(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal["1.0"] = "1.0"
    video: VideoMeta
    levels: tuple[Level, ...] = ("video", "segment", "clip", "frame")
    root_id: str
    nodes: dict[str, Node]
    subtitles: tuple[SubtitleCue, ...] = ()
    subject_registry: dict[str, dict[str, Any]] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)

    def node(self, node_id: str) -> Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise KeyError(
                f"node {node_id!r} is not in the tree of video {self.video.videoID}"
            ) from None

    def iter_nodes(self, level: Level | None = None) -> list[tuple[str, Node]]:
        """Nodes in depth-first, time order (optionally of one level)."""
        out: list[tuple[str, Node]] = []
        stack = [self.root_id]
        while stack:
            nid = stack.pop()
            n = self.nodes[nid]
            if level is None or n.level == level:
                out.append((nid, n))
            stack.extend(reversed(n.children))
        return out


def structural_errors(tree: VideoTree) -> list[str]:
    """Every structural problem of a schema-valid tree, each naming the node id and field."""
    errs: list[str] = []
    nodes = tree.nodes
    if tree.root_id not in nodes:
        return [f"root_id: {tree.root_id!r} is not a key of 'nodes'"]
    roots = [nid for nid, n in nodes.items() if n.parent is None]
    if roots != [tree.root_id]:
        errs.append(
            f"nodes: expected exactly one root ({tree.root_id!r}) with parent null, got {roots}"
        )
    level_rank = {lv: i for i, lv in enumerate(tree.levels)}
    # Linear time (issue 18.9): "does the parent list this node" is a set lookup, not a scan of
    # the parent's children tuple (quadratic for a node with many children).
    listed: set[tuple[str, str]] = {(pid, cid) for pid, p in nodes.items() for cid in p.children}
    for nid, n in nodes.items():
        if n.end + _TIME_EPS < n.start:
            errs.append(f"node {nid!r}: end ({n.end}) is before start ({n.start})")
        if n.level not in level_rank:
            errs.append(f"node {nid!r}: level {n.level!r} is not one of levels {list(tree.levels)}")
        if n.level == "frame" and abs(n.end - n.start) > _TIME_EPS:
            errs.append(f"node {nid!r}: a frame node needs start == end, got {n.start}..{n.end}")
        if n.parent is not None:
            if n.parent not in nodes:
                errs.append(f"node {nid!r}: parent {n.parent!r} does not exist")
            elif (n.parent, nid) not in listed:
                errs.append(f"node {nid!r}: parent {n.parent!r} does not list it in 'children'")
        prev_start = -1.0
        for cid in n.children:
            c = nodes.get(cid)
            if c is None:
                errs.append(f"node {nid!r}: child {cid!r} does not exist")
                continue
            if c.parent != nid:
                errs.append(f"node {cid!r}: parent is {c.parent!r} but {nid!r} lists it as a child")
            if c.start + _TIME_EPS < n.start or c.end > n.end + _TIME_EPS:
                errs.append(
                    f"node {cid!r}: time range {c.start}..{c.end} is outside its parent "
                    f"{nid!r} ({n.start}..{n.end})"
                )
            if (
                c.level in level_rank
                and n.level in level_rank
                and level_rank[c.level] <= level_rank[n.level]
            ):
                errs.append(
                    f"node {cid!r}: level {c.level!r} is not below its parent's {n.level!r}"
                )
            if c.start + _TIME_EPS < prev_start:
                errs.append(f"node {nid!r}: children are not sorted by start (at {cid!r})")
            prev_start = c.start
    # Reachability from the root also proves acyclicity (every node has one parent).
    seen: set[str] = set()
    stack = [tree.root_id]
    while stack:
        nid = stack.pop()
        if nid in seen:
            errs.append(f"node {nid!r}: reached twice from the root (cycle or shared child)")
            continue
        seen.add(nid)
        stack.extend(c for c in nodes[nid].children if c in nodes)
    unreachable = sorted(set(nodes) - seen)
    if unreachable:
        errs.append(
            f"nodes: {len(unreachable)} node(s) not reachable from the root: {unreachable[:5]}"
        )
    root = nodes[tree.root_id]
    if root.end > tree.video.duration_sec + 1.0:
        errs.append(
            f"node {tree.root_id!r}: end {root.end} exceeds "
            f"video.duration_sec {tree.video.duration_sec}"
        )
    return errs


def parse_tree(data: Any, source: str) -> VideoTree:
    """Validate a decoded JSON object as a video tree; errors name ``source``."""
    if not isinstance(data, dict):
        raise TreeFormatError(source, None, None, "a JSON object at the top level")
    try:
        tree = VideoTree.model_validate(data)
    except ValidationError as e:
        raise TreeFormatError.from_messages(
            source, describe_validation_error(e, _tree_loc)
        ) from None
    errs = structural_errors(tree)
    if errs:
        raise TreeFormatError.from_messages(source, errs)
    return tree


def _tree_loc(loc: tuple[int | str, ...]) -> str:
    if len(loc) >= 2 and loc[0] == "nodes":
        rest = ".".join(str(p) for p in loc[2:])
        return f"node {loc[1]!r}" + (f" field {rest!r}" if rest else "")
    return "field " + repr(".".join(str(p) for p in loc))


def load_tree(path: str | Path) -> VideoTree:
    """Load and validate one tree JSON file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark is not an error
    except OSError as e:
        raise TreeFormatError(str(p), None, None, f"a readable file ({e.strerror})") from None
    return parse_tree(TreeFormatError.decode_json(text, str(p)), str(p))


def load_trees(directory: str | Path) -> dict[str, VideoTree]:
    """All ``*.json`` trees in ``directory``, keyed by ``video.videoID``."""
    d = Path(directory)
    trees: dict[str, VideoTree] = {}
    for p in sorted(d.glob("*.json")):
        t = load_tree(p)
        if t.video.videoID in trees:
            raise TreeFormatError(
                str(p), None, "video.videoID", f"a unique videoID ({t.video.videoID!r} repeats)"
            )
        trees[t.video.videoID] = t
    return trees

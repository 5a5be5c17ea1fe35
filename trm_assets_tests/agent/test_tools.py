"""The tools over a video tree: results, task-level errors, the VLM path of inspect_frames."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from trm_assets.agent.tools import Toolbox, ToolPackError, VideoTools
from trm_assets.llm.protocol import InfraError
from trm_assets_tests.agent.fixtures import ScriptedLLM, kitchen_tree, question


def call(tools: VideoTools, name: str, args: Any = None) -> tuple[dict[str, Any], Any]:
    raw = args if isinstance(args, str) or args is None else json.dumps(args)
    res = asyncio.run(tools.call(name, raw))
    return json.loads(res.content), res


@pytest.fixture
def tools() -> VideoTools:
    return Toolbox({"vidA": kitchen_tree()}).session(question())


def test_overview_and_expand(tools: VideoTools) -> None:
    out, res = call(tools, "get_overview", {})
    assert out["video"]["duration_sec"] == 120.0
    assert out["video"]["node_counts"] == {"video": 1, "segment": 2, "clip": 4, "frame": 4}
    assert [c["node_id"] for c in out["children"]] == ["s0", "s1"]
    assert set(out["children"][0]) == {"node_id", "level", "start", "end", "caption", "n_children"}
    out, res = call(tools, "expand_node", {"node_id": "s0"})
    assert [c["node_id"] for c in out["children"]] == ["s0c0", "s0c1"]
    assert out["children"][0]["ocr"] == ["RECIPE 3: ONION SOUP"]
    assert out["children"][0]["subtitle_text"] == "First we chop three onions."
    assert res.node_ids == ("s0", "s0c0", "s0c1")


def test_captions_in_a_range_accept_clock_times(tools: VideoTools) -> None:
    out, _ = call(tools, "get_captions", {"start": "00:50", "end": "1:20"})
    assert [n["node_id"] for n in out["nodes"]] == ["s0c1", "s1c0"]
    out, _ = call(tools, "get_captions", {"start": 0, "end": 120, "level": "frame"})
    assert [n["node_id"] for n in out["nodes"]] == ["f0", "f1", "f2", "f3"]


def test_long_lists_are_subsampled_and_say_so() -> None:
    tools = Toolbox({"vidA": kitchen_tree()}, max_nodes=2).session(question())
    out, _ = call(tools, "get_captions", {"start": 0, "end": 120, "level": "frame"})
    assert [n["node_id"] for n in out["nodes"]] == ["f0", "f3"]
    assert out["truncated"] == {"shown": 2, "total": 4}


def test_search_subtitles_ocr(tools: VideoTools) -> None:
    out, _ = call(tools, "search_captions", {"query": "grey cat", "k": 2})
    assert out["results"][0]["node_id"] in {"s1c0", "f2"}
    assert len(out["results"]) == 2
    out, _ = call(tools, "search_captions", {"query": "zebra"})
    assert out["results"] == [] and "note" in out
    out, _ = call(tools, "get_subtitles", {"start": 90, "end": 120})
    assert out["cues"] == [{"start": 95.0, "end": 99.0, "text": "And the soup is ready."}]
    out, _ = call(tools, "get_ocr", {"start": 0, "end": 120})
    assert [(o["node_id"], o["text"]) for o in out["ocr"]] == [
        ("s0c0", ["RECIPE 3: ONION SOUP"]),
        ("s1c1", ["ENJOY"]),
        ("f3", ["ENJOY"]),
    ]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("expand_node", {"node_id": "nope"}, "does not exist"),
        ("get_captions", {"start": 50, "end": 10}, "is before 'start'"),
        ("get_captions", {"start": "soon", "end": 10}, "start"),
        ("get_captions", {"start": 0, "end": 10, "level": "scene"}, "level"),
        ("get_ocr", {"start": 500, "end": 600}, "after the end of the video"),
        ("search_captions", {"k": 3}, "query"),
        ("answer", {"letter": "Based on the video, C"}, "bare option letter"),
        ("fly_drone", {}, "unknown tool"),
        ("get_overview", "{not json", "not valid JSON"),
        ("get_overview", "[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_calls_are_task_level_error_results(
    tools: VideoTools, name: str, args: Any, message: str
) -> None:
    out, res = call(tools, name, args)
    assert message in out["error"]
    assert res.error == out["error"] and res.letter is None


def test_answer_tool(tools: VideoTools) -> None:
    out, res = call(tools, "answer", {"letter": "c"})
    assert res.letter == "C" and out == {"ok": True, "letter": "C"}


def test_inspect_frames_without_vlm_returns_stored_descriptions(tools: VideoTools) -> None:
    out, res = call(tools, "inspect_frames", {"question": "what colour?", "start": 95, "end": 110})
    assert out["source"] == "stored_captions" and res.source == "stored_captions"
    assert [f["node_id"] for f in out["frames"]] == ["f3"]
    assert [c["node_id"] for c in out["clips"]] == ["s1c1"]


def _tree_with_images(tmp_path: Path) -> Toolbox:
    data = kitchen_tree().model_dump(mode="json")
    data["nodes"]["f3"]["image"] = "vidA/000105.jpg"
    data["nodes"]["f2"]["image"] = "../../etc/passwd"  # outside frames_dir: never read
    (tmp_path / "vidA").mkdir()
    (tmp_path / "vidA" / "000105.jpg").write_bytes(b"\xff\xd8fakejpeg")
    from trm_assets.agent.tree import parse_tree

    return Toolbox({"vidA": parse_tree(data, "x")}, frames_dir=tmp_path)


def test_inspect_frames_calls_the_vlm_with_the_frames(tmp_path: Path) -> None:
    from trm_assets.llm.protocol import ChatResponse

    vlm = ScriptedLLM(lambda m, s: ChatResponse(content="The plate is blue."), model="vlm")
    box = _tree_with_images(tmp_path)
    box.vlm = vlm
    out, _ = call(
        box.session(question()),
        "inspect_frames",
        {"question": "plate colour?", "start": 70, "end": 110},
    )
    assert out["source"] == "vlm" and out["answer"] == "The plate is blue."
    assert out["frames"] == [105.0]
    parts = vlm.calls[0][0][1]["content"]
    assert parts[0]["type"] == "text" and "plate colour?" in parts[0]["text"]
    assert [p["image_url"]["url"][:23] for p in parts[1:]] == ["data:image/jpeg;base64,"]


def test_inspect_frames_vlm_outage_propagates_as_infra(tmp_path: Path) -> None:
    def down(m: Any, s: Any) -> Any:
        raise InfraError("http_status", "503", status=503)

    box = _tree_with_images(tmp_path)
    box.vlm = ScriptedLLM(down)
    with pytest.raises(InfraError):
        call(box.session(question()), "inspect_frames", {"question": "q", "start": 100, "end": 110})


def test_missing_tree_is_refused_before_any_rollout() -> None:
    box = Toolbox({"vidA": kitchen_tree()})
    with pytest.raises(ToolPackError, match=r"1 video\(s\) have questions but no tree: vidQ"):
        box.check_questions([question(), question("9-1", videoID="vidQ")])


def test_repeated_calls_of_the_toolbox_equal_a_fresh_computation(tmp_path: Path) -> None:
    """The toolbox remembers the deterministic tools' results across rollouts: every result,
    errors included, equals the one a memo-less session computes; ``inspect_frames`` (a model
    call) is never remembered."""
    calls: list[tuple[str, Any]] = [
        ("get_overview", {}),
        ("expand_node", {"node_id": "s1"}),
        ("get_captions", {"level": "clip", "start": 0, "end": 120}),
        ("search_captions", {"query": "plate"}),
        ("expand_node", {"node_id": "nope"}),  # a task-level error
        ("answer", {"letter": "B"}),
    ]
    box = Toolbox({"vidA": kitchen_tree()})
    for _ in range(3):  # three rollouts of the same question
        for name, args in calls:
            raw = json.dumps(args)
            fresh = asyncio.run(VideoTools(kitchen_tree()).call(name, raw))
            assert asyncio.run(box.session(question()).call(name, raw)) == fresh
    from trm_assets.llm.protocol import ChatResponse

    vlm = ScriptedLLM(lambda m, s: ChatResponse(content="blue"), model="vlm")
    images = _tree_with_images(tmp_path)
    images.vlm = vlm
    args = json.dumps({"question": "plate colour?", "start": 70, "end": 110})
    for _ in range(2):
        asyncio.run(images.session(question()).call("inspect_frames", args))
    assert len(vlm.calls) == 2


def test_the_toolbox_memo_is_bounded() -> None:
    from trm_assets.agent.tools import ToolResult, _ToolMemo

    memo = _ToolMemo()
    for i in range(_ToolMemo.MAX_ENTRIES + 10):
        memo.put(("v", "t", str(i)), ToolResult("t", "{}"))
    assert memo.get(("v", "t", "0")) is None  # started over when full
    assert memo.get(("v", "t", str(_ToolMemo.MAX_ENTRIES + 9))) is not None
    memo.put(("v", "big", ""), ToolResult("big", "x" * (_ToolMemo.MAX_CHARS + 1)))
    assert memo.get(("v", "big", "")) is None  # a large result is not kept

"""The video tree schema: valid trees load, every structural violation is named by node id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trm_assets.agent.tree import TreeFormatError, load_tree, load_trees
from trm_assets_tests.data_fixtures import WriteJson


def test_valid_tree_loads(write_json: WriteJson, tree: dict[str, Any]) -> None:
    t = load_tree(write_json("trees/vid001.json", tree))
    assert t.video.videoID == "vid001"
    assert [nid for nid, _ in t.iter_nodes()] == ["v", "s0", "s0c0", "s0c0f0", "s1"]
    assert [nid for nid, _ in t.iter_nodes("clip")] == ["s0c0"]
    assert t.node("s0c0").ocr == ("COMET 101",)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (
            lambda t: t["nodes"]["s0"].update(children=["nope"]),
            "node 's0': child 'nope' does not exist",
        ),
        (
            lambda t: t["nodes"]["s0c0"].update(end=45.0),
            "node 's0c0': time range 0.0..45.0 is outside",
        ),
        (lambda t: t["nodes"]["s1"].update(parent=None), "exactly one root"),
        (lambda t: t["nodes"]["s0c0f0"].update(end=5.0), "a frame node needs start == end"),
        (lambda t: t.update(root_id="zz"), "root_id: 'zz' is not a key"),
        (lambda t: t["nodes"]["v"].update(children=["s1", "s0"]), "not sorted by start"),
        (lambda t: t["nodes"]["s0"].update(level="frame"), "not below its parent"),
        (lambda t: t["nodes"]["s0"].update(start="soon"), "node 's0' field 'start'"),
        (lambda t: t["nodes"]["s0"].update(colour="red"), "node 's0' field 'colour': unknown key"),
        (lambda t: t["video"].pop("videoID"), "field 'video.videoID': required but missing"),
    ],
)
def test_structural_errors_are_located(
    write_json: WriteJson,
    tree: dict[str, Any],
    mutate: Callable[[dict[str, Any]], object],
    fragment: str,
) -> None:
    mutate(tree)
    p = write_json("trees/bad.json", tree)
    with pytest.raises(TreeFormatError) as ei:
        load_tree(p)
    assert str(p) in str(ei.value)
    assert fragment in str(ei.value), str(ei.value)


def test_cycle_is_detected(write_json: WriteJson, tree: dict[str, Any]) -> None:
    tree["nodes"]["s0c0"]["children"] = ["s0c0f0", "s0"]
    tree["nodes"]["s0"]["parent"] = "s0c0"
    tree["nodes"]["v"]["children"] = ["s1"]
    with pytest.raises(TreeFormatError, match=r"not reachable from the root|cycle"):
        load_tree(write_json("trees/cyc.json", tree))


def test_not_json_and_not_object(write_json: WriteJson) -> None:
    with pytest.raises(TreeFormatError, match="line 1 column"):
        load_tree(write_json("trees/x.json", None, text="{oops"))
    with pytest.raises(TreeFormatError, match="JSON object at the top level"):
        load_tree(write_json("trees/y.json", [1, 2]))


def test_load_trees_keys_by_video_id(
    write_json: WriteJson, tree: dict[str, Any], tmp_path: Path
) -> None:
    write_json("trees/vid001.json", tree)
    other = dict(tree, video=dict(tree["video"], videoID="vid002", video_id="002"))
    write_json("trees/vid002.json", other)
    assert sorted(load_trees(tmp_path / "trees")) == ["vid001", "vid002"]
    write_json("trees/vid003.json", other)
    with pytest.raises(TreeFormatError, match="unique videoID"):
        load_trees(tmp_path / "trees")

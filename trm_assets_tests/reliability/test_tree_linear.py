"""Issue 18.9: tree validation is linear in the number of nodes, with the same error messages.

The old ``structural_errors`` checked "does the parent list this node" with a membership test on
the parent's ``children`` tuple: quadratic in the number of siblings. On the 100,006-node tree
below (4 clips of 25,000 frames) it took 0.5 s at 10k nodes, 1.6 s at 20k and 5.0 s at 40k
(×3.2 per doubling) and 23.7 s at 100k; the linear version takes ≈ 0.5 s at 100k.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from trm_assets.agent.tree import TreeFormatError, VideoTree, parse_tree, structural_errors

N_CLIPS = 4
FRAMES_PER_CLIP = 25_000
CLIP_SECONDS = 250.0


def wide_tree(n_clips: int = N_CLIPS, per_clip: int = FRAMES_PER_CLIP) -> dict[str, Any]:
    """video → one segment → ``n_clips`` clips → ``per_clip`` frames each (sorted, in range)."""
    duration = n_clips * CLIP_SECONDS
    nodes: dict[str, dict[str, Any]] = {
        "v": {"level": "video", "parent": None, "children": ["s"], "start": 0.0, "end": duration},
        "s": {"level": "segment", "parent": "v", "children": [], "start": 0.0, "end": duration},
    }
    for c in range(n_clips):
        cid, start = f"c{c}", c * CLIP_SECONDS
        frames = [f"f{c}_{i}" for i in range(per_clip)]
        for i, fid in enumerate(frames):
            t = start + i * (CLIP_SECONDS / per_clip)
            nodes[fid] = {"level": "frame", "parent": cid, "children": [], "start": t, "end": t}
        nodes[cid] = {
            "level": "clip",
            "parent": "s",
            "children": frames,
            "start": start,
            "end": start + CLIP_SECONDS,
        }
        nodes["s"]["children"].append(cid)
    return {
        "video": {
            "video_id": "1",
            "videoID": "wide",
            "duration_sec": duration,
            "duration_category": "long",
            "domain": "Knowledge",
            "sub_category": "Test",
        },
        "root_id": "v",
        "nodes": nodes,
    }


@pytest.fixture(scope="module")
def big() -> VideoTree:
    data = wide_tree()
    assert len(data["nodes"]) == 2 + N_CLIPS * (1 + FRAMES_PER_CLIP) == 100_006
    return VideoTree.model_validate(data)


def test_a_100k_node_tree_validates_in_linear_time(big: VideoTree) -> None:
    t0 = time.perf_counter()
    errs = structural_errors(big)
    elapsed = time.perf_counter() - t0
    assert errs == []
    assert elapsed < 3.0, f"structural_errors took {elapsed:.2f} s on 100,006 nodes"


def test_a_bad_node_in_a_100k_tree_is_named_quickly(big: VideoTree) -> None:
    # The parent of f2_7 does not list it: rebuild c2's children without it (one node changed).
    nodes = dict(big.nodes)
    c2 = nodes["c2"]
    nodes["c2"] = c2.model_copy(update={"children": tuple(c for c in c2.children if c != "f2_7")})
    bad = big.model_copy(update={"nodes": nodes})
    t0 = time.perf_counter()
    errs = structural_errors(bad)
    assert time.perf_counter() - t0 < 3.0
    assert errs == [
        "node 'f2_7': parent 'c2' does not list it in 'children'",
        "nodes: 1 node(s) not reachable from the root: ['f2_7']",
    ]


def small() -> dict[str, Any]:
    return wide_tree(n_clips=2, per_clip=3)


def _break(mutate: Any) -> list[str]:
    data = copy.deepcopy(small())
    mutate(data)
    with pytest.raises(TreeFormatError) as ei:
        parse_tree(data, "t.json")
    return list(ei.value.problems)


# The exact messages of the quadratic version (hand-derived from its code, and compared with its
# output on these trees when the linear version was written).
BAD_TREES = [
    (
        "parent does not list the child",
        lambda d: d["nodes"]["c0"].update(children=["f0_0", "f0_2"]),
        [
            "node 'f0_1': parent 'c0' does not list it in 'children'",
            "nodes: 1 node(s) not reachable from the root: ['f0_1']",
        ],
    ),
    (
        "child claims another parent",
        lambda d: d["nodes"]["f1_0"].update(parent="c0"),
        [
            "node 'f1_0': parent 'c0' does not list it in 'children'",
            "node 'f1_0': parent is 'c0' but 'c1' lists it as a child",
        ],
    ),
    (
        "missing parent and missing child",
        lambda d: (
            d["nodes"]["f0_2"].update(parent="zz"),
            d["nodes"]["c1"].update(children=["f1_0", "f1_1", "f1_2", "ghost"]),
        ),
        [
            "node 'f0_2': parent 'zz' does not exist",
            "node 'f0_2': parent is 'zz' but 'c0' lists it as a child",
            "node 'c1': child 'ghost' does not exist",
        ],
    ),
    (
        "shared child, unsorted siblings",
        lambda d: d["nodes"]["c1"].update(children=["f1_1", "f1_0", "f1_2", "f0_0"]),
        [
            "node 'c1': children are not sorted by start (at 'f1_0')",
            "node 'f0_0': parent is 'c0' but 'c1' lists it as a child",
            "node 'f0_0': time range 0.0..0.0 is outside its parent 'c1' (250.0..500.0)",
            "node 'c1': children are not sorted by start (at 'f0_0')",
            "node 'f0_0': reached twice from the root (cycle or shared child)",
        ],
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), [b[1:] for b in BAD_TREES], ids=[b[0] for b in BAD_TREES]
)
def test_errors_of_bad_trees_are_unchanged(mutate: Any, expected: list[str]) -> None:
    assert _break(mutate) == expected

"""``trm data synth``: formats, evidence placement, and byte-for-byte reproduction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.agent.tree import load_tree, load_trees
from trm_assets.cli.sim import synth
from trm_assets.harness.data.questions import load_questions
from trm_assets.llm.sim.catalogue import TASK_TYPE_WEIGHTS, TASK_TYPES
from trm_assets.llm.sim.generator import apportion
from trm_assets.llm.sim.world import load_world

from .conftest import DEFAULT, SMOKE


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _recorded_args(sample: Path) -> list[str]:
    command: str = json.loads((sample / "ground_truth.json").read_text())["generator"]["command"]
    words = command.split()
    assert words[:5] == ["trm", "data", "synth", "--out", "DIR"], command
    return words[5:]


@pytest.mark.parametrize("sample", [SMOKE, DEFAULT], ids=["smoke", "default"])
def test_synth_reproduces_committed_sample_byte_for_byte(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "sample"
    result = CliRunner().invoke(synth, ["--out", str(out), *_recorded_args(sample)])
    assert result.exit_code == 0, result.output
    assert "SIMULATED" in result.output
    assert _files(out) == _files(sample)


def test_smoke_sample_loads_with_the_project_loaders() -> None:
    questions = load_questions(SMOKE / "questions.json")
    trees = load_trees(SMOKE / "trees")
    world = load_world(SMOKE)
    assert len(questions) == 120
    assert {q.tree_key for q in questions} == set(trees)
    assert {q.question_id for q in questions} == set(world.questions)
    for q in questions:
        truth = world.questions[q.question_id]
        assert truth.answer == q.answer
        assert truth.task_type == q.task_type
        assert truth.videoID == q.videoID


def test_evidence_for_the_right_option_is_in_the_tree() -> None:
    world = load_world(SMOKE)
    for qid, truth in sorted(world.questions.items()):
        tree = load_tree(SMOKE / "trees" / f"{truth.videoID}.json")
        node = tree.node(truth.evidence.node_id)
        ev = truth.evidence
        if ev.kind == "caption":
            assert ev.text in node.caption, qid
        elif ev.kind == "ocr":
            assert ev.text in node.ocr, qid
        elif ev.kind == "subtitle":
            assert ev.text in (node.subtitle_text or ""), qid
            assert any(c.text == ev.text for c in tree.subtitles), qid
        else:
            assert ev.text in node.caption and node.level == "video", qid
        assert node.start <= ev.start + 1e-6 and ev.end <= node.end + 1e-6


def test_default_sample_is_video_mme_sized() -> None:
    questions = load_questions(DEFAULT / "questions.json")
    assert len(questions) == 2700
    counts: dict[str, int] = {}
    for q in questions:
        counts[q.task_type] = counts.get(q.task_type, 0) + 1
    assert set(counts) == set(TASK_TYPES)
    for tt, n in counts.items():
        assert abs(n - TASK_TYPE_WEIGHTS[tt]) <= 2, (tt, n)
    assert {q.duration for q in questions} == {"short", "medium", "long"}
    size = sum(len(b) for b in _files(DEFAULT).values())
    assert size < 6_000_000


def test_apportion_is_exact_and_proportional() -> None:
    counts = apportion(120, TASK_TYPE_WEIGHTS)
    assert sum(counts.values()) == 120
    assert counts["Object Reasoning"] == max(counts.values())


def test_synth_rejects_bad_arguments(tmp_path: Path) -> None:
    result = CliRunner().invoke(synth, ["--out", str(tmp_path), "--videos", "0", "--seed", "1"])
    assert result.exit_code != 0


def test_recorded_command_reproduces_non_default_options(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    args = ["--videos", "12", "--seed", "5", "--questions-per-video", "2", "--cues-per-task", "1"]
    assert CliRunner().invoke(synth, ["--out", str(first), *args]).exit_code == 0
    world = load_world(first)
    assert len(world.questions) == 24
    assert all(len(t.cues) == 1 for t in world.truth.task_types.values())
    result = CliRunner().invoke(synth, ["--out", str(second), *_recorded_args(first)])
    assert result.exit_code == 0
    assert _files(first) == _files(second)

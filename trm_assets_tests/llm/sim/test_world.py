"""The hidden catalogue, the seed skills and the prompt templates the simulator recognizes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.cli.sim import oracle
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.evolution.templates import placeholders
from trm_assets.llm.sim.catalogue import CATALOGUE, NEUTRAL_ADVICE, TASK_TYPES
from trm_assets.llm.sim.draws import normalize_text
from trm_assets.llm.sim.roles import TEMPLATE_FILES, TEMPLATE_HEADINGS
from trm_assets.llm.sim.world import GroundTruthError, SimWorld, load_world

from .conftest import PROMPTS, SMOKE

MOMENTUM_BEGIN = "<!-- momentum:begin -->"
MOMENTUM_END = "<!-- momentum:end -->"
TEMPLATE_PLACEHOLDERS = {
    "diagnose": {"skill_files", "tool_names", "cases"},
    "evolve_skill": {
        "task_type",
        "skill_file",
        "skill_text",
        "cases",
        "rejected_edits",
        "max_edits",
    },
    "evolve_system": {"system_prompt", "cases", "rejected_edits", "max_edits"},
    "evolve_tool": {"tool_name", "tool_description", "cases", "rejected_edits", "max_edits"},
    "momentum": {
        "task_type",
        "skill_file",
        "skill_text",
        "previous_guidance",
        "regressed",
        "improved",
        "persistent_fail",
        "stable_success",
    },
}


def _all_phrasings() -> list[tuple[str, str]]:
    out = []
    for tt, (cues, harms) in CATALOGUE.items():
        out += [(f"{tt}/{cid}", p) for cid, _, ps in cues for p in ps]
        out += [(f"{tt}/{hid}", p) for hid, ps in harms for p in ps]
    return out


def test_catalogue_phrasings_never_contain_each_other() -> None:
    items = _all_phrasings()
    for (ka, a), (kb, b) in itertools.permutations(items, 2):
        if ka != kb:
            assert normalize_text(a) not in normalize_text(b), (ka, a, kb, b)


def test_neutral_advice_expresses_no_cue_or_harm(smoke_world: SimWorld) -> None:
    for advice in NEUTRAL_ADVICE:
        assert not smoke_world.any_catalogue_hit(advice), advice


def test_seed_skills_cover_every_task_type_with_momentum_block(seed_skills: dict[str, str]) -> None:
    expected = {skill_file_name(tt) for tt in TASK_TYPES} | {DEFAULT_SKILL_FILE}
    assert set(seed_skills) == expected
    for name, text in seed_skills.items():
        lines = [ln.strip() for ln in text.splitlines()]
        assert lines.count(MOMENTUM_BEGIN) == 1 and lines.count(MOMENTUM_END) == 1, name
        assert lines.index(MOMENTUM_BEGIN) < lines.index(MOMENTUM_END), name
        assert "## Strategy" in lines and "## Pitfalls" in lines, name


def test_seed_skills_express_few_cues_and_no_harm(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    expressed = 0
    for tt in smoke_world.task_types:
        texts = [seed_skills[skill_file_name(tt)], seed_skills[DEFAULT_SKILL_FILE]]
        expressed += len(smoke_world.cues_expressed(tt, texts))
        assert not smoke_world.harm_present(tt, texts), tt
    assert expressed <= 2


def test_agent_prompts_express_no_cue_or_harm(smoke_world: SimWorld) -> None:
    for path in [PROMPTS / "agent_system.md", *sorted((PROMPTS / "tools").glob("*.md"))]:
        if path.exists():
            assert not smoke_world.any_catalogue_hit(path.read_text()), path


def test_templates_start_with_the_headings_the_simulator_recognizes() -> None:
    by_role = {role: heading for heading, role in TEMPLATE_HEADINGS.items()}
    for role, file_name in TEMPLATE_FILES.items():
        text = (PROMPTS / file_name).read_text()
        assert text.splitlines()[0] == by_role[role], file_name
        assert set(placeholders(text)) == TEMPLATE_PLACEHOLDERS[role], file_name


def test_oracle_command_reports_seed_optimal_and_best(tmp_path: Path) -> None:
    world = load_world(SMOKE)
    qids = world.question_ids()
    pools = tmp_path / "pools.json"
    pools.write_text(
        json.dumps({"format": "trm.pools/1", "test": qids[:60], "validation": qids[60:]})
    )
    args = [
        "--data",
        str(SMOKE),
        "--skills",
        str(PROMPTS / "skills"),
        "--pools",
        str(pools),
        "--json",
    ]
    result = CliRunner().invoke(oracle, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["simulated"] is True and set(report["pools"]) == {"all", "test", "validation"}
    overall = report["pools"]["all"][-1]
    assert overall["group"] == "all" and overall["n"] == 120
    assert overall["expected"] < overall["optimal"] == overall["best"]
    text = CliRunner().invoke(oracle, args[:-1]).output
    assert "SIMULATED" in text


def test_oracle_command_scores_the_world_it_is_given() -> None:
    """``--sim`` selects the world (review: the command could only score the default one): the
    realistic profile's figures equal the oracle's own under that profile, and a bad key is a
    usage error naming it."""
    from trm_assets.llm.sim.oracle import load_skills, oracle_table
    from trm_assets.llm.sim_config import SimConfig

    args = ["--data", str(SMOKE), "--skills", str(PROMPTS / "skills"), "--json"]
    rows = {}
    for name, extra in (("default", []), ("realistic", ["--sim", "profile=realistic"])):
        result = CliRunner().invoke(oracle, [*args, *extra])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["sim"]["profile"] == name
        rows[name] = report["pools"]["all"]
    world = load_world(SMOKE)
    want = oracle_table(
        world,
        sorted(world.questions),
        load_skills(PROMPTS / "skills"),
        SimConfig(profile="realistic"),
    )
    assert [r["expected"] for r in rows["realistic"]] == [round(w.expected, 4) for w in want]
    assert rows["realistic"] != rows["default"]
    bad = CliRunner().invoke(oracle, [*args, "--sim", "text_flip_rate=0.9"])
    assert bad.exit_code == 2 and "text_flip_rate" in bad.output and "Traceback" not in bad.output
    bad = CliRunner().invoke(oracle, [*args, "--sim", "nope=1"])
    assert bad.exit_code == 2 and "nope" in bad.output


def test_ground_truth_errors_name_the_problem(tmp_path: Path) -> None:
    bad = json.loads((SMOKE / "ground_truth.json").read_text())
    first = sorted(bad["questions"])[0]
    bad["questions"][first]["cue"] = "no-such-cue"
    path = tmp_path / "ground_truth.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(GroundTruthError, match="no-such-cue"):
        load_world(path)
    with pytest.raises(GroundTruthError, match="trm data synth"):
        load_world(tmp_path / "missing")


def test_expected_accuracy_honours_skill_mode() -> None:
    """The oracle passes skill_mode on: 'none' ignores the skill texts entirely."""
    from trm_assets.llm.sim.oracle import expected_accuracy, expected_by_question, load_skills
    from trm_assets.llm.sim.world import load_world
    from trm_assets.llm.sim_config import SimConfig

    root = Path(__file__).resolve().parents[3]
    world = load_world(root / "data" / "smoke")
    skills = load_skills(root / "prompts" / "skills")
    qids = sorted(world.questions)[:30]
    cfg = SimConfig()
    none = expected_accuracy(world, qids, skills, cfg, skill_mode="none")
    by_q = expected_by_question(world, qids, skills, cfg, skill_mode="none")
    assert none == sum(by_q.values()) / len(by_q)
    assert none == expected_accuracy(world, qids, {}, cfg, skill_mode="task")

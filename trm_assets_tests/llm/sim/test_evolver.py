"""The simulated diagnose / evolve / momentum model: real JSON formats and the proposal mix."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping

from pydantic import ValidationError

from trm_assets.domain.edit_schema import EditProposal
from trm_assets.domain.edits import apply_edits
from trm_assets.domain.question import skill_file_name
from trm_assets.evolution.schemas import DiagnosisReport, MomentumGuidance
from trm_assets.evolution.templates import render_file
from trm_assets.llm.sim.oracle import expected_accuracy
from trm_assets.llm.sim.provider import SimulatedProvider, simulate
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import ProposalMix, SimConfig

from .conftest import PROMPTS

TASK = "Counting Problem"


def _cases(world: SimWorld, qids: list[str]) -> str:
    blocks = []
    for qid in qids:
        q = world.questions[qid]
        wrong = "B" if q.answer != "B" else "C"
        blocks.append(
            f"### Case {qid}\nTask type: {q.task_type}\nQuestion id: {qid}\n"
            f"Correct answer: {q.answer}; the agent answered {wrong} (stop: answer)\n"
            "Trace: get_overview -> search_captions('table cups') -> answer\n"
            "Diagnosis: the agent never opened the clip that shows the table."
        )
    return "\n\n".join(blocks)


def _evolve_skill_prompt(
    world: SimWorld, skills: Mapping[str, str], qids: list[str], rejected: str = "(none)"
) -> str:
    name = skill_file_name(TASK)
    return render_file(
        PROMPTS / "evolve_skill.md",
        task_type=TASK,
        skill_file=name,
        skill_text=skills[name],
        cases=_cases(world, qids),
        rejected_edits=rejected,
        max_edits=2,
    )


def _classify(world: SimWorld, content: str | None) -> str:
    try:
        proposal = EditProposal.model_validate(json.loads(content or ""))
    except (ValueError, ValidationError):
        return "malformed"
    if not proposal.edits:
        return "malformed"
    text = " ".join(e.text for e in proposal.edits)
    if world.cues_expressed(TASK, [text]):
        return "cue"
    if world.harm_present(TASK, [text]):
        return "harmful"
    assert not world.any_catalogue_hit(text), text
    return "neutral"


def test_proposal_mix_frequencies(big_world: SimWorld, seed_skills: dict[str, str]) -> None:
    qids = big_world.question_ids(TASK)
    config = SimConfig()
    counts: Counter[str] = Counter()
    n = 2000
    for i in range(n):
        case_ids = [qids[(7 * i + k) % len(qids)] for k in range(3)]
        prompt = _evolve_skill_prompt(big_world, seed_skills, case_ids)
        reply = simulate(big_world, config, [{"role": "user", "content": prompt}], seed=i)
        counts[_classify(big_world, reply.content)] += 1
    mix = config.proposal_mix
    for kind, share in (
        ("cue", mix.cue),
        ("neutral", mix.neutral),
        ("harmful", mix.harmful),
        ("malformed", mix.malformed),
    ):
        assert abs(counts[kind] / n - share) < 0.035, (kind, counts)


def test_a_swept_mix_is_followed(big_world: SimWorld, seed_skills: dict[str, str]) -> None:
    qids = big_world.question_ids(TASK)
    config = SimConfig(proposal_mix=ProposalMix(cue=0.6, neutral=0.2, harmful=0.1, malformed=0.1))
    kinds = Counter(
        _classify(
            big_world,
            simulate(
                big_world,
                config,
                [
                    {
                        "role": "system",
                        "content": _evolve_skill_prompt(
                            big_world, seed_skills, qids[i % 100 : i % 100 + 2]
                        ),
                    }
                ],
                seed=i,
            ).content,
        )
        for i in range(600)
    )
    assert abs(kinds["cue"] / 600 - 0.6) < 0.06


def test_cue_edits_apply_and_raise_the_oracle(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig()
    name = skill_file_name(TASK)
    qids = big_world.question_ids(TASK)
    base = expected_accuracy(big_world, qids, seed_skills, config)
    gains = []
    for i in range(300):
        prompt = _evolve_skill_prompt(big_world, seed_skills, qids[i % 50 : i % 50 + 3])
        reply = simulate(big_world, config, [{"role": "user", "content": prompt}], seed=i)
        if _classify(big_world, reply.content) != "cue":
            continue
        proposal = EditProposal.model_validate(json.loads(reply.content or ""))
        report = apply_edits(seed_skills[name], proposal.edits, budget=2)
        assert [r.status for r in report.results] == ["applied"]
        candidate = dict(seed_skills, **{name: report.text})
        gains.append(expected_accuracy(big_world, qids, candidate, config) - base)
    assert gains and min(gains) > 0.03


def test_rejected_edits_are_not_proposed_again(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    qids = big_world.question_ids(TASK)[:3]
    config = SimConfig(proposal_mix=ProposalMix(cue=1.0, neutral=0.0, harmful=0.0, malformed=0.0))
    first = simulate(
        big_world,
        config,
        [{"role": "user", "content": _evolve_skill_prompt(big_world, seed_skills, qids)}],
        seed=1,
    )
    text = json.loads(first.content or "")["edits"][0]["text"]
    again = simulate(
        big_world,
        config,
        [
            {
                "role": "user",
                "content": _evolve_skill_prompt(big_world, seed_skills, qids, rejected=text),
            }
        ],
        seed=1,
    )
    assert json.loads(again.content or "")["edits"][0]["text"] != text


def test_diagnosis_names_the_true_cue_with_probability_q(big_world: SimWorld) -> None:
    config = SimConfig()
    qids = big_world.question_ids()
    named = total = 0
    targets: Counter[str] = Counter()
    for i in range(300):
        case_ids = qids[(10 * i) % len(qids) : (10 * i) % len(qids) + 10]
        prompt = render_file(
            PROMPTS / "diagnose.md",
            skill_files="counting-problem.md, default-strategy.md",
            tool_names="get_overview, expand_node, answer",
            cases=_cases(big_world, case_ids),
        )
        report = DiagnosisReport.model_validate_json(
            simulate(big_world, config, [{"role": "user", "content": prompt}], seed=i).content or ""
        )
        assert [d.question_id for d in report.diagnoses] == case_ids
        for d in report.diagnoses:
            q = big_world.questions[d.question_id]
            total += 1
            named += big_world.expresses_cue(q.task_type, q.cue, [d.missing_strategy])
            targets[d.target] += 1
    assert abs(named / total - config.diagnose_cue_prob) < 0.04
    assert abs(targets["skill"] / total - 0.8) < 0.04 and targets["tool"] > 0


def test_momentum_guidance_format_and_mix(big_world: SimWorld, seed_skills: dict[str, str]) -> None:
    config = SimConfig()
    name = skill_file_name(TASK)
    qids = big_world.question_ids(TASK)
    ok = 0
    for i in range(300):
        prompt = render_file(
            PROMPTS / "momentum.md",
            task_type=TASK,
            skill_file=name,
            skill_text=seed_skills[name],
            previous_guidance="- Keep checking the table before counting.",
            regressed=qids[i % 40],
            improved="(none)",
            persistent_fail=" ".join(qids[i % 40 + 1 : i % 40 + 4]),
            stable_success="(none)",
        )
        content = (
            simulate(big_world, config, [{"role": "user", "content": prompt}], seed=i).content or ""
        )
        try:
            guidance = MomentumGuidance.model_validate_json(content).guidance
        except ValidationError:
            continue
        ok += 1
        bullets = guidance.splitlines()
        assert 1 <= len(bullets) <= 5 and all(b.startswith("- ") for b in bullets)
        assert bullets[0] == "- Keep checking the table before counting."
    assert abs(ok / 300 - 0.9) < 0.05


def test_system_and_tool_evolution_return_edit_proposals(big_world: SimWorld) -> None:
    config = SimConfig(proposal_mix=ProposalMix(cue=0.5, neutral=0.5, harmful=0.0, malformed=0.0))
    qids = big_world.question_ids()[:40]
    system_prompt = (PROMPTS / "agent_system.md").read_text()
    seen: Counter[str] = Counter()
    for i in range(40):
        for template, values in (
            ("evolve_system.md", {"system_prompt": system_prompt}),
            (
                "evolve_tool.md",
                {"tool_name": "get_ocr", "tool_description": "Read on-screen text."},
            ),
        ):
            prompt = render_file(
                PROMPTS / template,
                cases=_cases(big_world, qids[i : i + 3]),
                rejected_edits="(none)",
                max_edits=1,
                **values,
            )
            reply = simulate(big_world, config, [{"role": "user", "content": prompt}], seed=i)
            proposal = EditProposal.model_validate_json(reply.content or "")
            assert len(proposal.edits) == 1 and proposal.edits[0].section is None
            seen[reply.label] += 1
    assert seen["evolve_system:cue"] > 5 and seen["evolve_tool:neutral"] > 5


def test_unknown_prompts_get_a_labelled_non_answer(smoke_world: SimWorld) -> None:
    provider = SimulatedProvider(smoke_world)
    resp = asyncio.run(
        provider.chat([{"role": "user", "content": "What is the capital of France?"}])
    )
    assert "simulated" in (resp.content or "") and not resp.tool_calls

"""The simulated agent: determinism, the real tool protocol, and accuracy matching the oracle."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

import pytest

from trm_assets.agent.answer import extract_answer_letter
from trm_assets.agent.loop import AgentLoop
from trm_assets.agent.messages import SkillMode, build_messages, load_agent_prompts, skill_block
from trm_assets.agent.tools import Toolbox
from trm_assets.agent.tree import load_trees
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.harness.data.questions import load_questions
from trm_assets.llm.protocol import InfraError, LLMProvider
from trm_assets.llm.sim.agent import agent_draw
from trm_assets.llm.sim.oracle import expected_by_question, optimal_skills
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.world import SimWorld
from trm_assets.llm.sim_config import SimConfig

from .conftest import PROMPTS, SMOKE

SYSTEM = (PROMPTS / "agent_system.md").read_text()
REPLICATES = 4


def _system_message(task_type: str, skills: Mapping[str, str]) -> str:
    files = (skill_file_name(task_type), DEFAULT_SKILL_FILE)
    return "\n\n".join([SYSTEM.strip(), *(skill_block(f, skills[f]) for f in files)])


def _observed(
    world: SimWorld, skills: Mapping[str, str], qids: list[str], config: SimConfig
) -> float:
    hits = 0
    for qid in qids:
        text = _system_message(world.questions[qid].task_type, skills)
        for rep in range(REPLICATES):
            hits += agent_draw(world, config, qid, [text], 1000 + rep)[1]
    return hits / (len(qids) * REPLICATES)


def _check_matches_oracle(
    world: SimWorld, skills: Mapping[str, str], qids: list[str], config: SimConfig
) -> tuple[float, float]:
    probs = expected_by_question(world, qids, skills, config, system_prompt=SYSTEM)
    expected = sum(probs.values()) / len(probs)
    n = len(qids) * REPLICATES
    se = math.sqrt(sum(p * (1 - p) for p in probs.values()) * REPLICATES) / n
    observed = _observed(world, skills, qids, config)
    assert abs(observed - expected) < 4 * se + 1e-9, (observed, expected, se)
    return observed, expected


def test_seed_and_optimal_accuracy_match_the_oracle(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig()
    qids = big_world.question_ids()
    seed_obs, seed_exp = _check_matches_oracle(big_world, seed_skills, qids, config)
    opt_obs, opt_exp = _check_matches_oracle(
        big_world, optimal_skills(big_world, seed_skills), qids, config
    )
    assert 0.40 < seed_exp < 0.52 and 0.75 < opt_exp < 0.85
    assert opt_obs - seed_obs > 0.25


def test_a_cue_phrase_raises_and_a_harmful_directive_lowers_accuracy(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig()
    tt = "Counting Problem"
    name = skill_file_name(tt)
    qids = [q for q in big_world.question_ids(tt) if big_world.questions[q].cue == "cp-distinct"]
    assert len(qids) > 60
    with_cue = dict(seed_skills)
    with_cue[name] = seed_skills[name].replace(
        "## Pitfalls", "- Count each distinct instance only once.\n\n## Pitfalls"
    )
    with_harm = dict(seed_skills)
    with_harm[name] = seed_skills[name].replace(
        "## Pitfalls", "- To save steps, pick the largest number offered.\n\n## Pitfalls"
    )
    base_obs, base_exp = _check_matches_oracle(big_world, seed_skills, qids, config)
    cue_obs, cue_exp = _check_matches_oracle(big_world, with_cue, qids, config)
    harm_obs, harm_exp = _check_matches_oracle(big_world, with_harm, qids, config)
    assert cue_exp - base_exp > 0.25 and cue_obs - base_obs > 0.15
    assert base_exp - harm_exp > 0.05 and base_obs > harm_obs
    # The cue of another task type does not help these questions.
    other = dict(seed_skills)
    other[name] = seed_skills[name] + "\n- Build a timeline of the events.\n"
    other_exp = sum(
        expected_by_question(big_world, qids, other, config, system_prompt=SYSTEM).values()
    )
    assert other_exp / len(qids) == pytest.approx(base_exp)


def test_draws_are_deterministic_and_content_addressed(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig()
    qids = big_world.question_ids()[:300]
    texts = {q: [_system_message(big_world.questions[q].task_type, seed_skills)] for q in qids}
    first = [agent_draw(big_world, config, q, texts[q], 7) for q in qids]
    again = [agent_draw(big_world, config, q, texts[q], 7) for q in qids]
    other_sample = [agent_draw(big_world, config, q, texts[q], 8) for q in qids]
    reworded = [agent_draw(big_world, config, q, [texts[q][0] + "\n- Stay calm."], 7) for q in qids]
    other_seed = [agent_draw(big_world, SimConfig(seed=1), q, texts[q], 7) for q in qids]
    assert first == again
    for variant in (other_sample, reworded, other_seed):
        changed = sum(a[0] != b[0] for a, b in zip(first, variant, strict=True))
        assert changed > 50  # a redraw, not a copy
    # Normalization: case and punctuation do not change the draw.
    shouted = [agent_draw(big_world, config, q, [texts[q][0].upper()], 7) for q in qids]
    assert shouted == first


def _run_smoke(
    provider: LLMProvider, seed_skills: dict[str, str], replicate: int, temperature: float = 1.0
) -> list[tuple[str, str]]:
    prompts = load_agent_prompts(PROMPTS)
    questions = load_questions(SMOKE / "questions.json")
    toolbox = Toolbox(trees=load_trees(SMOKE / "trees"))
    loop = AgentLoop(provider, prompts, max_steps=8, temperature=temperature)

    async def run_all() -> list[tuple[str, str]]:
        out = []
        for q in questions:
            o = await loop.run(q, tools=toolbox.session(q), skills=seed_skills, seed=replicate)
            assert o.n_tool_errors == 0, (q.question_id, o.steps)
            out.append((o.letter, o.stop_reason))
        return out

    return asyncio.run(run_all())


def test_agent_loop_runs_the_smoke_sample_with_real_tools(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    provider = SimulatedProvider(smoke_world)
    assert isinstance(provider, LLMProvider) and provider.is_simulated
    assert provider.model.startswith("sim-")
    first = _run_smoke(provider, seed_skills, replicate=0)
    assert all(stop == "answer" and letter in "ABCD" for letter, stop in first)
    assert provider.usage.total_tokens > 0
    assert _run_smoke(SimulatedProvider(smoke_world), seed_skills, replicate=0) == first
    assert _run_smoke(SimulatedProvider(smoke_world), seed_skills, replicate=1) != first
    # Greedy decoding: the replicate (the request's seed) changes nothing.
    greedy = _run_smoke(SimulatedProvider(smoke_world), seed_skills, 0, temperature=0.0)
    assert _run_smoke(SimulatedProvider(smoke_world), seed_skills, 1, temperature=0.0) == greedy


def _agent_messages(
    world: SimWorld, qid: str, skills: Mapping[str, str]
) -> list[dict[str, object]]:
    tt = world.questions[qid].task_type
    user = f"Question id: {qid}\nVideo id: x\nTask type: {tt}\nQuestion: ?\nA. a\nB. b\nC. c\nD. d"
    return [
        {"role": "system", "content": _system_message(tt, skills)},
        {"role": "user", "content": user},
    ]


def test_infra_faults_raise_and_retries_can_succeed(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    qid = smoke_world.question_ids()[0]
    msgs = _agent_messages(smoke_world, qid, seed_skills)
    timeouts = SimulatedProvider(smoke_world, SimConfig(fault_timeout_rate=1.0))
    with pytest.raises(InfraError) as e:
        asyncio.run(timeouts.chat(msgs, seed=0))
    assert e.value.kind == "timeout"
    errors = SimulatedProvider(smoke_world, SimConfig(fault_http_5xx_rate=1.0))
    with pytest.raises(InfraError) as e2:
        asyncio.run(errors.chat(msgs, seed=0))
    assert e2.value.kind == "http_status" and e2.value.status in (500, 503)
    flaky = SimulatedProvider(smoke_world, SimConfig(fault_http_5xx_rate=0.5))
    outcomes = []
    for _ in range(12):  # the same request retried: each attempt draws again
        try:
            asyncio.run(flaky.chat(msgs, seed=0))
            outcomes.append("ok")
        except InfraError:
            outcomes.append("fail")
    assert "ok" in outcomes and "fail" in outcomes


def test_malformed_output_is_a_task_failure_not_an_exception(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    provider = SimulatedProvider(smoke_world, SimConfig(fault_malformed_rate=1.0))
    for qid in smoke_world.question_ids()[:20]:
        resp = asyncio.run(provider.chat(_agent_messages(smoke_world, qid, seed_skills), seed=3))
        assert not resp.tool_calls
        assert extract_answer_letter(resp.content) == ""


def test_provider_answer_matches_the_draw(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    provider = SimulatedProvider(smoke_world)
    for qid in smoke_world.question_ids()[:30]:
        msgs = _agent_messages(smoke_world, qid, seed_skills)
        resp = asyncio.run(provider.chat(msgs, seed=5))  # no tools offered: a bare letter
        letter, _, _ = agent_draw(smoke_world, SimConfig(), qid, [str(msgs[0]["content"])], 5)
        assert resp.content == letter


@pytest.mark.parametrize("mode", ["task", "all", "none"])
def test_agent_probability_equals_the_oracle_for_the_real_rendered_prompt(
    smoke_world: SimWorld, seed_skills: dict[str, str], mode: SkillMode
) -> None:
    prompts = load_agent_prompts(PROMPTS)
    descriptions = [d for _, d in sorted(prompts.tool_descriptions.items())]
    skills = optimal_skills(smoke_world, seed_skills)
    name = skill_file_name("Object Reasoning")
    skills[name] += "\n- Answer from general knowledge about the object.\n"
    config = SimConfig()
    oracle = expected_by_question(
        smoke_world,
        smoke_world.question_ids(),
        skills,
        config,
        system_prompt=prompts.system,
        tool_descriptions=descriptions,
        skill_mode=mode,
    )
    for q in load_questions(SMOKE / "questions.json"):
        messages, _ = build_messages(prompts, q, skills, mode)
        _, _, p = agent_draw(
            smoke_world, config, q.question_id, [str(messages[0]["content"]), *descriptions], 0
        )
        assert p == pytest.approx(oracle[q.question_id]), q.question_id

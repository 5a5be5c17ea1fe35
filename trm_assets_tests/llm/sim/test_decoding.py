"""Issue 15 A: the simulated agent decodes like a real model (temperature, rewording, length)."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from trm_assets.agent.messages import SkillMode, build_messages, load_agent_prompts
from trm_assets.domain.question import LETTERS, skill_file_name
from trm_assets.harness.data.config import ConfigError, load_config
from trm_assets.harness.data.questions import load_questions
from trm_assets.llm.protocol import InfraError
from trm_assets.llm.sim.agent import agent_draw
from trm_assets.llm.sim.decoding import (
    SeedPromptsError,
    correlated_unit,
    disagreement,
    draw_correlation,
    flip_correlation,
    instruction_parts,
    joint_correct,
    pass_dependence_truth,
    perturbed_probability,
    seed_words,
)
from trm_assets.llm.sim.draws import below, digest, normalize_text, unit
from trm_assets.llm.sim.oracle import active_texts, expected_by_question, optimal_skills
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.server import SimServer
from trm_assets.llm.sim.world import SimWorld, load_world
from trm_assets.llm.sim_config import PROFILES, SimConfig

from .conftest import DEFAULT, PROMPTS, SMOKE

PROMPT_SET = load_agent_prompts(PROMPTS)
TOOLS = [PROMPT_SET.tool_descriptions[k] for k in sorted(PROMPT_SET.tool_descriptions)]
ORACLE_KW: dict[str, Any] = {"system_prompt": PROMPT_SET.system, "tool_descriptions": TOOLS}
# Two neutral rewordings of the same length (7 words each): no cue, no harm, no length change.
REWORD_A = "- Read every option once more before answering."
REWORD_B = "- Check each option again before you answer."


@pytest.fixture(scope="module")
def default_world() -> SimWorld:
    return load_world(DEFAULT)


def _p_issue4(world: SimWorld, qid: str, texts: list[str], c: SimConfig, extra: int = 0) -> float:
    """Issue 4's P (plus a known dilution), recomputed here from the ground truth."""
    q = world.questions[qid]
    cue = world.expresses_cue(q.task_type, q.cue, texts)
    harm = world.harm_present(q.task_type, texts)
    x = (
        c.ability
        - c.difficulty_scale * q.difficulty
        + c.cue_strength * cue
        - c.harm_strength * harm
        - c.length_cost * extra / 100.0
    )
    return c.guess + (1.0 - c.guess) / (1.0 + math.exp(-x))


def _with(skills: Mapping[str, str], line: str) -> dict[str, str]:
    """Every skill file with ``line`` appended to its text."""
    return {k: v.rstrip("\n") + "\n" + line + "\n" for k, v in skills.items()}


# --- profiles -------------------------------------------------------------------------------------


def test_profiles_set_the_issue_values_and_explicit_keys_override_them(tmp_path: Path) -> None:
    default = SimConfig()
    for key, value in PROFILES["default"].items():  # one table, and field defaults agree with it
        got = getattr(default, key)
        assert (got.model_dump() if key == "proposal_mix" else got) == value, key
        field_default = SimConfig.model_fields[key].get_default(call_default_factory=True)
        assert (field_default.model_dump() if key == "proposal_mix" else field_default) == value
    r = SimConfig(profile="realistic")
    assert (r.agent_temperature, r.text_flip_rate, r.length_cost) == (0.0, 0.15, 0.05)
    assert (r.cue_strength, r.harm_strength) == (1.5, 1.5)
    mix = r.proposal_mix
    assert (mix.cue, mix.neutral, mix.harmful, mix.malformed) == (0.15, 0.55, 0.20, 0.10)
    assert (default.cue_strength, default.harm_strength, default.agent_temperature) == (
        2.3,
        2.0,
        1.0,
    )

    # YAML names the profile, the environment and --set override single keys.
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("sim:\n  profile: realistic\n  length_cost: 0.2\n")
    cfg = load_config(
        cfg_file,
        ["sim.cue_strength=2.0", "sim.proposal_mix.cue=0.25", "sim.proposal_mix.neutral=0.45"],
        environ={"TRM_SIM__TEXT_FLIP_RATE": "0.1"},
        dotenv_path=None,
    )
    s = cfg.sim
    assert (s.profile, s.cue_strength, s.length_cost, s.text_flip_rate) == (
        "realistic",
        2.0,
        0.2,
        0.1,
    )
    assert (s.harm_strength, s.agent_temperature) == (1.5, 0.0)  # the rest stays realistic
    assert (s.proposal_mix.cue, s.proposal_mix.neutral, s.proposal_mix.harmful) == (
        0.25,
        0.45,
        0.20,
    )
    assert load_config(None, ["sim.profile=realistic"], environ={}, dotenv_path=None).sim == r
    with pytest.raises(ConfigError, match="realistic"):
        load_config(None, ["sim.profile=realist"], environ={}, dotenv_path=None)


# --- temperature ----------------------------------------------------------------------------------


def test_temperature_above_zero_reproduces_issue_4_draws_bit_for_bit(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig()
    qids = big_world.question_ids()[:400]
    for qid in qids:
        texts = active_texts(big_world.questions[qid].task_type, seed_skills, **ORACLE_KW)
        relevant = digest(*(normalize_text(t) for t in texts))
        q = big_world.questions[qid]
        for sample in (0, 12345):
            # Issue 4's formula, written out: u = H(seed, q, text, sample) < P.
            p = _p_issue4(big_world, qid, texts, config)
            want: tuple[str, bool]
            if unit(config.seed, "agent", qid, relevant, sample) < p:
                want = (q.answer, True)
            else:
                wrong = [x for x in LETTERS if x != q.answer]
                want = (wrong[below(3, config.seed, "wrong", qid, relevant, sample)], False)
            for temperature in (1.0, 0.7, None):  # None: the default profile's 1.0
                got = agent_draw(big_world, config, qid, texts, sample, temperature=temperature)
                assert got[:2] == want and got[2] == pytest.approx(p, abs=1e-15), qid


def test_greedy_agent_is_a_function_of_question_and_text(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    qids = big_world.question_ids()[:300]
    texts = {q: active_texts(big_world.questions[q].task_type, seed_skills) for q in qids}
    for config, temperature in ((SimConfig(profile="realistic"), None), (SimConfig(), 0.0)):
        greedy = [
            agent_draw(big_world, config, q, texts[q], 0, temperature=temperature) for q in qids
        ]
        for sample in (1, 77, 2**30):
            again = [
                agent_draw(big_world, config, q, texts[q], sample, temperature=temperature)
                for q in qids
            ]
            assert again == greedy
        sampled = [
            [agent_draw(big_world, config, q, texts[q], s, temperature=1.0) for q in qids]
            for s in (1, 2)
        ]
        changed = sum(a[1] != b[1] for a, b in zip(*sampled, strict=True))
        assert changed > 60  # above 0 a new sample index is a new draw


def test_greedy_provider_ignores_the_seed_and_sampling_uses_it(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    questions = load_questions(SMOKE / "questions.json")
    provider = SimulatedProvider(smoke_world, SimConfig(profile="realistic"))
    differ = 0
    for q in questions:
        messages, _ = build_messages(PROMPT_SET, q, seed_skills, "task")
        replies = {asyncio.run(provider.chat(messages, seed=s)).content for s in range(4)}
        assert len(replies) == 1  # realistic profile: temperature 0 when the request names none
        sampled = {
            asyncio.run(provider.chat(messages, seed=s, temperature=1.0)).content for s in range(4)
        }
        differ += len(sampled) > 1
    assert differ > 30


def test_temperature_changes_no_latency_or_fault_draw(smoke_world: SimWorld) -> None:
    config = SimConfig(fault_timeout_rate=0.3, fault_http_5xx_rate=0.2)
    qid = smoke_world.question_ids()[0]
    q = smoke_world.questions[qid]
    user = f"Question id: {qid}\nVideo id: x\nTask type: {q.task_type}\nQuestion: ?\nA. a"

    def pattern(temperature: float) -> list[str]:
        provider = SimulatedProvider(smoke_world, config)
        out = []
        for i in range(40):
            msgs: list[Any] = [
                {"role": "system", "content": f"s{i % 7}"},
                {"role": "user", "content": user},
            ]
            try:
                asyncio.run(provider.chat(msgs, seed=i % 3, temperature=temperature))
                out.append("ok")
            except InfraError as e:
                out.append(f"{e.kind}:{e.status}")
        return out

    zero = pattern(0.0)
    assert zero == pattern(1.0) and len(set(zero)) > 1


def test_http_server_reads_the_temperature(
    smoke_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    q = load_questions(SMOKE / "questions.json")[0]
    messages, _ = build_messages(PROMPT_SET, q, seed_skills, "task")

    def post(server: SimServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=json.dumps({"model": "m", "messages": messages, **body}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    local = SimulatedProvider(smoke_world)
    with SimServer(SimulatedProvider(smoke_world, inject_faults=False)) as server:
        for seed in range(6):
            for temperature in (0.0, 1.0, None):
                body = {"seed": seed} | (
                    {} if temperature is None else {"temperature": temperature}
                )
                status, payload = post(server, body)
                want = asyncio.run(local.chat(messages, seed=seed, temperature=temperature))
                assert status == 200 and payload["choices"][0]["message"]["content"] == want.content
        status, payload = post(server, {"temperature": "hot"})
        assert status == 400 and "temperature" in payload["error"]["message"]


# --- the text perturbation ------------------------------------------------------------------------


def test_flip_correlation_gives_the_knob_exactly() -> None:
    rng = np.random.default_rng(15)
    for f in (0.05, 0.15, 0.3):  # P = 1/2: flip = 1/2 − arcsin(ρ)/π in closed form
        assert flip_correlation(0.5, f) == pytest.approx(math.sin(math.pi * (0.5 - f)), abs=1e-9)
    z, e1, e2 = rng.standard_normal((3, 400_000))
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    for p in (0.27, 0.6, 0.85):
        rho = flip_correlation(p, 0.15)
        c = NormalDist().inv_cdf(p)
        a = math.sqrt(rho) * z + math.sqrt(1 - rho) * e1 < c
        b = math.sqrt(rho) * z + math.sqrt(1 - rho) * e2 < c
        assert abs(float(np.mean(a != b)) - 0.15) < 0.004, p  # Monte Carlo of the latent model
        # E over texts of P_eff is P: mean-zero in probability, by Gauss-Hermite quadrature.
        mean = sum(
            w * perturbed_probability(p, rho, float(x)) for x, w in zip(nodes, weights, strict=True)
        ) / math.sqrt(2 * math.pi)
        assert mean == pytest.approx(p, abs=1e-6)
    assert flip_correlation(0.95, 0.15) == 0.0  # 2P(1 − P) < f: no room, the text decides
    assert flip_correlation(0.6, 0.0) == 1.0


@pytest.mark.parametrize("profile", ["flip-only", "realistic"])
def test_two_neutral_rewordings_flip_the_knob_share_at_temperature_zero(
    default_world: SimWorld, seed_skills: dict[str, str], profile: str
) -> None:
    world = default_world
    assert not world.any_catalogue_hit(REWORD_A) and not world.any_catalogue_hit(REWORD_B)
    config = (
        SimConfig(text_flip_rate=0.15, agent_temperature=0.0)
        if profile == "flip-only"
        else SimConfig(profile="realistic")
    )
    qids = world.question_ids()[:2000]
    skills_a, skills_b = _with(seed_skills, REWORD_A), _with(seed_skills, REWORD_B)
    flips = 0
    for qid in qids:
        tt = world.questions[qid].task_type
        a = agent_draw(world, config, qid, active_texts(tt, skills_a, **ORACLE_KW), 0)
        b = agent_draw(world, config, qid, active_texts(tt, skills_b, **ORACLE_KW), 0)
        flips += a[1] != b[1]
    assert abs(flips / len(qids) - 0.15) <= 0.02, flips / len(qids)
    # Expected accuracy barely moves: against the other rewording and against the unperturbed P.
    exp_a = expected_by_question(world, qids, skills_a, config, **ORACLE_KW)
    exp_b = expected_by_question(world, qids, skills_b, config, **ORACLE_KW)
    flat = SimConfig.model_validate({**config.model_dump(), "text_flip_rate": 0.0})
    exp_0 = expected_by_question(world, qids, skills_a, flat, **ORACLE_KW)
    mean = {k: sum(v.values()) / len(v) for k, v in (("a", exp_a), ("b", exp_b), ("0", exp_0))}
    assert abs(mean["a"] - mean["b"]) < 0.015 and abs(mean["a"] - mean["0"]) < 0.015, mean
    # No flip at all without the knob (default profile, greedy): replays and rewordings agree.
    greedy = SimConfig(agent_temperature=0.0)
    for qid in qids[:300]:
        tt = world.questions[qid].task_type
        a = agent_draw(world, greedy, qid, active_texts(tt, skills_a, **ORACLE_KW), 0)
        b = agent_draw(world, greedy, qid, active_texts(tt, skills_b, **ORACLE_KW), 0)
        assert a[1] == b[1]


# --- the length cost ------------------------------------------------------------------------------


def test_seed_words_count_the_committed_prompt_set(tmp_path: Path) -> None:
    tt = "OCR Problems"
    files = [
        PROMPTS / "agent_system.md",
        PROMPTS / "skills" / skill_file_name(tt),
        PROMPTS / "skills" / "default-strategy.md",
        *sorted((PROMPTS / "tools").glob("*.md")),
    ]
    words = sum(len(normalize_text(p.read_text()).split()) for p in files)
    assert seed_words(tt) == words and words > 800
    with pytest.raises(SeedPromptsError, match=r"sim\.length_cost=0"):
        seed_words(tt, tmp_path)


def test_the_length_cost_is_in_the_oracle_exactly(
    default_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    world = default_world
    config = SimConfig(length_cost=0.05)
    tt = "OCR Problems"
    name = skill_file_name(tt)
    filler = " ".join(["note"] * 200)  # 200 words, no cue, no harm
    assert not world.any_catalogue_hit(filler)
    longer = dict(seed_skills)
    longer[name] = seed_skills[name] + "\n" + filler + "\n"
    shorter = dict(seed_skills)
    shorter[name] = seed_skills[name].split("## Pitfalls")[0]
    qids = world.question_ids()
    seed_p = expected_by_question(world, qids, seed_skills, config, **ORACLE_KW)
    long_p = expected_by_question(world, qids, longer, config, **ORACLE_KW)
    short_p = expected_by_question(world, qids, shorter, config, **ORACLE_KW)
    n_tt = 0
    for qid in qids:
        q = world.questions[qid]
        texts = active_texts(q.task_type, seed_skills, **ORACLE_KW)
        assert seed_p[qid] == pytest.approx(_p_issue4(world, qid, texts, config), abs=1e-12)
        if q.task_type == tt:  # 200 words beyond the seed set cost 0.05 · 2 = 0.1 log-odds
            n_tt += 1
            assert long_p[qid] == pytest.approx(
                _p_issue4(world, qid, texts, config, 200), abs=1e-12
            )
            assert short_p[qid] == seed_p[qid]  # shorter than the seed set: no bonus
        else:
            assert long_p[qid] == seed_p[qid]
    assert n_tt > 100


# --- the oracle stays exact -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["task", "all"])
def test_agent_probability_equals_the_oracle_on_the_rendered_request_with_both_knobs(
    smoke_world: SimWorld, seed_skills: dict[str, str], mode: SkillMode
) -> None:
    config = SimConfig(profile="realistic")
    skills = _with(optimal_skills(smoke_world, seed_skills), REWORD_A)
    oracle = expected_by_question(
        smoke_world, smoke_world.question_ids(), skills, config, skill_mode=mode, **ORACLE_KW
    )
    unperturbed = SimConfig(profile="realistic", text_flip_rate=0.0, length_cost=0.0)
    moved = 0
    for q in load_questions(SMOKE / "questions.json"):
        messages, _ = build_messages(PROMPT_SET, q, skills, mode)
        request = [str(messages[0]["content"]), *TOOLS]
        p = agent_draw(smoke_world, config, q.question_id, request, 0)[2]
        assert p == oracle[q.question_id], q.question_id
        assert instruction_parts(request) == instruction_parts(
            active_texts(q.task_type, skills, skill_mode=mode, **ORACLE_KW)
        )
        moved += p != agent_draw(smoke_world, unperturbed, q.question_id, request, 0)[2]
    assert moved == len(smoke_world.questions)  # both knobs act on every question


def test_observed_accuracy_matches_the_oracle_at_both_temperatures(
    big_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    config = SimConfig(profile="realistic")
    world = big_world
    skills = _with(seed_skills, REWORD_A)
    qids = world.question_ids()
    probs = expected_by_question(world, qids, skills, config, **ORACLE_KW)
    expected = sum(probs.values()) / len(probs)
    var = sum(p * (1 - p) for p in probs.values())
    texts = {tt: active_texts(tt, skills, **ORACLE_KW) for tt in world.task_types}
    # At 0 each question is one fixed draw U(q) < P_eff; above 0 one per sample index.
    for temperature, samples in ((0.0, (0,)), (1.0, (0, 1, 2, 3))):
        hits = sum(
            agent_draw(
                world, config, q, texts[world.questions[q].task_type], s, temperature=temperature
            )[1]
            for q in qids
            for s in samples
        )
        n = len(qids) * len(samples)
        se = math.sqrt(var * len(samples)) / n
        assert abs(hits / n - expected) < 4 * se, (temperature, hits / n, expected)


# --- a low temperature (sim.temperature_scale) ---------------------------------------------------


@pytest.mark.parametrize(("temperature", "tau"), [(0.05, 0.5), (0.3, 0.5), (1.0, 0.5)])
def test_two_draws_of_one_prompt_agree_as_the_temperature_scale_says(
    default_world: SimWorld, seed_skills: dict[str, str], temperature: float, tau: float
) -> None:
    world = default_world
    config = SimConfig(agent_temperature=temperature, temperature_scale=tau)
    r = draw_correlation(config, None)
    assert r == pytest.approx(math.exp(-((temperature / tau) ** 2)))
    qids = world.question_ids()[:2000]
    texts = {tt: active_texts(tt, seed_skills, **ORACLE_KW) for tt in world.task_types}
    disagree = expected = hits = 0.0
    for qid in qids:
        tt = world.questions[qid].task_type
        a = agent_draw(world, config, qid, texts[tt], 11)
        b = agent_draw(world, config, qid, texts[tt], 12)
        disagree += a[1] != b[1]
        hits += a[1]
        expected += disagreement(a[2], r)  # the bivariate-normal value, per question
    n = len(qids)
    assert abs(disagree / n - expected / n) <= 0.02, (disagree / n, expected / n)
    # Fresh draws would disagree far more often at a low temperature: the knob is not a no-op.
    fresh = (
        sum(
            disagreement(
                agent_draw(world, config, q, texts[world.questions[q].task_type], 0)[2], 0.0
            )
            for q in qids
        )
        / n
    )
    if temperature < 0.1:
        assert disagree / n < fresh / 4, (disagree / n, fresh)
    # Every draw stays uniform: the accuracy is the oracle's at any temperature.
    probs = expected_by_question(world, qids, seed_skills, config, **ORACLE_KW)
    mean = sum(probs.values()) / n
    se = math.sqrt(sum(p * (1 - p) for p in probs.values())) / n
    assert abs(hits / n - mean) < 4 * se / math.sqrt(max(1e-9, 1 - r)) + 0.01, (hits / n, mean)


def test_a_zero_temperature_scale_keeps_issue_4_draws_and_the_greedy_draw_at_zero(
    default_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    world = default_world
    qids = world.question_ids()[:200]
    texts = {tt: active_texts(tt, seed_skills, **ORACLE_KW) for tt in world.task_types}
    scaled = SimConfig(temperature_scale=0.5)
    for qid in qids:
        t = texts[world.questions[qid].task_type]
        # τ > 0 changes nothing at temperature 0 (τ = 0 is issue 4's draw: the bit-for-bit test)
        assert agent_draw(world, scaled, qid, t, 3, temperature=0.0) == agent_draw(
            world, SimConfig(), qid, t, 3, temperature=0.0
        )
    assert correlated_unit(0.3, 0.8, 0.0) == 0.8 and correlated_unit(0.3, 0.8, 1.0) == 0.3


def test_a_low_temperature_replays_the_letter_too(
    default_world: SimWorld, seed_skills: dict[str, str]
) -> None:
    """Review: the wrong letter was still keyed on the sample index, so two wrong draws at a low
    temperature named different letters as often as fresh draws (66%). The letter now comes from
    the correlated uniform itself (at τ = 0 it is still the hash of issue 4)."""
    world = default_world
    config = SimConfig(agent_temperature=0.05, temperature_scale=0.5)
    texts = {tt: active_texts(tt, seed_skills, **ORACLE_KW) for tt in world.task_types}
    both_wrong = differ = 0
    for qid in world.question_ids()[:1000]:
        t = texts[world.questions[qid].task_type]
        a, b = agent_draw(world, config, qid, t, 11), agent_draw(world, config, qid, t, 12)
        if not a[1] and not b[1]:
            both_wrong += 1
            differ += a[0] != b[0]
    # fresh draws: 2/3; here 15% (three letters put two more boundaries in u's range than
    # right / wrong does, and at r = 0.99 a draw moves u by ≈ 0.03)
    assert both_wrong > 300 and differ / both_wrong < 0.25, (differ, both_wrong)
    # an unknown question's guess, too
    guesses = [
        agent_draw(world, config, f"unknown-{i}", [], s)[0] for i in range(50) for s in (1, 2)
    ]
    assert sum(a != b for a, b in zip(guesses[::2], guesses[1::2], strict=True)) <= 10  # fresh: 37


@pytest.mark.parametrize(
    ("p_a", "p_b", "r"),
    [(0.5, 0.5, 0.25), (0.3, 0.7, 0.5), (0.9, 0.2, 0.9), (0.6, 0.55, 0.98), (0.4, 0.4, 0.0)],
)
def test_joint_correct_is_the_bivariate_normal_probability(
    p_a: float, p_b: float, r: float
) -> None:
    """Against a Monte Carlo of the latent pair itself (4·10⁶ draws: SE < 2.5·10⁻⁴)."""
    rng = np.random.default_rng(11)
    z1 = rng.standard_normal(4_000_000)
    z2 = r * z1 + math.sqrt(1 - r * r) * rng.standard_normal(z1.size)
    # a latent correlation ρ of two draws means corr(z1, z2) = ρ here
    ia, ib = NormalDist().inv_cdf(p_a), NormalDist().inv_cdf(p_b)
    mc = float(np.mean((z1 < ia) & (z2 < ib)))
    assert joint_correct(p_a, p_b, r) == pytest.approx(mc, abs=1.5e-3)


def test_joint_correct_agrees_with_the_flip_integral_and_the_edges() -> None:
    for p in (0.2, 0.5, 0.83):
        for r in (0.1, 0.5, 0.95):
            assert joint_correct(p, p, r) == pytest.approx(p - disagreement(p, r) / 2, abs=1e-7)
    assert joint_correct(0.3, 0.6, 0.0) == pytest.approx(0.18)
    assert joint_correct(0.3, 0.6, 1.0) == 0.3
    assert joint_correct(0.0, 0.6, 0.5) == 0.0 and joint_correct(1.0, 0.6, 0.5) == 0.6


def test_pass_dependence_truth_of_the_worst_case_is_2_arcsin_r_over_pi() -> None:
    """GATE §10.2's worst case (p = ½ on both texts, the texts independent): the within-text
    joint is Φ₂(0, 0; r), the cross-text one ¼, so ρ_d = 2·arcsin(r)/π — the probe's threshold.
    In the simulator the shared greedy part is the question's, not the text's: two texts with
    equal P give E[d₁d₂] = 0 at any r."""
    for r in (0.25, 0.5, 0.9):
        same = joint_correct(0.5, 0.5, r)
        assert (2 * same - 2 * 0.25) / (1 - 2 * 0.25) == pytest.approx(2 * math.asin(r) / math.pi)
    cross, disc = pass_dependence_truth([(0.5, 0.5)] * 3, 0.9)
    assert cross == pytest.approx(0.0, abs=1e-12) and disc > 0

"""The gate is valid at any decoding temperature (issue 15 B, GATE §6.3 R1/R5).

* at temperature 0 a replayed pass adds no evidence: the simulated agent gives the very same
  outcomes to a second pass, so ``gate_passes > 1`` is a config error and the plan has one pass;
* at temperature 0 the plan is a seeded uniform order of the type's pool (never the ladder, whose
  order is built from the same deterministic baseline outcomes);
* with fresh draws the simulated world's ladder is cycled ``passes`` times; a truncated plan over a
  cold ladder is visited in a uniform order; a real endpoint visits the whole pool in a uniform
  order (its texts shift single answers: docs/decision-real-endpoint-uniform-order.md).
"""

from __future__ import annotations

import asyncio
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from trm_assets.domain.errors import TrmError
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.gate import (
    GateRequest,
    SequentialGate,
    deterministic_baseline,
    gate_passes,
)
from trm_assets.llm.factory import build_providers
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace

REALISTIC_T0 = ("sim.profile=realistic", "gate_passes=1", "val_size=72")


def _request(ctx: LoopContext, task_type: str, *, warm: bool = False) -> GateRequest:
    paths = ctx.paths
    name = skill_file_name(task_type)
    qids = ctx.validation_by_type[task_type]
    ladder = tuple(reversed(qids))  # an order that is visibly not the sorted / uniform one
    return GateRequest(
        epoch=0,
        step=1,
        skill_file=name,
        task_type=task_type,
        candidate_text=ctx.skills(paths.skills_version)[name] + "\n- Re-read the question.\n",
        baseline_skills=ctx.skills(paths.skills_version),
        skills_version=paths.skills_version,
        prompts_version=paths.prompts_version,
        ladder_qids=ladder,
        pool_qids=qids,
        gate_run_id="t_e0_s1_gate_x",
        ladder_warm=warm,
    )


def _biggest(ctx: LoopContext) -> str:
    return max(ctx.validation_by_type, key=lambda t: (len(ctx.validation_by_type[t]), t))


def test_passes_at_temperature_zero_are_a_config_error() -> None:
    with pytest.raises(TrmError, match="replays identical pairs"):
        tiny_config("sim.profile=realistic", "gate_passes=3")
    with pytest.raises(TrmError, match="replays identical pairs"):
        tiny_config("agent_temperature=0", "gate_passes=2")
    assert tiny_config("agent_temperature=1", "gate_passes=3").gate_passes == 3


def test_decoding_problems_are_listed_with_the_others() -> None:
    """The temperature checks are cross-field checks like the rest: reported together with a
    field's own error (review: only gate_alpha's line appeared)."""
    with pytest.raises(TrmError) as e:
        tiny_config("sim.profile=realistic", "gate_passes=2", "gate_alpha=2")
    assert "gate_alpha: Input should be less than 1" in str(e.value)
    assert "gate_passes: 2 replays identical pairs at agent temperature 0.0" in str(e.value)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("gate_screen=true",), "gate_screen: true screens"),
        (
            ("sim.profile=realistic", "gate_screen=true"),
            "(got gate_pool: validation, temperature 0.0)",
        ),
        (("gate_pool=validation+diagnosis",), "at agent temperature 1.0 only the validation"),
        (("gate_pool=validation+diagnosis", "gate_screen=true"), "gate_screen: true screens"),
    ],
)
def test_gate_options_that_would_do_nothing_are_config_errors(
    overrides: tuple[str, ...], says: str
) -> None:
    """``gate_screen`` acts only on a temperature-0 plan with diagnosis questions, and
    ``gate_pool: validation+diagnosis`` only at temperature 0: anything else was a silent no-op
    (review: identical rows with and without ``gate_screen=true``)."""
    with pytest.raises(TrmError, match=re.escape(says)):
        tiny_config(*overrides)
    ok = tiny_config(*REALISTIC_T0, "gate_pool=validation+diagnosis", "gate_screen=true")
    assert ok.gate_screen and ok.gate_pool == "validation+diagnosis"


def test_a_replayed_pass_adds_no_evidence(tmp_path: Path) -> None:
    """At temperature 0 the second pass of a question returns exactly the first pass's outcome
    (what a real server does), so its pairs would only duplicate evidence; the plan has one pass
    over the whole pool, in a seeded uniform order that is not the ladder's."""
    cfg = tiny_config(*REALISTIC_T0)
    assert cfg.effective_agent_temperature() == 0.0 and not cfg.fresh_draws()
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        tt = _biggest(ctx)
        req = _request(ctx, tt)
        qs = [ctx.questions[q] for q in req.pool_qids]
        skills = dict(req.baseline_skills)
        pv = req.prompts_version
        one = asyncio.run(ctx.rollouts("t_rep", qs, skills, pv, kind="x", skills_version=None))
        specs = [(q, 1) for q in qs]
        two = asyncio.run(ctx.rollouts("t_rep2", specs, skills, pv, kind="x", skills_version=None))
        first = {p.question_id: p.outcome for p in one.predictions}
        second = {p.question_id: p.outcome for p in two.predictions}
        assert first == second  # another run id and replicate: the same answers
        assert gate_passes(ctx, tt) == 1
        plan = SequentialGate().plan(ctx, req)
        assert plan.order == "uniform (temperature 0)"
        assert {rep for _, rep in plan.positions} == {0}
        assert sorted(q for q, _ in plan.positions) == sorted(req.pool_qids)
        assert len(req.pool_qids) >= 6
        assert [q for q, _ in plan.positions] != list(req.ladder_qids)
        assert SequentialGate().plan(ctx, req) == plan  # seeded: the same plan again
        other = SequentialGate().plan(ctx, replace(req, step=2))
        assert other.positions != plan.positions  # another gate, another order


def test_every_outcome_carries_its_plans_order(tmp_path: Path) -> None:
    """``step_report.gate_order`` is the plan's label also where the gate returns before any
    rollout (review: ``accept_all`` and an empty plan wrote '')."""
    from trm_assets.harness.loop.gate import NO_LADDER, validate_candidate_skill

    for policy, empty, action, order in (
        ("accept_all", False, "accept", "none"),
        ("ce_gate", True, "abort", "ladder-cold"),
    ):
        cfg = tiny_config("agent_temperature=1.0", f"gate_policy={policy}")
        ws = new_workspace(tmp_path / policy, cfg)
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            req = _request(ctx, _biggest(ctx))
            if empty:
                req = replace(req, ladder_qids=(), pool_qids=())
            out = asyncio.run(validate_candidate_skill(ctx, req))
            assert (out.action, out.order) == (action, order)
            assert out.verdict == (NO_LADDER if empty else "ACCEPT")


def test_fresh_draws_cycle_the_ladder_and_truncated_cold_plans_go_uniform(tmp_path: Path) -> None:
    cfg = tiny_config("agent_temperature=1.0", "gate_passes=2", "gate_block=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        tt = _biggest(ctx)
        req = _request(ctx, tt)
        plan = SequentialGate().plan(ctx, req)
        assert plan.order == "ladder-cold"
        assert plan.positions == tuple((q, rep) for rep in (0, 1) for q in req.ladder_qids)
    cfg = tiny_config("agent_temperature=1.0", "gate_passes=2", "gate_block=2", "gate_max_blocks=1")
    ws = new_workspace(tmp_path / "ws2", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        req = _request(ctx, _biggest(ctx))
        cold = SequentialGate().plan(ctx, req)
        assert cold.order == "uniform (truncated cold ladder)" and len(cold.positions) == 2
        assert {q for q, _ in cold.positions} <= set(req.ladder_qids)
        warm = SequentialGate().plan(ctx, replace(req, ladder_warm=True))
        assert warm.order == "ladder-warm"
        assert warm.positions == tuple((q, 0) for q in req.ladder_qids[:2])


def test_horizon_on_a_cold_ladder_goes_uniform(tmp_path: Path) -> None:
    """Audit: horizon mode spends α over the plan's front; over a full plan on the cold ladder (2
    wrong : 1 right) a mean-zero edit that helps hard and hurts easy questions was accepted 6.6%
    (N = 150, 1 pass; uniform order 2.3%, hybrid 3.8%). Horizon visits a cold ladder's questions
    in a seeded uniform order; a warm ladder, and hybrid on a cold one, keep the ladder."""
    cfg = tiny_config("agent_temperature=1.0", "gate_passes=2", "gate_block=2", "gate_mode=horizon")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        req = _request(ctx, _biggest(ctx))
        cold = SequentialGate().plan(ctx, req)
        assert cold.order == "uniform (horizon on a cold ladder)"
        n = len(req.ladder_qids)
        order = [q for q, _ in cold.positions[:n]]
        assert sorted(order) == sorted(req.ladder_qids) and order != list(req.ladder_qids)
        assert cold.positions == tuple((q, rep) for rep in (0, 1) for q in order)
        warm = SequentialGate().plan(ctx, replace(req, ladder_warm=True))
        assert warm.order == "ladder-warm"
        assert warm.positions == tuple((q, rep) for rep in (0, 1) for q in req.ladder_qids)


@pytest.mark.parametrize("passes", ["null", "2"])
def test_a_real_endpoint_visits_the_whole_pool_in_a_uniform_order(
    tmp_path: Path, passes: str
) -> None:
    """A real model's texts shift single answers: a ladder read from the baseline text's own
    outcomes keeps where it did worse, and any rewording wins there (test_gate_statistics). A real
    endpoint at an independent-draw temperature visits the type's whole pool (not the ladder's
    filtered questions) in a seeded uniform order, ``passes`` times, warm or cold; the simulated
    world keeps the ladder (its checked config has no text shifts at fresh temperatures)."""
    overrides = ("agent_temperature=1.0", f"gate_passes={passes}", "gate_block=2", "val_size=72")
    real = tiny_config(*overrides, "llm_provider=openai")
    ws = new_workspace(tmp_path / "ws", real)
    sim = build_providers(tiny_config(*overrides).provider_spec())  # plan() rolls nothing out
    with loop_context(ws, real, sim) as ctx:
        tt = _biggest(ctx)
        req = _request(ctx, tt)
        case_pack = req.pool_qids[:2]  # the step excluded them from both (step.py)
        req = replace(req, pool_qids=req.pool_qids[2:], ladder_qids=req.ladder_qids[:2])
        k = 1 if passes == "null" else 2
        plans = [SequentialGate().plan(ctx, replace(req, ladder_warm=w)) for w in (False, True)]
        for plan in plans:
            assert plan.order == "uniform (real endpoint)"
            order = [q for q, _ in plan.positions[: len(req.pool_qids)]]
            assert sorted(order) == sorted(req.pool_qids) and len(req.pool_qids) > 2
            assert not set(case_pack) & {q for q, _ in plan.positions}
            assert order not in (list(req.pool_qids), sorted(req.pool_qids))
            assert plan.positions == tuple((q, rep) for rep in range(k) for q in order)
        assert plans[0] == plans[1] == SequentialGate().plan(ctx, req)  # seeded, not by p̂
        assert SequentialGate().plan(ctx, replace(req, step=2)) != plans[0]
    cfg = tiny_config(*overrides)
    with loop_context(new_workspace(tmp_path / "sim", cfg), cfg, sim) as ctx:
        req = _request(ctx, _biggest(ctx), warm=True)
        assert SequentialGate().plan(ctx, req).order == "ladder-warm"


@pytest.mark.parametrize(
    ("overrides", "small", "large"),
    [
        (("agent_temperature=1.0", "gate_passes=null"), 3, 1),  # simulated: GATE §11 by size
        (("agent_temperature=1.0", "gate_passes=null", "llm_provider=openai"), 1, 1),  # unmeasured
        (("agent_temperature=1.0", "llm_provider=openai", "gate_passes=3"), 3, 3),  # measured
        (("agent_temperature=0", "gate_passes=1"), 1, 1),  # replays
    ],
)
def test_a_real_endpoints_default_is_one_pass(
    overrides: tuple[str, ...], small: int, large: int
) -> None:
    """Audit: a real endpoint at temperature 1 got three passes per small pool by default with
    no measured pass dependence (at r = 0.5 three passes accept a null edit 6.7% > α). The dry
    run's estimate follows the same rule."""
    from trm_assets.harness.loop.gate import passes_for

    cfg = tiny_config(*overrides)
    assert (passes_for(cfg, 50), passes_for(cfg, 60)) == (small, large)


def test_replayed_passes_inflate_false_accepts_and_one_uniform_pass_does_not() -> None:
    """GATE §10.2's least-favourable null (p_B = p_C = ½) at temperature 0: replaying a pair
    three times (the old plan) accepts far above α; one pass (the new plan) stays within α."""
    import math

    import numpy as np

    from trm_assets.domain.gate import GateParams, gate_plan
    from trm_bench.gate import run_gate

    rng = np.random.default_rng(7)
    params = GateParams(mode="hybrid", block=10)
    reps, n = 1500, 50
    rates = {}
    for passes in (1, 3):
        plan = gate_plan([f"q{i}" for i in range(n)], passes, params.block)
        accepts = 0
        for _ in range(reps):
            b, c = rng.random(n) < 0.5, rng.random(n) < 0.5  # one draw per question: replayed
            base = {(f"q{i}", r): bool(b[i]) for i in range(n) for r in range(passes)}
            cand = {(f"q{i}", r): bool(c[i]) for i in range(n) for r in range(passes)}
            accepts += run_gate(plan, dict(base), dict(cand), params)[0]
        rates[passes] = accepts / reps
    se = math.sqrt(0.05 * 0.95 / reps)
    assert rates[1] <= 0.05 + 2 * se
    assert rates[3] > 0.05 + 4 * se  # the replayed evidence the config now refuses


def test_temperature_zero_baseline_reuses_same_version_outcomes(tmp_path: Path) -> None:
    """At temperature 0 the gate's baseline on a validation question is the seed evaluation's
    outcome of the same version (no second rollout), and it equals a fresh rollout's."""
    from trm_assets.harness.loop.gate import deterministic_baseline, validate_candidate_skill
    from trm_assets.harness.loop.runner import current_action, run_action

    cfg = tiny_config(*REALISTIC_T0)
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init: the seed evaluation of the validation pool
        tt = _biggest(ctx)
        req = _request(ctx, tt)
        known = deterministic_baseline(ctx, req)
        assert set(req.pool_qids) <= set(known)
        qs = [ctx.questions[q] for q in req.pool_qids]
        fresh = asyncio.run(
            ctx.rollouts(
                "t_fresh", qs, dict(req.baseline_skills), req.prompts_version,
                kind="x", skills_version=None,
            )
        )  # fmt: skip
        assert {p.question_id: p.correct for p in fresh.predictions} == {
            q: known[q] for q in req.pool_qids
        }
        out = asyncio.run(validate_candidate_skill(ctx, replace(req, extra_qids=())))
        assert out.baseline_rollouts == 0 and out.cache_hits >= out.blocks


def test_temperature_zero_baseline_is_keyed_by_the_prompt_not_the_version(tmp_path: Path) -> None:
    """The reuse key is what a question reads: after another task type's file changed (a new
    version), a type whose prompt is unchanged still reuses the seed evaluation's outcomes, and
    the candidate arm of a gate serves as the baseline of the text it tested; a text no rollout
    has read yet reuses nothing. Every reused outcome equals a fresh rollout of that prompt."""
    from trm_assets.harness.loop.gate import deterministic_baseline, validate_candidate_skill
    from trm_assets.harness.loop.runner import current_action, run_action

    cfg = tiny_config(*REALISTIC_T0)
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init: the seed evaluation
        tt = _biggest(ctx)
        other = next(t for t in sorted(ctx.validation_by_type) if t != tt)
        req = _request(ctx, tt)
        # another type's file changed: a different version, the same prompt for ``tt``
        edited = {**req.baseline_skills, skill_file_name(other): "- Look twice.\n"}
        moved = replace(req, baseline_skills=edited, skills_version="v_not_recorded")
        assert deterministic_baseline(ctx, moved) == deterministic_baseline(ctx, req)
        assert set(req.pool_qids) <= set(deterministic_baseline(ctx, moved))
        # the candidate text has never been read: nothing known for it yet
        as_base = {**req.baseline_skills, req.skill_file: req.candidate_text}
        cand_req = replace(req, baseline_skills=as_base, gate_run_id="t_e0_s2_gate_y")
        assert deterministic_baseline(ctx, cand_req) == {}
        out = asyncio.run(validate_candidate_skill(ctx, replace(req, extra_qids=())))
        seen = {q for q, c in out.candidate_correctness.items() if c is not None}
        assert seen
        known = deterministic_baseline(ctx, cand_req)  # the candidate arm, now on record
        assert set(known) == seen
        qs = [ctx.questions[q] for q in sorted(seen)]
        fresh = asyncio.run(
            ctx.rollouts(
                "t_fresh", qs, as_base, req.prompts_version, kind="x", skills_version=None,
            )
        )  # fmt: skip
        assert {p.question_id: p.correct for p in fresh.predictions} == known


def test_temperature_zero_evaluations_reuse_the_same_prompt_and_charge_nothing(
    tmp_path: Path,
) -> None:
    """An evaluation (R, R2, held-out, `trm eval`) at temperature 0 serves every question whose
    prompt was already rolled out: no model call, no rollout charged, the outcome recorded under
    the new run (flagged) and equal to a fresh rollout's. With fresh draws nothing is reused."""
    from trm_assets.harness.loop.runner import current_action, run_action
    from trm_assets.harness.loop.step import evaluate

    for temperature, expect_reuse in (
        (("agent_temperature=0",), True),
        # the realistic world's text shifts: the one-pass plan at temperature 1 (config check)
        (("agent_temperature=1.0", "gate_fresh_temperature=2"), False),
    ):
        cfg = tiny_config(*REALISTIC_T0, *temperature)
        ws = new_workspace(tmp_path / f"ws{expect_reuse}", cfg)
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            run_action(ctx, current_action(ctx))  # init: the seed evaluation
            sv, pv = ctx.paths.skills_version, ctx.paths.prompts_version
            qs = ctx.pool_questions("validation")
            res = asyncio.run(evaluate(ctx, "t_R", sv, pv, qs, "slow_R"))
            if not expect_reuse:
                assert res.n_reused == 0 and res.usage.prompt_tokens > 0
                continue
            assert res.n_reused == res.n == len(qs) and res.usage.prompt_tokens == 0
            fresh = asyncio.run(evaluate(ctx, "t_fresh", sv, pv, qs, "x"))
            assert fresh.n_reused == 0
            got = {p.question_id: p.correct for p in res.predictions}
            assert got == {p.question_id: p.correct for p in fresh.predictions}
            logged = ctx.log.query(
                "SELECT count(*) AS n, sum(n_llm_calls) AS calls FROM predictions "
                "WHERE run_id = 't_R'"
            )[0]
            assert (logged["n"], logged["calls"]) == (len(qs), 0)
            flags = ctx.log.query(
                "SELECT count(*) AS n FROM flags WHERE run_id = 't_R' AND kind = 'reuse'"
            )[0]
            assert flags["n"] == len(qs)


def test_temperature_zero_plan_with_diagnosis_questions(tmp_path: Path) -> None:
    """``gate_pool: validation+diagnosis`` at temperature 0: a diagnosis question a step batch
    has rolled out (its failure may have been shown to the evolver) is never gate evidence, and
    questions whose baseline is known come first (a stop there costs the candidate arm only)."""
    from trm_assets.harness.loop.gate import deterministic_baseline
    from trm_assets.harness.loop.runner import current_action, run_action
    from trm_assets.harness.loop.step import evaluate

    cfg = tiny_config(*REALISTIC_T0, "gate_pool=validation+diagnosis")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init: the seed evaluation (validation only)
        tt = _biggest(ctx)
        diag = ctx.diagnosis_by_type[tt]
        assert len(diag) >= 4
        shown = diag[:2]
        sv, pv = ctx.paths.skills_version, ctx.paths.prompts_version
        asyncio.run(evaluate(ctx, "t_e0_s0", sv, pv, [ctx.questions[q] for q in shown], "step"))
        req = replace(_request(ctx, tt), extra_qids=tuple(diag))
        plan = SequentialGate().plan(ctx, req)
        visited = [q for q, _ in plan.positions]
        assert not set(shown) & set(visited)
        assert set(visited) == set(req.pool_qids) | (set(diag) - set(shown))
        known = deterministic_baseline(ctx, req)
        flags = [q in known for q in visited]
        assert flags == sorted(flags, reverse=True) and flags[0] and not flags[-1]
        assert plan.order.startswith("uniform, known baselines first")


def test_temperature_zero_reuse_never_crosses_simulated_worlds(tmp_path: Path) -> None:
    """The simulated model is its world: a workspace evaluated again under other answer-relevant
    ``sim`` keys (a `trm eval --set sim.…` or a resume with them changed) is not served the first
    world's outcomes; its outcomes equal a fresh workspace's in the new world. Timing keys are not
    part of the model: a change of latency still reuses (review of issue 15's contracts)."""
    from trm_assets.harness.loop.runner import current_action, run_action
    from trm_assets.harness.loop.step import evaluate

    first = tiny_config(*REALISTIC_T0)
    ws = new_workspace(tmp_path / "ws", first)
    with loop_context(ws, first, build_providers(first.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init: the seed evaluation in the first world
        sv, pv = ctx.paths.skills_version, ctx.paths.prompts_version
    other = tiny_config(*REALISTIC_T0, "sim.seed=7", "sim.ability=3", "sim.text_flip_rate=0.4")
    slower = tiny_config(*REALISTIC_T0, "sim.latency_ms_mean=1")

    def outcomes(
        cfg: RunConfig, workspace: Path, run_id: str
    ) -> tuple[int, dict[str, bool | None]]:
        with loop_context(workspace, cfg, build_providers(cfg.provider_spec())) as c:
            res = asyncio.run(evaluate(c, run_id, sv, pv, c.pool_questions("validation"), "slow_R"))
            return res.n_reused, {p.question_id: p.correct for p in res.predictions}

    reused, moved = outcomes(other, ws, "t_other")
    fresh_ws = new_workspace(tmp_path / "fresh", other)
    _, fresh = outcomes(other, fresh_ws, "t_fresh")
    _, before = outcomes(first, new_workspace(tmp_path / "again", first), "t_first")
    assert reused == 0 and moved == fresh
    assert moved != before  # the worlds do answer differently (else the check above is empty)
    same, _ = outcomes(slower, ws, "t_slower")
    assert same == len(fresh)


def test_passes_below_the_fresh_temperature_are_a_config_error() -> None:
    """A low temperature nearly replays the greedy answer (docs/decision-low-temperature.md):
    repeated passes are refused below ``gate_fresh_temperature`` unless the user lowers it."""
    with pytest.raises(TrmError, match=r"gate_passes: 3 at agent temperature 0\.3, below"):
        tiny_config("agent_temperature=0.3", "gate_passes=3")
    ok = tiny_config("agent_temperature=0.3", "gate_passes=3", "gate_fresh_temperature=0.2")
    assert ok.independent_draws() and ok.fresh_draws()
    low = tiny_config("agent_temperature=0.3", "gate_passes=1")
    assert not low.independent_draws() and low.fresh_draws()
    assert tiny_config().independent_draws()  # the default world (temperature 1) keeps passes


def test_a_low_temperature_gets_one_uniform_pass_and_reuses_nothing(tmp_path: Path) -> None:
    """Between 0 and ``gate_fresh_temperature`` the gate takes the temperature-0 plan (one pass
    over the pool, uniform order: each question one pair, whatever two draws of it share), but
    reuses no earlier rollout: at T > 0 a rollout is a new sample. With the simulator's
    ``temperature_scale`` two draws of one prompt at T = 0.05 agree far more often than fresh
    draws — the replays that repeated passes would count as evidence."""
    cfg = tiny_config("agent_temperature=0.05", "gate_passes=1", "sim.temperature_scale=0.5")
    ws = new_workspace(tmp_path / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        tt = _biggest(ctx)
        req = _request(ctx, tt)
        qs = [ctx.questions[q] for q in ctx.validation_by_type[tt]]
        skills, pv = dict(req.baseline_skills), req.prompts_version
        one = asyncio.run(ctx.rollouts("t_a", qs, skills, pv, kind="x", skills_version=None))
        two = asyncio.run(ctx.rollouts("t_b", qs, skills, pv, kind="x", skills_version=None))
        a = {p.question_id: p.outcome for p in one.predictions}
        b = {p.question_id: p.outcome for p in two.predictions}
        assert sum(a[q] != b[q] for q in a) <= 1  # near-replays (fresh draws: ~40% disagree)
        assert gate_passes(ctx, tt) == 1
        plan = SequentialGate().plan(ctx, req)
        assert plan.order == "uniform (below gate_fresh_temperature)"
        assert {rep for _, rep in plan.positions} == {0}
        assert sorted(q for q, _ in plan.positions) == sorted(req.pool_qids)
        assert plan.known is None
        assert deterministic_baseline(ctx, req) == {}  # rolled out, never served from t_a/t_b


def test_a_simulated_world_too_correlated_for_passes_is_a_config_error() -> None:
    """Review: ``sim.temperature_scale: 2`` at temperature 1 gives two draws of one prompt a
    latent correlation of 0.78, where three passes accept the least favourable null at ≈ 9.5%;
    the gate must not count them as independent."""
    with pytest.raises(TrmError, match=r"correlation of 0\.78 \(> 0\.25\)"):
        tiny_config("sim.temperature_scale=2")
    assert tiny_config("sim.temperature_scale=0.8").independent_draws()  # r(1) = 0.21
    raised = tiny_config("sim.temperature_scale=2", "gate_fresh_temperature=1.5", "gate_passes=1")
    assert not raised.independent_draws()  # the one-pass plan: valid at any correlation


def test_prompt_sensitivity_that_passes_would_share_is_a_config_error() -> None:
    """Review: with fresh draws, every draw of one text still carries that text's per-question
    shift (``sim.text_flip_rate``). The first check bounded it at p = ½ (1 − cos(πf)), where
    it is least shared; on questions with 2p(1 − p) <= f the text decides the answer and every
    draw of it repeats (the simulator's own text-to-text correlation is 0 there), so three
    passes over a pool of such questions accept a neutral rewording at ≈ 15% (every p = 0.92,
    f = 0.15, the shipped realistic value: 15.2% ± 0.7, real kernel, 3,000 replicates). Any
    f > 0 is now refused at fresh temperatures; one uniform pass stays allowed."""
    import math

    from trm_assets.llm.sim.decoding import flip_correlation
    from trm_assets.llm.sim_config import SimConfig, prompt_draw_worst_case

    for f, tau in ((0.05, 0.0), (0.15, 0.0), (0.3, 0.0), (0.15, 0.8), (0.45, 0.0)):
        sim = SimConfig(text_flip_rate=f, temperature_scale=tau)
        # the simulator's own text-to-text correlation: cos(πf) at p = ½ (the first check's
        # bound) is its largest, the least shared question, not the most
        rho = [flip_correlation(p / 1000, f) for p in range(1, 1000)]
        assert rho[499] == pytest.approx(math.cos(math.pi * f), abs=1e-9) and max(rho) == rho[499]
        # the worst case over p: some p near 0 or 1 has no text-to-text correlation left, and
        # there the text decides every draw
        assert min(rho) == 0.0
        assert prompt_draw_worst_case(sim, 1.0) == 1.0
    assert prompt_draw_worst_case(SimConfig(temperature_scale=0.8), 1.0) == pytest.approx(
        math.exp(-((1.0 / 0.8) ** 2))
    )
    for flip in ("0.3", "0.15", "0.02"):
        with pytest.raises(TrmError) as err:
            tiny_config(f"sim.text_flip_rate={flip}", "agent_temperature=1")
        msg = str(err.value)
        assert f"sim.text_flip_rate: {flip}: every draw of one text" in msg
        assert "raise gate_fresh_temperature above 1.0" in msg
        assert "use sim.text_flip_rate: 0" in msg and "temperature_scale" not in msg
    with pytest.raises(TrmError, match=r"sim\.text_flip_rate: 0\.15: every draw"):
        tiny_config("sim.profile=realistic", "agent_temperature=1")
    assert tiny_config("sim.text_flip_rate=0", "agent_temperature=1").independent_draws()
    one = ("sim.profile=realistic", "agent_temperature=1", "gate_fresh_temperature=1.5")
    assert not tiny_config(*one, "gate_passes=1").independent_draws()  # one uniform pass


def test_the_decoding_probe_refuses_what_the_config_check_refuses() -> None:
    from trm_bench.decoding import TemperatureProbe

    def probe(r: float | None, shared: float | None) -> TemperatureProbe:
        return TemperatureProbe(1.0, None, 0, 0, 0.0, r, None, shared)  # type: ignore[arg-type]

    assert probe(0.0, 1.0).config_refuses and not probe(0.0, 0.11).config_refuses
    assert probe(0.78, None).config_refuses  # a record without the field: r alone, as before
    assert not probe(None, None).config_refuses  # a real model


def _other_data(cfg: RunConfig, root: Path) -> tuple[Path, Path, Path]:
    """Data beside ``cfg``'s, under ``root``: a harder simulated world (the same questions,
    every difficulty + 3), a byte copy of the trees at another path, and the trees with every
    caption blanked."""
    import json

    assert cfg.ground_truth is not None
    world = json.loads(Path(cfg.ground_truth).read_text(encoding="utf-8"))
    for q in world["questions"].values():
        q["difficulty"] = q["difficulty"] + 3.0
    hard = root / "ground_truth_hard.json"
    hard.write_text(json.dumps(world), encoding="utf-8")
    same = root / "trees_same"
    shutil.copytree(cfg.trees, same)
    edited = root / "trees_edited"
    shutil.copytree(cfg.trees, edited)
    for path in sorted(edited.glob("*.json")):
        tree = json.loads(path.read_text(encoding="utf-8"))
        for node in tree["nodes"].values():
            node["caption"] = ""
        path.write_text(json.dumps(tree), encoding="utf-8")
    return hard, same, edited


def test_temperature_zero_reuse_never_crosses_data(tmp_path: Path) -> None:
    """Review: the reuse key held the prompt and the decoding but not the data a rollout reads.
    Evaluated again over another simulated world file (``ground_truth``) or over edited video
    trees, a workspace was served the first data's outcomes (72 of 72, no model call). Now
    another world is rolled out and answers as a fresh workspace does in it; edited trees are
    rolled out; the same trees at another path still reuse (the content is the key, not the
    path). A ``trm eval`` names another run for other data instead of reporting the old one."""

    from click.testing import CliRunner

    from trm_assets.cli.train import eval_cmd
    from trm_assets.harness.loop.runner import current_action, run_action
    from trm_assets.harness.loop.step import evaluate

    first = tiny_config(*REALISTIC_T0)
    ws = new_workspace(tmp_path / "ws", first)
    with loop_context(ws, first, build_providers(first.provider_spec())) as ctx:
        run_action(ctx, current_action(ctx))  # init: the seed evaluation
        sv, pv = ctx.paths.skills_version, ctx.paths.prompts_version
        home = ctx.data_digest

    gt, trees, edited = _other_data(first, tmp_path)

    def outcomes(
        cfg: RunConfig, workspace: Path, run_id: str
    ) -> tuple[int, int, dict[str, bool | None]]:
        with loop_context(workspace, cfg, build_providers(cfg.provider_spec())) as c:
            res = asyncio.run(evaluate(c, run_id, sv, pv, c.pool_questions("validation"), "slow_R"))
            return (
                res.n_reused,
                len(res.predictions),
                {p.question_id: p.correct for p in res.predictions},
            )

    hard = tiny_config(*REALISTIC_T0, f"ground_truth={gt}")
    reused, n, moved = outcomes(hard, ws, "t_hard")
    assert n > 0 and reused == 0
    _, _, fresh = outcomes(hard, new_workspace(tmp_path / "fresh", hard), "t_fresh")
    _, _, before = outcomes(first, ws, "t_first")
    assert moved == fresh and moved != before  # the hard world answers, not the first one
    reused, n, _ = outcomes(tiny_config(*REALISTIC_T0, f"trees={edited}"), ws, "t_edited")
    assert reused == 0
    reused, n, _ = outcomes(tiny_config(*REALISTIC_T0, f"trees={trees}"), ws, "t_same")
    assert reused == n  # the same trees elsewhere: served

    with loop_context(ws, hard, build_providers(hard.provider_spec())) as c:
        assert c.data_digest != home
    args = ["--workspace", str(ws), "--version", sv, "--pool", "validation"]
    again = CliRunner().invoke(eval_cmd, args)  # the workspace's stored config: the first data
    assert again.exit_code == 0, again.output
    assert f"run eval_{sv}_{pv}_validation:" in again.output
    other = CliRunner().invoke(eval_cmd, [*args, "--set", f"ground_truth={gt}"])
    assert other.exit_code == 0, other.output
    assert "already evaluated" not in other.output
    assert f"eval_{sv}_{pv}_validation_" in other.output  # another run: its own id


@pytest.mark.parametrize(
    "decoding", [(), ("agent_temperature=0", "gate_passes=1")], ids=["fresh", "temperature-0"]
)
def test_gate_baselines_never_cross_data(tmp_path: Path, decoding: tuple[str, ...]) -> None:
    """Review: the gate's baseline cache (R4) was keyed by the decoding and the other skills,
    not by the data a draw reads. A run resumed over another simulated world file or over edited
    trees paired the first data's cached baseline draws with candidate draws over the new data
    (at temperature 0 too: the cache is read before the same-data reuse). Now a gate over other
    data draws its baselines again; over the same data (at another path, or the world named by
    its sample directory) it is served from the cache."""

    from trm_assets.harness.loop.gate import validate_candidate_skill

    first = tiny_config(*decoding)
    assert first.fresh_draws() == (not decoding)
    ws = new_workspace(tmp_path / "ws", first)

    def gate(cfg: RunConfig, run_id: str) -> tuple[int, int]:
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            req = replace(_request(ctx, _biggest(ctx)), gate_run_id=run_id, extra_qids=())
            out = asyncio.run(validate_candidate_skill(ctx, req))
            return out.cache_hits, out.baseline_rollouts

    hits, drawn = gate(first, "t_e0_s1_gate_a")
    assert hits == 0 and drawn > 0  # nothing cached yet: every baseline position drawn

    gt, same, edited = _other_data(first, tmp_path)

    hits, drawn = gate(tiny_config(*decoding, f"ground_truth={gt}"), "t_e0_s1_gate_b")
    assert hits == 0 and drawn > 0
    hits, drawn = gate(tiny_config(*decoding, f"trees={edited}"), "t_e0_s1_gate_c")
    assert hits == 0 and drawn > 0
    hits, _ = gate(tiny_config(*decoding, f"trees={same}"), "t_e0_s1_gate_d")
    assert hits > 0  # the same content elsewhere: the first gate's draws are served
    # review: a sample directory as ground_truth (what the provider accepts) crashed the digest
    assert first.ground_truth is not None
    sample = Path(first.ground_truth).parent
    hits, _ = gate(tiny_config(*decoding, f"ground_truth={sample}"), "t_e0_s1_gate_e")
    assert hits > 0  # the same world file, named by its directory

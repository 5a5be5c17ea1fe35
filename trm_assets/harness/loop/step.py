"""The fast update: one step of one epoch (SPEC 5.3, seed §15 ``_run_step`` /
``_gate_batch_skills``), plus the two units around it: :func:`initialize_training` (the seed
evaluation that gives the cold ladder and the first best) and :func:`begin_epoch` (batches and
epoch-start snapshots, run by the epoch's first step).

A step, in order:

1. roll out the epoch's saved batch with the current (skills, prompts) — run ``{base}_e{E}_s{S}``;
2. update ``correctness`` incrementally (an infra failure leaves the previous value);
3. diagnose the failures → per-skill case packs (now) and system/tool packs (accumulated);
4. per task type of the batch, in sorted order: skip in cooldown; evolve the skill within the edit
   budget (never repeating the rejected buffer); skip without an applied edit; take the ladder
   (case-pack questions excluded); validate (:mod:`.validate`); then **accept** (snapshot the
   type's correctness *before* merging, new immutable version, manifest, merge the candidate's
   observed correctness, clear the skill's rejected buffer, open/extend a probation — never for
   ``default-strategy.md``), **reject** (only ``applied`` edits enter the rejected buffer,
   cooldown) or **abort** (INFRA / no ladder: cooldown only);
5. decrement cooldowns (the runner then commits the unit: its one checkpoint).

The evolution calls of step 4 start together once the diagnosis is done and are awaited in the
same order (:func:`_prefetch_evolutions`; ``docs/decision-evolve-prefetch.md``).

Every function here is synchronous (``asyncio.run`` inside) so a Dagster op can call it.

Why it is long: the fast update is one unit of work in the seed's order (rollouts, correctness,
diagnosis, per-skill evolve/gate, accept/reject/abort bookkeeping); the accept and reject helpers
are shared with the slow update.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trm_assets.domain.batching import make_batches
from trm_assets.domain.edits import edit_budget_at, rejected_entries
from trm_assets.domain.gate import Verdict
from trm_assets.domain.ladder import ladder_for, new_ladder, update_ladder
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question, skill_file_name
from trm_assets.domain.run_level import RunErrorParams, gate_params_for
from trm_assets.evolution.diagnosis import RunLogPort, load_diagnose_prompts, run_diagnosis
from trm_assets.evolution.evolve import evolve_single_skill, load_evolve_prompts
from trm_assets.evolution.types import (
    EvolutionRecord,
    LLMCallRecord,
    SkillCasePack,
    merge_tool_packs,
    text_hash,
)
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.gate import (
    NO_LADDER,
    GateRequest,
    ValidationOutcome,
    validate_candidate_skill,
)
from trm_assets.harness.loop.rollouts import InferenceResult
from trm_assets.harness.loop.session import UnitSession
from trm_assets.harness.storage.checkpoint import Probation, TrainState
from trm_assets.harness.storage.ladder_store import load_written_ladder, save_ladder
from trm_assets.harness.storage.observation import write_rows
from trm_assets.harness.storage.records import (
    EpochCounters,
    SeedEval,
    SlowRecords,
    training_rollouts,
)
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.workspace import (
    advance_current,
    prompt_store,
    read_best,
    record_run,
    skill_store,
    update_best,
)
from trm_assets.llm.protocol import InfraError

Echo = Callable[[str], None]


@dataclass(frozen=True)
class SkillGateReport:
    """What happened to one skill file in a step (one ``step_report`` row)."""

    skill_file: str
    task_type: str
    action: str  # cooldown | no_failures | gate_cap | no_edit | accept | reject | abort
    verdict: str | None = None
    new_skills_version: str | None = None
    wins: int | None = None
    losses: int | None = None
    detail: str = ""
    n_edits: int | None = None
    n_applied: int | None = None
    outcome: ValidationOutcome | None = None


@dataclass(frozen=True)
class StepResult:
    epoch: int
    step: int
    run_id: str
    n: int
    accuracy: float | None
    reports: tuple[SkillGateReport, ...]
    skills_version: str
    prompts_version: str


# ------------------------------------------------------------------------------------------------
# helpers shared with the slow update


def sample_index(seed: int, purpose: str, *parts: int | str) -> int:
    """A reproducible model sample index for one call (seeded stream per purpose and position)."""
    return int(rng_for(seed, purpose, *parts).integers(0, 2**31 - 1))


def charge_calls(state: TrainState, scope: str, phase: str, calls: Sequence[LLMCallRecord]) -> None:
    state.charge(
        scope,
        phase,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
        llm_calls=len(calls),
    )


def charge_inference(state: TrainState, scope: str, phase: str, res: InferenceResult) -> None:
    state.charge(
        scope,
        phase,
        rollouts=res.n - res.n_reused,  # a reused outcome (temperature 0) called no model
        prompt_tokens=res.usage.prompt_tokens,
        completion_tokens=res.usage.completion_tokens,
        llm_calls=sum(p.n_llm_calls for p in res.predictions),
    )


async def evaluate(
    ctx: LoopContext,
    run_id: str,
    skills_version: str,
    prompts_version: str,
    questions: Sequence[Question],
    kind: str,
) -> InferenceResult:
    """Roll out ``questions`` with a stored version pair, recorded under ``run_id`` — in the
    manifest's history while its first model calls are in flight (its rows are written after),
    so a checkpoint still landing (``UnitSession.commit(behind=True)``) overlaps the calls."""
    ctx.after_next_launch(
        functools.partial(
            record_run,
            ctx.workspace,
            run_id,
            skills_version=skills_version,
            prompts_version=prompts_version,
            kind=kind,
            use_current=False,
        )
    )
    res = await ctx.rollouts(
        run_id, list(questions), ctx.skills(skills_version), prompts_version,
        kind=kind, skills_version=skills_version,
    )  # fmt: skip
    return res  # run_inference recorded the versions and questions on the run's row


def outcomes_by_qid(res: InferenceResult) -> dict[str, bool | None]:
    """One draw per question (replicate 0), sorted."""
    return {p.question_id: p.outcome for p in sorted(res.predictions, key=lambda p: p.question_id)}


# ------------------------------------------------------------------------------------------------
# init


def initialize_training(s: UnitSession) -> SeedEval:
    """Seed evaluation on the validation pool (run ``{base}_init``): correctness, the cold ladder
    (one observation per question), the first best (the seed skills) and the state file."""
    ctx, state = s.ctx, s.state
    paths = ctx.paths
    sv, pv = paths.skills_version, paths.prompts_version
    run_id = f"{ctx.base}_init"
    res = asyncio.run(evaluate(ctx, run_id, sv, pv, ctx.pool_questions("validation"), "seed_eval"))
    charge_inference(state, "init", "seed_eval", res)
    outcomes = outcomes_by_qid(res)
    state.correctness.update(outcomes)
    tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
    # A new ladder and this run's best, not what a killed attempt of init left: its re-run may
    # have drawn other outcomes (a real server at temperature > 0), and folding the same run
    # into the old ladder again is a no-op
    ladder = new_ladder(tasks, ctx.ladder_params())
    save_ladder(paths.ladder, update_ladder(ladder, run_id, outcomes))
    state.eval_prev_acc, state.eval_prev_run_id = res.accuracy, run_id
    state.baseline_skills_version, state.baseline_prompts_version = sv, pv
    best = read_best(ctx.workspace)
    if best is None or best.run_id == run_id:
        update_best(ctx.workspace, skills=sv, prompts=pv, val_accuracy=res.accuracy, run_id=run_id)
    state.seed_eval = SeedEval(
        run_id=run_id,
        skills_version=sv,
        prompts_version=pv,
        val_accuracy=res.accuracy,
        val_expected_accuracy=ctx.expected_accuracy(sv, pv, list(ctx.pools.validation)),
    )
    exp = state.seed_eval.val_expected_accuracy
    s.say(
        f"init: seed skills {sv}/{pv} val accuracy {_fmt(res.accuracy)}"
        + (f" (expected {_fmt(exp)}, SIMULATED)" if exp is not None else "")
    )
    return state.seed_eval


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# ------------------------------------------------------------------------------------------------
# epoch start


def begin_epoch(ctx: LoopContext, state: TrainState, epoch: int) -> None:
    """Batches of the diagnosis pool (seeded per epoch, wrong answers mixed in) and the epoch-start
    snapshots (versions, skill hashes, validation correctness, best); clears the accumulators."""
    paths = ctx.paths
    diagnosis = ctx.pool_questions("diagnosis")
    batches = make_batches(
        diagnosis,
        batch_size=ctx.cfg.batch_size,
        min_class_per_batch=ctx.cfg.min_class_per_batch,
        correctness=state.correctness,
        rng=rng_for(ctx.cfg.seed, "batches", epoch),
    )
    state.batches = [list(b) for b in batches]
    state.epoch_started = epoch
    state.epoch_start_versions = {"skills": paths.skills_version, "prompts": paths.prompts_version}
    state.epoch_start_skills = {
        name: text_hash(text) for name, text in sorted(ctx.skills(paths.skills_version).items())
    }
    state.epoch_start_correctness = {q: state.correctness.get(q) for q in ctx.pools.validation}
    best = read_best(ctx.workspace)
    state.epoch_start_best = best.model_dump() if best is not None else None
    state.changed_task_types_this_epoch = []
    state.system_packs = type(state.system_packs)()
    state.tool_packs = {}
    # the largest step of the run so far stays: the budget planner's estimate of a next step
    state.epoch_counters = EpochCounters(step_rollouts_max=state.epoch_counters.step_rollouts_max)
    state.slow = SlowRecords()


# ------------------------------------------------------------------------------------------------
# the step


def run_step(s: UnitSession) -> StepResult:
    """Step ``s.step`` of epoch ``s.epoch`` (the runner opened the unit and commits it)."""
    ctx, state, epoch, step, echo = s.ctx, s.state, s.epoch, s.step, s.echo
    _check_ladder(ctx)  # a corrupt ladder fails before any rollout is recorded
    if state.epoch_started < epoch:
        begin_epoch(ctx, state, epoch)
    spent = training_rollouts(state.budget)
    result = asyncio.run(_run_step(ctx, state, epoch, step, echo))
    cost = training_rollouts(state.budget) - spent
    # the budget planner's estimate of a next step (tracked only under a rollout budget)
    if ctx.cfg.rollout_budget is not None and cost > state.epoch_counters.step_rollouts_max:
        state.epoch_counters = replace(state.epoch_counters, step_rollouts_max=cost)
    for name in sorted(state.gate_cooldown):  # 4. decrement cooldowns
        state.gate_cooldown[name] -= 1
        if state.gate_cooldown[name] <= 0:
            del state.gate_cooldown[name]
    acts = [r.action for r in result.reports]
    n_acc, n_rej, n_abort = acts.count("accept"), acts.count("reject"), acts.count("abort")
    # an evolution call lost to infrastructure is not a skip (cooldown, no failures, no edit)
    n_infra = sum(1 for r in result.reports if r.action == "no_edit" and r.verdict == "INFRA")
    lost = f", evolution failed (infra) {n_infra}" if n_infra else ""
    s.say(
        f"epoch {epoch} step {step}: batch {result.n} acc {_fmt(result.accuracy)}; "
        f"accepted {n_acc}, rejected {n_rej}, aborted {n_abort}, "
        f"skipped {len(acts) - n_acc - n_rej - n_abort - n_infra}{lost}; "
        f"skills {result.skills_version}"
    )
    return result


async def _run_step(
    ctx: LoopContext, state: TrainState, epoch: int, step: int, echo: Echo | None
) -> StepResult:
    cfg, scope = ctx.cfg, f"e{epoch}"
    paths = ctx.paths
    batch = state.batches[step % len(state.batches)] if state.batches else []
    run_id = f"{ctx.base}_e{epoch}_s{step}"
    # 1-2. rollouts of the batch, correctness
    res = await evaluate(
        ctx,
        run_id,
        paths.skills_version,
        paths.prompts_version,
        [ctx.questions[q] for q in batch],
        "step",
    )
    charge_inference(state, scope, "step_rollouts", res)
    for qid, outcome in outcomes_by_qid(res).items():
        if outcome is not None:
            state.correctness[qid] = outcome
    # 3. diagnosis — of the rows just rolled out, from memory (a read back would wait for their
    # write); from the run log if this process was not given every row of the run
    rows = ctx.log.recent(run_id)
    source: RunLogPort = rows if rows is not None and len(rows) == res.n else _flushed(ctx)
    if echo is not None:  # the diagnose/evolve calls report nothing while they run
        echo(f"epoch {epoch} step {step}: diagnosing the failed rollouts …")
    try:
        diag = await run_diagnosis(
            run_id,
            ctx.questions,
            ctx.dataset.trees,
            ctx.providers.diagnose,
            source,
            skill_store(paths),
            load_diagnose_prompts(prompt_store(paths)),
            cfg.concurrency,
            sample=sample_index(cfg.seed, "diagnose", epoch, step),
        )
    except InfraError as e:  # every diagnose call failed for infra: nothing to evolve from
        ctx.check_model_calls("the step's diagnosis", run_id, [str(e)], 1)
        state.count("diagnose_infra")
        if echo is not None:
            echo(f"epoch {epoch} step {step}: diagnosis failed (infra: {e.kind}); no edits")
        skill_packs: Mapping[str, SkillCasePack] = {}
    else:
        charge_calls(state, scope, "diagnose", diag.calls)
        state.system_packs = state.system_packs.merged(diag.system_pack)
        state.tool_packs = merge_tool_packs(state.tool_packs, diag.tool_packs)
        skill_packs = diag.skill_packs
    # 4. per skill, task types in sorted order
    budget = edit_budget_at(epoch, step, ctx.budget_schedule())
    evolve_prompts = load_evolve_prompts(prompt_store(paths))
    reports: list[SkillGateReport] = []
    task_types = sorted({ctx.questions[q].task_type for q in batch})
    template = evolve_prompts.evolve_skill
    proposals = _prefetch_evolutions(
        ctx, state, epoch, step, task_types, skill_packs, budget, template
    )
    try:
        for task_type in task_types:
            report = await _gate_skill(
                ctx, state, epoch, step, task_type, skill_packs, budget, template, run_id, echo,
                proposals.get(skill_file_name(task_type)),
            )  # fmt: skip
            reports.append(report)
            ctx.after_next_launch(
                functools.partial(
                    write_rows, ctx.log, "step_report", [_step_row(epoch, step, report, budget)]
                )
            )
    finally:  # a gate that raised leaves the later proposals unused: stop and collect them
        for task in proposals.values():
            task.cancel()
        await asyncio.gather(*proposals.values(), return_exceptions=True)
    evolved = [r for r in reports if r.action not in ("cooldown", "no_failures", "gate_cap")]
    failed = [r.detail for r in evolved if r.action == "no_edit" and r.verdict == "INFRA"]
    ctx.check_model_calls("every evolution call of the step", run_id, failed, len(evolved))
    paths = ctx.paths
    return StepResult(
        epoch,
        step,
        run_id,
        res.n,
        res.accuracy,
        tuple(reports),
        paths.skills_version,
        paths.prompts_version,
    )


def _flushed(ctx: LoopContext) -> RunLogReader:
    ctx.log.flush()
    return RunLogReader.open(ctx.paths.run_db)


def _evolve(
    ctx: LoopContext,
    state: TrainState,
    epoch: int,
    step: int,
    pack: SkillCasePack,
    budget: int,
    template: str,
) -> Coroutine[Any, Any, EvolutionRecord]:
    """The evolution call of one skill file: what it reads is its own — the file's text, its
    case pack, its rejected entries, the step's edit budget and its own sample index."""
    return evolve_single_skill(
        pack,
        skill_store(ctx.paths),
        llm=ctx.providers.evolve,
        template=template,
        budget=budget,
        rejected=state.rejected_buffer.get(pack.skill_file, []),
        sample=sample_index(ctx.cfg.seed, "evolve_skill", epoch, step, pack.skill_file),
    )


def _prefetch_evolutions(
    ctx: LoopContext,
    state: TrainState,
    epoch: int,
    step: int,
    task_types: Sequence[str],
    packs: Mapping[str, SkillCasePack],
    budget: int,
    template: str,
) -> dict[str, asyncio.Task[EvolutionRecord]]:
    """The step's evolution calls, started together (``docs/decision-evolve-prefetch.md``).

    Gating one skill changes nothing another skill's evolution reads (:func:`_evolve`: only that
    file's text, pack and rejected entries), so each call gives the same proposal whether it is
    made before or after the earlier gates; made together, a step waits one evolution latency
    instead of one per skill. Only the calls the step will use are started: skills in cooldown
    or without failures have none, and when the run's gate cap could stop the step part-way
    (GATE §6.4) — or two task types share a skill file — nothing is started and every call is
    made in turn, as before."""
    files = [skill_file_name(t) for t in task_types]
    if len(set(files)) != len(files):
        return {}
    todo = [
        f for t, f in zip(task_types, files, strict=True) if _skipped(ctx, state, t, packs) is None
    ]
    if state.gates_total + len(todo) > _run_error_params(ctx).max_gates:
        return {}
    return {
        f: asyncio.ensure_future(_evolve(ctx, state, epoch, step, packs[f], budget, template))
        for f in todo
    }


def _check_ladder(ctx: LoopContext) -> None:
    tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
    load_written_ladder(ctx.paths.ladder, tasks, ctx.ladder_params())


def _step_row(epoch: int, step: int, r: SkillGateReport, budget: int) -> dict[str, object]:
    o = r.outcome
    return {
        "epoch": epoch,
        "step": step,
        "skill_file": r.skill_file,
        "task_type": r.task_type,
        "action": r.action,
        "verdict": r.verdict,
        "policy": o.policy if o else None,
        "gate_run_id": o.gate_run_id if o else None,
        "wins": r.wins,
        "losses": r.losses,
        "blocks": o.blocks if o else None,
        "candidate_rollouts": o.candidate_rollouts if o else None,
        "baseline_rollouts": o.baseline_rollouts if o else None,
        "cache_hits": o.cache_hits if o else None,
        "gate_order": o.order if o else None,
        "edit_budget": budget,
        "n_edits": r.n_edits,
        "n_applied": r.n_applied,
        "new_skills_version": r.new_skills_version,
        "detail": r.detail,
    }


def _run_error_params(ctx: LoopContext) -> RunErrorParams:
    cfg = ctx.cfg
    max_gates = cfg.run_max_gates or cfg.epochs * cfg.steps_per_epoch * len(ctx.dataset.task_types)
    return RunErrorParams(
        policy=cfg.run_error_policy,
        pfer_budget=cfg.run_pfer_budget,
        fdr_alpha=cfg.run_fdr_alpha,
        max_gates=max_gates,
    )


def _skipped(
    ctx: LoopContext, state: TrainState, task_type: str, packs: Mapping[str, SkillCasePack]
) -> SkillGateReport | None:
    """Why a task type's skill is not evolved now (cooldown, no failures, the run's gate cap),
    or None: the checks before a skill's evolution call."""
    skill_file = skill_file_name(task_type)
    if state.gate_cooldown.get(skill_file, 0) > 0:
        return SkillGateReport(skill_file, task_type, "cooldown")
    if skill_file not in packs:
        return SkillGateReport(skill_file, task_type, "no_failures")
    max_gates = _run_error_params(ctx).max_gates
    if state.gates_total >= max_gates:  # GATE §6.4: a hard cap on the gates of a run
        return SkillGateReport(
            skill_file, task_type, "gate_cap", detail=f"run_max_gates={max_gates}"
        )
    return None


async def _gate_skill(
    ctx: LoopContext,
    state: TrainState,
    epoch: int,
    step: int,
    task_type: str,
    packs: Mapping[str, SkillCasePack],
    budget: int,
    template: str,
    run_id: str,
    echo: Echo | None,
    proposal: Awaitable[EvolutionRecord] | None = None,
) -> SkillGateReport:
    """Gate one skill file; ``proposal``: its evolution call, already started
    (:func:`_prefetch_evolutions`), or None to make it here."""
    cfg, scope = ctx.cfg, f"e{epoch}"
    skipped = _skipped(ctx, state, task_type, packs)
    if skipped is not None:
        return skipped
    skill_file = skill_file_name(task_type)
    pack = packs[skill_file]
    paths = ctx.paths
    if echo is not None:
        echo(f"  evolving {skill_file} from {len(pack.question_ids)} failed case(s) …")
    if proposal is None:
        proposal = _evolve(ctx, state, epoch, step, pack, budget, template)
    try:
        record = await proposal
    except InfraError as e:  # no candidate: nothing was tested, no blacklist, no cooldown
        return SkillGateReport(skill_file, task_type, "no_edit", "INFRA", detail=f"evolve: {e}")
    charge_calls(state, scope, "evolve", record.calls)
    n_edits = len(record.edits)
    n_applied = len(record.applied_edits)
    if not record.changed:
        return SkillGateReport(
            skill_file, task_type, "no_edit", detail=record.detail, n_edits=n_edits,
            n_applied=n_applied,
        )  # fmt: skip
    excluded = tuple(pack.question_ids)
    tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
    ladder = load_written_ladder(paths.ladder, tasks, ctx.ladder_params())
    ladder_qids = ladder_for(ladder, task_type, warm=state.gate_epoch_observed, exclude=excluded)
    pool_qids = tuple(q for q in ctx.validation_by_type.get(task_type, ()) if q not in excluded)
    extra_qids: tuple[str, ...] = ()
    if cfg.gate_pool == "validation+diagnosis":  # issue 15 C: more questions, more power
        batch = set(state.batches[step % len(state.batches)]) if state.batches else set()
        extra_qids = tuple(
            q
            for q in ctx.diagnosis_by_type.get(task_type, ())
            if q not in excluded and q not in batch
        )
    params = gate_params_for(
        state.gates_total + 1, state.accepts_total, ctx.gate_params(), _run_error_params(ctx)
    )
    req = GateRequest(
        epoch=epoch,
        step=step,
        skill_file=skill_file,
        task_type=task_type,
        candidate_text=record.candidate_text,
        baseline_skills=ctx.skills(paths.skills_version),
        skills_version=paths.skills_version,
        prompts_version=paths.prompts_version,
        ladder_qids=ladder_qids,
        pool_qids=pool_qids,
        extra_qids=extra_qids,
        gate_run_id=f"{run_id}_gate_{skill_file.removesuffix('.md')}",
        ladder_run_ids=ladder.applied_runs,
        ladder_warm=state.gate_epoch_observed,
    )
    outcome = await validate_candidate_skill(ctx, req, params=params, leave_tail=True)
    for observer in ctx.observers:
        observer.on_gate(req, outcome)
    state.charge(
        scope,
        "gate",
        rollouts=outcome.baseline_rollouts + outcome.candidate_rollouts,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        llm_calls=outcome.llm_calls,
    )
    if echo is not None:
        echo(
            f"  gate {skill_file}: {outcome.verdict} (W={outcome.wins} L={outcome.losses}, "
            f"{outcome.blocks} block(s), {outcome.candidate_rollouts} candidate + "
            f"{outcome.baseline_rollouts} baseline rollouts, {outcome.cache_hits} cache hits)"
        )
    if outcome.verdict != NO_LADDER:  # a gate that could not start decided nothing
        state.gates_total += 1
        state.count("gates")
        state.count("alpha_sum", params.alpha)
    if outcome.action == "accept":
        version = apply_accept(ctx, state, req, record, outcome)
        return SkillGateReport(
            skill_file, task_type, "accept", outcome.verdict, version, outcome.wins,
            outcome.losses, record.detail, n_edits, n_applied, outcome,
        )  # fmt: skip
    if outcome.action == "reject":
        apply_reject(ctx, state, req, record, outcome)
        return SkillGateReport(
            skill_file, task_type, "reject", outcome.verdict, None, outcome.wins,
            outcome.losses, record.detail, n_edits, n_applied, outcome,
        )  # fmt: skip
    state.count("aborted")
    if cfg.gate_cooldown_steps > 0:
        state.gate_cooldown[skill_file] = cfg.gate_cooldown_steps
    return SkillGateReport(
        skill_file, task_type, "abort", outcome.verdict, None, outcome.wins, outcome.losses,
        "no verdict (INFRA or no ladder): no blacklist entry, cooldown", n_edits, n_applied,
        outcome,
    )  # fmt: skip


def apply_accept(
    ctx: LoopContext,
    state: TrainState,
    req: GateRequest,
    record: EvolutionRecord,
    outcome: ValidationOutcome,
) -> str:
    """SPEC 5.3 accept, in the seed's order; returns the new skills version."""
    qids = ctx.validation_by_type.get(req.task_type, ())
    snapshot = {q: state.correctness.get(q) for q in qids}  # BEFORE merging (probation anchor)
    anchor_skills, anchor_prompts = req.skills_version, req.prompts_version
    meta = advance_current(  # promote → manifest (current pointer) …
        ctx.workspace,
        "skills",
        {req.skill_file: record.candidate_text},
        reason=f"accept e{req.epoch} s{req.step} {req.skill_file} ({outcome.verdict})",
        edits=record.report_rows(),
        extra={
            "gate_run_id": outcome.gate_run_id,
            "verdict": outcome.verdict,
            "policy": outcome.policy,
            "wins": outcome.wins,
            "losses": outcome.losses,
        },
    )  # … and ctx.paths resolves the new current on its next access (refresh paths)
    for qid, value in sorted(outcome.candidate_correctness.items()):  # merge candidate correctness
        if value is not None:
            state.correctness[qid] = value
    state.rejected_buffer.pop(req.skill_file, None)  # clear this skill's rejected buffer
    if req.skill_file != DEFAULT_SKILL_FILE:  # probation (never for default-strategy.md)
        evidence = {
            "gate_run_id": outcome.gate_run_id,
            "verdict": outcome.verdict,
            "wins": outcome.wins,
            "losses": outcome.losses,
            "version": meta.version,
        }
        edits = [
            {**e.model_dump(), **evidence}
            for e in (record.apply_report.applied if record.apply_report else ())
        ]
        open_probation = state.probations.get(req.skill_file)
        if open_probation is not None:  # a second accept of the same skill extends the bundle
            open_probation.pending_edits.extend(edits)
        else:
            base = ctx.skills(anchor_skills)
            state.probations[req.skill_file] = Probation(
                skill_file=req.skill_file,
                task_type=req.task_type,
                anchor_skills_version=anchor_skills,
                anchor_prompts_version=anchor_prompts,
                anchor_run_id=state.eval_prev_run_id,
                anchor_default_hash=text_hash(base.get(DEFAULT_SKILL_FILE, "")),
                correctness_snapshot=snapshot,
                pending_edits=edits,
                opened_epoch=req.epoch,
                opened_step=req.step,
            )
    if req.task_type not in state.changed_task_types_this_epoch:
        state.changed_task_types_this_epoch.append(req.task_type)
    state.accepts_total += 1
    state.count("accepted")
    return meta.version


def apply_reject(
    ctx: LoopContext,
    state: TrainState,
    req: GateRequest,
    record: EvolutionRecord,
    outcome: ValidationOutcome,
) -> None:
    """SPEC 5.3 reject: only edits whose apply status is ``applied`` enter the rejected buffer
    (tagged verified-harmful only on REJECT_HARM); the skill starts its cooldown."""
    verdict = outcome.kernel_verdict or Verdict.REJECT_BUDGET
    if record.apply_report is not None:
        entries = rejected_entries(
            record.apply_report,
            verdict,
            skill_file=req.skill_file,
            wins=outcome.wins,
            losses=outcome.losses,
        )
        state.rejected_buffer.setdefault(req.skill_file, []).extend(entries)
    if ctx.cfg.gate_cooldown_steps > 0:
        state.gate_cooldown[req.skill_file] = ctx.cfg.gate_cooldown_steps
    state.count("rejected")

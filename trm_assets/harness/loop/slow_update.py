"""The slow update: the ten steps of SPEC 5.6 (fidelity #13, seed §15 ``_slow_update_cycle``) as
ten separate functions, in this order:

==  ===================================  =========================================================
#   function                             reads (state / workspace) → writes
==  ===================================  =========================================================
1   :func:`snapshot_and_rerun_validation` current versions → ``slow.r`` (run ``{base}_e{E}_R``,
                                          accuracy, versions) and ``slow.r_outcomes``
2   :func:`record_dual_metric`            ``slow.r`` → ``dual_metric_eval``, ``shadow_gate`` rows
3   :func:`write_back_r_correctness`      ``slow.r_outcomes`` → ``correctness`` (unconditional)
4   :func:`settle_probations`             ``probations``, ``slow.r_outcomes`` → file-level
                                          rollbacks (new versions), ``correctness`` of rolled-back
                                          types ← anchor, ``slow.probations``
5   :func:`update_best_from_r`            ``slow.r`` → manifest ``best`` (strictly greater)
6   :func:`apply_momentum`                epoch-start vs current correctness → one new skills
                                          version with the guidance blocks, ``slow.momentum``
7   :func:`evolve_system_and_tools`       ``system_packs``, ``tool_packs`` → one new prompts
                                          version, ``slow.prompts``
8   :func:`r2_closed_loop`                → run ``{base}_e{E}_R2`` on (r2_skills_version,
                                          new_prompts_version); regressed → prompts reverted;
                                          kept → correctness, eval_prev, best vs R2's pair
9   :func:`report_epoch`                  → three-state labels, ``epoch_report``, the four-way
                                          ``holdout_eval`` on the test pool, early-stop counter
10  :func:`refresh_ladder`                → ``ladder.json`` from exactly: step rollouts
                                          ``{base}_e{E}_s*`` minus ``*_gate_*``, R, a kept R2;
                                          ``gate_epoch_observed``; next epoch
==  ===================================  =========================================================

Each function is the body of one unit of work (one Dagster op each): it takes the opened
:class:`~trm_assets.harness.loop.session.UnitSession` (the runner refused it out of order and
commits it), reads what it needs from the persisted state (so it runs alone after a process
restart), keeps its output record in ``state.slow``
(:class:`~trm_assets.harness.storage.records.SlowRecords`) and returns it. The test pool is
used only by step 9 (a report; never a decision).

Why it is long: it holds the ten slow-update functions of fidelity item #13 in their fixed order,
each a unit of work with its own checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar, Unpack

from trm_assets.agent.messages import active_skill_files
from trm_assets.domain.edits import edit_budget_end
from trm_assets.domain.ladder import GATE_RUN_MARK, update_ladder
from trm_assets.domain.probation import ProbationVerdict, probation_verdict
from trm_assets.domain.question import DEFAULT_SKILL_FILE, skill_file_name
from trm_assets.evolution.evolve import (
    evolve_single_tool,
    evolve_system_prompt,
    load_evolve_prompts,
)
from trm_assets.evolution.momentum import update_momentum
from trm_assets.evolution.types import text_hash
from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.session import UnitSession
from trm_assets.harness.loop.step import (
    charge_calls,
    charge_inference,
    evaluate,
    outcomes_by_qid,
    sample_index,
)
from trm_assets.harness.storage.checkpoint import (
    CheckpointError,
    Probation,
    TrainState,
    encode_record,
)
from trm_assets.harness.storage.ladder_store import load_written_ladder, save_ladder
from trm_assets.harness.storage.observation import mixed_score, nullable_score, write_rows
from trm_assets.harness.storage.records import (
    BestFromR,
    BestSummary,
    DualMetric,
    EpochReportOutcome,
    EpochSummary,
    HoldoutEval,
    LadderRefresh,
    MomentumOutcome,
    ProbationSettlement,
    PromptsEvolution,
    R2Outcome,
    RunRef,
    SlowRecords,
    WriteBack,
)
from trm_assets.harness.storage.runlog import FLAG_REUSE, RunLogReader
from trm_assets.harness.storage.versions import VersionNote, parse_version
from trm_assets.harness.storage.workspace import (
    StoreKind,
    advance_current,
    prompt_store,
    read_best,
    read_manifest,
    revert_files,
    skill_store,
    update_best,
)
from trm_assets.llm.protocol import InfraError

Echo = Callable[[str], None]
T = TypeVar("T")


async def _or_infra(call: Awaitable[T]) -> T | InfraError:
    """An evolve/momentum call whose model failed for infrastructure reasons proposes nothing
    (the previous text is kept; :func:`_proposals`); any other exception is a bug and
    propagates."""
    try:
        return await call
    except InfraError as e:
        return e


def _proposals(ctx: LoopContext, what: str, epoch: int, outs: list[T | InfraError]) -> list[T]:
    """The calls that answered; a real endpoint that failed all of them stops the unit
    (:meth:`LoopContext.check_model_calls`)."""
    errors = [str(o) for o in outs if isinstance(o, InfraError)]
    ctx.check_model_calls(what, f"{ctx.base}_e{epoch}_slow", errors, len(outs))
    return [o for o in outs if not isinstance(o, InfraError)]


def _need(value: T | None, name: str) -> T:
    """An earlier function's output (always there when the planner's order holds)."""
    if value is None:
        raise CheckpointError(f"state.json: slow.{name} is missing (a corrupt checkpoint)")
    return value


def _val_expected(ctx: LoopContext, skills: str, prompts: str) -> float | None:
    """The oracle's expected validation accuracy of a pair (None with a real model)."""
    return ctx.expected_accuracy(skills, prompts, list(ctx.pools.validation))


def _advance_if_changed(
    ctx: LoopContext,
    kind: StoreKind,
    current: str,
    changes: Mapping[str, str],
    **note: Unpack[VersionNote],
) -> str:
    """ONE new ``kind`` version holding every change (in file order); ``current`` if none."""
    if not changes:
        return current
    return advance_current(ctx.workspace, kind, dict(sorted(changes.items())), **note).version


# 1 ----------------------------------------------------------------------------------------------


def snapshot_and_rerun_validation(s: UnitSession) -> RunRef:
    """SPEC 5.6 step 1: snapshot the current versions and re-run the full validation pool (R)."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    paths = ctx.paths
    sv, pv = paths.skills_version, paths.prompts_version
    run_id = f"{ctx.base}_e{epoch}_R"
    res = asyncio.run(evaluate(ctx, run_id, sv, pv, ctx.pool_questions("validation"), "slow_R"))
    charge_inference(state, f"e{epoch}", "R", res)
    state.slow = replace(state.slow, r_outcomes=outcomes_by_qid(res))
    out = RunRef(run_id, sv, pv, res.accuracy, n=res.n)
    state.slow = replace(state.slow, r=out)
    return out


# 2 ----------------------------------------------------------------------------------------------


def record_dual_metric(s: UnitSession) -> DualMetric:
    """SPEC 5.6 step 2: hard/soft/mixed metrics of R → ``dual_metric_eval`` (+ ``shadow_gate``).

    No provider reports a per-question soft score, so soft and mixed are NULL (never 0) and the
    mixed shadow of the best argmax stays undecided (NULL)."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    r = _need(state.slow.r, "r")
    soft: float | None = None
    mixed = mixed_score(r.accuracy, soft)
    best = read_best(ctx.workspace)
    write_rows(
        ctx.log,
        "dual_metric_eval",
        [
            {
                "epoch": epoch,
                "run_id": r.run_id,
                "skills_version": r.skills_version,
                "prompts_version": r.prompts_version,
                "n": r.n,
                "hard_accuracy": r.accuracy,
                "soft_score": nullable_score(soft),
                "mixed_score": nullable_score(mixed),
            }
        ],
    )
    write_rows(
        ctx.log,
        "shadow_gate",
        [
            {
                "epoch": epoch,
                "run_id": r.run_id,
                "hard_accuracy": r.accuracy,
                "mixed_score": nullable_score(mixed),
                "shadow_best_mixed": None,
                "would_replace": None,
                "hard_best_accuracy": best.val_accuracy if best is not None else None,
            }
        ],
    )
    out = DualMetric(hard=r.accuracy, soft=soft)
    state.slow = replace(state.slow, dual_metric=out)
    return out


# 3 ----------------------------------------------------------------------------------------------


def write_back_r_correctness(s: UnitSession) -> WriteBack:
    """SPEC 5.6 step 3: R's per-question outcomes replace ``correctness`` unconditionally."""
    state = s.state
    outcomes = _need(state.slow.r_outcomes, "r_outcomes")
    for qid in sorted(outcomes):
        state.correctness[qid] = outcomes[qid]
    out = WriteBack(n=len(outcomes))
    state.slow = replace(state.slow, write_back=out)
    return out


# 4 ----------------------------------------------------------------------------------------------


def settle_probations(s: UnitSession) -> Mapping[str, ProbationSettlement]:
    """SPEC 5.6 step 4 / GATE §7: each open probation against R on the type's whole validation pool.

    ROLLBACK is a file-level revert (the anchor version's content promoted as a *new* version; the
    manifest is not rewound) and the type's correctness is overwritten from the anchor (overriding
    step 3). KEEP, KEEP_CONFIRMED and DEFER close the probation (a DEFER has no evidence for a
    rollback; with a fixed pool it would never get more)."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    outcomes = _need(state.slow.r_outcomes, "r_outcomes")
    r = _need(state.slow.r, "r")
    r_skills = ctx.skills(r.skills_version)
    r_default = text_hash(r_skills.get(DEFAULT_SKILL_FILE, ""))
    r_prompts = ctx.prompt_files(r.prompts_version)
    settled: dict[str, ProbationSettlement] = {}
    for name in sorted(state.probations):
        p = state.probations[name]
        qids = ctx.validation_by_type.get(p.task_type, ())
        stale = p.task_type in _unevaluated_types_before(state, p.opened_epoch)
        # the anchor's outcomes are of the text the type read at the start of the epoch it opened
        # in; another skill file it reads (``skill_mode: all``) that changed since then
        # confounds the comparison with R (GATE §7: "other skills affecting this type")
        start_skills = ctx.skills(_epoch_start_skills(state, p))
        moved = _other_files_changed(ctx, p.task_type, p.skill_file, start_skills, r_skills)
        # ``skill_mode: none``: the type reads no skill file, so both arms ran the same text and
        # their differences are noise — no evidence either way (a ROLLBACK said "worse")
        unread = not any(
            p.skill_file in _shown(ctx, p.task_type, k) for k in (start_skills, r_skills)
        )
        confounded = (
            stale
            or unread
            or bool(moved)
            or p.anchor_default_hash != r_default
            or ctx.prompt_files(p.anchor_prompts_version) != r_prompts
        )
        res = probation_verdict(
            p.correctness_snapshot,
            {q: outcomes.get(q) for q in qids},
            confounded=confounded,
            params=ctx.probation_params(),
            anchor_run_id=p.anchor_run_id,
        )
        reason = res.reason
        if stale:
            reason += (
                f" (the anchor holds {p.task_type}'s outcomes of another text than epoch "
                f"{p.opened_epoch - 1} left current: R2 was discarded)"
            )
        elif unread:
            reason = (
                f"no evidence: {p.task_type} reads no version of {p.skill_file} under "
                f"skill_mode {ctx.cfg.skill_mode!r}, so both arms ran the same text"
            )
        elif moved:
            reason += f" (other skill files {p.task_type} reads changed: {', '.join(moved)})"
        entry = ProbationSettlement(
            verdict=res.verdict.value,
            wins=res.wins,
            losses=res.losses,
            pairs=res.pairs,
            reason=reason,
            edits=len(p.pending_edits),
        )
        if res.verdict is ProbationVerdict.ROLLBACK:
            meta = revert_files(
                ctx.workspace,
                "skills",
                p.anchor_skills_version,
                [p.skill_file],
                reason=f"probation rollback e{epoch} {p.skill_file}: {res.reason}",
                extra={"probation": encode_record(entry)},
            )
            for q in qids:  # the rollback overrides step 3 for its questions
                state.correctness[q] = p.correctness_snapshot.get(q)
            entry = replace(entry, new_skills_version=meta.version)
            state.count("rolled_back")
        settled[name] = entry
        del state.probations[name]
    state.slow = replace(state.slow, probations=settled)
    return settled


def _epoch_start_skills(state: TrainState, p: Probation) -> str:
    """The skills version whose evaluation the probation's anchor snapshot holds: the start of
    the epoch it opened in. Every probation settles in that epoch's slow update; were one ever
    carried over, its own anchor version is the nearest record."""
    if p.opened_epoch == state.epoch and "skills" in state.epoch_start_versions:
        return state.epoch_start_versions["skills"]
    return p.anchor_skills_version


def _shown(ctx: LoopContext, task_type: str, skills: Mapping[str, str]) -> dict[str, str]:
    """The skill texts a question of ``task_type`` reads under ``skill_mode`` (name → text)."""
    return {f: skills[f] for f in active_skill_files(task_type, skills, ctx.cfg.skill_mode)}


def _other_files_changed(
    ctx: LoopContext,
    task_type: str,
    own: str,
    before: Mapping[str, str],
    after: Mapping[str, str],
) -> list[str]:
    """The skill files other than ``own`` that ``task_type`` reads in ``before`` or ``after`` and
    whose text differs between them (always none under ``skill_mode: task``, whose only other
    file, ``default-strategy.md``, the loop never changes)."""
    a, b = _shown(ctx, task_type, before), _shown(ctx, task_type, after)
    return sorted(f for f in set(a) | set(b) if f != own and a.get(f) != b.get(f))


def _unevaluated_types_before(state: TrainState, epoch: int) -> tuple[str, ...]:
    """The task types whose ``correctness`` at the start of ``epoch`` came from another text than
    the one they read (the previous epoch's :func:`unevaluated_types`): a probation opened on one
    in ``epoch`` has an anchor of another text, and is confounded."""
    for h in state.history:
        if h.epoch == epoch - 1:
            return h.unevaluated_types or ()
    return ()


def unevaluated_types(ctx: LoopContext, state: TrainState) -> tuple[str, ...]:
    """At the end of a slow update: the task types whose current text (the skills they read by
    ``skill_mode``, and the prompts) differs from the text their ``correctness`` came from. That
    is R's, or for a type whose probation rolled back the anchor's (the rollback's version; its
    default strategy and prompts were R's, else it would have deferred), unless R2 was kept (R2
    evaluated the current pair). They arise when R2 is discarded (prompts reverted, or another
    type's guidance reverted) while the momentum's guidance stays current (step 8)."""
    r2, r = _need(state.slow.r2, "r2"), _need(state.slow.r, "r")
    if r2.kept:
        return ()
    settled = state.slow.probations or {}
    rolled: dict[str | None, str] = {
        _task_of(ctx, name): entry.new_skills_version
        for name, entry in settled.items()
        if entry.new_skills_version is not None
    }
    if ctx.prompt_files(r.prompts_version) != ctx.prompt_files(ctx.paths.prompts_version):
        return tuple(sorted(ctx.validation_by_type))  # every type reads the prompts
    now = ctx.skills(ctx.paths.skills_version)
    source = {v: ctx.skills(v) for v in {r.skills_version, *rolled.values()}}
    return tuple(
        t
        for t in sorted(ctx.validation_by_type)
        if _shown(ctx, t, source[rolled.get(t) or r.skills_version]) != _shown(ctx, t, now)
    )


# 5 ----------------------------------------------------------------------------------------------


def _maybe_best(ctx: LoopContext, run: RunRef) -> bool:
    """Best = argmax validation accuracy; only a strictly greater accuracy replaces it."""
    acc = run.accuracy
    best = read_best(ctx.workspace)
    if acc is None:
        return False
    if best is None or best.val_accuracy is None or acc > best.val_accuracy:
        update_best(
            ctx.workspace,
            skills=run.skills_version,
            prompts=run.prompts_version,
            val_accuracy=acc,
            run_id=run.run_id,
        )
        return True
    return False


def update_best_from_r(s: UnitSession) -> BestFromR:
    """SPEC 5.6 step 5: best argmax against R's version pair (strictly greater to replace)."""
    ctx, state = s.ctx, s.state
    replaced = _maybe_best(ctx, _need(state.slow.r, "r"))
    out = BestFromR(replaced=replaced, best=read_best(ctx.workspace))
    state.slow = replace(state.slow, best_r=out)
    return out


# 6 ----------------------------------------------------------------------------------------------


def apply_momentum(s: UnitSession) -> MomentumOutcome:
    """SPEC 5.6 step 6: per task type changed this epoch, the (epoch start, now) pairs → momentum
    guidance into the skill's protected block; all updates form ONE new immutable version (none →
    no version). A parse failure keeps the previous guidance (the evolution call's rule)."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    paths = ctx.paths
    store = skill_store(paths)
    template = load_evolve_prompts(prompt_store(paths)).momentum
    # Only types whose skill changed this epoch and whose two arms are outcomes of the texts they
    # name (docs/decision-momentum-scope.md):
    # * the text the type reads still differs from its epoch-start text (a probation rollback in
    #   step 4 restores that text and its outcomes; under ``skill_mode: none`` it reads no
    #   skill): elsewhere both arms ran the same text and the pairs are pure sampling noise;
    # * its epoch-start outcomes are of its epoch-start text (not a type the previous epoch left
    #   unevaluated: those are of an older text, and the pairs would charge the ungated guidance
    #   still current to this epoch's edits);
    # * its current outcomes (R's) are of its current text (under ``skill_mode: all`` a rollback
    #   in step 4 changes the text every type reads).
    current = ctx.skills(paths.skills_version)
    start = ctx.skills(state.epoch_start_versions["skills"])
    at_r = ctx.skills(_need(state.slow.r, "r").skills_version)
    stale = set(_unevaluated_types_before(state, epoch))
    changed = {
        t
        for t in state.changed_task_types_this_epoch
        if t not in stale
        and _shown(ctx, t, current) != _shown(ctx, t, start)
        and _shown(ctx, t, current) == _shown(ctx, t, at_r)
    }

    async def all_updates() -> list[Any]:
        calls = []
        for task_type, qids in ctx.validation_by_type.items():
            name = skill_file_name(task_type)
            if name not in current or task_type not in changed:
                continue
            calls.append(
                _or_infra(
                    update_momentum(
                        name,
                        task_type,
                        store,
                        {q: state.epoch_start_correctness.get(q) for q in qids},
                        {q: state.correctness.get(q) for q in qids},
                        ctx.questions,
                        llm=ctx.providers.evolve,
                        template=template,
                        sample=sample_index(ctx.cfg.seed, "momentum", epoch, name),
                    )
                )
            )
        return list(await asyncio.gather(*calls))

    records = _proposals(ctx, "every momentum call", epoch, asyncio.run(all_updates()))
    changes: dict[str, str] = {}
    for rec in records:
        charge_calls(state, f"e{epoch}", "momentum", rec.calls)
        if rec.updated and rec.candidate_text != rec.original_text:
            changes[rec.skill_file] = rec.candidate_text
    version = _advance_if_changed(
        ctx,
        "skills",
        paths.skills_version,
        changes,
        reason=f"momentum e{epoch}",
        extra={"momentum": sorted(changes)},
    )
    out = MomentumOutcome(
        updated=tuple(sorted(changes)), skills_version=version, new_version=bool(changes)
    )
    state.slow = replace(state.slow, momentum=out)
    return out


# 7 ----------------------------------------------------------------------------------------------


def evolve_system_and_tools(s: UnitSession) -> PromptsEvolution:
    """SPEC 5.6 step 7: the system prompt and tool descriptions evolve from the epoch's packs with
    the end-of-run edit budget; applied changes form ONE new prompts version."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    paths = ctx.paths
    prompts = prompt_store(paths)
    templates = load_evolve_prompts(prompts)
    budget = edit_budget_end(ctx.budget_schedule())

    async def proposals() -> list[Any]:
        calls = []
        if state.system_packs.cases:
            calls.append(
                _or_infra(
                    evolve_system_prompt(
                        state.system_packs,
                        prompts,
                        llm=ctx.providers.evolve,
                        template=templates.evolve_system,
                        budget=budget,
                        sample=sample_index(ctx.cfg.seed, "evolve_system", epoch),
                    )
                )
            )
        for name in sorted(state.tool_packs):
            calls.append(
                _or_infra(
                    evolve_single_tool(
                        state.tool_packs[name],
                        prompts,
                        llm=ctx.providers.evolve,
                        template=templates.evolve_tool,
                        budget=budget,
                        sample=sample_index(ctx.cfg.seed, "evolve_tool", epoch, name),
                    )
                )
            )
        return list(await asyncio.gather(*calls))

    records = _proposals(ctx, "every system/tool evolution call", epoch, asyncio.run(proposals()))
    changes: dict[str, str] = {}
    edits: list[dict[str, Any]] = []
    for rec in records:
        charge_calls(state, f"e{epoch}", "system_tool", rec.calls)
        if rec.changed:
            changes[rec.target_file] = rec.candidate_text
            edits.extend({"file": rec.target_file, **row} for row in rec.report_rows())
    before = paths.prompts_version
    after = _advance_if_changed(
        ctx, "prompts", before, changes, reason=f"system/tool evolution e{epoch}", edits=edits
    )
    out = PromptsEvolution(before=before, after=after, changed=tuple(sorted(changes)))
    state.slow = replace(state.slow, prompts=out)
    return out


# 8 ----------------------------------------------------------------------------------------------


def r2_closed_loop(s: UnitSession) -> R2Outcome:
    """SPEC 5.6 step 8: R2 on (r2_skills_version, new_prompts_version) — never R's versions.

    Runs only when step 6 or 7 made a new version. R2 *regressed* when its accuracy is below R's,
    or when some task type is verified worse on its own questions (R against R2, paired by
    question; the probation's harm rule, E⁻ ≥ 1/``probation_alpha_harm``, GATE §7): an ungated
    change that costs one type a lot barely moves the pooled accuracy. Both comparisons use only
    the types that read after step 4 the text R evaluated (a probation rollback restores another
    text: R ran the rolled-back one, and its questions would tilt the pooled accuracy towards
    R2; :func:`_comparable_types`). For a harmed type whose skill the
    momentum changed (step 6), that guidance is reverted (file-level, to R's text); if the prompts
    changed and R2 regressed, the prompts are reverted. After any revert R2 is discarded (it
    evaluated a pair that is no longer current); otherwise R2 is kept: its correctness is written
    back, it becomes the latest evaluation (eval_prev) and the best argmax is taken against R2's
    version pair."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    r, prompts = _need(state.slow.r, "r"), _need(state.slow.prompts, "prompts")
    momentum = _need(state.slow.momentum, "momentum")
    paths = ctx.paths
    r2_sv, new_pv = paths.skills_version, paths.prompts_version
    out = R2Outcome(ran=False, kept=False, reverted=False)
    latest = r
    if momentum.new_version or prompts.changed:
        run_id = f"{ctx.base}_e{epoch}_R2"
        res = asyncio.run(
            evaluate(ctx, run_id, r2_sv, new_pv, ctx.pool_questions("validation"), "slow_R2")
        )
        charge_inference(state, f"e{epoch}", "R2", res)
        r2 = RunRef(run_id, r2_sv, new_pv, res.accuracy)
        harmed, r_acc, r2_acc = r2_against_r(ctx, state, outcomes_by_qid(res), res.accuracy)
        out = replace(out, ran=True, r2=r2, harmed=harmed or None)
        regressed = bool(harmed) or (r2_acc is not None and r_acc is not None and r2_acc < r_acc)
        undo = sorted(name for name in momentum.updated if _task_of(ctx, name) in set(harmed))
        if undo:
            revert_files(
                ctx.workspace,
                "skills",
                r.skills_version,
                undo,
                reason=f"R2 e{epoch}: {', '.join(harmed)} verified worse: revert momentum",
            )
            out = replace(out, momentum_reverted=tuple(undo))
        if prompts.changed and regressed:
            meta = revert_files(
                ctx.workspace,
                "prompts",
                prompts.before,
                list(prompts.changed),
                reason=f"R2 regressed e{epoch} ({r2_acc} vs {r_acc}, harmed "
                f"{list(harmed)}): revert prompts",
            )
            out = replace(out, reverted=True, prompts_version=meta.version)
        if not out.reverted and not undo:
            for qid, value in outcomes_by_qid(res).items():
                state.correctness[qid] = value
            out = replace(out, kept=True, best_replaced=_maybe_best(ctx, r2))
            latest = r2
    state.eval_prev_acc, state.eval_prev_run_id = latest.accuracy, latest.run_id
    state.baseline_skills_version = latest.skills_version
    state.baseline_prompts_version = latest.prompts_version
    state.slow = replace(state.slow, r2=out)
    return out


def _task_of(ctx: LoopContext, skill_file: str) -> str | None:
    """The task type whose skill file is ``skill_file`` (None for ``default-strategy.md``)."""
    return {skill_file_name(t): t for t in ctx.validation_by_type}.get(skill_file)


def r2_against_r(
    ctx: LoopContext,
    state: TrainState,
    r2_outcomes: Mapping[str, bool | None],
    r2_accuracy: float | None,
) -> tuple[tuple[str, ...], float | None, float | None]:
    """R2 against R on the types comparable between them (:func:`_comparable_types`): the types
    verified worse, and the two pooled accuracies R2 is judged on. With every type comparable
    these are the two runs' own accuracies."""
    r = _need(state.slow.r, "r")
    comparable = _comparable_types(ctx, state)
    harmed = _harmed_types(ctx, state, r2_outcomes, comparable)
    if len(comparable) == len(ctx.validation_by_type):
        return harmed, r.accuracy, r2_accuracy
    # R ran another text than R2's predecessor on the other types' questions (a rollback in
    # step 4): the pooled comparison is made on the comparable types' questions only
    qids = [q for t in comparable for q in ctx.validation_by_type[t]]
    r_outcomes = _need(state.slow.r_outcomes, "r_outcomes")
    return harmed, _accuracy_on(r_outcomes, qids), _accuracy_on(r2_outcomes, qids)


def _comparable_types(ctx: LoopContext, state: TrainState) -> tuple[str, ...]:
    """The task types that read after step 4 the text R evaluated, so that R's outcomes are R2's
    baseline on their questions. A probation rollback in step 4 restores another text: under
    ``skill_mode: task`` its own type's, under ``all`` every type's (under ``none`` no type reads
    a skill)."""
    types = tuple(sorted(ctx.validation_by_type))
    settled = state.slow.probations or {}
    rollbacks = [e.new_skills_version for e in settled.values() if e.new_skills_version]
    if not rollbacks:
        return types
    at_r = ctx.skills(_need(state.slow.r, "r").skills_version)
    after = ctx.skills(max(rollbacks, key=parse_version))  # the last version step 4 made
    return tuple(t for t in types if _shown(ctx, t, at_r) == _shown(ctx, t, after))


def _accuracy_on(outcomes: Mapping[str, bool | None], qids: list[str]) -> float | None:
    """Correct / scored over ``qids`` (infra failures, ``None``, left out), as a run's accuracy."""
    scored = [outcomes[q] for q in qids if outcomes.get(q) is not None]
    return sum(1 for v in scored if v) / len(scored) if scored else None


def _harmed_types(
    ctx: LoopContext,
    state: TrainState,
    r2_outcomes: Mapping[str, bool | None],
    comparable: tuple[str, ...],
) -> tuple[str, ...]:
    """The ``comparable`` task types R2 is verified worse on than R (paired by question, one draw
    each; the probation's harm rule)."""
    r_outcomes = _need(state.slow.r_outcomes, "r_outcomes")
    params = ctx.probation_params()
    out = []
    for task_type, qids in sorted(ctx.validation_by_type.items()):
        if task_type not in comparable:
            continue
        res = probation_verdict(
            {q: r_outcomes.get(q) for q in qids},
            {q: r2_outcomes.get(q) for q in qids},
            params=params,
        )
        if res.verdict is ProbationVerdict.ROLLBACK and res.log_e_harm >= math.log(
            1.0 / params.alpha_harm
        ):
            out.append(task_type)
    return tuple(out)


# 9 ----------------------------------------------------------------------------------------------


def _label(before: list[bool | None], after: list[bool | None]) -> str:
    def acc(xs: list[bool | None]) -> float | None:
        seen = [x for x in xs if x is not None]
        return sum(seen) / len(seen) if seen else None

    a, b = acc(before), acc(after)
    if a is None or b is None or a == b:
        return "unchanged"
    return "improved" if b > a else "regressed"


def report_epoch(s: UnitSession) -> EpochReportOutcome:
    """SPEC 5.6 step 9: three-state labels per task type, the epoch report, the four-way
    held-out report on the test pool (seed, epoch start, current, best) and the early-stop
    counter. The test pool is read here only, for reporting."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    scope = f"e{epoch}"
    labels = {
        t: _label(
            [state.epoch_start_correctness.get(q) for q in qids],
            [state.correctness.get(q) for q in qids],
        )
        for t, qids in ctx.validation_by_type.items()
    }
    m = read_manifest(ctx.workspace)
    assert state.seed_eval is not None and m.best is not None
    pairs = {
        "seed": (state.seed_eval.skills_version, state.seed_eval.prompts_version),
        "epoch_start": (
            state.epoch_start_versions["skills"],
            state.epoch_start_versions["prompts"],
        ),
        "current": (m.current.skills, m.current.prompts),
        "best": (m.best.skills, m.best.prompts),
    }
    holdout: dict[str, HoldoutEval] = {}
    rows = []
    test_ids = list(ctx.pools.test)
    seen: dict[tuple[str, str], float | None] = {}  # a pair named twice is evaluated once
    for label, (sv, pv) in pairs.items():
        if (sv, pv) not in seen:
            seen[sv, pv] = holdout_accuracy(ctx, state, scope, sv, pv)
        acc = seen[sv, pv]
        exp = ctx.expected_accuracy(sv, pv, test_ids)
        holdout[label] = HoldoutEval(skills=sv, prompts=pv, accuracy=acc, expected=exp)
        rows.append(
            {
                "epoch": epoch,
                "label": label,
                "skills_version": sv,
                "prompts_version": pv,
                "run_id": holdout_run_id(ctx, sv, pv),
                "n": len(test_ids),
                "accuracy": acc,
                "expected_accuracy": exp,
                "simulated": ctx.providers.simulated,
            }
        )
    write_rows(ctx.log, "holdout_eval", rows)
    # early stop: has the best improved during this epoch?
    start_best = state.epoch_start_best or {}
    improved = (m.best.skills, m.best.prompts, m.best.val_accuracy) != (
        start_best.get("skills"),
        start_best.get("prompts"),
        start_best.get("val_accuracy"),
    )
    state.steps_since_best_improved = 0 if improved else state.steps_since_best_improved + 1
    if state.steps_since_best_improved >= ctx.cfg.patience:
        state.early_stopped = True
    c = state.epoch_counters
    budget = state.budget.get(scope, {})
    rollouts = sum(v["rollouts"] for v in budget.values())
    tokens = sum(v["prompt_tokens"] + v["completion_tokens"] for v in budget.values())
    infra_failures = _infra_failures(ctx, epoch)
    val_sv, val_pv = state.baseline_skills_version or "", state.baseline_prompts_version or ""
    summary = EpochSummary(
        epoch=epoch,
        val_accuracy=state.eval_prev_acc,
        val_run_id=state.eval_prev_run_id,
        val_skills_version=val_sv,
        val_prompts_version=val_pv,
        test_accuracy=holdout["current"].accuracy,
        val_expected_accuracy=_val_expected(ctx, val_sv, val_pv),
        accepted=int(c.accepted),
        rejected=int(c.rejected),
        rolled_back=int(c.rolled_back),
        aborted=int(c.aborted),
        gates=int(c.gates),
        expected_false_accepts=round(float(c.alpha_sum), 6),
        rollouts=rollouts,
        tokens=tokens,
        infra_failures=infra_failures,
        labels=labels,
        holdout=holdout,
        best=BestSummary(
            skills_version=m.best.skills,
            prompts_version=m.best.prompts,
            val_accuracy=m.best.val_accuracy,
            val_expected_accuracy=_val_expected(ctx, m.best.skills, m.best.prompts),
        ),
        early_stopped=state.early_stopped,
        unevaluated_types=unevaluated_types(ctx, state) or None,
        probations=state.slow.probations or None,
    )
    state.history = (*(h for h in state.history if h.epoch != epoch), summary)
    r2_out = _need(state.slow.r2, "r2")
    write_rows(
        ctx.log,
        "epoch_report",
        [
            {
                "epoch": epoch,
                "val_accuracy": state.eval_prev_acc,
                "val_run_id": state.eval_prev_run_id,
                "val_skills_version": val_sv,  # the pair val_accuracy is of (R, or a kept R2)
                "val_prompts_version": val_pv,
                "r_accuracy": _need(state.slow.r, "r").accuracy,
                "r2_accuracy": r2_out.r2.accuracy if r2_out.r2 is not None else None,
                "r2_kept": r2_out.kept,
                "skills_version": m.current.skills,
                "prompts_version": m.current.prompts,
                "best_skills_version": m.best.skills,
                "best_prompts_version": m.best.prompts,
                "best_val_accuracy": m.best.val_accuracy,
                "test_accuracy": summary.test_accuracy,
                "val_expected_accuracy": summary.val_expected_accuracy,
                "momentum_updated": list(_need(state.slow.momentum, "momentum").updated),
                "system_tool_action": _system_tool_action(state.slow),
                "labels": labels,
                "accepted": summary.accepted,
                "rejected": summary.rejected,
                "rolled_back": summary.rolled_back,
                "aborted": summary.aborted,
                "gates": summary.gates,
                "expected_false_accepts": summary.expected_false_accepts,
                "rollouts": rollouts,
                "tokens": tokens,
                "infra_failures": infra_failures,
            }
        ],
    )
    exp = summary.val_expected_accuracy
    s.say(
        f"epoch {epoch} done: val {_f(state.eval_prev_acc)}"
        + (f" (expected {_f(exp)}, SIMULATED)" if exp is not None else "")
        + f", test {_f(summary.test_accuracy)}; accepted {summary.accepted}, rejected "
        f"{summary.rejected}, rolled back {summary.rolled_back}, gates "
        f"{summary.gates}; best {m.best.skills}/{m.best.prompts} "
        f"({_f(m.best.val_accuracy)}); {rollouts} rollouts, {tokens} tokens"
        + ("; early stop" if state.early_stopped else "")
    )
    out = EpochReportOutcome(labels=labels, holdout=holdout, early_stopped=state.early_stopped)
    state.slow = replace(state.slow, report=out)
    return out


def _infra_failures(ctx: LoopContext, epoch: int) -> int:
    """Infrastructure-failed rollouts of the epoch's runs (steps, gates, R, R2): those the
    manifest's history records, not every run id of the epoch on record — a killed unit's
    attempt may have left a gate run its re-run never reached (the history was rolled back
    past it; its rows stay, docs/decision-resume-a-killed-barrier.md)."""
    prefix = f"{ctx.base}_e{epoch}_"
    history = read_manifest(ctx.workspace).history
    runs = sorted({h.run_id for h in history if h.run_id.startswith(prefix)})
    if not runs:
        return 0
    ctx.log.flush()
    with RunLogReader.open(ctx.paths.run_db) as reader:
        rows = reader.query(
            "SELECT coalesce(sum(n_infra_failures), 0) AS n FROM runs "
            "WHERE list_contains(?, run_id)",
            [runs],
        )
    return int(rows[0]["n"]) if rows else 0


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _system_tool_action(slow: SlowRecords) -> str:
    p, r2 = _need(slow.prompts, "prompts"), _need(slow.r2, "r2")
    if not p.changed:
        return "none"
    return "reverted" if r2.reverted else "kept"


def holdout_run_id(ctx: LoopContext, skills: str, prompts: str) -> str:
    return f"{ctx.base}_test_{skills}_{prompts}"


def holdout_accuracy(
    ctx: LoopContext, state: TrainState, scope: str, skills: str, prompts: str
) -> float | None:
    """Accuracy of a version pair on the test pool; a pair already evaluated is not re-run
    (a report only: never an input to any decision)."""
    run_id = holdout_run_id(ctx, skills, prompts)
    # Reuse only a run the manifest recorded: a run finished by a unit that was killed before
    # its checkpoint is rolled back from the manifest, so it is evaluated (and charged) again,
    # exactly as the uninterrupted run did (the rows themselves are idempotent inserts). An
    # unrecorded run is not read back at all (the read would first wait for the log's writes),
    # nor one an earlier epoch's report holds in the checkpoint.
    if read_manifest(ctx.workspace).run(run_id) is not None:
        for summary in reversed(state.history):
            for h in summary.holdout.values():
                if (h.skills, h.prompts) == (skills, prompts):
                    return h.accuracy
        ctx.log.flush()
        with RunLogReader.open(ctx.paths.run_db) as reader:
            row = reader.run(run_id)
        if row is not None and row.get("status") == "done":
            acc = row.get("accuracy")
            return None if acc is None else float(acc)
    res = asyncio.run(evaluate(ctx, run_id, skills, prompts, ctx.pool_questions("test"), "holdout"))
    charge_inference(state, scope, "holdout", res)
    return res.accuracy


# 10 ---------------------------------------------------------------------------------------------


def ladder_sources(ctx: LoopContext, epoch: int, r2_kept: bool) -> list[str]:
    """Exactly the three sources: this epoch's step rollouts ``{base}_e{E}_s*`` minus
    ``*_gate_*``, R, and R2 if kept. Never a reverted R2, shadow, held-out or gate run."""
    ctx.log.flush()
    with RunLogReader.open(ctx.paths.run_db) as reader:
        steps = reader.run_ids(glob=f"{ctx.base}_e{epoch}_s*", exclude_glob="*_gate_*")
    sources = [*steps, f"{ctx.base}_e{epoch}_R"]
    if r2_kept:
        sources.append(f"{ctx.base}_e{epoch}_R2")
    return sources


def refresh_ladder(s: UnitSession) -> LadderRefresh:
    """SPEC 5.6 step 10: fold the three sources into the ladder (atomic write), switch the ladder
    to warm order (``gate_epoch_observed``) and move the progress to the next epoch."""
    ctx, state, epoch = s.ctx, s.state, s.epoch
    paths = ctx.paths
    tasks = {q: ctx.questions[q].task_type for q in ctx.pools.validation}
    ladder = load_written_ladder(paths.ladder, tasks, ctx.ladder_params())
    sources = ladder_sources(ctx, epoch, _need(state.slow.r2, "r2").kept)
    with RunLogReader.open(paths.run_db) as reader:
        from_gates = served_from_gates(reader)
        for run_id in sources:
            outcomes = {
                q: v
                for (q, rep), v in sorted(reader.correctness(run_id).items())
                if rep == 0 and q not in from_gates.get(run_id, ())
            }
            ladder = update_ladder(ladder, run_id, outcomes)
    save_ladder(paths.ladder, ladder)
    state.gate_epoch_observed = True
    out = LadderRefresh(sources=tuple(sources))
    state.slow = replace(state.slow, ladder=out)
    return out  # the commit moves the progress to the next epoch (plan.advance)


def served_from_gates(reader: RunLogReader) -> dict[str, set[str]]:
    """Run id → the questions whose row was served at temperature 0 (``reuse/same_prompt``)
    from a gate's rollout, directly or through rows that were served themselves: the anti-leak
    rule keeps them out of the ladder as it keeps the gate runs (an audit found R serving the
    accepting gate's candidate rows, which the ladder then folded in). At temperature 0 the plan
    is uniform and the ladder orders nothing, so no decision changes; a run resumed at a fresh
    temperature would order its gates by them."""
    served: dict[tuple[str, str], str] = {}
    for r in reader.query(
        "SELECT run_id, question_id, detail FROM flags WHERE kind = ? AND name = 'same_prompt'",
        [FLAG_REUSE],
    ):
        try:
            source = json.loads(r["detail"] or "{}").get("from_run")
        except (ValueError, AttributeError):
            continue
        if isinstance(source, str):
            served[(str(r["run_id"]), str(r["question_id"]))] = source
    out: dict[str, set[str]] = {}
    for (run, qid), source in served.items():
        seen = {run}  # a chain of served rows, followed to the rollout it copies
        while GATE_RUN_MARK not in source and source not in seen and (source, qid) in served:
            seen.add(source)
            source = served[(source, qid)]
        if GATE_RUN_MARK in source:
            out.setdefault(run, set()).add(qid)
    return out


SLOW_STEPS: tuple[Callable[[UnitSession], object], ...] = (
    snapshot_and_rerun_validation,
    record_dual_metric,
    write_back_r_correctness,
    settle_probations,
    update_best_from_r,
    apply_momentum,
    evolve_system_and_tools,
    r2_closed_loop,
    report_epoch,
    refresh_ladder,
)

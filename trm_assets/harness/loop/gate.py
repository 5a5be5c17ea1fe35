"""Block-sequential validation of one candidate skill file (SPEC 5.4, GATE §4.4, seed §11).

:func:`validate_candidate_skill` is the seed's ``validate_skill_local``:

1. the candidate skill set is **materialized in a unique temp dir** under ``<workspace>/tmp`` and
   read back from there; the dir is removed in ``finally``. What is read back must equal the
   proposed text the candidate block runs with (what runs is what was written) — checked while
   the gate's first barrier is in flight: a difference cancels it before any outcome is used;
2. the plan — (question, pass) positions in the order the decoding gives (below), fixed before
   the first block — is cut
   into blocks of ``gate_block``; **per block, strictly in order**:

   a. the baseline block comes from the on-disk :class:`BaselineCacheStore` (key: task type,
      skill hash, prompts version, question, replicate, context hash; GATE §6.3 R1/R2/R4); only
      the misses are rolled out, their outcomes are **written to disk before memory**; infra
      failures are retried once and never cached;
   b. the **whole** candidate block is rolled out (fresh draws: a new run id per gate);
   c. :func:`~trm_assets.domain.gate.pair_block` (plan order, candidate infra imputed as wrong,
      baseline infra dropped) and :func:`~trm_assets.domain.gate.gate_decision` (INFRA guard
      first, then the e-process/SPRT/sign-test rules) — the last block's decision is final;
   d. one ``gate_evidence`` row per question plus one per block, and ``quadrant_pair`` rows.

   The bookkeeping no later lookup of the gate reads — the arms' records in the manifest, the
   cache file, the evidence rows — is done once the next barrier's model calls are out
   (:meth:`~trm_assets.harness.loop.context.LoopContext.after_next_launch`; cache entries reach
   disk before memory all the same), so it costs no time between barriers.

Gate run ids contain ``_gate_`` (checked on entry): the ladder refuses them (anti-leak rule).

**Gate policies** (``RunConfig.gate_policy``, for ablations) are small classes behind one
protocol, :class:`GatePolicy` (``plan``: the positions, fixed before the first block; ``decide``:
the action of the last verdict), and share everything else: ``ce_gate`` (default, the sequential
gate); ``accept_all`` (ACE-like: no rollouts, always accept); ``minibatch_sum`` (GEPA-like: 3
random questions of the type, accept iff Σc > Σb); ``full_val_point`` (SkillOpt-like: the type's
whole validation pool, accept iff the candidate's accuracy is strictly higher). The
non-sequential policies run their plan as one block so the kernel's INFRA guard and evidence still
apply. A new policy is one class plus one entry in :data:`POLICIES`.

**The sequential gate's order follows the decoding** (GATE §6.3 R1/R5, issue 15): with
independent draws (agent temperature ≥ ``gate_fresh_temperature``, default 1) it visits the
information ladder, cycled ``passes`` times; at temperature 0 every rollout of a prompt is the same
answer, and a low temperature nearly so (docs/decision-low-temperature.md), so passes would replay
(nearly) identical pairs and the ladder's order — built from those very outcomes — would select on
the baseline: the plan is then one pass over the type's pool in a seeded uniform order (a random
order of pool questions is a sample of the question population, so the discordant-sign test stays
valid for "the candidate is not better on questions like these"). A plan truncated by
``gate_max_blocks`` over a *cold* ladder would test only the ladder's biased front (a mean-zero
heterogeneous edit was accepted 6.2% > α): it visits the same questions in a seeded uniform
order instead. **A real endpoint never takes the ladder's order** (any temperature): a real model's
texts have their own per-question effects (prompt sensitivity). From the third observation of an
unchanged baseline text, the warm filter drops the questions that text did well on, and on an
easy pool the questions it keeps are the ones it happened to do worse on. A rewording regresses
to the mean there (a neutral rewording accepted 6.9% at one pass, every p = 0.85, six
observations: ``trm bench gate --worst-case``). Without the filter, the ladder's order costs the
same as a uniform one and breaks α in horizon mode and in truncated plans
(docs/decision-real-endpoint-uniform-order.md). So a real endpoint visits the type's whole pool
in a seeded uniform order, ``passes`` times.

Why it is long: the block barrier, the baseline cache protocol, the four policies and the evidence
rows are one procedure (GATE §4.4) that must be read top to bottom; splitting it would scatter the
order of operations the statistics depend on.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from trm_assets.domain.baseline_cache import (
    GATE_BASELINE,
    BaselineEntry,
    BaselineKey,
    make_entry,
)
from trm_assets.domain.gate import (
    GateParams,
    GateVerdict,
    PairResult,
    Verdict,
    chunk_plan,
    default_passes,
    gate_decision,
    gate_plan,
    new_gate_state,
    pair_block,
)
from trm_assets.domain.ladder import GATE_RUN_MARK
from trm_assets.evolution.types import text_hash
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.loop.context import LoopContext
from trm_assets.harness.loop.rollouts import InferenceResult
from trm_assets.harness.storage.cache_store import BaselineCacheStore
from trm_assets.harness.storage.observation import write_rows
from trm_assets.harness.storage.versions import read_tree
from trm_assets.harness.storage.workspace import record_run

PolicyName = Literal["ce_gate", "accept_all", "minibatch_sum", "full_val_point"]
MINIBATCH_SIZE: Final = 3  # GEPA's default reflection_minibatch_size
NO_LADDER: Final = "NO_LADDER"
Decision = tuple[Literal["accept", "reject", "abort"], str]


@dataclass(frozen=True)
class GateRequest:
    """One candidate to validate. ``ladder_qids`` is the ladder taken *before* the gate (case-pack
    questions already excluded); ``pool_qids`` the type's validation pool minus the same."""

    epoch: int
    step: int
    skill_file: str
    task_type: str
    candidate_text: str
    baseline_skills: Mapping[str, str]
    skills_version: str
    prompts_version: str
    ladder_qids: tuple[str, ...]
    pool_qids: tuple[str, ...]
    gate_run_id: str
    ladder_run_ids: tuple[str, ...] = ()
    ladder_warm: bool = False
    # diagnosis-pool questions of the type outside this step's batch and case pack
    # (``gate_pool: validation+diagnosis``): visited by the temperature-0 plan only
    extra_qids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ValidationOutcome:
    """The gate's result. ``candidate_correctness`` holds only the questions it observed."""

    action: Literal["accept", "reject", "abort"]
    verdict: str
    policy: str
    gate_run_id: str
    final: GateVerdict | None
    wins: int
    losses: int
    blocks: int
    d_max: int
    candidate_correctness: dict[str, bool | None]
    baseline_rollouts: int = 0
    candidate_rollouts: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    history: tuple[GateVerdict, ...] = field(default=())
    order: str = ""  # how the plan was ordered (GatePlan.order)

    @property
    def kernel_verdict(self) -> Verdict | None:
        return Verdict(self.verdict) if self.verdict in Verdict.__members__ else None


@dataclass(frozen=True)
class GatePlan:
    """The positions a policy visits, fixed before the first block, and how they were ordered."""

    positions: tuple[tuple[str, int], ...]
    order: str  # ladder-warm | ladder-cold | uniform (temperature 0) | uniform (truncated ...) | …
    one_block: bool = False  # non-sequential policies decide once, on the whole plan
    screen: int = 0  # positions of the cheap first stage (temperature 0, known baselines)
    # the same-prompt baselines the plan already looked up (temperature 0), None if it did not:
    # the gate reuses them instead of querying the run log again
    known: Mapping[str, bool] | None = None


class GatePolicy(Protocol):
    """How one candidate is validated: which positions, and what the last verdict means.

    Contract: ``plan`` is a pure function of the config, the request and a seed (never of gate
    outcomes); an empty plan means "cannot validate" (NO_LADDER abort) unless
    ``accepts_without_rollouts``; ``decide`` maps the final kernel verdict to the step's action.
    """

    name: str
    accepts_without_rollouts: bool

    def plan(self, ctx: LoopContext, req: GateRequest) -> GatePlan: ...

    def decide(self, verdict: GateVerdict) -> Decision: ...


def _point_decision(v: GateVerdict) -> Decision:
    # minibatch_sum: Σc > Σb; full_val_point: acc_C > acc_B. On the same usable pairs both are
    # W > L. A rejection is "not verified" (REJECT_BUDGET semantics for the rejected buffer).
    if v.verdict is Verdict.INFRA:
        return "abort", Verdict.INFRA.value
    if v.wins > v.losses:
        return "accept", Verdict.ACCEPT.value
    return "reject", Verdict.REJECT_BUDGET.value


def gate_passes(ctx: LoopContext, task_type: str) -> int:
    """``gate_passes`` from the config, else GATE §11's default for the type's pool size — and 1
    below ``gate_fresh_temperature``, where a second pass would replay (nearly) identical pairs.
    A real endpoint's default is 1 too: its pass dependence is not known (the simulated world's
    is checked by the config), and at r = 0.5 three passes accept a null edit 6.7% > α
    (``trm bench decoding`` measures it; set ``gate_passes`` once it says INDEPENDENT)."""
    return passes_for(ctx.cfg, len(ctx.validation_by_type.get(task_type, ())))


def passes_for(cfg: RunConfig, pool_size: int) -> int:
    """:func:`gate_passes` for a type of ``pool_size`` validation questions (also the dry run's
    estimate)."""
    if not cfg.independent_draws():
        return 1
    if cfg.gate_passes is not None:
        return cfg.gate_passes
    return default_passes(pool_size) if cfg.llm_provider == "sim" else 1


def _uniform(ctx: LoopContext, req: GateRequest, qids: Sequence[str], why: str) -> list[str]:
    rng = rng_for(ctx.cfg.seed, "gate_order", why, req.epoch, req.step, req.skill_file)
    pool = sorted(qids)
    return [pool[i] for i in rng.permutation(len(pool))]


def _never_shown(ctx: LoopContext, qids: Sequence[str]) -> tuple[str, ...]:
    """The diagnosis-pool questions no step batch has rolled out: the diagnosis and the evolver
    read the failures of step batches (question, options, the correct answer), so an edit could
    be written for exactly those questions; a gate must not count them as evidence."""
    if not qids:
        return ()
    shown = {
        str(r["q"])
        for r in ctx.log.query(
            "SELECT DISTINCT p.question_id AS q FROM predictions p "
            "JOIN runs r ON r.run_id = p.run_id WHERE r.kind = 'step'"
        )
    }
    return tuple(q for q in qids if q not in shown)


class SequentialGate:
    """``ce_gate``: the block-sequential e-process / hybrid gate (GATE §4), order by decoding."""

    name = "ce_gate"
    accepts_without_rollouts = False

    def plan(self, ctx: LoopContext, req: GateRequest) -> GatePlan:
        cfg = ctx.cfg
        if not cfg.independent_draws():  # GATE §6.3 R5: deterministic (or nearly) decoding
            # diagnosis questions join a temperature-0 plan only (config: gate_pool)
            extra = () if cfg.fresh_draws() else _never_shown(ctx, req.extra_qids)
            order = _uniform(ctx, req, (*req.pool_qids, *extra), "temperature0")
            if extra:
                # questions whose baseline is already known first (they cost the candidate arm
                # only), so a direction or futility stop comes before the gate pays both arms.
                # Which baselines are known depends on which prompts were rolled out, never on
                # their outcomes: the order stays fixed before the first block.
                known = deterministic_baseline(ctx, req)
                order = [q for q in order if q in known] + [q for q in order if q not in known]
                positions = gate_plan(order, 1, cfg.gate_block, cfg.gate_max_blocks)
                n_known = sum(1 for q, _ in positions if q in known)
                screen = n_known if cfg.gate_screen and 0 < n_known < len(positions) else 0
                return GatePlan(
                    positions,
                    "uniform, known baselines first (temperature 0)",
                    screen=screen,
                    known=known,
                )
            positions = gate_plan(order, 1, cfg.gate_block, cfg.gate_max_blocks)
            if cfg.fresh_draws():  # a low temperature: nothing reused, one pass
                return GatePlan(positions, "uniform (below gate_fresh_temperature)")
            return GatePlan(positions, "uniform (temperature 0)")
        passes = gate_passes(ctx, req.task_type)
        if cfg.llm_provider != "sim":
            # a real model's texts shift single questions' answers: the ladder, read from the
            # baseline text's own outcomes, would keep where that text did worse than a rewording
            # of it will (regression to the mean; docs/decision-real-endpoint-uniform-order.md).
            # Only the simulated world's checked config (no text shifts at fresh temperatures)
            # lets the ladder order a gate.
            order = _uniform(ctx, req, req.pool_qids, "real endpoint")
            positions = gate_plan(order, passes, cfg.gate_block, cfg.gate_max_blocks)
            return GatePlan(positions, "uniform (real endpoint)")
        full = gate_plan(req.ladder_qids, passes, cfg.gate_block)
        positions = gate_plan(req.ladder_qids, passes, cfg.gate_block, cfg.gate_max_blocks)
        # a cold ladder's front (2 wrong : 1 right) is a biased sample: a plan that tests only
        # that front, or horizon mode, which spends its α over it, accepted a mean-zero edit
        # that helps hard questions and hurts easy ones above α (truncated 6.2%; horizon over a
        # full plan of 150, 6.6%, against 2.3% in uniform order; GATE §10.1)
        why = None
        if not req.ladder_warm and len(positions) < len(full):
            why, label = "truncated", "uniform (truncated cold ladder)"
        elif not req.ladder_warm and cfg.gate_mode == "horizon":
            why, label = "horizon-cold", "uniform (horizon on a cold ladder)"
        if why is not None:
            order = _uniform(ctx, req, req.ladder_qids, why)
            positions = gate_plan(order, passes, cfg.gate_block, cfg.gate_max_blocks)
            return GatePlan(positions, label)
        return GatePlan(positions, "ladder-warm" if req.ladder_warm else "ladder-cold")

    def decide(self, verdict: GateVerdict) -> Decision:
        if verdict.verdict is Verdict.INFRA:
            return "abort", Verdict.INFRA.value
        action = verdict.action
        assert action != "continue", "the last block's decision is final"
        return action, verdict.verdict.value


class AcceptAll:
    """``accept_all`` (ACE-like): every applied edit is accepted, no rollouts."""

    name = "accept_all"
    accepts_without_rollouts = True

    def plan(self, ctx: LoopContext, req: GateRequest) -> GatePlan:
        return GatePlan((), "none", one_block=True)

    def decide(self, verdict: GateVerdict) -> Decision:
        return "accept", Verdict.ACCEPT.value


class MinibatchSum:
    """``minibatch_sum`` (GEPA-like): 3 random questions of the type, accept iff Σc > Σb."""

    name = "minibatch_sum"
    accepts_without_rollouts = False

    def plan(self, ctx: LoopContext, req: GateRequest) -> GatePlan:
        rng = rng_for(ctx.cfg.seed, "minibatch_sum", req.epoch, req.step, req.skill_file)
        pool = sorted(req.pool_qids)
        k = min(MINIBATCH_SIZE, len(pool))
        picked = sorted(pool[i] for i in rng.choice(len(pool), size=k, replace=False)) if k else []
        return GatePlan(tuple((q, 0) for q in picked), "random minibatch", one_block=True)

    def decide(self, verdict: GateVerdict) -> Decision:
        return _point_decision(verdict)


class FullValPoint:
    """``full_val_point`` (SkillOpt-like): the whole pool, accept iff acc_C > acc_B."""

    name = "full_val_point"
    accepts_without_rollouts = False

    def plan(self, ctx: LoopContext, req: GateRequest) -> GatePlan:
        return GatePlan(tuple((q, 0) for q in sorted(req.pool_qids)), "whole pool", one_block=True)

    def decide(self, verdict: GateVerdict) -> Decision:
        return _point_decision(verdict)


POLICIES: Final[Mapping[str, GatePolicy]] = {
    p.name: p for p in (SequentialGate(), AcceptAll(), MinibatchSum(), FullValPoint())
}
GATE_POLICIES: Final[tuple[str, ...]] = tuple(POLICIES)


def policy_of(ctx: LoopContext) -> GatePolicy:
    return POLICIES[ctx.cfg.gate_policy]


def _materialize(tmp_root: Path, skills: Mapping[str, str], name: str, text: str) -> dict[str, str]:
    tmp_root.mkdir(parents=True, exist_ok=True)
    # One writer per workspace (SPEC §8) and this function never yields: a candidate directory
    # found here was left by a killed gate (the kill bench found one after a resume).
    for stale in tmp_root.glob("cand-*"):
        shutil.rmtree(stale, ignore_errors=True)
    d = Path(tempfile.mkdtemp(prefix=f"cand-{name.removesuffix('.md')}-", dir=tmp_root))
    try:
        for fname, body in sorted({**skills, name: text}.items()):
            with open(d / fname, "w", encoding="utf-8", newline="") as fh:
                fh.write(body)
        return read_tree(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def validate_candidate_skill(
    ctx: LoopContext,
    req: GateRequest,
    *,
    params: GateParams | None = None,
    progress: Callable[[str], None] | None = None,
    leave_tail: bool = False,
) -> ValidationOutcome:
    """Validate ``req``'s candidate against the current version (see the module docstring).
    ``leave_tail``: the last block's bookkeeping (cache file, evidence rows) is left queued for
    the next barrier of the unit, or its commit (``LoopContext.after_next_launch``)."""
    if GATE_RUN_MARK not in req.gate_run_id:
        raise ValueError(
            f"gate run id {req.gate_run_id!r} must contain {GATE_RUN_MARK!r} (the anti-leak "
            "filter of the ladder depends on it)"
        )
    gp = policy_of(ctx)
    policy = gp.name
    gate_plan_ = gp.plan(ctx, req)
    plan = gate_plan_.positions
    if gp.accepts_without_rollouts:
        return ValidationOutcome(
            "accept", Verdict.ACCEPT.value, policy, req.gate_run_id, None, 0, 0, 0, 0, {},
            order=gate_plan_.order,
        )  # fmt: skip
    if not plan:
        return ValidationOutcome(
            "abort", NO_LADDER, policy, req.gate_run_id, None, 0, 0, 0, 0, {},
            order=gate_plan_.order,
        )  # fmt: skip
    params = params if params is not None else ctx.gate_params()
    if gate_plan_.one_block:  # one block: the kernel's INFRA guard and evidence, no early stop
        params = replace(params, block=len(plan))
    if gate_plan_.screen:  # two stages: go on to the dear part only if the cheap one is ahead
        params = replace(params, screen_positions=gate_plan_.screen)
    base_skills = dict(req.baseline_skills)
    cache = BaselineCacheStore(ctx.paths.baseline_cache, req.task_type)
    skill_hash = text_hash(base_skills[req.skill_file])
    context_hash = ctx.baseline_context_hash(base_skills)  # R4, with the data read
    base_run, cand_run = f"{req.gate_run_id}_base", f"{req.gate_run_id}_cand"
    known = gate_plan_.known if gate_plan_.known is not None else deterministic_baseline(ctx, req)
    state = new_gate_state(len(plan), params)
    counters = {"base": 0, "cand": 0, "hits": 0, "pt": 0, "ct": 0, "calls": 0}
    observed: dict[str, bool | None] = {}
    verdict: GateVerdict | None = None
    recorded: set[str] = set()  # the arms' runs, recorded in the manifest once per gate
    # 1. the candidate, materialized in a unique temp dir (always removed) and its run recorded:
    # while the first baseline barrier runs, or before the first candidate block without one.
    # Bookkeeping that no later lookup of this gate reads (the baseline cache file, evidence
    # rows) likewise waits for the next barrier's first calls (LoopContext.after_next_launch).
    cand_skills = {**req.baseline_skills, req.skill_file: req.candidate_text}

    def prepare_candidate() -> None:
        written = _materialize(
            ctx.paths.tmp_dir, req.baseline_skills, req.skill_file, req.candidate_text
        )
        if written != cand_skills:  # before any of its outcomes is used: the barrier is cancelled
            raise ValueError(
                f"gate {req.gate_run_id}: the candidate read back from its directory differs "
                "from the proposed text (what runs must be what was written)"
            )
        _record(ctx, cand_run, req, "gate_candidate")

    def arm(run_id: str, positions: Sequence[tuple[str, int]], kind: str) -> Awaitable[Any]:
        skills = base_skills if kind == "gate_baseline" else cand_skills
        if run_id not in recorded:  # the run's rows are written after its barrier
            recorded.add(run_id)
            if kind == "gate_baseline":
                ctx.after_next_launch(functools.partial(_record, ctx, run_id, req, kind))
        return _rollouts(ctx, run_id, positions, skills, req, kind)

    recorded.add(cand_run)
    ctx.after_next_launch(prepare_candidate)

    for bi, chunk in enumerate(chunk_plan(plan, params.block)):
        # a. baseline: cache first, misses only; disk before memory
        keys = {
            pos: BaselineKey(
                req.task_type, skill_hash, req.prompts_version, pos[0], pos[1], context_hash
            )
            for pos in chunk
        }
        baseline: dict[tuple[str, int], bool | None] = {}
        source: dict[tuple[str, int], str] = {}
        misses = []
        for pos in chunk:
            hit = cache.get(keys[pos], req.ladder_run_ids)
            if hit is None and pos[0] in known:
                baseline[pos], source[pos] = known[pos[0]], "same_prompt"
                counters["hits"] += 1
            elif hit is None:
                misses.append(pos)
            else:
                baseline[pos], source[pos] = hit, "cache"
                counters["hits"] += 1
        if misses:
            res = await arm(base_run, misses, "gate_baseline")
            outcomes = res.correctness()
            retry = [pos for pos in misses if outcomes.get(pos) is None]
            if retry:  # GATE §2: retry a baseline infra failure once, then drop the pair
                again = await arm(base_run, retry, "gate_baseline")
                outcomes.update(again.correctness())
                _count(counters, "base", again)
            _count(counters, "base", res)
            entries = [
                make_entry(keys[pos], outcomes.get(pos), provenance=GATE_BASELINE, run_id=base_run)
                for pos in misses
            ]
            ctx.after_next_launch(functools.partial(_put, cache, entries))
            for pos in misses:
                baseline[pos], source[pos] = outcomes.get(pos), "fresh"
        # b. the whole candidate block
        cres = await arm(cand_run, list(chunk), "gate_candidate")
        _count(counters, "cand", cres)
        candidate = cres.correctness()
        stops = {(p.question_id, p.replicate): p.stop_reason for p in cres.predictions}
        # c. pair, INFRA guard, decide (block barrier: only now)
        pairs = pair_block(
            list(chunk),
            baseline,
            candidate,
            baseline_attempted=len(misses),
            candidate_attempted=len(chunk),
        )
        verdict = gate_decision(state, pairs, params)
        for qid, rep in chunk:
            observed[qid] = candidate.get((qid, rep))
        # d. evidence (written while the next block runs, or now after the last)
        ctx.after_next_launch(
            functools.partial(
                _write_evidence, ctx, req, policy, bi, params.block, pairs, verdict, source, stops
            )
        )
        if progress is not None:
            progress(
                f"    gate {req.skill_file} block {bi + 1}: W={verdict.wins} L={verdict.losses} "
                f"{verdict.verdict.value}"
            )
        if verdict.verdict is not Verdict.CONTINUE:
            break
    if not leave_tail:
        ctx.drain_later()
    assert verdict is not None
    action, name = gp.decide(verdict)
    return ValidationOutcome(
        action=action,
        verdict=name,
        policy=policy,
        gate_run_id=req.gate_run_id,
        final=verdict,
        wins=verdict.wins,
        losses=verdict.losses,
        blocks=verdict.blocks,
        d_max=state.d_max,
        candidate_correctness=observed,
        order=gate_plan_.order,
        baseline_rollouts=counters["base"],
        candidate_rollouts=counters["cand"],
        cache_hits=counters["hits"],
        prompt_tokens=counters["pt"],
        completion_tokens=counters["ct"],
        llm_calls=counters["calls"],
        history=tuple(state.history),
    )


def deterministic_baseline(ctx: LoopContext, req: GateRequest) -> dict[str, bool]:
    """At temperature 0 the baseline's outcome on a question is whatever any earlier rollout of
    the very same prompt gave — same task skill text, same other skills it reads, same prompts
    version, same decoding (:meth:`LoopContext.prompt_key`, recorded on every run): step
    rollouts, R, the seed evaluation, an earlier gate's baseline, and the candidate arm of the gate
    that accepted the text now current (also under an earlier version, when only other task types
    changed since). Re-running it would pay for the same answer again. The uniform order makes
    reusing those outcomes valid (no selection through the order: GATE §6.3 R1 is about the
    ladder). Questions whose stored outcomes disagree (a server that is not deterministic after
    all) or that failed for infrastructure reasons are rolled out as usual. With fresh draws this
    returns nothing: every baseline draw then comes from the gate-baseline cache or a rollout."""
    if ctx.cfg.fresh_draws():
        return {}
    rows = ctx.same_prompt_rows(
        req.task_type,
        ctx.prompt_key(req.task_type, req.baseline_skills, req.prompts_version),
        (*req.pool_qids, *req.extra_qids),
        # not this step's own gates: a killed and resumed step must reuse exactly what an
        # uninterrupted one reuses (the key holds the decoding: a resume with another
        # temperature, or a `trm eval --set ...`, does not serve its rows)
        not_run_prefix=req.gate_run_id.split(GATE_RUN_MARK)[0] + GATE_RUN_MARK,
    )
    return {q: bool(r["correct"]) for q, r in rows.items()}


def _count(counters: dict[str, int], arm: str, res: InferenceResult) -> None:
    counters[arm] += res.n
    counters["pt"] += res.usage.prompt_tokens
    counters["ct"] += res.usage.completion_tokens
    counters["calls"] += sum(p.n_llm_calls for p in res.predictions)


def _put(cache: BaselineCacheStore, entries: Sequence[BaselineEntry | None]) -> None:
    cache.put_many(e for e in entries if e is not None)


def _record(ctx: LoopContext, run_id: str, req: GateRequest, kind: str) -> None:
    record_run(
        ctx.workspace,
        run_id,
        skills_version=req.skills_version if kind == "gate_baseline" else None,
        prompts_version=req.prompts_version,
        kind=kind,
        use_current=False,
    )


async def _rollouts(
    ctx: LoopContext,
    run_id: str,
    positions: Sequence[tuple[str, int]],
    skills: Mapping[str, str],
    req: GateRequest,
    kind: str,
) -> InferenceResult:
    return await ctx.rollouts(
        run_id,
        [(ctx.questions[q], rep) for q, rep in positions],
        skills,
        req.prompts_version,
        kind=kind,
        skills_version=req.skills_version if kind == "gate_baseline" else None,
    )


def _write_evidence(
    ctx: LoopContext,
    req: GateRequest,
    policy: str,
    block_index: int,
    block_size: int,
    pairs: PairResult,
    v: GateVerdict,
    source: Mapping[tuple[str, int], str],
    stops: Mapping[tuple[str, int], str],
) -> None:
    common: dict[str, Any] = {
        "epoch": req.epoch,
        "step": req.step,
        "skill_file": req.skill_file,
        "task_type": req.task_type,
        "policy": policy,
    }
    start = block_index * block_size
    rows: list[dict[str, Any]] = []
    quads: list[dict[str, Any]] = []
    for offset, row in enumerate(pairs.rows):
        qid, rep = row.key if isinstance(row.key, tuple) else (row.key, 0)
        stop = stops.get((qid, rep))
        rows.append(
            {
                "gate_run_id": req.gate_run_id,
                "row_kind": "question",
                "block": block_index,
                "position": start + offset,
                **common,
                "question_id": qid,
                "replicate": rep,
                "baseline": row.baseline,
                "candidate": row.candidate,
                "sign": row.sign,
                "quadrant": row.quadrant,
                "candidate_imputed": row.candidate_imputed,
                "baseline_source": source.get((qid, rep)),
                # only a question that reached a terminal state carries its stop reason
                "stop_reason": stop if stop not in (None, "error") else None,
                **_block_fields(None),
            }
        )
        if row.quadrant is not None:
            quads.append(
                {
                    "gate_run_id": req.gate_run_id,
                    "question_id": qid,
                    "replicate": rep,
                    "epoch": req.epoch,
                    "step": req.step,
                    "task_type": req.task_type,
                    "quadrant": row.quadrant,
                }
            )
    rows.append(
        {
            "gate_run_id": req.gate_run_id,
            "row_kind": "block",
            "block": block_index,
            "position": -1,
            **common,
            "question_id": None,
            "replicate": None,
            "baseline": None,
            "candidate": None,
            "sign": None,
            "quadrant": None,
            "candidate_imputed": None,
            "baseline_source": None,
            "stop_reason": None,
            **_block_fields(v),
        }
    )
    write_rows(ctx.log, "gate_evidence", rows)
    if quads:
        write_rows(ctx.log, "quadrant_pair", quads)


def _block_fields(v: GateVerdict | None) -> dict[str, Any]:
    names = (
        "verdict", "log_e_plus", "log_e_minus", "log_sprt", "p_final", "wins", "losses", "ties",
        "pairs", "positions", "d_max", "infra", "attempted", "infra_rate",
        "candidate_infra_suspect",
    )  # fmt: skip
    if v is None:
        return dict.fromkeys(names)
    out = {n: getattr(v, n) for n in names}
    out["verdict"] = v.verdict.value
    return out

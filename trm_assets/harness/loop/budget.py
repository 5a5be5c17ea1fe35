"""``trm train --dry-run``: a pre-flight estimate of the rollouts per epoch by phase, and a
warning when no gate of the configuration can ever accept.

Phases (rollouts of the agent; every decision's actual rollouts and tokens are accounted in the
state's ledger during the run, see
:meth:`~trm_assets.harness.storage.checkpoint.TrainState.charge`):

* ``step_rollouts`` — the epoch's batches (exact: the batches of epoch 0 are computed);
* ``gates_max`` — every task type of every batch gated, each gate running to its maximum
  ``d_max`` positions on both arms (the baseline cache only lowers this);
* ``R``, ``R2`` — the validation pool (R2 at most once per epoch);
* ``holdout_max`` — the four-way report on the test pool (pairs already evaluated are reused).

The reachability check asks the kernel itself: a gate of ``d_max`` positions is fed blocks in
which the candidate wins every pair; if no ACCEPT is ever reached, no edit of that task type can
be accepted under these settings (e.g. validation pools too small for the block/pass settings).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from trm_assets.domain import gate as kernel
from trm_assets.domain.batching import make_batches
from trm_assets.domain.pools import Pools
from trm_assets.domain.question import Question
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.loop.context import gate_params_of
from trm_assets.harness.loop.gate import MINIBATCH_SIZE, passes_for


@dataclass(frozen=True)
class EpochEstimate:
    step_rollouts: int
    gates_max: int
    gate_rollouts_max: int
    r: int
    r2: int
    holdout_max: int

    @property
    def total_max(self) -> int:
        return self.step_rollouts + self.gate_rollouts_max + self.r + self.r2 + self.holdout_max


@dataclass(frozen=True)
class BudgetEstimate:
    init: int
    per_epoch: EpochEstimate
    epochs: int
    final: int
    d_max: dict[str, int]
    unreachable: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())
    gate_plan: str = ""  # what a gate visits at this decoding (gate_plan_line)

    @property
    def total_max(self) -> int:
        return self.init + self.epochs * self.per_epoch.total_max + self.final


def gate_d_max(cfg: RunConfig, pool_size: int, extra_size: int = 0) -> int:
    """The most positions one gate of a task type with ``pool_size`` validation questions (and
    ``extra_size`` diagnosis-pool questions, visited at temperature 0 with
    ``gate_pool: validation+diagnosis``) visits."""
    if cfg.gate_policy == "accept_all":
        return 0
    if cfg.gate_policy == "minibatch_sum":
        return min(MINIBATCH_SIZE, pool_size)
    if cfg.gate_policy == "full_val_point":
        return pool_size
    if not cfg.independent_draws():  # one pass over the pool (gate.SequentialGate)
        passes = 1
        if cfg.gate_pool == "validation+diagnosis" and not cfg.fresh_draws():
            pool_size += extra_size
    else:
        passes = passes_for(cfg, pool_size)
    qids = [f"q{i}" for i in range(pool_size)]
    return len(kernel.gate_plan(qids, passes, cfg.gate_block, cfg.gate_max_blocks))


def accept_reachable(cfg: RunConfig, d_max: int) -> bool:
    """Whether a ce_gate of ``d_max`` positions can ACCEPT at all (every pair a candidate win)."""
    if cfg.gate_policy != "ce_gate":
        return d_max > 0 or cfg.gate_policy == "accept_all"
    if d_max < 1:
        return False
    params = gate_params_of(cfg)
    plan = [(f"q{i}", 0) for i in range(d_max)]
    state = kernel.new_gate_state(d_max, params)
    for chunk in kernel.chunk_plan(plan, params.block):
        keys = list(chunk)
        block = kernel.pair_block(
            keys, dict.fromkeys(keys, False), dict.fromkeys(keys, True), len(keys), len(keys)
        )
        v = kernel.gate_decision(state, block, params)
        if v.verdict is kernel.Verdict.ACCEPT:
            return True
        if v.verdict is not kernel.Verdict.CONTINUE:
            return False
    return False


def gate_plan_line(cfg: RunConfig) -> str:
    """What a gate of this configuration visits, and why (the decoding decides: gate.py)."""
    t = cfg.effective_agent_temperature()
    if cfg.gate_policy != "ce_gate":
        return f"{cfg.gate_policy} (agent temperature {t:g})"
    if t <= 0:
        extra = " and never-shown diagnosis questions" if cfg.gate_pool != "validation" else ""
        return (
            f"one pass over the validation pool{extra} in a seeded uniform order (agent "
            "temperature 0: a second pass would replay the same answers; baselines an earlier "
            "rollout of the same prompt gave are reused)"
        )
    if not cfg.independent_draws():
        return (
            f"one pass over the validation pool in a seeded uniform order (agent temperature "
            f"{t:g} < gate_fresh_temperature {cfg.gate_fresh_temperature:g}: a low temperature "
            "nearly replays the same answer, so passes would not be independent)"
        )
    if cfg.llm_provider != "sim":  # gate.SequentialGate: a real model's texts shift answers
        return (
            f"{passes_for(cfg, 0)} pass(es) over the validation pool in a seeded uniform order "
            f"(agent temperature {t:g}: independent draws; a real endpoint never takes the "
            "ladder's order, which would select on the baseline text's own outcomes)"
        )
    passes = (
        f"{cfg.gate_passes} pass(es)"
        if cfg.gate_passes is not None
        else f"{kernel.SMALL_POOL_PASSES} passes for pools under {kernel.SMALL_POOL}, else 1"
    )
    return f"the information ladder, {passes} (agent temperature {t:g}: independent draws)"


def estimate(cfg: RunConfig, questions: tuple[Question, ...], pools: Pools) -> BudgetEstimate:
    """The dry-run estimate (see the module docstring)."""
    task = {q.question_id: q.task_type for q in questions}
    diag = {q: task[q] for q in pools.diagnosis}
    batches = make_batches(
        diag,
        batch_size=cfg.batch_size,
        min_class_per_batch=cfg.min_class_per_batch,
        correctness={},
        rng=rng_for(cfg.seed, "batches", 0),
    )
    val_by_type: dict[str, int] = {}
    for q in pools.validation:
        val_by_type[task[q]] = val_by_type.get(task[q], 0) + 1
    diag_by_type: dict[str, int] = {}
    for q in pools.diagnosis:
        diag_by_type[task[q]] = diag_by_type.get(task[q], 0) + 1
    d_max = {t: gate_d_max(cfg, n, diag_by_type.get(t, 0)) for t, n in sorted(val_by_type.items())}
    steps = [batches[s % len(batches)] for s in range(cfg.steps_per_epoch)] if batches else []
    gates = 0
    gate_rollouts = 0
    for b in steps:
        for t in sorted({task[q] for q in b}):
            gates += 1
            gate_rollouts += 2 * d_max.get(t, 0)
    per_epoch = EpochEstimate(
        step_rollouts=sum(len(b) for b in steps),
        gates_max=gates,
        gate_rollouts_max=gate_rollouts,
        r=len(pools.validation),
        r2=len(pools.validation),
        holdout_max=4 * len(pools.test),
    )
    unreachable = tuple(t for t, d in d_max.items() if not accept_reachable(cfg, d))
    warnings: list[str] = []
    if not batches:
        warnings.append("the diagnosis pool is empty: no step can roll out a batch")
    if d_max and len(unreachable) == len(d_max):
        warnings.append(
            "no gate of this configuration can ever ACCEPT (gates still reject; d_max per type "
            f"{d_max}): raise val_size, gate_passes (with independent draws) or "
            "gate_max_blocks, or gate_alpha"
        )
    elif unreachable:
        warnings.append(
            f"{len(unreachable)} task type(s) can never be accepted by the gate (validation pool "
            f"too small for the block/pass settings): {', '.join(unreachable)}"
        )
    passes = passes_for(cfg, 0)  # a real endpoint's do not depend on the pool's size
    if cfg.gate_policy == "ce_gate" and cfg.llm_provider != "sim" and passes > 1:
        warnings.append(
            f"gate_passes: {passes} on a real endpoint counts {passes} draws of one prompt as "
            "independent evidence, but a prompt-sensitive model gives every draw of a text the "
            "same per-question lean (a neutral rewording was accepted 13.5% with three passes "
            "at p = 0.92: `trm bench gate --worst-case`); keep it only if `trm bench decoding` "
            f"at agent temperature {cfg.effective_agent_temperature():g} says INDEPENDENT"
        )
    return BudgetEstimate(
        init=len(pools.validation),
        per_epoch=per_epoch,
        epochs=cfg.epochs,
        final=len(pools.test),
        d_max=d_max,
        unreachable=unreachable,
        warnings=tuple(warnings),
        gate_plan=gate_plan_line(cfg),
    )


@dataclass(frozen=True)
class TokenEstimate:
    """Tokens per rollout, from the workspace's own run log when it has rollouts (measured),
    else from the prompt set's length (estimated, ≈ 4 characters a token)."""

    per_rollout: float
    source: str  # "measured over N rollouts" | "estimated from the prompt set"
    price_prompt_per_1k: float | None = None
    price_completion_per_1k: float | None = None
    completion_share: float = 0.05

    def total(self, rollouts: int) -> float:
        return self.per_rollout * rollouts

    def money(self, rollouts: int) -> float | None:
        if self.price_prompt_per_1k is None and self.price_completion_per_1k is None:
            return None
        tokens = self.total(rollouts)
        pp, cp = self.price_prompt_per_1k or 0.0, self.price_completion_per_1k or 0.0
        share = self.completion_share
        return tokens / 1000 * ((1 - share) * pp + share * cp)


def prompt_token_estimate(prompt_chars: int, max_steps: int) -> float:
    """Tokens of one rollout from its first prompt's size: the agent re-sends the growing
    conversation on every turn (≈ 5 turns for a tool-using agent, bounded by ``max_steps``),
    each turn adding ≈ 150 tokens of tool result and ≈ 40 of reply."""
    turns = max(1, min(5, max_steps))
    base = prompt_chars / 4
    return sum(base + 190 * k for k in range(turns)) + 40 * turns


class EstimateWarning(UserWarning):
    """Something the pre-flight estimate left out (shown as a ``warning:`` line by the CLI)."""


def token_estimate(workspace: Path, cfg: RunConfig) -> TokenEstimate:
    """Measured tokens per rollout from the workspace's run log, else estimated from the prompt
    set (the seed prompts of a new workspace); prices from the engineering settings."""
    from trm_assets.harness.storage.runlog import RunLogReader
    from trm_assets.harness.storage.workspace import default_prompts_dir
    from trm_assets.llm.settings import Settings, SettingsError, load_settings

    try:
        s: Settings | None = load_settings()
    except SettingsError as e:
        if cfg.llm_provider != "sim":  # the run reads these settings: refuse them here too
            raise
        # the simulated world's run reads no TRM_LLM_* setting: the estimate goes on, unpriced
        warnings.warn(f"no prices in the estimate: {e}", EstimateWarning, stacklevel=2)
        s = None
    pp = s.price_prompt_per_1k if s is not None else None
    cp = s.price_completion_per_1k if s is not None else None
    db = workspace / "runs.duckdb"
    if db.is_file():
        try:
            with RunLogReader.open(db) as r:
                row = r.query(
                    "SELECT count(*) AS n, avg(coalesce(prompt_tokens, 0) + "
                    "coalesce(completion_tokens, 0)) AS t FROM predictions "
                    "WHERE stop_reason <> 'error' AND coalesce(n_llm_calls, 0) > 0"
                    # (a temperature-0 outcome served from an earlier rollout made no call)
                )[0]
            if int(row["n"]) > 0:
                n = int(row["n"])
                return TokenEstimate(float(row["t"]), f"measured over {n} rollouts", pp, cp)
        except Exception:  # a busy or foreign log: fall back to the estimate
            pass
    # what the agent reads: system + user prompt, tool descriptions, the default strategy, one
    # (the longest) task skill, and ≈ 600 characters of question and options
    seed = default_prompts_dir()

    def size(p: Path) -> int:
        return p.stat().st_size

    skills = [size(p) for p in (seed / "skills").glob("*.md") if p.name != "default-strategy.md"]
    chars = (
        sum(size(seed / n) for n in ("agent_system.md", "agent_user.md"))
        + sum(size(p) for p in (seed / "tools").glob("*.md"))
        + size(seed / "skills" / "default-strategy.md")
        + max(skills, default=0)
        + 600
    )
    est = prompt_token_estimate(chars, cfg.max_agent_steps)
    return TokenEstimate(est, "estimated from the prompt set's length", pp, cp)


def format_tokens(e: BudgetEstimate, tok: TokenEstimate) -> str:
    per_epoch = e.per_epoch.total_max
    lines = [
        f"tokens per rollout ≈ {tok.per_rollout:,.0f} ({tok.source})",
        f"  per epoch (max)   ≈ {tok.total(per_epoch):,.0f} tokens",
        f"  whole run (max)   ≈ {tok.total(e.total_max):,.0f} tokens",
    ]
    money = tok.money(e.total_max)
    if money is not None:
        lines.append(
            f"  whole run (max)   ≈ {money:,.2f} in the price unit of TRM_LLM_PRICE_*_PER_1K "
            f"(assuming {tok.completion_share:.0%} completion tokens)"
        )
    return "\n".join(lines)


def format_estimate(e: BudgetEstimate) -> str:
    p = e.per_epoch
    lines = [
        "pre-flight estimate (agent rollouts; gates and held-out at their maximum):",
        f"  init (seed evaluation on validation)   {e.init:>8}",
        f"  per epoch: step rollouts               {p.step_rollouts:>8}",
        f"             gates (≤ {p.gates_max:>3} gates, both arms) {p.gate_rollouts_max:>8}",
        f"             R (full validation)         {p.r:>8}",
        f"             R2 (full validation, max)   {p.r2:>8}",
        f"             held-out (4 pairs, max)     {p.holdout_max:>8}",
        f"             epoch total (max)           {p.total_max:>8}",
        f"  final test evaluation                  {e.final:>8}",
        f"  whole run, {e.epochs} epoch(s) (max)          {e.total_max:>8}",
    ]
    if e.gate_plan:
        lines.append(f"  a gate visits: {e.gate_plan}")
    lines += [f"warning: {w}" for w in e.warnings]
    return "\n".join(lines)

"""One training run of ``trm bench optimizer``: the real loop under one gate policy, stopped at a
rollout budget, observed with the simulated world's ground truth.

What is observed, and how (nothing in the loop is modified):

* **every gated proposal** — :class:`GateRecorder` is a loop observer
  (:class:`~trm_assets.harness.loop.observer.LoopObserver`): it sees each request and outcome
  after the gate decided and records the candidate's ground truth: the oracle's expected
  accuracy of the candidate skill set minus the baseline's on every question of the edited task
  type (``docs/decision-bench-edit-ground-truth.md``);
* **the trajectory** — after every unit of work (``init``, a step, one slow-update function) the
  budget ledger of ``state.json`` gives the training rollouts so far and the manifest gives the
  current and best version pairs, whose expected test accuracy comes from the oracle;
* **the budget** — training rollouts are every ledger phase except ``holdout`` (the test-pool
  report, which decides nothing). The run stops after the first unit that takes the total past
  the budget; that unit is discarded, so every figure of the run (decisions, delivered version,
  rollouts, tokens) is as of the last unit within the budget
  (``docs/decision-bench-equal-budget.md``).

Why it is long: one benchmark run (config, the loop under a policy, the ground-truth observer, the
budget cut) is a single procedure.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import (
    RunConfig,
    load_config,
    override_key,
    read_yaml_config,
)
from trm_assets.harness.loop.context import LoopContext, loop_context
from trm_assets.harness.loop.gate import NO_LADDER, GateRequest, ValidationOutcome
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.loop.runner import current_action, run_action
from trm_assets.harness.loop.slow_update import holdout_run_id
from trm_assets.harness.loop.step import evaluate
from trm_assets.harness.storage.checkpoint import TrainState, load_state
from trm_assets.harness.storage.records import REPORT_PHASES, training_rollouts
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.harness.storage.workspace import read_manifest
from trm_assets.llm.factory import SimOracle, build_providers
from trm_assets.llm.sim.draws import normalize_text
from trm_assets.llm.sim.oracle import active_texts, best_expected_accuracy, expected_by_question
from trm_assets.llm.sim.world import SimWorld
from trm_bench.overhead import new_workspace

REPO: Final = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG: Final = REPO / "data" / "configs" / "default.yaml"
# |Δ expected accuracy on the edited task type| at or below this is "neutral" (0.1pp). In the
# default world the effects are all-or-nothing per cue/harm indicator, so real effects are ≥ 1pp
# and a neutral edit's Δ is exactly 0 (float noise only). In the realistic world a rewording's Δ
# is not 0 (text flips, length cost): GateRecord.kind says what an edit carries instead.
NEUTRAL_THRESHOLD: Final = 0.001
NOOP_TOLERANCE: Final = 1e-12
MAX_EPOCHS: Final = 200  # the budget, not the epoch count, ends a benchmark run
_PATH_KEYS: Final = ("questions", "trees", "ground_truth")
# The A/A audit's proposer: only neutral (no-op) edits, so every accept is a false accept.
AA_NOOP: Final[tuple[str, ...]] = (
    "sim.proposal_mix.cue=0.0",
    "sim.proposal_mix.neutral=1.0",
    "sim.proposal_mix.harmful=0.0",
    "sim.proposal_mix.malformed=0.0",
)


@dataclass(frozen=True)
class RunSpec:
    """One run: a policy and a seed (``seed`` and ``sim.seed``) at a rollout budget."""

    policy: str
    seed: int
    budget: int
    config_path: str = str(DEFAULT_CONFIG)
    overrides: tuple[str, ...] = ()
    max_gates: int | None = None  # A/A: stop once this many gates decided (within the budget)
    label: str = ""


@dataclass
class GateRecord:
    """One gated proposal with its ground truth."""

    unit: int
    epoch: int
    step: int
    skill_file: str
    task_type: str
    action: str  # accept | reject | abort
    verdict: str
    decided: bool  # a verdict (not INFRA / no ladder)
    delta: float  # expected accuracy of the task type's questions: candidate − baseline
    max_abs_question_delta: float
    truth: str  # helpful | neutral | harmful
    added_lines: list[str]
    harmful_lines: list[str]
    rollouts: int
    wins: int  # usable pairs the candidate won / lost (the gate's evidence)
    losses: int
    # what the proposal carries, whatever its effect: a new harmful directive, a new cue of its
    # task type, or neither (a rewording; in the realistic world its effect is not 0)
    kind: str = "neutral"


@dataclass
class Point:
    """The loop after one unit of work."""

    unit: int
    action: str
    epoch: int | None
    rollouts: int
    tokens: int
    current: tuple[str, str]
    best: tuple[str, str]
    expected_test_current: float
    expected_test_best: float


@dataclass
class RunResult:
    """Everything the aggregation needs from one run (JSON-ready through :func:`asdict`)."""

    policy: str
    seed: int
    label: str
    budget: int
    units: int
    epochs_completed: int
    rollouts: int
    tokens: int
    seed_pair: tuple[str, str]
    delivered_pair: tuple[str, str]
    expected_test_seed: float
    expected_test_delivered: float
    expected_test_optimal: float
    observed_test_seed: float | None
    observed_test_delivered: float | None
    harmful_surviving_by_epoch: list[int]
    harmful_surviving_delivered: int
    harmful_kind_surviving_delivered: int  # edits carrying a harmful directive (by kind)
    harm_types_delivered: int
    gates: list[dict[str, Any]] = field(default_factory=list)
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# configuration


def resolve_config(spec: RunSpec) -> RunConfig:
    """The run's config: the YAML + the spec's overrides + policy, seeds and budget-driven epochs.

    Relative data paths of the YAML are made absolute against the repository (runs happen in
    worker processes and temp dirs); the environment and ``.env`` are ignored (determinism)."""
    raw = read_yaml_config(spec.config_path)  # a ConfigError naming the file, not a traceback
    paths = []
    for key in _PATH_KEYS:
        value = raw.get(key)
        if isinstance(value, str) and not Path(value).is_absolute() and (REPO / value).exists():
            paths.append(f"{key}={REPO / value}")
    overrides = (
        *paths,
        f"epochs={MAX_EPOCHS}",
        f"patience={MAX_EPOCHS}",
        # the loop plans within the budget itself: its last epoch ends early with a slow update
        f"rollout_budget={spec.budget}",
        f"gate_policy={spec.policy}",
        f"seed={spec.seed}",
        f"sim.seed={spec.seed}",
        *spec.overrides,  # last: an error names the user's key (the run's own are refused)
    )
    refuse_run_keys(spec.overrides)
    return load_config(spec.config_path, overrides, environ={}, dotenv_path=None)


#: Keys the benchmark sets for each run: a ``--set`` of one would be overwritten or would break
#: the equal budget, so it is refused with the option to use instead.
RUN_KEYS: Final[Mapping[str, str]] = {
    "seed": "--first-seed / --seeds",
    "sim.seed": "--first-seed / --seeds",
    "gate_policy": "--policies",
    "rollout_budget": "--budget",
}


def refuse_run_keys(overrides: Sequence[str]) -> None:
    for item in overrides:
        key = override_key(item)
        if key in RUN_KEYS:
            raise TrmError(f"--set {key}: the benchmark sets it for every run; use {RUN_KEYS[key]}")


def training_usage(state: TrainState) -> tuple[int, int]:
    """(rollouts, tokens) of the ledger, without the reporting phases."""
    tokens = sum(
        row["prompt_tokens"] + row["completion_tokens"]
        for phases in state.budget.values()
        for phase, row in phases.items()
        if phase not in REPORT_PHASES
    )
    return training_rollouts(state.budget), tokens


# ------------------------------------------------------------------------------------------------
# the oracle


class Oracle:
    """Expected accuracies of version pairs and candidate skill sets (memoized)."""

    def __init__(self, ctx: LoopContext) -> None:
        sim = ctx.providers.oracle
        world = sim.world if isinstance(sim, SimOracle) else None
        if world is None:
            raise RuntimeError("trm bench optimizer needs the SIMULATED world (llm_provider: sim)")
        self.ctx = ctx
        self.world: SimWorld = world
        self.test = tuple(ctx.pools.test)
        by_type: dict[str, list[str]] = {}
        for q in ctx.dataset.questions:
            by_type.setdefault(q.task_type, []).append(q.question_id)
        self.by_type = {t: tuple(sorted(v)) for t, v in by_type.items()}
        self._pairs: dict[tuple[str, str], float] = {}

    def _prompts(self, prompts_version: str) -> tuple[str, list[str]]:
        p = self.ctx.agent_prompts(prompts_version)
        return p.system, p.tool_texts()

    def texts_read(
        self, task_type: str, skills: Mapping[str, str], prompts_version: str
    ) -> list[str]:
        """The instruction texts a question of ``task_type`` reads (its skill, the default
        strategy, the system prompt, tool descriptions, other skills under ``all``)."""
        system, tools = self._prompts(prompts_version)
        return active_texts(
            task_type,
            skills,
            system_prompt=system,
            tool_descriptions=tools,
            skill_mode=self.ctx.cfg.skill_mode,
        )

    def cues_read(
        self, task_type: str, skills: Mapping[str, str], prompts_version: str
    ) -> set[str]:
        """The cues of ``task_type`` its questions read, in any instruction text."""
        return self.world.cues_expressed(
            task_type, self.texts_read(task_type, skills, prompts_version)
        )

    def per_question(
        self, qids: Sequence[str], skills: Mapping[str, str], prompts_version: str
    ) -> dict[str, float]:
        system, tools = self._prompts(prompts_version)
        return expected_by_question(
            self.world,
            qids,
            skills,
            self.ctx.cfg.sim,
            system_prompt=system,
            tool_descriptions=tools,
            skill_mode=self.ctx.cfg.skill_mode,
        )

    def test_expected(self, pair: tuple[str, str]) -> float:
        if pair not in self._pairs:
            probs = self.per_question(self.test, self.ctx.skills(pair[0]), pair[1])
            self._pairs[pair] = sum(probs.values()) / len(probs)
        return self._pairs[pair]

    def test_optimal(self) -> float:
        return best_expected_accuracy(self.world, self.test, self.ctx.cfg.sim)

    def harm_types(self, pair: tuple[str, str]) -> int:
        """Task types whose instruction texts (skill, default strategy, prompts) hold a harmful
        directive, from any channel (gated edits, momentum guidance, prompt evolution)."""
        skills = self.ctx.skills(pair[0])
        return sum(
            1
            for tt in self.world.task_types
            if self.world.harm_present(tt, self.texts_read(tt, skills, pair[1]))
        )


TRUTHS = ("helpful", "neutral", "harmful")  # the ground-truth classes of a proposal


def classify(delta: float) -> str:
    if delta > NEUTRAL_THRESHOLD:
        return "helpful"
    if delta < -NEUTRAL_THRESHOLD:
        return "harmful"
    return "neutral"


# ------------------------------------------------------------------------------------------------
# observing the gate


class GateRecorder(LoopObserver):
    """Watches the gates of one run (the loop's observer seam); records each proposal's ground
    truth."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.records: list[GateRecord] = []
        self.unit = 0

    def on_gate(self, req: GateRequest, outcome: ValidationOutcome) -> None:
        self.record(req, outcome)

    def record(self, req: GateRequest, outcome: ValidationOutcome) -> None:
        qids = self.oracle.by_type.get(req.task_type, ())
        base = dict(req.baseline_skills)
        cand = {**base, req.skill_file: req.candidate_text}
        pb = self.oracle.per_question(qids, base, req.prompts_version)
        pc = self.oracle.per_question(qids, cand, req.prompts_version)
        delta = (sum(pc.values()) - sum(pb.values())) / len(qids) if qids else 0.0
        max_q = max((abs(pc[q] - pb[q]) for q in qids), default=0.0)
        before = {normalize_text(ln) for ln in base.get(req.skill_file, "").splitlines()}
        added = [
            ln
            for ln in req.candidate_text.splitlines()
            if ln.strip() and normalize_text(ln) not in before
        ]
        world = self.oracle.world
        harmful = [ln for ln in added if world.harm_present(req.task_type, [ln])]
        # a cue the type already reads anywhere (another prompt, the default strategy) adds
        # nothing: only a cue new to what its questions read makes the edit a cue edit
        read = self.oracle.cues_read(req.task_type, base, req.prompts_version)
        new_cue = bool(self.oracle.cues_read(req.task_type, cand, req.prompts_version) - read)
        self.records.append(
            GateRecord(
                unit=self.unit,
                epoch=req.epoch,
                step=req.step,
                skill_file=req.skill_file,
                task_type=req.task_type,
                action=outcome.action,
                verdict=outcome.verdict,
                decided=outcome.action in ("accept", "reject") and outcome.verdict != NO_LADDER,
                delta=delta,
                max_abs_question_delta=max_q,
                truth=classify(delta),
                added_lines=added,
                harmful_lines=harmful,
                rollouts=outcome.baseline_rollouts + outcome.candidate_rollouts,
                wins=outcome.wins,
                losses=outcome.losses,
                kind="harmful" if harmful else "cue" if new_cue else "neutral",
            )
        )


def surviving_harmful(
    records: Sequence[GateRecord],
    skills: Mapping[str, str],
    last_unit: int,
    *,
    by_kind: bool = False,
) -> int:
    """Accepted harmful edits whose harmful line (else added lines) is still in the skill file:
    harmful by effect (ground truth), or ``by_kind``: edits that carry a harmful directive."""
    n = 0
    for r in records:
        harmful = r.kind == "harmful" if by_kind else r.truth == "harmful"
        if r.unit > last_unit or r.action != "accept" or not harmful:
            continue
        text = normalize_text(skills.get(r.skill_file, ""))
        lines = r.harmful_lines or r.added_lines
        if any(normalize_text(ln).strip() and normalize_text(ln) in text for ln in lines):
            n += 1
    return n


# ------------------------------------------------------------------------------------------------
# one run


def _observed_test(ctx: LoopContext, pair: tuple[str, str]) -> float | None:
    """Observed test accuracy of a pair: the loop's held-out run if it exists, else one test-pool
    evaluation under a bench run id (reporting only: never charged to the loop's ledger)."""
    ctx.log.flush()
    with RunLogReader.open(ctx.paths.run_db) as reader:
        row = reader.run(holdout_run_id(ctx, *pair))
    if row is not None and row.get("status") == "done" and row.get("accuracy") is not None:
        return float(row["accuracy"])
    res = asyncio.run(
        evaluate(
            ctx,
            f"bench_test_{pair[0]}_{pair[1]}",
            pair[0],
            pair[1],
            ctx.pool_questions("test"),
            "holdout",
        )
    )
    return res.accuracy


def execute(spec: RunSpec, workdir: Path | None = None) -> RunResult:
    """Run one policy/seed to its budget in a fresh workspace (removed afterwards)."""
    cfg = resolve_config(spec)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f"trm-opt-{spec.policy}-{spec.seed}-", dir=workdir))
    try:
        ws = tmp / "ws"
        new_workspace(ws, cfg)
        with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
            result = _drive(ctx, spec)
            ctx.log.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.wall_s = round(time.perf_counter() - started, 2)
    return result


def _pairs(ctx: LoopContext) -> tuple[tuple[str, str], tuple[str, str]]:
    m = read_manifest(ctx.workspace)
    cur = (m.current.skills, m.current.prompts)
    best = (m.best.skills, m.best.prompts) if m.best is not None else cur
    return cur, best


def _drive(ctx: LoopContext, spec: RunSpec) -> RunResult:
    oracle = Oracle(ctx)
    recorder = GateRecorder(oracle)
    seed_pair, _ = _pairs(ctx)
    points: list[Point] = [
        Point(0, "start", None, 0, 0, seed_pair, seed_pair, *(oracle.test_expected(seed_pair),) * 2)
    ]
    epoch_ends: list[tuple[int, int]] = []  # (unit, surviving harmful gated edits)
    last_ok = 0  # the last unit within the budget
    ctx.observers = (*ctx.observers, recorder)
    unit = 0
    while True:
        action = current_action(ctx)
        if action.kind in ("done", "finalize"):
            break
        unit += 1
        recorder.unit = unit
        run_action(ctx, action)
        state = load_state(ctx.paths.state, ctx.cfg)
        assert state is not None
        rollouts, tokens = training_usage(state)
        if rollouts > spec.budget:
            break  # this unit is past the budget: discarded
        last_ok = unit
        cur, best = _pairs(ctx)
        points.append(
            Point(
                unit,
                action.describe(),
                action.epoch,
                rollouts,
                tokens,
                cur,
                best,
                oracle.test_expected(cur),
                oracle.test_expected(best),
            )
        )
        if action.kind == "slow_update" and action.slow_step == 10:
            epoch_ends.append((unit, surviving_harmful(recorder.records, ctx.skills(cur[0]), unit)))
        if spec.max_gates is not None:
            decided = sum(1 for r in recorder.records if r.decided)
            if decided >= spec.max_gates:
                break
    last = points[-1]
    delivered = last.best
    records = [r for r in recorder.records if r.unit <= last_ok]
    return RunResult(
        policy=spec.policy,
        seed=spec.seed,
        label=spec.label,
        budget=spec.budget,
        units=last_ok,
        epochs_completed=len(epoch_ends),
        rollouts=last.rollouts,
        tokens=last.tokens,
        seed_pair=seed_pair,
        delivered_pair=delivered,
        expected_test_seed=oracle.test_expected(seed_pair),
        expected_test_delivered=oracle.test_expected(delivered),
        expected_test_optimal=oracle.test_optimal(),
        observed_test_seed=_observed_test(ctx, seed_pair),
        observed_test_delivered=_observed_test(ctx, delivered),
        harmful_surviving_by_epoch=[n for _, n in epoch_ends],
        harmful_surviving_delivered=surviving_harmful(records, ctx.skills(delivered[0]), last_ok),
        harmful_kind_surviving_delivered=surviving_harmful(
            records, ctx.skills(delivered[0]), last_ok, by_kind=True
        ),
        harm_types_delivered=oracle.harm_types(delivered),
        gates=[asdict(r) for r in records],
        trajectory=[
            {
                "unit": p.unit,
                "action": p.action,
                "rollouts": p.rollouts,
                "tokens": p.tokens,
                "expected_test_current": p.expected_test_current,
                "expected_test_best": p.expected_test_best,
            }
            for p in points
        ],
    )


def execute_dict(spec: RunSpec) -> dict[str, Any]:
    """Process-pool entry point (a plain dict crosses the process boundary)."""
    return execute(spec).to_dict()

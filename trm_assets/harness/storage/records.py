"""Typed records passed between units of work through the checkpoint (issue 14).

A unit of work reads what earlier units produced from ``state.json`` and nothing else, so these
records are the interface between them: the outputs of the ten slow-update functions
(:class:`SlowRecords`, one small record per function), the seed evaluation, the per-epoch
summaries, the epoch's counters, the final delivery and the budget ledger's rows. They are plain
frozen dataclasses without any I/O; their one (de)serialization is in
:mod:`trm_assets.harness.storage.checkpoint` (``encode_record`` / ``decode_record``), which writes
exactly the JSON the untyped dictionaries were written as, so old workspaces resume.

Field metadata read by that codec:

* :data:`OMIT_NONE` — the key is written only when the value is not None (and reads as None when
  absent): the old dictionaries set these keys only in some branches;
* :data:`ZERO_IF_ABSENT` — a counter an old checkpoint may not have written yet (the untyped
  counters were created on first count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict

from trm_assets.harness.storage.workspace import BestPointer

OMIT_NONE: Final[Mapping[str, Any]] = {"omit_none": True}
ZERO_IF_ABSENT: Final[Mapping[str, Any]] = {"zero_if_absent": True}


# ------------------------------------------------------------------------------------------------
# budget ledger and counters


class PhaseUsage(TypedDict):
    """One row of the budget ledger (scope × phase): rollouts, tokens and model calls. A typed
    dict rather than a dataclass: the ledger is an open scope × phase table that the benchmarks
    and ``trm report`` read by key (``docs/decision-typed-records.md``)."""

    rollouts: int
    prompt_tokens: int
    completion_tokens: int
    llm_calls: int


BudgetLedger = dict[str, dict[str, PhaseUsage]]  # scope (init, e0, …, final) → phase → usage
#: ledger phases that report and decide nothing (the test-pool evaluations): not training
REPORT_PHASES: Final = frozenset({"holdout"})


def training_rollouts(ledger: BudgetLedger) -> int:
    """Rollouts of the ledger that train (every phase but :data:`REPORT_PHASES`): what
    ``rollout_budget`` counts and what the optimizer benchmark compares policies at."""
    return sum(
        row["rollouts"]
        for phases in ledger.values()
        for phase, row in phases.items()
        if phase not in REPORT_PHASES
    )


CounterName = Literal[
    "accepted", "rejected", "aborted", "rolled_back", "gates", "alpha_sum", "diagnose_infra"
]


@dataclass(frozen=True)
class EpochCounters:
    """What the epoch's units counted (reset by the epoch's first step)."""

    accepted: int = field(default=0, metadata=ZERO_IF_ABSENT)
    rejected: int = field(default=0, metadata=ZERO_IF_ABSENT)
    aborted: int = field(default=0, metadata=ZERO_IF_ABSENT)
    rolled_back: int = field(default=0, metadata=ZERO_IF_ABSENT)
    gates: int = field(default=0, metadata=ZERO_IF_ABSENT)
    alpha_sum: float = field(
        default=0.0, metadata=ZERO_IF_ABSENT
    )  # sum of the gates' alphas: expected false accepts
    diagnose_infra: int = field(default=0, metadata=ZERO_IF_ABSENT)
    # the most training rollouts one step of the run has cost so far (carried from epoch to
    # epoch): the planner's estimate of a next step under a rollout budget
    step_rollouts_max: int = field(default=0, metadata=ZERO_IF_ABSENT)


# ------------------------------------------------------------------------------------------------
# evaluations


@dataclass(frozen=True)
class SeedEval:
    """The seed evaluation of ``init`` (run ``{base}_init``) on the validation pool."""

    run_id: str
    skills_version: str
    prompts_version: str
    val_accuracy: float | None
    val_expected_accuracy: float | None  # the oracle's (None with a real model)


@dataclass(frozen=True)
class RunRef:
    """A validation run of one version pair (R, a kept or discarded R2)."""

    run_id: str
    skills_version: str
    prompts_version: str
    accuracy: float | None
    n: int | None = field(default=None, metadata=OMIT_NONE)  # rollouts (written for R only)


@dataclass(frozen=True)
class HoldoutEval:
    """One of the four held-out evaluations of an epoch report (a report, never a decision)."""

    skills: str
    prompts: str
    accuracy: float | None
    expected: float | None


# ------------------------------------------------------------------------------------------------
# the slow update: one record per function


@dataclass(frozen=True)
class DualMetric:  # 2
    hard: float | None
    soft: float | None  # no provider reports a soft score: always None (never 0)


@dataclass(frozen=True)
class WriteBack:  # 3
    n: int


@dataclass(frozen=True)
class ProbationSettlement:  # 4, per skill file
    verdict: str
    wins: int
    losses: int
    pairs: int
    reason: str
    edits: int
    new_skills_version: str | None = field(default=None, metadata=OMIT_NONE)  # set by a ROLLBACK


@dataclass(frozen=True)
class BestFromR:  # 5
    replaced: bool
    best: BestPointer | None


@dataclass(frozen=True)
class MomentumOutcome:  # 6
    updated: tuple[str, ...]
    skills_version: str
    new_version: bool


@dataclass(frozen=True)
class PromptsEvolution:  # 7
    before: str
    after: str
    changed: tuple[str, ...]


@dataclass(frozen=True)
class R2Outcome:  # 8
    ran: bool
    kept: bool
    reverted: bool
    r2: RunRef | None = field(default=None, metadata=OMIT_NONE)
    prompts_version: str | None = field(
        default=None, metadata=OMIT_NONE
    )  # the reverted prompts' new version
    best_replaced: bool | None = field(default=None, metadata=OMIT_NONE)  # set when R2 is kept
    # task types R2 showed verified worse than R (E⁻ ≥ 1/probation_alpha_harm on the type's
    # paired questions), and the skill files whose momentum guidance was reverted for it
    # (written only when not empty)
    harmed: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    momentum_reverted: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class EpochReportOutcome:  # 9
    labels: Mapping[str, str]  # task type → improved | regressed | unchanged
    holdout: Mapping[str, HoldoutEval]  # seed, epoch_start, current, best
    early_stopped: bool


@dataclass(frozen=True)
class LadderRefresh:  # 10
    sources: tuple[str, ...]


@dataclass(frozen=True)
class SlowRecords:
    """The outputs of the epoch's slow-update functions done so far (empty at the epoch start).

    The JSON keys are the ones of the untyped dictionary (``r``, ``r_outcomes``, ``dual_metric``,
    ``write_back``, ``probations``, ``best_r``, ``momentum``, ``prompts``, ``r2``, ``report``,
    ``ladder``); a function not run yet has no key."""

    r: RunRef | None = field(default=None, metadata=OMIT_NONE)  # 1
    r_outcomes: Mapping[str, bool | None] | None = field(
        default=None, metadata=OMIT_NONE
    )  # 1: R's draw per question
    dual_metric: DualMetric | None = field(default=None, metadata=OMIT_NONE)  # 2
    write_back: WriteBack | None = field(default=None, metadata=OMIT_NONE)  # 3
    probations: Mapping[str, ProbationSettlement] | None = field(
        default=None, metadata=OMIT_NONE
    )  # 4
    best_r: BestFromR | None = field(default=None, metadata=OMIT_NONE)  # 5
    momentum: MomentumOutcome | None = field(default=None, metadata=OMIT_NONE)  # 6
    prompts: PromptsEvolution | None = field(default=None, metadata=OMIT_NONE)  # 7
    r2: R2Outcome | None = field(default=None, metadata=OMIT_NONE)  # 8
    report: EpochReportOutcome | None = field(default=None, metadata=OMIT_NONE)  # 9
    ladder: LadderRefresh | None = field(default=None, metadata=OMIT_NONE)  # 10


# ------------------------------------------------------------------------------------------------
# per epoch and final


@dataclass(frozen=True)
class BestSummary:
    skills_version: str
    prompts_version: str
    val_accuracy: float | None
    val_expected_accuracy: float | None


@dataclass(frozen=True)
class EpochSummary:
    """One row of ``history``: what the epoch's report (slow update 9) summarised."""

    epoch: int
    labels: Mapping[str, str]  # task type → improved | regressed | unchanged
    holdout: Mapping[str, HoldoutEval]  # seed, epoch_start, current, best on the test pool
    best: BestSummary
    early_stopped: bool
    # the latest validation evaluation (R, or a kept R2) and the current pair on the test pool
    val_accuracy: float | None
    val_run_id: str | None
    val_skills_version: str
    val_prompts_version: str
    test_accuracy: float | None
    val_expected_accuracy: float | None
    # the epoch's decisions (its EpochCounters), their expected false accepts, what it cost
    accepted: int
    rejected: int
    rolled_back: int
    aborted: int
    gates: int
    expected_false_accepts: float
    rollouts: int
    tokens: int
    infra_failures: int
    # task types whose current text (the skills they read, the prompts) no outcome in
    # ``correctness`` came from: R2, the evaluation of the momentum's guidance, was discarded
    # (slow update 8) while the guidance stayed; a probation opened on one in the next epoch would
    # compare against another text's outcomes
    unevaluated_types: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    # the probations this slow update settled (step 4), by skill file; state.slow is cleared when
    # the next epoch begins, and only a ROLLBACK leaves a version behind
    probations: Mapping[str, ProbationSettlement] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class FinalReport:
    """``finalize``: the delivered best and its test-pool evaluation (a report)."""

    reason: str
    skills_version: str
    prompts_version: str
    val_accuracy: float | None
    val_expected_accuracy: float | None
    test_accuracy: float | None
    test_expected_accuracy: float | None

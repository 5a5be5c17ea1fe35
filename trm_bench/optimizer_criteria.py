"""Issue 15's "done when" for one ``trm bench optimizer`` comparison, computed from its runs.

The default policy (``RunConfig``'s ``gate_policy`` default) must deliver a mean expected test
gain at least each other policy's, reported as the paired difference over the seeds both ran
(mean ± standard error of the per-seed differences); accept at most 3% of the neutral proposals
it gated; and leave at most 0.05 harmful gated edits per run in the delivered skills. The
verdict is recomputed from the runs, so a table in ``benchmarks/RESULTS.md`` can be checked
against the ``--runs-out`` file it came from.

"Neutral" and "harmful" are judged two ways, and both must hold:

* **by effect** — the sign of the oracle's expected-accuracy change on the edited task type
  (0.1pp dead band; the table's classes). In the realistic world a rewording's effect is not 0
  (15% of answers flip, and added words cost), so few edits are neutral by effect and a
  rewording that happens to lose 0.5pp counts as harmful;
* **by kind** — what the proposal carries: a new harmful directive, a new cue, or neither (a
  rewording, the proposal mix's "neutral").

The issue states its bounds for 5 seeds at 6,000 rollouts or more: ``met`` is False when any
check fails; otherwise it is None ("not assessed") for a comparison with fewer seeds or a smaller
budget, a bound with nothing to count (no neutral proposal gated) or a policy with no seed in
common with the default one; True only when every check holds on an assessable comparison.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Final

from trm_assets.harness.data.config import RunConfig

NEUTRAL_ACCEPTED_MAX: Final = 0.03
HARMFUL_SURVIVING_MAX: Final = 0.05
MIN_SEEDS: Final = 5
MIN_BUDGET: Final = 6000


def default_policy() -> str:
    policy: str = RunConfig.model_fields["gate_policy"].default
    return policy


def _gain(run: Mapping[str, Any]) -> float:
    return float(run["expected_test_delivered"] - run["expected_test_seed"])


def paired(
    runs: Sequence[Mapping[str, Any]], policy: str, other: str
) -> dict[str, float | int | None]:
    """``policy − other`` in expected test gain, paired by seed: mean, standard error, seeds."""
    mine = {r["seed"]: _gain(r) for r in runs if r["policy"] == policy}
    theirs = {r["seed"]: _gain(r) for r in runs if r["policy"] == other}
    diffs = [mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys())]
    if not diffs:
        return {"mean": None, "se": None, "seeds": 0}
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
    return {"mean": statistics.fmean(diffs), "se": se, "seeds": len(diffs)}


def _neutral(gates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    accepted = sum(1 for g in gates if g["action"] == "accept")
    return {
        "gated": len(gates),
        "accepted": accepted,
        "rate": accepted / len(gates) if gates else None,
    }


def criteria(runs: Sequence[Mapping[str, Any]], budget: int | None = None) -> dict[str, Any] | None:
    """The verdict for the default policy against every other policy in ``runs`` (None when the
    default policy did not run). ``budget``: the comparison's rollouts per run."""
    policy = default_policy()
    own = [r for r in runs if r["policy"] == policy]
    if not own:
        return None
    others = sorted({r["policy"] for r in runs} - {policy})
    gains = {o: paired(runs, policy, o) for o in others}
    decided = [g for r in own for g in r["gates"] if g["decided"]]
    # runs files written before the kind was recorded: the kind-based bounds are not assessed
    kinds = all("kind" in g for g in decided) and all(
        "harmful_kind_surviving_delivered" in r for r in own
    )
    neutral = {
        "effect": _neutral([g for g in decided if g["truth"] == "neutral"]),
        "kind": _neutral([g for g in decided if kinds and g["kind"] == "neutral"]),
    }
    harmful: dict[str, float | None] = {
        "effect": statistics.fmean(r["harmful_surviving_delivered"] for r in own),
        "kind": (
            statistics.fmean(r["harmful_kind_surviving_delivered"] for r in own) if kinds else None
        ),
    }
    checks: dict[str, bool | None] = {
        **{f"gain >= {o}": None if g["mean"] is None else g["mean"] >= 0 for o, g in gains.items()},
    }
    for how in ("effect", "kind"):
        rate, surviving = neutral[how]["rate"], harmful[how]
        checks[f"neutral accepted <= 3% ({how})"] = (
            None if rate is None else rate <= NEUTRAL_ACCEPTED_MAX
        )
        checks[f"harmful surviving <= 0.05/run ({how})"] = (
            None if surviving is None else surviving <= HARMFUL_SURVIVING_MAX
        )
    seeds = len({r["seed"] for r in own})
    unassessed = [k for k, ok in checks.items() if ok is None]
    if seeds < MIN_SEEDS:
        unassessed.append(f"{seeds} seed(s) < {MIN_SEEDS}")
    if budget is not None and budget < MIN_BUDGET:
        unassessed.append(f"budget {budget} < {MIN_BUDGET}")
    failed = [k for k, ok in checks.items() if ok is False]
    return {
        "default_policy": policy,
        "paired_gain": gains,
        "neutral": neutral,
        "harmful_surviving_per_run": harmful,
        "checks": checks,
        "failed": failed,
        "not_assessed": unassessed,
        "met": False if failed else None if unassessed else True,
    }


def format_criteria(c: Mapping[str, Any]) -> str:
    lines = [f"Issue 15 criteria for the default policy ({c['default_policy']}):"]
    for other, g in c["paired_gain"].items():
        if g["mean"] is None:
            lines.append(f"  − {other}: no common seed")
            continue
        se = "" if g["se"] is None else f" ± {100 * g['se']:.2f}"
        lines.append(
            f"  − {other}: {100 * g['mean']:+.2f}{se}pp (paired over {g['seeds']} seed(s))"
        )
    for how in ("effect", "kind"):
        n, h = c["neutral"][how], c["harmful_surviving_per_run"][how]
        if h is None:
            lines.append(f"  by {how}: not recorded in these runs")
            continue
        rate = "n/a" if n["rate"] is None else f"{100 * n['rate']:.1f}%"
        lines.append(
            f"  by {how}: neutral accepted {n['accepted']} of {n['gated']} ({rate}), "
            f"harmful surviving {h:.2f}/run"
        )
    if c["failed"]:
        lines.append("  not met: " + "; ".join(c["failed"]))
    if c["not_assessed"]:
        lines.append("  not assessed: " + "; ".join(c["not_assessed"]))
    if c["met"]:
        lines.append("  met")
    return "\n".join(lines)

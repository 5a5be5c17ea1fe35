"""Issue 15's "done when" for one ``trm bench optimizer`` comparison, computed from its runs.

The default policy (``RunConfig``'s ``gate_policy`` default) must deliver a mean expected test
gain at least each other policy's, reported as the paired difference over the seeds both ran
(mean ± standard error of the per-seed differences); accept at most 3% of the neutral proposals
it gated; and leave at most 0.05 harmful gated edits per run in the delivered skills. The
verdict is recomputed from the runs, so a table in ``benchmarks/RESULTS.md`` can be checked
against the ``--runs-out`` file it came from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Final

from trm_assets.harness.data.config import RunConfig

NEUTRAL_ACCEPTED_MAX: Final = 0.03
HARMFUL_SURVIVING_MAX: Final = 0.05


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


def criteria(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The verdict for the default policy against every other policy in ``runs`` (None when the
    default policy did not run)."""
    policy = default_policy()
    own = [r for r in runs if r["policy"] == policy]
    if not own:
        return None
    others = sorted({r["policy"] for r in runs} - {policy})
    gains = {o: paired(runs, policy, o) for o in others}
    gated = [g for r in own for g in r["gates"] if g["decided"] and g["truth"] == "neutral"]
    accepted = sum(1 for g in gated if g["action"] == "accept")
    rate = accepted / len(gated) if gated else 0.0
    harmful = statistics.fmean(r["harmful_surviving_delivered"] for r in own)
    checks = {
        **{f"gain >= {o}": g["mean"] is not None and g["mean"] >= 0 for o, g in gains.items()},
        "neutral accepted <= 3%": rate <= NEUTRAL_ACCEPTED_MAX,
        "harmful surviving <= 0.05/run": harmful <= HARMFUL_SURVIVING_MAX,
    }
    return {
        "default_policy": policy,
        "paired_gain": gains,
        "neutral": {"gated": len(gated), "accepted": accepted, "rate": rate},
        "harmful_surviving_per_run": harmful,
        "checks": checks,
        "met": all(checks.values()),
    }


def format_criteria(c: Mapping[str, Any]) -> str:
    lines = [f"Issue 15 criteria for the default policy ({c['default_policy']}):"]
    for other, g in c["paired_gain"].items():
        if g["mean"] is None:
            lines.append(f"  − {other}: no common seed")
            continue
        se = "n/a" if g["se"] is None else f"{100 * g['se']:.2f}"
        lines.append(
            f"  − {other}: {100 * g['mean']:+.2f} ± {se}pp (paired over {g['seeds']} seed(s))"
        )
    n = c["neutral"]
    lines.append(f"  neutral accepted: {n['accepted']} of {n['gated']} ({100 * n['rate']:.1f}%)")
    lines.append(f"  harmful surviving per run: {c['harmful_surviving_per_run']:.2f}")
    failed = [k for k, ok in c["checks"].items() if not ok]
    lines.append("  met" if c["met"] else "  not met: " + "; ".join(failed))
    return "\n".join(lines)

"""``trm bench optimizer``: the statistical gate against its ablations on the SIMULATED world.

The full loop (:mod:`trm_assets.harness.loop.runner`) runs on the default simulated sample once per
gate policy (``ce_gate``, ``accept_all``, ``minibatch_sum`` with b = 3, ``full_val_point``) and
seed, each run stopped at the same budget of training rollouts (:mod:`.optimizer_run`). The
world's ground truth classifies every gated proposal (helpful / neutral / harmful by the oracle's
expected-accuracy delta on its task type), and the oracle gives the expected test accuracy of
every version, so the benchmark reports per policy:

* held-out test gain of the delivered version over the seed skills, observed (test-pool rollouts)
  and expected (oracle), mean and SD over seeds;
* the fraction of the oracle gain reached: (E[delivered] − E[seed]) / (E[optimal] − E[seed]) on
  the test pool, mean over seeds;
* accepted edits by ground truth, the acceptance rate of each class among gated proposals,
  harmful gated edits still present at the end of each epoch and in the delivered version;
* training rollouts and tokens; a PNG plot of expected test accuracy against rollouts.

``--aa`` runs the A/A audit instead: the simulated evolve model proposes only neutral edits (each
candidate verified by the oracle to leave every question's expected accuracy unchanged), so every
accept is a false accept; the rate per policy comes with a 95% Wilson interval. ``--sweep`` runs
the comparison over the helpful-proposal share (10%, 20%, 40%, 60%). The test pool is only
reported on; nothing here feeds a decision back into the loop.

Why it is long: the optimizer comparison's CLI, summaries, A/A audit and sweep share the run specs
and the report format.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Final

import click

from trm_assets.domain.errors import TrmError
from trm_assets.harness.data.config import override_key
from trm_assets.harness.loop.gate import GATE_POLICIES
from trm_assets.llm.sim_config import ProposalMix
from trm_bench.optimizer_criteria import criteria, format_criteria
from trm_bench.optimizer_run import (
    AA_NOOP,
    DEFAULT_CONFIG,
    NOOP_TOLERANCE,
    TRUTHS,
    RunSpec,
    execute_dict,
    resolve_config,
)

POLICIES: Final[tuple[str, ...]] = ("ce_gate", "accept_all", "minibatch_sum", "full_val_point")
assert set(POLICIES) == set(GATE_POLICIES)
FULL_BUDGET: Final = 6000
QUICK_BUDGET: Final = 2500
AA_GATES_PER_RUN: Final = 60
AA_GATES_PER_RUN_QUICK: Final = 20
AA_BUDGET: Final = 60000  # a cap only: A/A runs stop at their gate count
SWEEP_SHARES: Final[tuple[float, ...]] = (0.10, 0.20, 0.40, 0.60)
# The A/A audit: only no-op (neutral) proposals, no cooldown (more gates per step), a small test
# pool (the audit reports nothing on it, and the loop's held-out report costs rollouts).
AA_OVERRIDES: Final[tuple[str, ...]] = (
    *AA_NOOP,
    "gate_cooldown_steps=0",
    "steps_per_epoch=6",
    "test_size=60",
)
Progress = Callable[[str], None]


def sweep_mix(cue: float) -> tuple[str, ...]:
    """The proposal mix with helpful share ``cue``; the other three keep their default ratios."""
    d = ProposalMix()
    rest = d.neutral + d.harmful + d.malformed
    scale = (1.0 - cue) / rest
    n, h = round(d.neutral * scale, 6), round(d.harmful * scale, 6)
    m = round(1.0 - cue - n - h, 6)
    return (
        f"sim.proposal_mix.cue={cue}",
        f"sim.proposal_mix.neutral={n}",
        f"sim.proposal_mix.harmful={h}",
        f"sim.proposal_mix.malformed={m}",
    )


# ------------------------------------------------------------------------------------------------
# statistics


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float | None, float | None]:
    """95% Wilson score interval for k successes in n trials (None, None when n = 0)."""
    if n == 0:
        return None, None
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.fmean(v) if v else None


def _sd(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return statistics.stdev(v) if len(v) > 1 else (0.0 if v else None)


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-policy figures of the comparison (see the module docstring)."""
    obs_gain = [
        None
        if r["observed_test_delivered"] is None or r["observed_test_seed"] is None
        else r["observed_test_delivered"] - r["observed_test_seed"]
        for r in runs
    ]
    exp_gain = [r["expected_test_delivered"] - r["expected_test_seed"] for r in runs]
    # the current version at the end of the budget (not yet confirmed by a slow update's best)
    cur_gain = [
        r["trajectory"][-1]["expected_test_current"] - r["expected_test_seed"] for r in runs
    ]
    fractions = [
        (r["expected_test_delivered"] - r["expected_test_seed"])
        / (r["expected_test_optimal"] - r["expected_test_seed"])
        for r in runs
    ]
    gates = [g for r in runs for g in r["gates"]]
    accepted = {
        c: sum(1 for g in gates if g["action"] == "accept" and g["truth"] == c) for c in TRUTHS
    }
    gated = {c: sum(1 for g in gates if g["decided"] and g["truth"] == c) for c in TRUTHS}
    # accept_all decides without rollouts; its accepts are "decided" too
    accept_rate = {
        c: _r(
            sum(1 for g in gates if g["decided"] and g["truth"] == c and g["action"] == "accept")
            / gated[c]
        )
        if gated[c]
        else None
        for c in TRUTHS
    }
    n_epochs = max((len(r["harmful_surviving_by_epoch"]) for r in runs), default=0)
    by_epoch = [
        _r(
            _mean(
                [
                    r["harmful_surviving_by_epoch"][e]
                    for r in runs
                    if len(r["harmful_surviving_by_epoch"]) > e
                ]
            ),
            3,
        )
        for e in range(n_epochs)
    ]
    return {
        "test_gain_mean": _r(_mean(obs_gain)),
        "test_gain_sd": _r(_sd(obs_gain)),
        "expected_test_gain_mean": _r(_mean(exp_gain)),
        "expected_test_gain_sd": _r(_sd(exp_gain)),
        "expected_test_gain_current_mean": _r(_mean(cur_gain)),
        "oracle_fraction": _r(_mean(fractions)),
        "oracle_fraction_sd": _r(_sd(fractions)),
        "expected_test_delivered_mean": _r(_mean([r["expected_test_delivered"] for r in runs])),
        "expected_test_seed_mean": _r(_mean([r["expected_test_seed"] for r in runs])),
        "expected_test_optimal_mean": _r(_mean([r["expected_test_optimal"] for r in runs])),
        "accepted": accepted,
        "accepted_total": sum(accepted.values()),
        "gated": gated,
        "accept_rate": accept_rate,
        "harmful_surviving_per_run": _r(_mean([r["harmful_surviving_delivered"] for r in runs]), 3),
        "harmful_surviving_by_epoch": by_epoch,
        "harm_types_delivered_per_run": _r(_mean([r["harm_types_delivered"] for r in runs]), 3),
        "rollouts": _r(_mean([r["rollouts"] for r in runs]), 1),
        "tokens": _r(_mean([r["tokens"] for r in runs]), 0),
        "epochs_completed": _r(_mean([r["epochs_completed"] for r in runs]), 2),
        "runs": len(runs),
    }


def _is_null(gate: Mapping[str, Any]) -> bool:
    return bool(gate["max_abs_question_delta"] <= NOOP_TOLERANCE or gate["delta"] <= NOOP_TOLERANCE)


def summarize_aa(runs: Sequence[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """False-accept rate over decided null gates, with a 95% Wilson interval.

    A null gate is a decided gate whose candidate is not better in expectation over its task
    type's questions (oracle ``delta <= NOOP_TOLERANCE``): in the default world that is exactly
    the no-op edits (every question's probability unchanged); in a world with text perturbation
    (``sim.text_flip_rate``) and length cost a neutral rewording moves individual questions, and
    is a null exactly when its type-level expected effect is not positive.
    """
    gates = [g for r in runs for g in r["gates"]]
    noop = [g for g in gates if g["decided"] and _is_null(g)]
    excluded = sum(1 for g in gates if g["decided"]) - len(noop)
    k = sum(1 for g in noop if g["action"] == "accept")
    lo, hi = wilson(k, len(noop))
    per_run = []
    for r in runs:
        rn = [g for g in r["gates"] if g["decided"] and _is_null(g)]
        per_run.append(
            {
                "seed": r["seed"],
                "gates": len(rn),
                "false_accepts": sum(1 for g in rn if g["action"] == "accept"),
            }
        )
    return {
        "gates": len(noop),
        "false_accepts": k,
        "rate": _r(k / len(noop)) if noop else None,
        "ci_low": _r(lo),
        "ci_high": _r(hi),
        "alpha": alpha,
        "within_alpha": (k / len(noop) <= alpha) if noop else None,
        "excluded_not_noop": excluded,
        "aborted": sum(1 for g in gates if not g["decided"]),
        "rollouts": _r(_mean([r["rollouts"] for r in runs]), 1),
        "per_run": per_run,
    }


# ------------------------------------------------------------------------------------------------
# running


def run_specs(
    specs: Sequence[RunSpec],
    workers: int,
    progress: Progress | None,
    journal: Path | None = None,
) -> list[dict[str, Any]]:
    """Run every spec (in worker processes when ``workers`` > 1); results in spec order. Each
    finished run is appended to ``journal`` (JSON lines) at once, so a long benchmark that is
    stopped keeps what it measured."""
    started = time.perf_counter()

    def note(i: int, res: dict[str, Any]) -> None:
        if journal is not None:
            with open(journal, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(res) + "\n")
        if progress is not None:
            progress(
                f"[{time.perf_counter() - started:6.0f}s] {res['label'] or ''} {res['policy']} "
                f"seed {res['seed']}: {res['rollouts']} rollouts, expected test "
                f"{res['expected_test_seed']:.3f} → {res['expected_test_delivered']:.3f} "
                f"({res['wall_s']:.0f}s)"
            )

    if workers <= 1:
        out = []
        for i, s in enumerate(specs):
            out.append(execute_dict(s))
            note(i, out[-1])
        return out
    results: list[dict[str, Any] | None] = [None] * len(specs)
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=die_with_parent, initargs=(os.getpid(),)
    ) as pool:
        futures = {pool.submit(execute_dict, s): i for i, s in enumerate(specs)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            note(i, results[i])  # type: ignore[arg-type]
    return [r for r in results if r is not None]


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: a killed bench takes its workers with it (Linux ``PR_SET_PDEATHSIG``)
    instead of leaving them to finish their runs as orphans.

    The signal is SIGKILL: a SIGTERM is ignored or stays pending when the bench was started
    from a process that ignores or blocks it (dispositions and masks survive ``exec``; in the
    suite's xdist workers the orphan lived on). SIGTERM's default action did no cleanup either:
    the journal is the parent's, and a run's files are written atomically."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def comparison(
    seeds: Sequence[int],
    budget: int,
    config: str,
    overrides: Sequence[str],
    workers: int,
    progress: Progress | None,
    journal: Path | None = None,
    policies: Sequence[str] = POLICIES,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    specs = [RunSpec(p, s, budget, config, tuple(overrides)) for s in seeds for p in policies]
    runs = run_specs(specs, workers, progress, journal)
    return {p: summarize([r for r in runs if r["policy"] == p]) for p in policies}, runs


def sweep_table(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per helpful share (the run label ``cue=0.10``), per policy: :func:`summarize`."""
    table: dict[str, Any] = {}
    for share in SWEEP_SHARES:
        label = f"cue={share:.2f}"
        rs = [r for r in runs if r["label"] == label]
        if rs:
            table[f"{share:.2f}"] = {
                p: summarize([r for r in rs if r["policy"] == p]) for p in POLICIES
            }
    return table


# ------------------------------------------------------------------------------------------------
# plot


def expected_curves(
    runs: Sequence[dict[str, Any]], budget: int, points: int = 101
) -> dict[str, list[tuple[int, float]]]:
    """Mean over seeds of the current version's expected test accuracy against rollouts
    (step functions sampled on a common grid)."""
    grid = [round(budget * i / (points - 1)) for i in range(points)]
    out: dict[str, list[tuple[int, float]]] = {}
    for p in POLICIES:
        rs = [r for r in runs if r["policy"] == p]
        if not rs:
            continue
        curve = []
        for x in grid:
            vals = []
            for r in rs:
                traj = r["trajectory"]
                if x > traj[-1]["rollouts"]:
                    continue
                v = traj[0]["expected_test_current"]
                for pt in traj:
                    if pt["rollouts"] > x:
                        break
                    v = pt["expected_test_current"]
                vals.append(v)
            if vals:
                curve.append((x, statistics.fmean(vals)))
        out[p] = curve
    return out


def write_plot(runs: Sequence[dict[str, Any]], budget: int, path: Path, title: str) -> str | None:
    """The PNG plot (None when matplotlib is not installed: the JSON says so)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    curves = expected_curves(runs, budget)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for p, pts in curves.items():
        ax.plot([x for x, _ in pts], [y for _, y in pts], label=p, drawstyle="steps-post")
    optimal = _mean([r["expected_test_optimal"] for r in runs])
    if optimal is not None:
        ax.axhline(optimal, color="grey", linestyle=":", label="oracle optimum")
    ax.set_xlabel("training rollouts (held-out reporting excluded)")
    ax.set_ylabel("expected test accuracy (oracle)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


# ------------------------------------------------------------------------------------------------
# text output


def format_table(policies: dict[str, Any]) -> str:
    head = (
        "| policy | test gain (obs) | test gain (exp) | oracle fraction | accepted H/N/Hm | "
        "accept rate H/N/Hm | harmful surviving/run | rollouts | tokens |"
    )
    lines = [head, "|---" * 9 + "|"]
    for p, s in policies.items():
        a, ar = s["accepted"], s["accept_rate"]

        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{100 * x:.1f}%"

        def pp(m: float | None, sd: float | None) -> str:
            return "n/a" if m is None else f"{100 * m:+.1f} ± {100 * (sd or 0):.1f}pp"

        lines.append(
            f"| {p} | {pp(s['test_gain_mean'], s['test_gain_sd'])} | "
            f"{pp(s['expected_test_gain_mean'], s['expected_test_gain_sd'])} | "
            f"{pct(s['oracle_fraction'])} | {a['helpful']}/{a['neutral']}/{a['harmful']} | "
            f"{pct(ar['helpful'])}/{pct(ar['neutral'])}/{pct(ar['harmful'])} | "
            f"{s['harmful_surviving_per_run']} | {s['rollouts']:.0f} | {s['tokens']:.3g} |"
        )
    return "\n".join(lines)


def format_aa(aa: dict[str, Any]) -> str:
    lines = [
        "| policy | no-op gates | false accepts | rate | 95% Wilson CI | ≤ α |",
        "|---|---|---|---|---|---|",
    ]
    for p, s in aa.items():
        rate = "n/a" if s["rate"] is None else f"{100 * s['rate']:.1f}%"
        ci = (
            "n/a"
            if s["ci_low"] is None
            else f"[{100 * s['ci_low']:.1f}%, {100 * s['ci_high']:.1f}%]"
        )
        lines.append(
            f"| {p} | {s['gates']} | {s['false_accepts']} | {rate} | {ci} | {s['within_alpha']} |"
        )
    return "\n".join(lines)


def format_sweep(sweep: dict[str, Any]) -> str:
    lines = [
        "| helpful share | " + " | ".join(POLICIES) + " | best |",
        "|---" * (len(POLICIES) + 2) + "|",
    ]
    for share, pols in sweep.items():
        cells = []
        for p in POLICIES:
            s = pols[p]
            cells.append(
                f"{100 * s['expected_test_gain_mean']:+.1f}pp ({100 * s['oracle_fraction']:.0f}%)"
                f" / {100 * s['expected_test_gain_current_mean']:+.1f}pp"
            )
        best = max(POLICIES, key=lambda p: pols[p]["expected_test_gain_mean"])
        lines.append(f"| {share} | " + " | ".join(cells) + f" | {best} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# CLI


@click.command("optimizer")
@click.option("--quick", is_flag=True, help=f"Budget {QUICK_BUDGET} rollouts per run (minutes).")
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Runs per policy (seed k sets the loop's seed and the simulator's noise seed).",
)
@click.option(
    "--first-seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The first seed (runs use seeds first-seed … first-seed + seeds − 1): tune on one "
    "set of seeds, report on another.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
@click.option(
    "--aa",
    is_flag=True,
    help="Run the A/A audit (no-op proposals; policies from --aa-policies) instead of the "
    "comparison (with --sweep: both the audit and the sweep). It sets "
    + ", ".join(AA_OVERRIDES)
    + " itself.",
)
@click.option(
    "--sweep",
    is_flag=True,
    help="Run the helpful-proposal-share sweep (all four policies) instead of the comparison.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=None,
    help=f"Training rollouts per run (default {FULL_BUDGET}, {QUICK_BUDGET} with --quick).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    default=str(DEFAULT_CONFIG),
    show_default=True,
    help="The RunConfig YAML (the SIMULATED world).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    help="A RunConfig or sim.* override KEY=VALUE (repeatable). The environment and .env are "
    "not read (a run is reproduced from its command line); seed, sim.seed, gate_policy and "
    "rollout_budget are set per run (use --first-seed, --policies, --budget).",
)
@click.option(
    "--aa-gates",
    type=click.IntRange(min=1),
    default=None,
    help=f"A/A: decided gates per run (default {AA_GATES_PER_RUN}, "
    f"{AA_GATES_PER_RUN_QUICK} with --quick).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=min(2, os.cpu_count() or 1),
    show_default=True,
    help="Worker processes (runs are independent; results do not depend on this).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("optimizer_expected_test.png"),
    show_default=True,
    help="Where the PNG plot of expected test accuracy against rollouts goes.",
)
@click.option(
    "--policies",
    "compared",
    default=",".join(POLICIES),
    show_default=True,
    help="The policies to compare (comma-separated; runs are independent, so a subset gives "
    "the same per-policy figures as the full comparison).",
)
@click.option(
    "--aa-policies",
    default=",".join(POLICIES),
    show_default=True,
    help="A/A: the policies to audit (comma-separated; the audit of one policy is independent "
    "of the others').",
)
@click.option(
    "--runs-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every run's raw record (gates, trajectory) to this JSON file (and, while "
    "running, each finished run to <file>.partial.jsonl).",
)
def cli(
    quick: bool,
    seeds: int,
    first_seed: int,
    as_json: bool,
    aa: bool,
    sweep: bool,
    budget: int | None,
    config_path: str,
    overrides: tuple[str, ...],
    aa_gates: int | None,
    workers: int,
    plot_path: Path,
    runs_out: Path | None,
    compared: str,
    aa_policies: str,
) -> None:
    """Gate policies at an equal rollout budget on the SIMULATED world (ground-truth scoring)."""
    b = budget or (QUICK_BUDGET if quick else FULL_BUDGET)
    progress: Progress = lambda m: click.echo(m, err=True)  # noqa: E731
    started = time.perf_counter()
    seed_ids = range(first_seed, first_seed + seeds)
    try:
        base_cfg = resolve_config(RunSpec("ce_gate", 0, b, config_path, overrides))
    except TrmError as e:
        raise click.UsageError(str(e)) from None
    if base_cfg.llm_provider != "sim" or not base_cfg.ground_truth:
        raise click.UsageError(
            f"{config_path}: trm bench optimizer needs the SIMULATED world (llm_provider: sim "
            "and a ground_truth file): the scoring uses its hidden ground truth"
        )
    out: dict[str, Any] = {}
    all_runs: list[dict[str, Any]] = []
    journal = None
    if runs_out is not None:
        runs_out.parent.mkdir(parents=True, exist_ok=True)
        journal = runs_out.with_name(runs_out.name + ".partial.jsonl")
        journal.unlink(missing_ok=True)
    meta: dict[str, Any] = {
        "config": config_path,
        "overrides": list(overrides),
        "seeds": seeds,
        "first_seed": first_seed,
        "budget": b,
        "quick": quick,
        "simulated": True,
        # the world and decoding every run resolved to (the environment is not read)
        "sim_profile": base_cfg.sim.profile,
        "agent_temperature": base_cfg.effective_agent_temperature(),
        "gate_passes": base_cfg.gate_passes,
        "gate_fresh_temperature": base_cfg.gate_fresh_temperature,
        "sim_temperature_scale": base_cfg.sim.temperature_scale,
    }
    if not aa and not sweep:
        chosen = tuple(p.strip() for p in compared.split(",") if p.strip())
        if not chosen or set(chosen) - set(POLICIES):
            raise click.UsageError(f"--policies: choose from {POLICIES}, got {chosen}")
        policies, runs = comparison(
            seed_ids, b, config_path, overrides, workers, progress, journal, chosen
        )
        all_runs += runs
        out["policies"] = policies
        out["criteria"] = criteria(runs, b)
        out["plot"] = write_plot(
            runs,
            b,
            plot_path,
            f"SIMULATED world ({Path(config_path).name}, profile {base_cfg.sim.profile}), "
            f"{seeds} seeds, budget {b} rollouts; mean over seeds",
        )
    if aa:
        # the audit sets these: a --set of one of them was silently replaced, then blamed
        fixed = {override_key(o): o for o in AA_OVERRIDES}
        clash = [o for o in overrides if override_key(o) in fixed]
        if clash:
            raise click.UsageError(
                f"--aa sets {', '.join(fixed[override_key(o)] for o in clash)} "
                f"itself (no-op proposals, more gates per run); drop --set {', '.join(clash)}"
            )
        audited = tuple(p.strip() for p in aa_policies.split(",") if p.strip())
        unknown = sorted(set(audited) - set(POLICIES))
        if unknown or not audited:
            raise click.UsageError(f"--aa-policies: unknown {unknown}; choose from {POLICIES}")
        g = aa_gates or (AA_GATES_PER_RUN_QUICK if quick else AA_GATES_PER_RUN)
        specs = [
            RunSpec(
                p, s, AA_BUDGET, config_path, (*overrides, *AA_OVERRIDES), max_gates=g, label="aa"
            )
            for s in seed_ids
            for p in audited
        ]
        runs = run_specs(specs, workers, progress, journal)
        all_runs += runs
        out["aa"] = {
            p: summarize_aa([r for r in runs if r["policy"] == p], base_cfg.gate_alpha)
            for p in audited
        }
        meta["aa_gates_per_run"] = g
        meta["aa_budget_cap"] = AA_BUDGET
        meta["aa_overrides"] = list(AA_OVERRIDES)
    if sweep:
        # seed-major order: an interrupted sweep still has whole seeds for every share
        specs = [
            RunSpec(p, s, b, config_path, (*overrides, *sweep_mix(share)), label=f"cue={share:.2f}")
            for s in seed_ids
            for share in SWEEP_SHARES
            for p in POLICIES
        ]
        runs = run_specs(specs, workers, progress, journal)
        all_runs += runs
        out["sweep"] = sweep_table(runs)
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    out["meta"] = meta
    if runs_out is not None:
        runs_out.write_text(json.dumps(all_runs), encoding="utf-8")
        if journal is not None:
            journal.unlink(missing_ok=True)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(
        f"SIMULATED world ({meta['sim_profile']} profile, agent temperature "
        f"{meta['agent_temperature']:g}), {config_path}, {seeds} seed(s), budget {b} training "
        "rollouts per run"
    )
    if "policies" in out:
        click.echo(format_table(out["policies"]))
        if out["criteria"] is not None:
            click.echo(format_criteria(out["criteria"]))
        click.echo(f"plot: {out['plot'] or 'not written (matplotlib is not installed)'}")
    if "aa" in out:
        click.echo("\nA/A audit (no-op proposals; every accept is false)")
        click.echo(format_aa(out["aa"]))
    if "sweep" in out:
        click.echo(
            "\nSensitivity: expected test gain of the delivered version (oracle fraction) / of "
            "the current version at the end of the budget, by helpful-proposal share"
        )
        click.echo(format_sweep(out["sweep"]))
    click.echo(f"({meta['wall_s']:.0f}s)")

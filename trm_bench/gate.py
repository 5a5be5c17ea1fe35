"""``trm bench gate``: the GATE.md §10 simulation study on top of the real kernel.

Every gated method runs :func:`trm_assets.domain.gate.pair_block` and
:func:`trm_assets.domain.gate.gate_decision` block by block on simulated outcomes; the warm
ladder is ordered by :func:`trm_assets.domain.ladder.warm_order`. Comparators (GEPA-style
minibatch, fixed-n McNemar, full-validation point estimate and McNemar) use the same pool model.

Pool model (GATE §10.1): p_B(q) ~ Beta(0.6, 0.5); edits are logit shifts (−0.384, 0, +0.388,
+0.790 → −5pp, 0, +5pp, +10pp pool-mean gain), "null_hetero" is +1.2 logits where p_B < ½ and
−1.077 elsewhere. Warm ladder: p̂ = (S+1)/6 from 4 prior baseline draws, keep p̂ ∈ [0.2, 0.8],
sort by p̂(1−p̂) descending; cold ladder (N = 50 comparison table): one prior draw, p̂ = ⅓ or ⅔,
2 wrong : 1 right over the whole pool (:func:`trm_assets.domain.ladder.cold_order`). Blocks of
10; fresh draws of both arms for every pass.

Why it is long: the §10 study and §10.2's worst case (its four null families: replayed, nearly
replayed and text-shifted passes, and a ladder read from a text-shifted baseline) drive the same
kernel through one :func:`run_gate`; split, the worst case would import the study's driver back
and the two tables could drift apart.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import numpy as np

from trm_assets.domain.gate import (
    GateParams,
    Verdict,
    chunk_plan,
    gate_decision,
    gate_plan,
    new_gate_state,
    pair_block,
    sign_test_p,
)
from trm_assets.domain.ladder import COLD_RIGHT, COLD_WRONG, cold_order, warm_order

EFFECTS: tuple[str, ...] = ("-5pp", "null", "null_hetero", "+5pp", "+10pp")
LOGIT_SHIFT: dict[str, float] = {"-5pp": -0.384, "null": 0.0, "+5pp": 0.388, "+10pp": 0.790}
HETERO_UP, HETERO_DOWN = 1.2, -1.077
P_LOW, P_HIGH = 0.2, 0.8
BLOCK = 10
MCNEMAR_ALPHA = 0.05

# The gated methods run through the real gate_decision; name → params.
GATED: dict[str, GateParams] = {
    "hybrid": GateParams(alpha=0.05, mode="hybrid", alpha_early=0.01, block=BLOCK),
    "hybrid_alpha10": GateParams(alpha=0.10, mode="hybrid", alpha_early=0.02, block=BLOCK),
    "ep_horizon": GateParams(alpha=0.05, mode="horizon", block=BLOCK),
    "ep_anytime": GateParams(alpha=0.05, mode="anytime", block=BLOCK),
}
METHODS: tuple[str, ...] = (
    *GATED,
    "fixed_n_mcnemar",
    "gepa_b3",
    "gepa_b10",
    "full_val_point",
    "full_val_mcnemar",
)


@dataclass(frozen=True)
class Setting:
    """One table of GATE §10.3."""

    pool: int
    passes: int
    ladder: str = "warm"


SETTINGS: tuple[Setting, ...] = (
    Setting(150, 1),
    Setting(50, 3),
    Setting(50, 1),
    Setting(50, 1, "cold"),
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def candidate_rates(p_b: np.ndarray, effect: str) -> np.ndarray:
    """p_C from p_B for an effect (logit shift, or the heterogeneous null)."""
    logit = np.log(p_b) - np.log1p(-p_b)
    if effect == "null_hetero":
        shift = np.where(p_b < 0.5, HETERO_UP, HETERO_DOWN)
    else:
        shift = np.full_like(p_b, LOGIT_SHIFT[effect])
    return _sigmoid(logit + shift)


def warm_ladder(p_b: np.ndarray, rng: np.random.Generator) -> tuple[str, ...]:
    """GATE §10.1 warm ladder: p̂ = (S+1)/6 from 4 prior baseline draws, filtered and sorted."""
    s = rng.binomial(4, p_b)
    return warm_order([(str(i), (int(x) + 1) / 6.0) for i, x in enumerate(s)], P_LOW, P_HIGH)


def cold_ladder(p_b: np.ndarray, rng: np.random.Generator) -> tuple[str, ...]:
    """GATE §10.1 cold ladder: one prior baseline draw, p̂ = ⅓ or ⅔, 2 wrong : 1 right."""
    x = rng.random(p_b.shape[0]) < p_b
    return cold_order([(str(i), COLD_RIGHT if xi else COLD_WRONG) for i, xi in enumerate(x)])


def run_gate(
    plan: Sequence[tuple[str, int]],
    base: dict[tuple[str, int], bool | None],
    cand: dict[tuple[str, int], bool | None],
    params: GateParams,
) -> tuple[bool, int]:
    """Run the real gate over pre-drawn outcomes; (accepted, candidate rollouts to decision)."""
    state = new_gate_state(len(plan), params)
    for chunk in chunk_plan(plan, params.block):
        blk = pair_block(chunk, base, cand, len(chunk), len(chunk))
        verdict = gate_decision(state, blk, params).verdict
        if verdict is not Verdict.CONTINUE:
            return verdict is Verdict.ACCEPT, state.positions
    raise AssertionError("the gate must decide at its last block")  # pragma: no cover


@dataclass
class Tally:
    accepts: int = 0
    rollouts: int = 0

    def add(self, accepted: bool, rollouts: int) -> None:
        self.accepts += int(accepted)
        self.rollouts += rollouts


def simulate_cell(
    setting: Setting, effect: str, replicates: int, rng: np.random.Generator
) -> dict[str, Tally]:
    """All methods for one (setting, effect) cell; gated methods share each replicate's draws."""
    tallies = {m: Tally() for m in METHODS}
    n = setting.pool
    for _ in range(replicates):
        p_b = np.clip(rng.beta(0.6, 0.5, size=n), 1e-9, 1 - 1e-9)
        p_c = candidate_rates(p_b, effect)
        ladder = warm_ladder(p_b, rng) if setting.ladder == "warm" else cold_ladder(p_b, rng)
        plan = gate_plan(ladder, setting.passes, BLOCK)
        if plan:
            idx = np.fromiter((int(q) for q, _ in plan), dtype=np.int64, count=len(plan))
            b_draw = rng.random(len(plan)) < p_b[idx]
            c_draw = rng.random(len(plan)) < p_c[idx]
            base: dict[tuple[str, int], bool | None] = dict(zip(plan, b_draw.tolist(), strict=True))
            cand: dict[tuple[str, int], bool | None] = dict(zip(plan, c_draw.tolist(), strict=True))
            for name, params in GATED.items():
                tallies[name].add(*run_gate(plan, base, cand, params))
            w = int(np.sum(c_draw & ~b_draw))
            los = int(np.sum(b_draw & ~c_draw))
            tallies["fixed_n_mcnemar"].add(sign_test_p(w, los) <= MCNEMAR_ALPHA, len(plan))
        else:  # nothing informative: no gate can run, nothing is accepted
            for name in (*GATED, "fixed_n_mcnemar"):
                tallies[name].add(False, 0)
        for b_size in (3, 10):
            pick = rng.choice(n, size=b_size, replace=False)
            sb = int(np.sum(rng.random(b_size) < p_b[pick]))
            sc = int(np.sum(rng.random(b_size) < p_c[pick]))
            tallies[f"gepa_b{b_size}"].add(sc > sb, b_size)  # GEPA: skip if new_sum <= old_sum
        fb = rng.random(n) < p_b
        fc = rng.random(n) < p_c
        tallies["full_val_point"].add(int(fc.sum()) > int(fb.sum()), n)
        w = int(np.sum(fc & ~fb))
        los = int(np.sum(fb & ~fc))
        tallies["full_val_mcnemar"].add(sign_test_p(w, los) <= MCNEMAR_ALPHA, n)
    return tallies


def run_study(
    replicates: int, seed: int, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every (setting, effect, method) case as a JSON-ready dict."""
    cases: list[dict[str, Any]] = []
    root = np.random.SeedSequence(seed)
    children = root.spawn(len(SETTINGS) * len(EFFECTS))
    for si, setting in enumerate(SETTINGS):
        for ei, effect in enumerate(EFFECTS):
            rng = np.random.default_rng(children[si * len(EFFECTS) + ei])
            started = time.perf_counter()
            tallies = simulate_cell(setting, effect, replicates, rng)
            if progress is not None:
                progress(
                    f"pool={setting.pool} {setting.ladder} passes={setting.passes} "
                    f"effect={effect}: "
                    f"{time.perf_counter() - started:.1f}s"
                )
            for method in METHODS:
                t = tallies[method]
                cases.append(
                    {
                        "pool": setting.pool,
                        "ladder": setting.ladder,
                        "passes": setting.passes,
                        "method": method,
                        "effect": effect,
                        "accept_rate": t.accepts / replicates,
                        "mean_candidate_rollouts": t.rollouts / replicates,
                        "replicates": replicates,
                    }
                )
    return cases


def format_tables(cases: Sequence[dict[str, Any]]) -> str:
    """Markdown tables in the layout of GATE §10.3: P(ACCEPT) / mean candidate rollouts."""
    out: list[str] = []
    for setting in SETTINGS:
        rows = [
            c
            for c in cases
            if (c["pool"], c["passes"], c["ladder"])
            == (setting.pool, setting.passes, setting.ladder)
        ]
        if not rows:
            continue
        reps = rows[0]["replicates"]
        out.append(
            f"Pool N = {setting.pool}, {setting.ladder} ladder, {setting.passes} pass(es), "
            f"{reps} replicates per cell (SE ≤ {50 / math.sqrt(reps):.2f}pp)"
        )
        out.append("")
        out.append("| method | " + " | ".join(EFFECTS) + " |")
        out.append("|---" * (len(EFFECTS) + 1) + "|")
        for method in METHODS:
            cells = []
            for effect in EFFECTS:
                c = next(x for x in rows if x["method"] == method and x["effect"] == effect)
                cells.append(f"{100 * c['accept_rate']:.1f}% / {c['mean_candidate_rollouts']:.0f}")
            out.append(f"| {method} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


QUICK_REPLICATES = 3000
FULL_REPLICATES = 20000


# ------------------------------------------------------------------------------------------------
# GATE §10.2 worst case for the configurations the defaults produce (issue 15 B)

WORST_CASE_ROWS: tuple[tuple[str, int, int, bool, float, float], ...] = (
    # (label, pool N, passes, fresh draws per pass, alpha, alpha_early)
    ("fresh draws (T > 0), N = 150, 1 pass", 150, 1, True, 0.05, 0.01),
    ("fresh draws (T > 0), N = 50, 3 passes (default < 60)", 50, 3, True, 0.05, 0.01),
    ("deterministic (T = 0), N = 50, 1 uniform pass (default)", 50, 1, False, 0.05, 0.01),
    ("deterministic (T = 0), N = 150, 1 uniform pass", 150, 1, False, 0.05, 0.01),
    (
        "deterministic (T = 0), N = 175 (validation+diagnosis), 1 uniform pass",
        175,
        1,
        False,
        0.05,
        0.01,
    ),
    ("deterministic (T = 0), N = 50, 3 REPLAYED passes (the old plan)", 50, 3, False, 0.05, 0.01),
    ("fresh draws, N = 50, 3 passes, alpha = .10", 50, 3, True, 0.10, 0.02),
)


# A low temperature (docs/decision-low-temperature.md): each arm's text fixes a per-question
# latent part, each pass adds a fresh part; two passes of one prompt share correlation r (the
# simulator's exp(−(T/τ)²)). Appended after the rows above so their random stream is unchanged.
_BEFORE, _BELOW = "(the plan before gate_fresh_temperature)", "(below gate_fresh_temperature)"
LOW_TEMPERATURE_ROWS: tuple[tuple[str, int, int, float], ...] = (
    # (label, pool N, passes, r)
    (f"low temperature (r = 0.5), N = 50, 3 passes {_BEFORE}", 50, 3, 0.5),
    (f"low temperature (r = 0.9), N = 50, 3 passes {_BEFORE}", 50, 3, 0.9),
    (f"low temperature (r = 0.9), N = 50, 1 uniform pass {_BELOW}", 50, 1, 0.9),
    ("low temperature (r = 0.25, INDEPENDENT_MAX_CORRELATION), N = 50, 3 passes", 50, 3, 0.25),
    # `trm bench decoding`'s one threshold (ρ_d = 2·arcsin(0.25)/π) across pool sizes and passes
    *(
        (f"decoding threshold (r = 0.25: ρ_d = 0.161), N = {n}, {k} passes", n, k, 0.25)
        for n, k in ((10, 3), (20, 3), (59, 3), (50, 2), (50, 5), (50, 10))
    ),
)


# A text's own per-question shift (``sim.text_flip_rate`` f, docs/decision-decoding-probe.md):
# the simulator's draw at T > 0 is [√ρ·W + √(1 − ρ)·E_text < Φ⁻¹(p)], W fresh per pass, E fixed
# per (question, text), ρ its text-to-text correlation ``flip_correlation(p, f)``. ρ is largest
# at p = ½; where 2p(1 − p) <= f it is 0 and every draw of a text repeats. Appended last.
_REFUSED = "(refused at fresh temperatures since the twenty-third session)"
TEXT_SHIFT_ROWS: tuple[tuple[str, int, int, float, float], ...] = (
    # (label, pool N, passes, p, f)
    (
        "text shifts (f = 0.15) at p = ½, N = 50, 3 passes (the bound a3ca453 held)",
        50,
        3,
        0.5,
        0.15,
    ),
    (f"text shifts (f = 0.15) at p = 0.92, N = 50, 3 passes {_REFUSED}", 50, 3, 0.92, 0.15),
    ("text shifts (f = 0.15) at p = 0.92, N = 50, 1 uniform pass (the remedy)", 50, 1, 0.92, 0.15),
)


# The warm ladder under text shifts (docs/decision-real-endpoint-uniform-order.md): p̂ read from
# earlier draws of the baseline text (init's, then one per slow update's R); from the third, the
# [p_low, p_high] filter drops where an easy pool's text did well and keeps where it happened to
# do worse, and a rewording regresses to the mean there.
# One pass, fresh draws (a real endpoint's default at T ≥ 1). Appended last.
LADDER_SHIFT_ROWS: tuple[tuple[str, int, float, float, int, bool], ...] = (
    # (label, pool N, p, f, observations of the baseline text, the ladder's order)
    (
        "text shifts (f = 0.15), every p = 0.85, N = 50, 1 pass, warm ladder of 3 observations",
        50,
        0.85,
        0.15,
        3,
        True,
    ),
    (
        "text shifts (f = 0.15), every p = 0.85, N = 50, 1 pass, warm ladder of 6 observations "
        "(a real endpoint's old plan at T >= 1: an unchanged text after five slow updates)",
        50,
        0.85,
        0.15,
        6,
        True,
    ),
    (
        "text shifts (f = 0.15), every p = 0.85, N = 50, 1 uniform pass over the pool "
        "(a real endpoint's plan now)",
        50,
        0.85,
        0.15,
        6,
        False,
    ),
)


def _row(label: str, alpha: float, replicates: int, accepts: int) -> dict[str, Any]:
    rate = accepts / replicates
    se = math.sqrt(max(rate * (1 - rate), 1e-12) / replicates)
    return {
        "setting": label,
        "alpha": alpha,
        "replicates": replicates,
        "false_accept_rate": round(rate, 4),
        "se": round(se, 4),
        "within_alpha_2se": rate <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / replicates),
    }


def worst_case_table(replicates: int, seed: int) -> list[dict[str, Any]]:
    """Every question at p_B = p_C = ½ (ψ = ½, the least favourable null), blocks of 10, hybrid.

    With fresh draws every pass draws both arms again; with deterministic decoding a question's
    pair is drawn once and every pass replays it (what a temperature-0 server does).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for label, n, passes, fresh, alpha, alpha_early in WORST_CASE_ROWS:
        params = GateParams(mode="hybrid", alpha=alpha, alpha_early=alpha_early, block=10)
        plan = gate_plan([f"q{i}" for i in range(n)], passes, params.block)
        accepts = 0
        for _ in range(replicates):
            b = rng.random((passes if fresh else 1, n)) < 0.5
            c = rng.random((passes if fresh else 1, n)) < 0.5
            base = {
                (f"q{i}", r): bool(b[r if fresh else 0, i]) for i in range(n) for r in range(passes)
            }
            cand = {
                (f"q{i}", r): bool(c[r if fresh else 0, i]) for i in range(n) for r in range(passes)
            }
            accepted, _ = run_gate(plan, dict(base), dict(cand), params)
            accepts += accepted
        rows.append(_row(label, alpha, replicates, accepts))
    params = GateParams(mode="hybrid", alpha=0.05, alpha_early=0.01, block=10)
    for label, n, passes, r in LOW_TEMPERATURE_ROWS:
        accepts = near_replay_accepts(n, passes, r, replicates, rng, params)
        rows.append(_row(label, params.alpha, replicates, accepts))
    for label, n, passes, p, f in TEXT_SHIFT_ROWS:
        accepts = text_shift_accepts(n, passes, p, f, replicates, rng, params)
        rows.append(_row(label, params.alpha, replicates, accepts))
    for label, n, p, f, seen, ladder in LADDER_SHIFT_ROWS:
        accepts = ladder_shift_accepts(n, p, f, seen, ladder, replicates, rng, params)
        rows.append(_row(label, params.alpha, replicates, accepts))
    return rows


def ladder_shift_accepts(
    n: int,
    p: float,
    f: float,
    seen: int,
    ladder: bool,
    replicates: int,
    rng: np.random.Generator,
    params: GateParams,
) -> int:
    """Accepts in ``replicates`` one-pass gates on a neutral rewording with fresh draws over
    ``n`` questions of pass rate ``p`` (each text its own per-question shift, ``f``). The ladder
    folds ``seen`` earlier draws of the baseline text through the real ``update_ladder`` (the
    first cold, then γ-EMA) and the gate visits its warm order; else the whole pool in a uniform
    order. A replicate whose warm ladder is empty counts as not accepted."""
    from trm_assets.domain.ladder import LadderParams, ladder_for, new_ladder, update_ladder

    (text_w, fresh_w), cut = _text_shift_model(p, f)
    qids = [f"q{i}" for i in range(n)]
    empty = new_ladder(dict.fromkeys(qids, "t"), LadderParams())
    accepts = 0
    for _ in range(replicates):
        text = text_w * rng.standard_normal((2, 1, n))  # each arm's own shifts
        earlier = text[0] + fresh_w * rng.standard_normal((seen, n)) < cut
        lad = empty
        for k in range(seen):
            lad = update_ladder(lad, f"r{k}", dict(zip(qids, map(bool, earlier[k]), strict=True)))
        order = ladder_for(lad, "t", warm=True) if ladder else [qids[i] for i in rng.permutation(n)]
        if order:
            right = text + fresh_w * rng.standard_normal((2, 1, n)) < cut  # the gate's pass
            accepts += _passes_accepted(gate_plan(list(order), 1, params.block), right, params)
    return accepts


def text_shift_accepts(
    n: int,
    passes: int,
    p: float,
    f: float,
    replicates: int,
    rng: np.random.Generator,
    params: GateParams,
) -> int:
    """Accepts in ``replicates`` gates over ``n`` questions of pass rate ``p`` on a neutral
    rewording (each arm's text its own per-question shift, ``sim.text_flip_rate`` ``f``), with
    fresh draws per pass (above): the near-replay model with the text as its fixed part."""
    weights, cut = _text_shift_model(p, f)
    return _fixed_part_accepts(n, passes, weights, cut, replicates, rng, params)


def _text_shift_model(p: float, f: float) -> tuple[tuple[float, float], float]:
    """The simulator's draw at pass rate ``p`` with ``text_flip_rate`` ``f`` (above): the weights
    of the text's own part and of the fresh part, and the cut the latent is right below."""
    from statistics import NormalDist

    from trm_assets.llm.sim.decoding import flip_correlation

    rho = flip_correlation(p, f)
    return (math.sqrt(1 - rho), math.sqrt(rho)), NormalDist().inv_cdf(p)


def near_replay_accepts(
    n: int, passes: int, r: float, replicates: int, rng: np.random.Generator, params: GateParams
) -> int:
    """Accepts in ``replicates`` gates (``passes`` passes over ``n`` questions) on the least
    favourable null at a low temperature, two draws of one prompt correlated ``r`` (above)."""
    weights = (math.sqrt(r), math.sqrt(1 - r))
    return _fixed_part_accepts(n, passes, weights, 0.0, replicates, rng, params)  # p = ½


def _fixed_part_accepts(
    n: int,
    passes: int,
    weights: tuple[float, float],
    cut: float,
    replicates: int,
    rng: np.random.Generator,
    params: GateParams,
) -> int:
    """Accepts in ``replicates`` gates on a null where each arm's text fixes a per-question
    latent part (independent between arms: every question's answer may move under the edit)
    and each pass adds a fresh one, with ``weights`` (fixed, fresh); right when the latent is
    below ``cut``."""
    fixed_w, fresh_w = weights
    plan = gate_plan([f"q{i}" for i in range(n)], passes, params.block)
    accepts = 0
    for _ in range(replicates):
        fixed = rng.standard_normal((2, 1, n))
        latent = fixed_w * fixed + fresh_w * rng.standard_normal((2, passes, n))
        accepts += _passes_accepted(plan, latent < cut, params)
    return accepts


def _passes_accepted(
    plan: Sequence[tuple[str, int]], right: np.ndarray, params: GateParams
) -> bool:
    """One gate over ``plan`` on outcomes ``right[arm, pass, question]`` (arm 0 the baseline)."""
    _, passes, n = right.shape
    arm_b: dict[tuple[str, int], bool | None] = {
        (f"q{i}", k): bool(right[0, k, i]) for i in range(n) for k in range(passes)
    }
    arm_c: dict[tuple[str, int], bool | None] = {
        (f"q{i}", k): bool(right[1, k, i]) for i in range(n) for k in range(passes)
    }
    accepted, _ = run_gate(plan, arm_b, arm_c, params)
    return bool(accepted)


@click.command("gate")
@click.option("--quick", is_flag=True, help=f"{QUICK_REPLICATES} replicates per cell (< 1 min).")
@click.option("--json", "as_json", is_flag=True, help="Print the cases as JSON.")
@click.option("--seed", type=int, default=20260307, show_default=True, help="Master seed.")
@click.option(
    "--replicates",
    type=click.IntRange(min=1),
    default=None,
    help=f"Replicates per cell (default {FULL_REPLICATES}, or {QUICK_REPLICATES} with --quick).",
)
@click.option(
    "--worst-case",
    is_flag=True,
    help="GATE §10.2's least-favourable null for the default configurations (fresh vs T = 0).",
)
def cli(quick: bool, as_json: bool, seed: int, replicates: int | None, worst_case: bool) -> None:
    """Reproduce GATE.md §10.3 (acceptance rates and rollouts) on the real gate kernel."""
    reps = replicates or (QUICK_REPLICATES if quick else FULL_REPLICATES)
    started = time.perf_counter()
    if worst_case:
        table = worst_case_table(reps, seed)
        if as_json:
            click.echo(json.dumps({"worst_case": table}, indent=1))
            return
        click.echo(
            "| setting (hybrid, blocks of 10, p_B = p_C = ½) | α | false accepts | ≤ α + 2 SE |"
        )
        click.echo("|---|---|---|---|")
        for r in table:
            click.echo(
                f"| {r['setting']} | {r['alpha']} | {100 * r['false_accept_rate']:.2f}% "
                f"± {100 * r['se']:.2f} | {'yes' if r['within_alpha_2se'] else '**no**'} |"
            )
        click.echo(f"({time.perf_counter() - started:.0f}s, {reps} replicates, seed {seed})")
        return
    progress = None if as_json else (lambda msg: click.echo(msg, err=True))
    cases = run_study(reps, seed, progress)
    if as_json:
        click.echo(json.dumps({"cases": cases}, indent=1))
    else:
        click.echo(format_tables(cases))
        click.echo(f"({time.perf_counter() - started:.0f}s, seed {seed})")

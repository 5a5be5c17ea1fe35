"""The text report of ``trm bench decoding`` (its ``--json`` object as a table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trm_assets.domain.pass_dependence import INDEPENDENT_MAX_CORRELATION


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def format_report(out: Mapping[str, Any]) -> str:
    lines = [
        f"{out['provider']}, {out['questions']} questions (validation + diagnosis pools, "
        f"{len(out['task_types'])} task types), two passes each of the prompt set's skills (A) "
        f"and a variant (B): {out['variant']}",
        f"threshold ρ_d ≤ {out['threshold']:.3f} (the worst case at latent correlation "
        f"{INDEPENDENT_MAX_CORRELATION}); "
        f"'independent' needs its 95% upper bound at most that and at least "
        f"{out['min_discordant_questions']} questions with a discordant pair",
        "",
        f"{'T':>5} {'acc A':>6} {'acc B':>6} {'disc':>6} {'ρ_d':>7} {'95% CI':>17} "
        f"{'sim ρ_d':>8} {'ICC':>6}  verdict",
    ]
    for t in out["temperatures"]:
        ci = f"[{fmt(t['ci_low'])}, {fmt(t['ci_high'])}]"
        lines.append(
            f"{t['temperature']:>5g} {t['accuracy_a']:>6.3f} {t['accuracy_b']:>6.3f} "
            f"{t['discordance']:>6.3f} {fmt(t['rho']):>7} {ci:>17} "
            f"{fmt(t['simulated_rho']):>8} {fmt(t['icc_within']):>6}  {t['verdict']}"
            + f" ({t['discordant_questions']} discordant questions"
            + (f", {t['dropped']} without an outcome)" if t["dropped"] else ")")
        )
    lines += ["", recommendation(out)]
    replayed = [t["temperature"] for t in out["temperatures"] if t["config_refuses"]]
    if replayed:
        lines.append(
            f"note: the simulated world's own draws correlate above r = "
            f"{INDEPENDENT_MAX_CORRELATION} at T = {', '.join(f'{t:g}' for t in replayed)} "
            "(sim.temperature_scale): the config check refuses repeated passes there whatever "
            "this variant shows (the least favourable edit moves every answer), so the "
            "recommendation leaves them out"
        )
    return "\n".join(lines)


def recommendation(out: Mapping[str, Any]) -> str:
    """What the probe says about ``gate_fresh_temperature`` (the config's value beside it)."""
    lowest, now = out["gate_fresh_temperature"], out["configured_gate_fresh_temperature"]
    if lowest is None:
        top = max(out["temperatures"], key=lambda t: t["temperature"])
        reasons = {
            "dependent": "keep gate_fresh_temperature above every temperature the agent runs "
            "at, so the gate runs one uniform pass",
            "inconclusive": "probe it with more questions in one planned look (each new look, "
            "e.g. with another --draw-seed, is another chance of a false 'independent')",
            "no evidence": "the texts never disagreed there: probe with a variant that changes "
            "answers (--variant-skills)",
        }
        why = (
            "the config check refuses repeated passes there for this simulated world"
            if top["config_refuses"]
            else reasons[str(top["verdict"])]
        )
        return (
            f"recommendation: none (now {now:g}) — repeated passes need every probed temperature "
            f"from the threshold up to be independent, and T = {top['temperature']:g} is "
            f"{top['verdict']}: {why}"
        )
    if now < lowest:
        return (
            f"recommendation: raise gate_fresh_temperature to {lowest:g} (now {now:g}): below "
            f"{lowest:g} the probe does not show two passes independent"
        )
    return (
        f"recommendation: gate_fresh_temperature: {lowest:g} is supported (now {now:g}); "
        f"repeated passes are valid from {lowest:g} up"
    )

"""``trm bench decoding``: may the gate count two rollouts of one prompt as independent at T?

``gate_fresh_temperature`` is the user's statement about their model: from that agent temperature
up, the gate runs repeated passes and counts every pair as new evidence
(``docs/decision-low-temperature.md``). This command measures the statement on the configured
provider — the simulated world, or a real OpenAI-compatible server — instead of guessing it.

For each temperature it rolls out N questions four times: the prompt set's skills (text A) and a
neutral variant (text B: every task type's skill with one neutral line appended, or
``--variant-skills``), two passes each, every rollout with its own seed. From the paired
differences ``d = b − a`` of the two passes it estimates ρ_d = E[d₁d₂]/E[d²]
(:mod:`trm_assets.domain.pass_dependence`) with a bootstrap interval over questions, and compares
it with the worst case the gate is designed for (ρ_d ≤ 0.161, the least favourable null at latent
correlation 0.25). The recommendation is the lowest probed temperature from which every probed
temperature up is independent.

Questions come from the validation and diagnosis pools of the config's split: the test pool
never informs a decision, and this one sets a config key. With the simulated world the report
also gives the value the simulator implies (its oracle's P_eff of both texts and the latent
correlation r(T)): the check that the estimate measures what it claims.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import click

from trm_assets.agent.tools import Toolbox
from trm_assets.cli.support import fail_on_trm_error
from trm_assets.domain.pass_dependence import (
    INDEPENDENT_MAX_CORRELATION,
    MAX_PASS_DEPENDENCE,
    MIN_DISCORDANT_QUESTIONS,
    PassDependence,
    PassVerdict,
    QuestionDraws,
    estimate_pass_dependence,
    lowest_independent_temperature,
)
from trm_assets.harness.data.config import load_config
from trm_assets.harness.data.rng import rng_for
from trm_assets.harness.loop.rollouts import InferenceProgress, InferenceResult, run_inference
from trm_assets.llm.factory import build_providers
from trm_assets.llm.providers import Providers
from trm_bench.decoding_inputs import (
    DEFAULT_QUESTIONS,
    ProbeError,
    ProbeInputs,
    check_variant_is_neutral,
    load_inputs,
)
from trm_bench.decoding_report import fmt, format_report

REPO: Final = Path(__file__).resolve().parents[1]
DEFAULT_PROMPTS: Final = REPO / "prompts"
DEFAULT_TEMPERATURES: Final = (0.3, 0.7, 1.0)
PASSES: Final = 2
HEARTBEAT_S: Final = 30.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class TemperatureProbe:
    temperature: float
    estimate: PassDependence
    dropped: int  # questions left out: a rollout without an outcome (infrastructure failure)
    rollouts: int
    wall_s: float
    simulated_r: float | None  # the simulator's r(T) (None with a real model)
    truth: float | None  # the simulator's ρ_d on the same questions (None with a real model)
    # what the config check bounds: r(T) with the text's own part (sim.text_flip_rate)
    simulated_shared: float | None = None

    @property
    def config_refuses(self) -> bool:
        """The simulated world's draws correlate above the bound the config check holds them to
        (the least favourable edit moves every answer): never recommended here."""
        shared = self.simulated_shared if self.simulated_shared is not None else self.simulated_r
        return shared is not None and shared > INDEPENDENT_MAX_CORRELATION


def _rollouts(
    inputs: ProbeInputs,
    providers: Providers,
    skills: Mapping[str, str],
    run_id: str,
    temperature: float,
    progress: Callable[[InferenceProgress], None] | None,
) -> InferenceResult:
    cfg = inputs.cfg
    return asyncio.run(
        run_inference(
            inputs.questions,
            llm=providers.agent,
            tools=Toolbox(inputs.dataset.trees),
            log=None,
            run_id=run_id,
            concurrency=cfg.concurrency,
            max_steps=cfg.max_agent_steps,
            skill_mode=cfg.skill_mode,
            skills=skills,
            prompts=inputs.prompts,
            replicates=PASSES,
            temperature=temperature,
            progress=progress,
            heartbeat_s=HEARTBEAT_S if progress is not None else None,
        )
    )


def question_draws(
    a: InferenceResult, b: InferenceResult
) -> tuple[list[tuple[str, QuestionDraws]], int]:
    """(question id, its four outcomes) for every question whose four rollouts have an outcome,
    and how many questions were left out."""
    out: dict[str, dict[tuple[str, int], bool | None]] = {}
    for arm, result in (("a", a), ("b", b)):
        for p in result.predictions:
            out.setdefault(p.question_id, {})[(arm, p.replicate)] = p.outcome
    kept: list[tuple[str, QuestionDraws]] = []
    for qid, o in out.items():
        values = [o.get((arm, rep)) for arm in ("a", "b") for rep in range(PASSES)]
        if all(v is not None for v in values):
            a1, a2, b1, b2 = (bool(v) for v in values)
            kept.append((qid, QuestionDraws(a1, a2, b1, b2)))
    return kept, len(out) - len(kept)


def simulated_shared(inputs: ProbeInputs, providers: Providers, temperature: float) -> float | None:
    """What the config check bounds: the most two simulated draws of one prompt share over
    questions, the text's own part included (None: a real model)."""
    if providers.oracle is None:
        return None
    from trm_assets.llm.sim_config import prompt_draw_worst_case

    return prompt_draw_worst_case(inputs.cfg.sim, temperature)


def simulated_r(inputs: ProbeInputs, providers: Providers, temperature: float) -> float | None:
    """The simulator's latent correlation r(T) of two draws of one prompt (None: a real model)."""
    if providers.oracle is None:
        return None
    from trm_assets.llm.sim.decoding import draw_correlation

    return draw_correlation(inputs.cfg.sim, temperature)


def simulated_truth(
    inputs: ProbeInputs, providers: Providers, qids: Sequence[str], r: float | None
) -> float | None:
    """ρ_d the simulator implies on ``qids`` when its draws correlate ``r`` (None with a real
    model)."""
    if providers.oracle is None or r is None:
        return None
    from trm_assets.llm.sim.decoding import pass_dependence_truth

    prompts, mode = inputs.prompts, inputs.cfg.skill_mode
    p_a, p_b = (
        providers.oracle.expected_by_question(
            list(qids),
            skills,
            system_prompt=prompts.system,
            tool_descriptions=prompts.tool_texts(),
            skill_mode=mode,
        )
        for skills in (inputs.skills_a, inputs.skills_b)
    )
    cross, disc = pass_dependence_truth(((p_a[q], p_b[q]) for q in qids), r)
    return cross / disc if disc > 0 else None


def _reporter(label: str, progress: Progress | None) -> Callable[[InferenceProgress], None] | None:
    """A progress line at most every :data:`HEARTBEAT_S` seconds, and at the end."""
    if progress is None:
        return None
    last = [0.0]

    def report(p: InferenceProgress) -> None:
        if p.done == p.total or p.elapsed_s - last[0] >= HEARTBEAT_S:
            last[0] = p.elapsed_s
            eta = p.eta_s()
            left = "" if eta is None or p.done == p.total else f", about {eta:.0f} s left"
            progress(f"{label}: {p.done}/{p.total} rollouts{left}")

    return report


def probe_temperature(
    inputs: ProbeInputs,
    providers: Providers,
    temperature: float,
    *,
    progress: Progress | None = None,
) -> TemperatureProbe:
    """Four rollouts of every question at ``temperature`` and the estimate of ρ_d."""
    if temperature <= 0:
        raise ProbeError(
            f"temperature {temperature}: at 0 a pass replays the one before by definition "
            "(the gate runs one uniform pass there); probe temperatures above 0"
        )
    t0 = time.perf_counter()
    results = []
    for arm, skills in (("a", inputs.skills_a), ("b", inputs.skills_b)):
        run_id = f"decoding-probe-{inputs.draw_seed}-{arm}-t{temperature!r}"
        report = _reporter(f"T={temperature:g} text {arm.upper()}", progress)
        result = _rollouts(inputs, providers, skills, run_id, temperature, report)
        if all(p.outcome is None for p in result.predictions):
            first = next((p.error for p in result.predictions if p.error), "no error recorded")
            raise ProbeError(
                f"T={temperature:g}: every rollout of text {arm.upper()} failed; the first: {first}"
            )
        results.append(result)
    kept, dropped = question_draws(*results)
    if not kept:
        raise ProbeError(f"T={temperature:g}: no question has all four outcomes")
    estimate = estimate_pass_dependence(
        [d for _, d in kept], rng_for(inputs.cfg.seed, "decoding-probe-bootstrap", str(temperature))
    )
    r = simulated_r(inputs, providers, temperature)
    return TemperatureProbe(
        temperature=temperature,
        estimate=estimate,
        dropped=dropped,
        rollouts=sum(len(r.predictions) for r in results),
        wall_s=time.perf_counter() - t0,
        simulated_r=r,
        truth=simulated_truth(inputs, providers, [q for q, _ in kept], r),
        simulated_shared=simulated_shared(inputs, providers, temperature),
    )


def run_probe(
    inputs: ProbeInputs,
    providers: Providers,
    temperatures: Sequence[float],
    *,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The probe at every temperature and the recommendation (the ``--json`` object)."""
    check_variant_is_neutral(inputs, providers)
    probes = []
    for t in sorted(set(temperatures)):
        probe = probe_temperature(inputs, providers, t, progress=progress)
        probes.append(probe)
        if progress is not None:  # a slow server: each temperature's result as soon as it is in
            e = probe.estimate
            progress(
                f"T={t:g}: ρ_d = {fmt(e.rho)} [{fmt(e.ci_low)}, {fmt(e.ci_high)}], "
                f"{e.discordant_questions} discordant questions: {e.verdict}"
            )
    lowest = lowest_independent_temperature(
        [  # a temperature the config check refuses for this world is never recommended
            (p.temperature, PassVerdict.INCONCLUSIVE if p.config_refuses else p.estimate.verdict)
            for p in probes
        ]
    )
    return {
        "provider": providers.label(),
        "questions": len(inputs.questions),
        "variant": inputs.variant,
        "task_types": list(inputs.task_types),
        "skill_mode": inputs.cfg.skill_mode,
        "draw_seed": inputs.draw_seed,
        "threshold": MAX_PASS_DEPENDENCE,
        "min_discordant_questions": MIN_DISCORDANT_QUESTIONS,
        "temperatures": [
            {
                "temperature": p.temperature,
                **asdict(p.estimate),
                "verdict": str(p.estimate.verdict),
                "dropped": p.dropped,
                "rollouts": p.rollouts,
                "wall_s": round(p.wall_s, 3),
                "simulated_rho": p.truth,
                "simulated_r": p.simulated_r,
                # what config_refuses compares (review: it was not in the output)
                "simulated_shared": p.simulated_shared,
                "config_refuses": p.config_refuses,
            }
            for p in probes
        ],
        "gate_fresh_temperature": lowest,
        "configured_gate_fresh_temperature": inputs.cfg.gate_fresh_temperature,
    }


@click.command("decoding")
@click.option("--config", "config_path", type=click.Path(), default=None, help="YAML config file.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a setting.")
@click.option(
    "--temperature",
    "temperatures",
    type=click.FloatRange(min=0, max=2, min_open=True),
    multiple=True,
    help="An agent temperature to probe (repeatable; default "
    f"{', '.join(map(str, DEFAULT_TEMPERATURES))}).",
)
@click.option(
    "--questions",
    "n_questions",
    type=click.IntRange(min=10),
    default=None,
    help=f"Questions per temperature, 4 rollouts each (default {DEFAULT_QUESTIONS}, or all the "
    "variant's questions if fewer).",
)
@click.option(
    "--prompts-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=DEFAULT_PROMPTS,
    show_default=True,
    help="The prompt set (agent_system.md, tools/, skills/): text A.",
)
@click.option(
    "--variant-skills",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Skill files (*.md) replacing text A's for text B (default: one neutral line appended "
    "to every task type's skill).",
)
@click.option(
    "--workspace",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Take the pools from this workspace's pools.json (read only), so its test pool stays "
    "unprobed (default: the config's split).",
)
@click.option(
    "--draw-seed",
    type=int,
    default=0,
    show_default=True,
    help="Part of every rollout's seed: another value draws all rollouts anew (a second look "
    "with more questions otherwise repeats the first one's draws).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")
@fail_on_trm_error
def cli(
    config_path: str | None,
    overrides: tuple[str, ...],
    temperatures: tuple[float, ...],
    n_questions: int | None,
    prompts_dir: Path,
    variant_skills: Path | None,
    workspace: Path | None,
    draw_seed: int,
    as_json: bool,
) -> None:
    """May the gate count two rollouts of one prompt as independent? (gate_fresh_temperature)

    Uses the config's provider: the SIMULATED world by default, or a real server
    (llm_provider: openai, TRM_LLM_BASE_URL). Progress goes to stderr."""
    cfg = load_config(config_path, overrides)
    inputs = load_inputs(
        cfg, n_questions, prompts_dir, variant_skills, workspace=workspace, draw_seed=draw_seed
    )
    providers = build_providers(cfg.provider_spec())
    out = run_probe(
        inputs,
        providers,
        temperatures or DEFAULT_TEMPERATURES,
        progress=lambda m: click.echo(m, err=True),
    )
    click.echo(json.dumps(out) if as_json else format_report(out))

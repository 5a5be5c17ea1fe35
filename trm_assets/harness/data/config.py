"""RunConfig: every research knob of a run, frozen, validated in four layers (seed §3, GATE §11).

Precedence: CLI ``--set key=value`` > environment / ``.env`` (``TRM_<FIELD>``, nested with
``__``: ``TRM_SIM__SEED=3``) > YAML file > defaults. Unknown keys are errors at every layer (a typo
must not silently fall back to a default). Secrets and engineering settings are *not* here: see
:mod:`trm_assets.llm.settings`.

Validation layers (all problems are reported together, each with its dotted path, the value and
the allowed range):

1. field types and ranges (pydantic);
2. edit budget (``1 ≤ edit_budget_end ≤ edit_budget_start``);
3. mini-batch (``min_class_per_batch < batch_size``, strictly);
4. gate (``gate_lambda_dir < 0``; hybrid ⇒ ``gate_alpha_early < gate_alpha``; elond ⇒ anytime;
   ``ladder_p_low < ladder_p_high``);

plus, once the data is loaded, ``val_size ≥ eval_min_per_class × n_task_types``
(:func:`check_against_data`).

Why it is long: every knob of RunConfig with its range and meaning, and the four validation layers
that must list every problem at once, live together so one file is the reference of the
configuration.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trm_assets.domain.errors import TrmError
from trm_assets.domain.gate import SMALL_POOL, SMALL_POOL_PASSES
from trm_assets.domain.pass_dependence import INDEPENDENT_MAX_CORRELATION
from trm_assets.llm.providers import ProviderSpec
from trm_assets.llm.sim_config import (
    PROFILES,
    NoBoolNumbers,
    SimConfig,
    prompt_draw_worst_case,
    sim_dump,
)

ENV_PREFIX = "TRM_"
# Environment variables with the TRM_ prefix that belong to Settings, not to RunConfig.
# Engineering variables, not config keys (TRM_PROGRESS_EVERY_S: `trm train`'s progress cadence)
_SETTINGS_ENV_PREFIXES = ("TRM_LLM_", "TRM_DAGSTER_", "TRM_HOME", "TRM_PROGRESS_EVERY_S")


def _field(default: Any, allowed: str, **kw: Any) -> Any:
    """A field whose allowed range is stated for humans in error messages."""
    return Field(default, json_schema_extra={"allowed": allowed}, **kw)


class ConfigError(TrmError, ValueError):
    """Every problem of a configuration, one per line."""

    def __init__(self, problems: Sequence[str], source: str = "config") -> None:
        self.problems = tuple(problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source}: {len(self.problems)} invalid setting(s):\n{body}")


#: The default cap on a stored model text (``run_log_text_cap_bytes``; the run log's own default,
#: ``storage.runlog.DEFAULT_TEXT_CAP_BYTES``, is this value).
RUN_LOG_TEXT_CAP_DEFAULT: Final = 64 * 1024


class RunConfig(NoBoolNumbers):
    """All decision-relevant knobs of one experiment. Frozen: a run never mutates its config."""

    # allow_inf_nan=False: ``.inf``/``.nan`` pass a bound like ``>= 0`` and crash later (issue 18)
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # --- data and seeds -------------------------------------------------------------------------
    seed: int = _field(0, "any integer")
    questions: str = _field("data/default/questions.json", "a question file (json, csv, parquet)")
    trees: str = _field("data/default/trees", "a directory of tree JSON files")
    ground_truth: str | None = _field(
        "data/default/ground_truth.json", "the simulator's sidecar, or null with a real model"
    )

    # --- pools (SPEC 5.1) -----------------------------------------------------------------------
    test_size: int = _field(600, ">= 1", ge=1)
    val_size: int = _field(600, ">= 1", ge=1)
    eval_min_per_class: int = _field(30, ">= 1", ge=1)

    # --- loop -----------------------------------------------------------------------------------
    epochs: int = _field(3, ">= 1", ge=1)
    rollout_budget: int | None = _field(
        None,
        ">= 1, or null (no budget: the run ends after `epochs`). Training rollouts the run aims "
        "to spend (every rollout but the test-pool reports): before each step the planner checks "
        "that the largest step of the run so far plus the last slow update's cost still fit; if "
        "not, the epoch ends early with its slow update (or the run finalizes if the epoch has "
        "no step yet), so the last rollouts spent are always evaluated and deliverable. The "
        "check uses estimates: a step or slow update dearer than the ones before can take the "
        "run past the budget",
        ge=1,
    )
    steps_per_epoch: int = _field(4, "1..10000", ge=1, le=10000)
    patience: int = _field(2, ">= 1", ge=1)
    batch_size: int = _field(24, ">= 2", ge=2)
    min_class_per_batch: int = _field(2, ">= 1 and < batch_size", ge=1)
    gate_cooldown_steps: int = _field(2, ">= 0", ge=0)
    gate_policy: Literal["ce_gate", "accept_all", "minibatch_sum", "full_val_point"] = _field(
        "ce_gate", "ce_gate | accept_all | minibatch_sum | full_val_point"
    )

    # --- edit budget (cosine from start to end over all steps; end = slow-update budget) --------
    edit_budget_start: int = _field(4, "1..50", ge=1, le=50)
    edit_budget_end: int = _field(1, "1..edit_budget_start", ge=1, le=50)

    # --- gate (GATE.md §11) ---------------------------------------------------------------------
    gate_alpha: float = _field(0.05, "0 < α < 1", gt=0, lt=1)
    gate_mode: Literal["anytime", "horizon", "hybrid"] = _field(
        "hybrid", "anytime | horizon | hybrid"
    )
    gate_alpha_early: float = _field(0.01, "0 < α₁ < gate_alpha", gt=0, lt=1)
    gate_alpha_harm: float = _field(0.10, "0 < α_h < 1", gt=0, lt=1)
    gate_lambda0: float = _field(0.4, "0 < λ₀ < 1", gt=0, lt=1)
    gate_lambda_dir: float = _field(math.log(0.1), "< 0")
    gate_block: int = _field(10, ">= 1", ge=1)
    gate_futility_power: float = _field(
        0.0,
        "0 <= x < 1: REJECT_FUTILE once the chance of accepting by the plan's end under the "
        "design alternative is below this (0: only when unreachable)",
        ge=0,
        lt=1,
    )
    gate_pool: Literal["validation", "validation+diagnosis"] = _field(
        "validation",
        "validation | validation+diagnosis (temperature 0: the gate also visits the type's "
        "diagnosis-pool questions no step batch has rolled out, known baselines first; "
        "above temperature 0 only the validation pool is visited)",
    )
    gate_screen: bool = _field(
        False,
        "true | false (temperature 0, known baselines first: REJECT_FUTILE after the "
        "known-baseline questions unless the candidate is ahead there, W − L ≥ 1)",
    )
    gate_passes: int | None = _field(
        None,
        f"1..50, or null (1; {SMALL_POOL_PASSES} for pools < {SMALL_POOL} with the simulated "
        "world's independent draws, gate_fresh_temperature). More than 1 on a real endpoint "
        "counts draws of one text as independent: set it only where `trm bench decoding` says "
        "INDEPENDENT",
        ge=1,
        le=50,
    )
    gate_fresh_temperature: float = _field(
        1.0,
        "0 < x <= 2: the lowest agent temperature at which the gate counts two rollouts of one "
        "prompt as independent draws (repeated passes; with the simulated world the ladder's "
        "order); below it a low temperature nearly replays the answer, and the gate takes the "
        "temperature-0 plan (one uniform pass). `trm bench decoding` measures it on the "
        "configured model",
        gt=0,
        le=2,
    )
    gate_max_blocks: int | None = _field(
        None, ">= 1, or null (ceil(questions·passes/block): the ladder's, or the pool's)", ge=1
    )
    gate_infra_max_rate: float = _field(0.2, "0 < x < 1", gt=0, lt=1)
    gate_infra_min_denominator: int = _field(10, ">= 10", ge=10)
    gate_grid_k: int = _field(20, "5..200", ge=5, le=200)
    gate_grid_max: float = _field(0.9, "0 < x < 1", gt=0, lt=1)
    run_error_policy: Literal["per_gate", "pfer", "elond"] = _field(
        "per_gate", "per_gate | pfer | elond"
    )
    run_pfer_budget: float = _field(1.0, "> 0", gt=0)
    run_fdr_alpha: float = _field(0.10, "0 < x < 1", gt=0, lt=1)
    run_max_gates: int | None = _field(None, ">= 1, or null (epochs × steps × task types)", ge=1)
    probation_alpha_harm: float = _field(0.10, "0 < x < 1", gt=0, lt=1)
    probation_rollback_margin: int = _field(0, ">= 0 (an integer count of questions)", ge=0)
    probation_min_pairs: int = _field(10, ">= 1", ge=1)

    # --- information ladder (fidelity #6) -------------------------------------------------------
    ladder_p_low: float = _field(0.2, "0 <= p_low < p_high", ge=0, lt=1)
    ladder_p_high: float = _field(0.8, "p_low < p_high <= 1", gt=0, le=1)
    ladder_gamma: float = _field(0.3, "0 < γ <= 1", gt=0, le=1)
    ladder_probe_every: int = _field(
        3, ">= 1 (one probe question after every N ladder items)", ge=1
    )

    # --- inference ------------------------------------------------------------------------------
    concurrency: int = _field(8, "1..512", ge=1, le=512)
    max_agent_steps: int = _field(8, "1..64", ge=1, le=64)
    skill_mode: Literal["task", "all", "none"] = _field("task", "task | all | none")
    infra_outage_rate: float = _field(
        0.5,
        "0 < x <= 1: share of rollouts ended by an infra failure (of model calls in the "
        "simulated world), in a barrier or over the last infra_outage_window rollouts, beyond "
        "which the unit stops (an outage is not a result)",
        gt=0,
        le=1,
    )
    infra_outage_window: int = _field(20, ">= 1 rollouts", ge=1)
    run_log_text_cap_bytes: int = _field(
        RUN_LOG_TEXT_CAP_DEFAULT,
        "1024 .. 16 MiB bytes: the cap on each model text the run log stores (a reply, a tool "
        "result, an error); the original size is recorded beside it (issue 18.7: unbounded, "
        "1 MB replies made a 540 MB run log). Diagnosis reads the stored traces back, so a cap "
        "below a trace's length can change what it is shown",
        ge=1024,
        le=16 * 1024 * 1024,
    )
    agent_temperature: float | None = _field(
        None,
        "0..2, or null (the world's default: sim.agent_temperature with the simulator, 0 with a "
        "real model)",
        ge=0,
        le=2,
    )

    # --- models ---------------------------------------------------------------------------------
    llm_provider: Literal["sim", "openai"] = _field("sim", "sim | openai")
    agent_model: str = _field("sim-agent", "a model name", min_length=1)
    evolve_model: str = _field("sim-evolve", "a model name", min_length=1)
    diagnose_model: str | None = _field(None, "a model name, or null to use evolve_model")

    # --- simulated world ------------------------------------------------------------------------
    sim: SimConfig = Field(default_factory=SimConfig)

    @model_validator(mode="after")
    def _cross_field(self) -> RunConfig:
        problems = cross_field_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def fingerprint(self) -> str:
        """Hash of the decision-relevant fields (resume guard: a change warns).

        A key added later is left out where its value decides nothing, so a checkpoint written
        before it resumes without a spurious drift warning: ``gate_fresh_temperature`` outside
        0 < T < it (the gate's plan is the one it always was), ``sim.temperature_scale`` at 0
        (issue 4's fresh draws), ``run_log_text_cap_bytes`` at its default (the cap it always
        was). A run at 0 < T < ``gate_fresh_temperature``, whose plan did
        change, is warned."""
        return _hash(self.decision_values())

    def decision_values(self) -> dict[str, Any]:
        """The values :meth:`fingerprint` hashes, as JSON (no secret: the config holds none), so
        a drift warning can name the keys that changed."""
        data = self.model_dump(mode="json", exclude=set(NON_DECISION_FIELDS))
        t = self.effective_agent_temperature()
        if not 0 < t < self.gate_fresh_temperature:
            del data["gate_fresh_temperature"]
        if self.run_log_text_cap_bytes == RUN_LOG_TEXT_CAP_DEFAULT:  # as before the key existed
            del data["run_log_text_cap_bytes"]
        data["sim"] = sim_dump(self.sim)
        return data

    def structural_fingerprint(self) -> str:
        """Hash of the fields whose change makes a saved state meaningless (resume refuses)."""
        return _hash(self.model_dump(mode="json", include=set(STRUCTURAL_FIELDS)))

    def effective_diagnose_model(self) -> str:
        return self.diagnose_model or self.evolve_model

    def effective_agent_temperature(self) -> float:
        """The decoding temperature of every agent rollout (step, evaluations, gates)."""
        return agent_temperature_of(self.agent_temperature, self.llm_provider, self.sim)

    def fresh_draws(self) -> bool:
        """Whether a rollout is a new sample (temperature > 0), so an earlier rollout of the same
        prompt cannot stand in for it. At temperature 0 a real server answers the same prompt
        the same way (GATE §6.3 R5) and outcomes are reused."""
        return self.effective_agent_temperature() > 0

    def independent_draws(self) -> bool:
        """Whether the gate may count two rollouts of one prompt as independent evidence:
        temperature ≥ ``gate_fresh_temperature``. Below it (a low temperature nearly replays the
        greedy answer: docs/decision-low-temperature.md) the gate uses the temperature-0 plan,
        one uniform pass, valid at any decoding."""
        return self.effective_agent_temperature() >= self.gate_fresh_temperature

    def provider_spec(self) -> ProviderSpec:
        """What :func:`trm_assets.llm.factory.build_providers` needs from the config."""
        return ProviderSpec(
            kind=self.llm_provider,
            agent_model=self.agent_model,
            evolve_model=self.evolve_model,
            diagnose_model=self.effective_diagnose_model(),
            ground_truth=self.ground_truth,
            sim=self.sim,
        )


# Fields that change how fast a run goes, never what it decides. (`epochs` is decision-relevant:
# the cosine edit-budget schedule and the default gate cap depend on it.)
NON_DECISION_FIELDS: tuple[str, ...] = (
    "concurrency",
    "infra_outage_rate",
    "infra_outage_window",
)
# Fields whose change invalidates saved pools, batches or correctness: resume refuses.
STRUCTURAL_FIELDS: tuple[str, ...] = (
    "seed",
    "questions",
    "trees",
    "test_size",
    "val_size",
    "eval_min_per_class",
    "batch_size",
    "min_class_per_batch",
    "steps_per_epoch",
)


def _hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cross_field_problems(
    c: RunConfig | Mapping[str, Any], skip: frozenset[str] = frozenset()
) -> list[str]:
    """Layers 2-4 of the seed's validation; each problem names the fields and values.

    Works on a validated config or on raw values (``skip`` names fields that already failed their
    own validation, whose checks are left out), so one error message can list every problem.
    """
    v: dict[str, Any] = {
        name: info.default
        for name, info in RunConfig.model_fields.items()
        if not info.is_required()
    }
    v.update(c.model_dump() if isinstance(c, RunConfig) else dict(c))
    checks: list[tuple[tuple[str, ...], Callable[[], bool], Callable[[], str]]] = [
        # layer 2: edit budget
        (
            ("edit_budget_end", "edit_budget_start"),
            lambda: v["edit_budget_end"] > v["edit_budget_start"],
            lambda: (
                f"edit_budget_end: {v['edit_budget_end']} must be <= edit_budget_start "
                f"({v['edit_budget_start']})"
            ),
        ),
        # layer 3: mini-batch
        (
            ("min_class_per_batch", "batch_size"),
            lambda: v["min_class_per_batch"] >= v["batch_size"],
            lambda: (
                f"min_class_per_batch: {v['min_class_per_batch']} must be strictly less than "
                f"batch_size ({v['batch_size']})"
            ),
        ),
        # layer 4: gate (GATE §11) and ladder
        (
            ("gate_lambda_dir",),
            lambda: not v["gate_lambda_dir"] < 0,
            lambda: f"gate_lambda_dir: {v['gate_lambda_dir']} must be < 0 (e.g. ln 0.1 = -2.303)",
        ),
        (
            ("gate_mode", "gate_alpha_early", "gate_alpha"),
            lambda: v["gate_mode"] == "hybrid" and not v["gate_alpha_early"] < v["gate_alpha"],
            lambda: (
                f"gate_alpha_early: {v['gate_alpha_early']} must be < gate_alpha "
                f"({v['gate_alpha']}) when gate_mode is hybrid"
            ),
        ),
        (
            ("run_error_policy", "gate_mode"),
            lambda: v["run_error_policy"] == "elond" and v["gate_mode"] != "anytime",
            lambda: (
                f"gate_mode: {v['gate_mode']!r} must be 'anytime' when run_error_policy is 'elond'"
            ),
        ),
        (
            ("ladder_p_low", "ladder_p_high"),
            lambda: not v["ladder_p_low"] < v["ladder_p_high"],
            lambda: (
                f"ladder_p_low: {v['ladder_p_low']} must be < ladder_p_high ({v['ladder_p_high']})"
            ),
        ),
    ]
    checks += _decoding_checks(v)
    problems: list[str] = []
    for fields, violated, message in checks:
        if skip.intersection(fields):
            continue
        try:
            if violated():
                problems.append(message())
        except TypeError:  # a raw value of the wrong type: its own field error says so
            continue
    return problems


_Check = tuple[tuple[str, ...], Callable[[], bool], Callable[[], str]]


def agent_temperature_of(agent_temperature: float | None, provider: str, sim: SimConfig) -> float:
    """``agent_temperature``, or the world's default when null: the simulator's
    ``sim.agent_temperature``, 0 with a real model."""
    if agent_temperature is not None:
        return float(agent_temperature)
    return sim.agent_temperature if provider == "sim" else 0.0


def _decoding_checks(v: Mapping[str, Any]) -> list[_Check]:
    """Gate options that are invalid or do nothing at the agent temperature (issue 15 B); the
    temperature of raw values follows :meth:`RunConfig.effective_agent_temperature`."""

    def sim_config() -> SimConfig:
        sim = v.get("sim")
        if not isinstance(sim, SimConfig):
            try:  # raw values: the section as given (the profile fills the rest), or the default
                sim = SimConfig.model_validate(sim if isinstance(sim, Mapping) else {})
            except ValidationError as e:  # the sim section's own errors say what is wrong
                raise TypeError from e
        return sim

    def temperature() -> float:
        return agent_temperature_of(v["agent_temperature"], v["llm_provider"], sim_config())

    def correlation() -> float:
        """The most two simulated draws of one prompt share at the agent temperature, over
        questions: the sampler's part, or 1 with a text's own part (``sim.text_flip_rate``)."""
        return prompt_draw_worst_case(sim_config(), temperature())

    def why() -> str:
        sim = sim_config()
        if sim.text_flip_rate > 0.0:
            return (
                f"sim.text_flip_rate: {sim.text_flip_rate}: every draw of one text carries that "
                "text's own per-question shift, and on questions with 2p(1 − p) <= "
                f"{sim.text_flip_rate} (p near 0 or 1) it decides the answer, so two draws of "
                f"one prompt at agent temperature {temperature()} repeat it (a shared latent "
                "part of up to 1, > "
                f"{INDEPENDENT_MAX_CORRELATION}; three passes over such questions accept a "
                "neutral rewording at 14-15%, not 5%)"
            )
        return (
            f"sim.temperature_scale: {sim.temperature_scale}: two simulated draws of one "
            f"prompt at agent temperature {temperature()} share a latent correlation of "
            f"{correlation():.2f} (> {INDEPENDENT_MAX_CORRELATION})"
        )

    def remedy() -> str:
        sim = sim_config()
        if sim.text_flip_rate > 0.0:
            return "use sim.text_flip_rate: 0"
        return (
            f"use sim.temperature_scale <= "
            f"{temperature() / math.sqrt(-math.log(INDEPENDENT_MAX_CORRELATION)):.3g}"
        )

    return [
        (
            ("gate_passes", "gate_fresh_temperature", "agent_temperature", "sim", "llm_provider"),
            lambda: temperature() == 0 and v["gate_passes"] is not None and v["gate_passes"] > 1,
            lambda: (
                f"gate_passes: {v['gate_passes']} replays identical pairs at agent temperature "
                f"{temperature()} (deterministic decoding gives the same answer to the same "
                "prompt, so a second pass adds no evidence but is counted as if it did); use "
                "gate_passes: 1 (or null), or an agent_temperature >= gate_fresh_temperature "
                f"({v['gate_fresh_temperature']})"
            ),
        ),
        (
            ("gate_passes", "gate_fresh_temperature", "agent_temperature", "sim", "llm_provider"),
            lambda: (
                0 < temperature() < v["gate_fresh_temperature"]
                and v["gate_passes"] is not None
                and v["gate_passes"] > 1
            ),
            lambda: (
                f"gate_passes: {v['gate_passes']} at agent temperature {temperature()}, below "
                f"gate_fresh_temperature ({v['gate_fresh_temperature']}): a low temperature "
                "nearly replays the same answer to the same prompt, so a second pass adds "
                "little evidence but is counted as if it were independent; use gate_passes: 1 "
                "(or null), or lower gate_fresh_temperature if this model's draws are "
                "independent at this temperature"
            ),
        ),
        (
            ("gate_policy", "gate_fresh_temperature", "agent_temperature", "sim", "llm_provider"),
            lambda: (
                v["llm_provider"] == "sim"
                and v["gate_policy"] == "ce_gate"
                and 0 < v["gate_fresh_temperature"] <= temperature()
                and correlation() > INDEPENDENT_MAX_CORRELATION
            ),
            lambda: (
                f"{why()}, yet the gate counts them as independent there (temperature >= "
                f"gate_fresh_temperature {v['gate_fresh_temperature']}: repeated passes, the "
                f"ladder's order); raise gate_fresh_temperature above {temperature()} (one "
                f"uniform pass, valid at any correlation), or {remedy()}"
            ),
        ),
        (
            ("gate_screen", "gate_pool", "agent_temperature", "sim", "llm_provider"),
            lambda: (
                bool(v["gate_screen"])
                and (v["gate_pool"] != "validation+diagnosis" or temperature() > 0)
            ),
            lambda: (
                "gate_screen: true screens the known-baseline questions of a temperature-0 plan "
                "that also visits diagnosis questions; it needs gate_pool: validation+diagnosis "
                f"and agent temperature 0 (got gate_pool: {v['gate_pool']}, temperature "
                f"{temperature()}), else it does nothing"
            ),
        ),
        (
            ("gate_pool", "agent_temperature", "sim", "llm_provider"),
            lambda: v["gate_pool"] == "validation+diagnosis" and temperature() > 0,
            lambda: (
                "gate_pool: validation+diagnosis adds never-shown diagnosis questions to a "
                f"temperature-0 plan; at agent temperature {temperature()} only the validation "
                "pool is visited, so it would do nothing: use gate_pool: validation, or "
                "agent_temperature: 0"
            ),
        ),
    ]


def check_against_data(config: RunConfig, task_types: Iterable[str], n_questions: int) -> None:
    """The data-dependent layer: stratified validation and pool sizes must fit the data."""
    types = sorted(set(task_types))
    problems: list[str] = []
    need = config.eval_min_per_class * len(types)
    if config.val_size < need:
        problems.append(
            f"val_size: {config.val_size} must be >= eval_min_per_class × task types = "
            f"{config.eval_min_per_class} × {len(types)} = {need}"
        )
    used = config.test_size + config.val_size + 1  # at least one diagnosis question
    if used > n_questions:
        problems.append(
            f"test_size + val_size: {used - 1} leaves no diagnosis question out of the "
            f"{n_questions} loaded from {config.questions}"
        )
    if problems:
        raise ConfigError(problems, "config vs data")


# ------------------------------------------------------------------------------------------------
# Loading with precedence CLI > env/.env > YAML


def _loc_str(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in loc)


def _allowed(loc: tuple[int | str, ...]) -> str | None:
    model: Any = RunConfig
    info = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        info = fields[part]
        model = info.annotation
    extra = getattr(info, "json_schema_extra", None)
    return extra.get("allowed") if isinstance(extra, dict) else None


def _held(layer: Mapping[str, Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """The part of ``loc`` whose value ``layer`` set: all of it, or a shorter prefix the layer
    set to a non-mapping (``--set sim=5``); None when the value came from elsewhere."""
    node: Any = layer
    for i, part in enumerate(loc):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
        if not isinstance(node, Mapping) and i < len(loc) - 1:
            return loc[: i + 1]
    return loc or None


def _format_validation_error(
    e: ValidationError, origin: Callable[[tuple[int | str, ...]], str | None] = lambda _: None
) -> list[str]:
    out: list[str] = []
    for err in e.errors():
        loc = tuple(err.get("loc", ()))
        # not the file the message names: say where the value came from
        given = origin(loc) if loc else None
        where = f" [from {given}]" if given else ""
        if not loc and err.get("type") == "value_error":
            # cross-field problems arrive as one multi-line message
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            out.extend(line for line in msg.splitlines() if line.strip())
            continue
        path = _loc_str(loc) or "<root>"
        if err.get("type") == "extra_forbidden":
            out.append(f"{path}: unknown key{where} (check the spelling; see `trm config show`)")
            continue
        allowed = _allowed(loc)
        value = err.get("input")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        line = f"{path}: {msg} (got {value!r})"
        if allowed:
            line += f"; allowed: {allowed}"
        out.append(line + where)
    return out


def _set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        raise ConfigError([f"{dotted!r}: empty key"], "--set")
    node = target
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError([f"{dotted}: {part!r} is not a section"], "--set")
        node = nxt
    node[parts[-1]] = value


def _parse_scalar(text: str) -> Any:
    """Parse an override value like YAML would (``0.1`` → float, ``null`` → None, ``[1,2]``)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def override_key(item: str) -> str:
    """The dotted key of a ``--set KEY=VALUE`` item (``" sim.seed =3"`` → ``"sim.seed"``)."""
    return item.partition("=")[0].strip()


def parse_set_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["gate_alpha=0.1", "sim.seed=3"]`` → nested dict; malformed items are errors."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for item in items:
        _, sep, raw = item.partition("=")
        key = override_key(item)
        if not sep or not key:
            bad.append(f"--set {item!r}: expected key=value")
            continue
        _set_dotted(out, key, _parse_scalar(raw))
    if bad:
        raise ConfigError(bad, "--set")
    return out


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``TRM_GATE_ALPHA=0.1`` / ``TRM_SIM__SEED=3`` → nested dict (Settings variables skipped)."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name.startswith(_SETTINGS_ENV_PREFIXES):
            continue
        dotted = name[len(ENV_PREFIX) :].lower().replace("__", ".")
        top = dotted.split(".", 1)[0]
        if top not in RunConfig.model_fields:  # the variable, not a key nobody typed
            section = next((f for f in _SECTIONS if top.startswith(f"{f}_")), None)
            hint = (
                f" (a key of the {section} section: {ENV_PREFIX}{section.upper()}__"
                f"{top[len(section) + 1 :].upper()})"
                if section
                else " (see `trm config show` for the keys)"
            )
            bad.append(f"{name}: no config key {top!r}{hint}")
            continue
        _set_dotted(out, dotted, _parse_scalar(environ[name]))
    if bad:
        raise ConfigError(bad, "environment")
    return out


#: The nested sections of RunConfig (an environment variable reaches their keys with ``__``).
_SECTIONS: Final = tuple(
    name
    for name, info in RunConfig.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
)


def read_dotenv(path: str | Path = ".env") -> dict[str, str]:
    """Variables of a ``.env`` file (values from the real environment win over it)."""
    from dotenv import dotenv_values  # shipped with pydantic-settings

    p = Path(path)
    if not p.is_file():
        return {}
    return {k: v for k, v in dotenv_values(p).items() if v is not None}


def layered_environ(
    environ: Mapping[str, str] | None = None, dotenv_path: str | Path | None = ".env"
) -> dict[str, str]:
    """The variables a run reads: ``.env`` (when ``dotenv_path`` is given) under ``environ``
    (the process environment when None)."""
    env = read_dotenv(dotenv_path) if dotenv_path is not None else {}
    env.update(os.environ if environ is None else environ)
    return env


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (the last one silently
    won: a config with two ``gate_alpha`` lines ran with whichever came later)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            # only keys written as plain scalars (merge keys `<<` and complex keys are left to
            # the parent, which reports what it cannot take)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_scalar(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([f"cannot read the file ({e.strerror})"], str(p)) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"not UTF-8 text (byte {e.start})"], str(p)) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise ConfigError([f"{where}invalid YAML ({getattr(e, 'problem', e)})"], str(p)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"top level must be a mapping of settings, got {type(data).__name__}"], str(p)
        )
    return data


def load_config(
    yaml_path: str | Path | None = None,
    cli_overrides: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    dotenv_path: str | Path | None = ".env",
) -> RunConfig:
    """Resolve the config with precedence CLI > env/.env > YAML > defaults.

    Raises :class:`ConfigError` listing every problem (unknown keys included).
    """
    layers: dict[str, Any] = {}
    source = str(yaml_path) if yaml_path else "config"
    if yaml_path is not None:
        layers = read_yaml_config(yaml_path)
    env = layered_environ(environ, dotenv_path)
    from_env, from_cli = env_overrides(env), parse_set_overrides(cli_overrides)
    layers = _deep_merge(_deep_merge(layers, from_env), from_cli)

    def origin(loc: tuple[int | str, ...]) -> str | None:
        """Which layer gave the value at ``loc`` when it is not the YAML file (named above)."""
        if _held(from_cli, loc) is not None:
            return "--set"
        held = _held(from_env, loc)
        return None if held is None else ENV_PREFIX + "__".join(str(p).upper() for p in held)

    try:
        return RunConfig.model_validate(layers)
    except ValidationError as e:
        problems = _format_validation_error(e, origin)
        failed = frozenset(str(err["loc"][0]) for err in e.errors() if err.get("loc"))
        if failed:  # field errors stop pydantic before the cross-field layer: run it here
            known = {k: val for k, val in layers.items() if k in RunConfig.model_fields}
            problems += cross_field_problems(known, skip=failed)
        raise ConfigError(problems, source) from None


def config_to_yaml(config: RunConfig) -> str:
    """The resolved config as YAML (no secrets live in RunConfig).

    The ``sim`` keys whose value is the profile's own are written as comments under the section
    (``# text_flip_rate: 0.15``): the dump shows every resolved value, and loading it back — or
    loading it with another ``sim.profile`` — lets those keys follow the profile, as the
    original config did. Written as keys, they would pin the old profile's values and make the
    new profile a mere label. Loading the dump gives the same config (tested)."""
    data = config.model_dump(mode="json")
    sim = data.pop("sim")
    profile = config.sim.profile
    own = PROFILES.get(profile, {})
    followed: dict[str, Any] = {}
    pinned: dict[str, Any] = {}
    for key, value in sim.items():
        if key not in own:
            pinned[key] = value
        elif isinstance(value, dict):  # proposal_mix: the profile merges it per category
            same = {c: x for c, x in value.items() if own[key].get(c) == x}
            if same:
                followed[key] = same
            if len(same) < len(value):
                pinned[key] = {c: x for c, x in value.items() if c not in same}
        elif value == own[key]:
            followed[key] = value
        else:
            pinned[key] = value
    out = yaml.safe_dump(data, sort_keys=False) + yaml.safe_dump({"sim": pinned}, sort_keys=False)
    if followed:
        out += f"  # from sim.profile {profile} (they follow the profile; write a key to pin it):\n"
        listed = yaml.safe_dump(followed, sort_keys=False, default_flow_style=False)
        out += "".join(f"  # {line}\n" for line in listed.splitlines())
    return out

"""``trm bench decoding``: the pass-dependence probe against the simulator's own value, never on
the test pool, the same over real HTTP, and its command line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trm_assets.cli.main import main
from trm_assets.domain.pass_dependence import PassDependence, PassVerdict
from trm_assets.harness.data.config import RunConfig, load_config
from trm_assets.harness.storage.pools import build_pools
from trm_assets.llm.factory import build_providers
from trm_assets.llm.providers import Providers
from trm_assets.llm.settings import Settings
from trm_assets.llm.sim.provider import SimulatedProvider
from trm_assets.llm.sim.server import SimServer
from trm_assets.llm.sim.world import load_world
from trm_bench.decoding import DEFAULT_PROMPTS, probe_temperature, run_probe
from trm_bench.decoding_inputs import VARIANT_LINE, ProbeError, load_inputs, neutral_variant
from trm_bench.decoding_report import format_report, recommendation
from trm_bench.overhead import new_workspace

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "data" / "configs"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the configs' data paths are relative to the repository


def config(name: str = "default", *sets: str) -> RunConfig:
    return load_config(
        CONFIGS / f"{name}.yaml",
        ("sim.latency_ms_mean=0", *sets),
        environ={},
        dotenv_path=None,
    )


def _z(est: PassDependence, truth: float) -> float:
    assert est.rho is not None and est.ci_low is not None and est.ci_high is not None, est
    se = (est.ci_high - est.ci_low) / 3.92
    return abs(est.rho - truth) / se


def test_the_probe_never_reads_the_test_pool_and_its_order_is_seeded() -> None:
    cfg = config("smoke")
    inputs = load_inputs(cfg, 100, DEFAULT_PROMPTS)
    pools = build_pools(cfg, inputs.dataset.questions)
    ids = [q.question_id for q in inputs.questions]
    assert len(set(ids)) == 100
    assert set(ids) <= set(pools.validation) | set(pools.diagnosis)
    assert not set(ids) & set(pools.test)
    assert [q.question_id for q in load_inputs(cfg, 100, DEFAULT_PROMPTS).questions] == ids
    other = load_inputs(config("smoke", "seed=1"), 100, DEFAULT_PROMPTS).questions
    assert [q.question_id for q in other] != ids
    with pytest.raises(ProbeError, match="at most 108"):
        load_inputs(cfg, 109, DEFAULT_PROMPTS)


def test_the_variant_appends_one_line_to_every_task_skill_only() -> None:
    skills = {"default-strategy.md": "# d\n", "counting-problem.md": "# c\n\n"}
    assert neutral_variant(skills) == {
        "default-strategy.md": "# d\n",
        "counting-problem.md": f"# c\n{VARIANT_LINE}\n",
    }


def test_estimates_agree_with_the_simulated_value() -> None:
    """Realistic world with τ = 0.5: at T = 0.05 a second pass nearly replays the first; at
    T = 1 the draws are nearly fresh but the texts still give questions different P_eff."""
    cfg = config("default", "sim.profile=realistic", "sim.temperature_scale=0.5")
    inputs = load_inputs(cfg, 1200, DEFAULT_PROMPTS)
    providers = build_providers(cfg.provider_spec())
    low = probe_temperature(inputs, providers, 0.05)
    high = probe_temperature(inputs, providers, 1.0)
    assert low.truth is not None and high.truth is not None
    assert low.truth > 0.6 and 0.03 < high.truth < 0.12  # what the world is, not the probe
    for probe in (low, high):
        assert probe.truth is not None
        assert probe.dropped == 0 and probe.rollouts == 4 * 1200
        assert _z(probe.estimate, probe.truth) < 3.0, (probe.estimate, probe.truth)
    assert low.estimate.verdict is PassVerdict.DEPENDENT
    assert low.estimate.agree_within > high.estimate.agree_within
    # text shifts (f = 0.15): the least favourable question repeats every draw of a text, so the
    # config check refuses passes at every fresh temperature, and so does the probe
    assert low.simulated_shared == high.simulated_shared == 1.0
    assert low.config_refuses and high.config_refuses


def test_default_world_at_temperature_one_is_independent_exactly() -> None:
    """The default world's draws are fresh and the variant changes no question's probability:
    the simulated value is 0 exactly, and 500 questions show it within the threshold."""
    cfg = config("default")
    out = run_probe(
        load_inputs(cfg, 500, DEFAULT_PROMPTS), build_providers(cfg.provider_spec()), [1.0]
    )
    (row,) = out["temperatures"]
    assert row["simulated_rho"] == 0.0
    assert row["verdict"] == "independent" and row["ci_high"] <= out["threshold"]
    assert out["gate_fresh_temperature"] == 1.0


def _without_wall(out: dict[str, Any]) -> dict[str, Any]:
    return {**out, "temperatures": [{**t, "wall_s": None} for t in out["temperatures"]]}


def test_over_real_http_the_probe_measures_the_same_draws() -> None:
    """The OpenAI-compatible provider against sim-serve: the same seeds give the same answers,
    so the estimate equals the in-process one (and no simulated value: no oracle)."""
    cfg = config("smoke", "sim.profile=realistic", "gate_passes=1")
    inputs = load_inputs(cfg, 60, DEFAULT_PROMPTS)
    local = run_probe(inputs, build_providers(cfg.provider_spec()), [0.7])
    again = run_probe(inputs, build_providers(cfg.provider_spec()), [0.7])
    assert _without_wall(again) == _without_wall(local)  # deterministic
    world = load_world(REPO / "data" / "smoke")
    with SimServer(SimulatedProvider(world, cfg.sim, inject_faults=False)) as server:
        spec = cfg.model_copy(update={"llm_provider": "openai"}).provider_spec()
        http: Providers = build_providers(spec, Settings(base_url=server.base_url))
        remote = run_probe(inputs, http, [0.7])
    assert remote["provider"].startswith("model ")
    (a,), (b,) = local["temperatures"], remote["temperatures"]
    keys = ("rho", "cross", "discordance", "accuracy_a", "accuracy_b", "ci_low", "ci_high")
    assert {k: b[k] for k in keys} == {k: a[k] for k in keys}
    assert a["simulated_rho"] is not None and b["simulated_rho"] is None


def test_a_variant_with_a_cue_is_refused(tmp_path: Path) -> None:
    cfg = config("smoke")
    world = load_world(REPO / "data" / "smoke")
    cue = world.truth.task_types["Counting Problem"].cues[0].phrasings[0]
    skill = "counting-problem.md"
    (tmp_path / skill).write_text(
        (DEFAULT_PROMPTS / "skills" / skill).read_text() + f"- {cue}\n", encoding="utf-8"
    )
    inputs = load_inputs(cfg, 10, DEFAULT_PROMPTS, tmp_path)
    with pytest.raises(ProbeError, match="neutral change"):
        run_probe(inputs, build_providers(cfg.provider_spec()), [1.0])
    same = tmp_path / "same"
    same.mkdir()
    (same / skill).write_text((DEFAULT_PROMPTS / "skills" / skill).read_text(), encoding="utf-8")
    with pytest.raises(ProbeError, match="nothing to compare"):
        load_inputs(cfg, 20, DEFAULT_PROMPTS, same)


def test_command_line_json_and_errors() -> None:
    runner = CliRunner()
    args = ["bench", "decoding", "--config", str(CONFIGS / "smoke.yaml"), "--set",
            "sim.latency_ms_mean=0", "--questions", "40"]  # fmt: skip
    res = runner.invoke(main, [*args, "--temperature", "0.5", "--temperature", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [t["temperature"] for t in out["temperatures"]] == [0.5, 1.0]
    assert {"rho", "ci_low", "ci_high", "verdict", "simulated_rho", "rollouts"} <= set(
        out["temperatures"][0]
    )
    assert out["configured_gate_fresh_temperature"] == 1.0
    cfg = config("smoke")
    direct = run_probe(
        load_inputs(cfg, 40, DEFAULT_PROMPTS), build_providers(cfg.provider_spec()), [0.5, 1.0]
    )
    assert _without_wall(out) == _without_wall(direct)  # the command runs exactly this probe
    first = out["temperatures"][0]
    assert f"T=0.5: ρ_d = {first['rho']:.3f} [{first['ci_low']:.3f}, " in res.stderr
    res = runner.invoke(main, [*args, "--temperature", "0"])
    assert res.exit_code == 2 and "0<x<=2" in res.output.replace(" ", "")
    res = runner.invoke(main, [*args[:-1], "500"])
    assert res.exit_code == 2 and "error: --questions 500" in res.output
    text = runner.invoke(main, [*args, "--temperature", "1"])
    assert text.exit_code == 0 and "recommendation:" in text.stdout


def _out(lowest: float | None, now: float, top: str, refused: bool = False) -> dict[str, Any]:
    rows = [("independent", False), (top, refused)]
    return {
        "gate_fresh_temperature": lowest,
        "configured_gate_fresh_temperature": now,
        "temperatures": [
            {"temperature": t, "verdict": v, "config_refuses": r}
            for t, (v, r) in zip((0.3, 1.0), rows, strict=True)
        ],
    }


@pytest.mark.parametrize(
    ("out", "says"),
    [
        (_out(1.0, 0.7, "independent"), "raise gate_fresh_temperature to 1 (now 0.7)"),
        (_out(0.3, 1.0, "independent"), "gate_fresh_temperature: 0.3 is supported (now 1)"),
        (_out(0.7, 0.7, "independent"), "gate_fresh_temperature: 0.7 is supported (now 0.7)"),
        (_out(None, 1.0, "dependent"), "T = 1 is dependent: keep gate_fresh_temperature above"),
        (_out(None, 1.0, "inconclusive"), "T = 1 is inconclusive: probe it with more questions"),
        (_out(None, 1.0, "no evidence"), "the texts never disagreed there"),
        (_out(None, 1.0, "independent", True), "the config check refuses repeated passes"),
    ],
)
def test_the_recommendation_names_why(out: dict[str, Any], says: str) -> None:
    assert says in recommendation(out)


def test_a_simulated_world_the_config_check_refuses_is_never_recommended() -> None:
    """Texts without a per-question effect and a sampler that replays (τ = 1 at T = 0.5: r =
    0.78): the neutral variant shows no dependence, the config check refuses the world there."""
    cfg = config("default", "sim.temperature_scale=1", "gate_fresh_temperature=1.5")
    out = run_probe(
        load_inputs(cfg, 300, DEFAULT_PROMPTS), build_providers(cfg.provider_spec()), [0.5, 2.0]
    )
    low, high = out["temperatures"]
    assert low["config_refuses"] and not high["config_refuses"]
    assert low["simulated_r"] == pytest.approx(math.exp(-0.25))
    assert low["simulated_shared"] == low["simulated_r"]  # no text shifts: the sampler's part
    assert out["gate_fresh_temperature"] in (None, 2.0)
    assert "the config check refuses repeated passes there" in format_report(out)


def _variant(tmp_path: Path, name: str, text: str) -> Path:
    d = tmp_path / "variant"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text, encoding="utf-8")
    return d


def test_a_variant_of_one_file_probes_only_the_questions_that_read_it(tmp_path: Path) -> None:
    cfg = config("default")
    skill = "counting-problem.md"
    text = (DEFAULT_PROMPTS / "skills" / skill).read_text(encoding="utf-8")
    d = _variant(tmp_path, skill, text.replace("# Counting Problem", "# Counting problems"))
    inputs = load_inputs(cfg, 60, DEFAULT_PROMPTS, d)
    assert inputs.task_types == ("Counting Problem",)
    assert {q.task_type for q in inputs.questions} == {"Counting Problem"}
    out = run_probe(inputs, build_providers(cfg.provider_spec()), [1.0])
    assert out["variant"] == str(d) and out["task_types"] == ["Counting Problem"]
    with pytest.raises(ProbeError, match=r"not-a-skill\.md not in the prompt set's skills"):
        load_inputs(cfg, 10, DEFAULT_PROMPTS, _variant(tmp_path, "not-a-skill.md", "x\n"))


def test_neutrality_compares_the_cues_both_texts_express(tmp_path: Path) -> None:
    """A reworded title of a skill that already holds a cue is neutral; dropping the cue is
    not (the old check scanned the whole file once it was no longer a substring)."""
    cfg = config("smoke")
    providers = build_providers(cfg.provider_spec())
    skill = "ocr-problems.md"
    text = (DEFAULT_PROMPTS / "skills" / skill).read_text(encoding="utf-8")
    cue_line = "- Keep subtitles separate from on-screen text"
    assert cue_line in text  # the seed skill expresses the cue ocr-not-subtitles
    retitled = load_inputs(
        cfg, 3, DEFAULT_PROMPTS, _variant(tmp_path, skill, text.replace("# OCR", "# On-screen"))
    )
    run_probe(retitled, providers, [1.0])  # accepted
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith(cue_line))
    (tmp_path / "variant" / skill).write_text(dropped, encoding="utf-8")
    inputs = load_inputs(cfg, 3, DEFAULT_PROMPTS, tmp_path / "variant")
    with pytest.raises(ProbeError, match="adds or removes a cue"):
        run_probe(inputs, providers, [1.0])


def test_a_workspace_s_pools_keep_its_test_pool_out(tmp_path: Path) -> None:
    """The config's split may differ from the workspace's (another seed, an older split): with
    --workspace the probe reads the workspace's pools.json, read only."""
    from trm_assets.domain.pools import make_pools, pools_to_dict

    cfg = config("smoke")
    own = build_pools(cfg, load_inputs(cfg, 10, DEFAULT_PROMPTS).dataset.questions)
    # a workspace whose test pool is the config split's validation pool
    ws_pools = make_pools(own.validation, own.test, own.diagnosis)
    ws = new_workspace(tmp_path / "ws", cfg)
    # a workspace after `trm init` only: its pools are not frozen yet (review: it was called
    # "not a workspace, or never initialized")
    with pytest.raises(ProbeError, match=r"no pools\.json yet .* leave out --workspace"):
        load_inputs(cfg, 10, DEFAULT_PROMPTS, workspace=ws)
    (ws / "pools.json").write_text(json.dumps(pools_to_dict(ws_pools)), encoding="utf-8")
    before = (ws / "pools.json").read_bytes()
    plain = {q.question_id for q in load_inputs(cfg, 100, DEFAULT_PROMPTS).questions}
    assert plain & set(ws_pools.test)  # without it, the workspace's test questions are probed
    inputs = load_inputs(cfg, 48, DEFAULT_PROMPTS, workspace=ws)
    assert not {q.question_id for q in inputs.questions} & set(ws_pools.test)
    assert (ws / "pools.json").read_bytes() == before
    with pytest.raises(ProbeError, match=r"not a workspace \(no manifest\.json\)"):
        load_inputs(cfg, 10, DEFAULT_PROMPTS, workspace=tmp_path / "nothing-here")


def test_a_server_that_is_down_is_named_after_the_first_text() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    cfg = config("smoke", "gate_passes=1")
    spec = cfg.model_copy(update={"llm_provider": "openai"}).provider_spec()
    settings = Settings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=2)
    inputs = load_inputs(cfg, 10, DEFAULT_PROMPTS)
    with pytest.raises(ProbeError, match=r"every rollout of text A failed; the first: .*onnect"):
        run_probe(inputs, build_providers(spec, settings), [1.0])


def test_another_draw_seed_draws_anew() -> None:
    cfg = config("smoke")
    providers = build_providers(cfg.provider_spec())
    a = run_probe(load_inputs(cfg, 100, DEFAULT_PROMPTS), providers, [1.0])
    b = run_probe(load_inputs(cfg, 100, DEFAULT_PROMPTS, draw_seed=1), providers, [1.0])
    (ta,), (tb,) = a["temperatures"], b["temperatures"]
    assert (ta["cross"], ta["discordance"]) != (tb["cross"], tb["discordance"])
    assert ta["simulated_rho"] == tb["simulated_rho"]  # the same questions, new draws

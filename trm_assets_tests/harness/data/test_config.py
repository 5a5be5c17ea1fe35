"""RunConfig: precedence CLI > env/.env > YAML, every validation layer, fingerprints, secrets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from trm_assets.harness.data.config import (
    ConfigError,
    RunConfig,
    check_against_data,
    config_to_yaml,
    load_config,
    parse_set_overrides,
    read_yaml_config,
)
from trm_assets.llm.settings import Settings
from trm_assets.llm.sim_config import PROFILES

CONFIGS = Path(__file__).resolve().parents[3] / "data" / "configs"


def _yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults_are_valid_and_frozen() -> None:
    cfg = load_config(None, environ={}, dotenv_path=None)
    assert cfg == RunConfig()
    with pytest.raises(ValidationError):
        cfg.seed = 3  # type: ignore[misc]


def test_precedence_cli_over_env_over_yaml(tmp_path: Path) -> None:
    y = _yaml(tmp_path, "gate_alpha: 0.02\nbatch_size: 30\nsim:\n  seed: 5\n  cue_strength: 1.0\n")
    dotenv = tmp_path / ".env"
    dotenv.write_text("TRM_BATCH_SIZE=40\nTRM_EPOCHS=7\n")
    env = {"TRM_BATCH_SIZE": "50", "TRM_SIM__SEED": "6"}
    cfg = load_config(y, ["sim.seed=9", "patience=4"], environ=env, dotenv_path=dotenv)
    assert cfg.gate_alpha == 0.02  # YAML only
    assert cfg.batch_size == 50  # real env beats .env beats YAML
    assert cfg.epochs == 7  # .env beats default
    assert cfg.sim.seed == 9  # CLI beats env
    assert cfg.sim.cue_strength == 1.0  # nested YAML keys merge, not replace
    assert cfg.patience == 4


def test_set_parses_like_yaml() -> None:
    assert parse_set_overrides(["a=0.5", "b=null", "c.d=true", "e=text"]) == {
        "a": 0.5,
        "b": None,
        "c": {"d": True},
        "e": "text",
    }
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set_overrides(["novalue"])


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        # layer 1: fields
        (
            ["gate_alpha=1.5"],
            "gate_alpha: Input should be less than 1 (got 1.5); allowed: 0 < α < 1",
        ),
        (["batch_size=many"], "batch_size: Input should be a valid integer"),
        (["gate_mode=sometimes"], "gate_mode: Input should be 'anytime', 'horizon' or 'hybrid'"),
        (["sim.proposal_mix.cue=0.9"], "proposal mix must sum to 1"),
        # layer 2: edit budget
        (
            ["edit_budget_start=2", "edit_budget_end=3"],
            "edit_budget_end: 3 must be <= edit_budget_start (2)",
        ),
        # layer 3: mini-batch, strictly less
        (
            ["batch_size=4", "min_class_per_batch=4"],
            "min_class_per_batch: 4 must be strictly less than batch_size (4)",
        ),
        # layer 4: gate
        (["gate_lambda_dir=0"], "gate_lambda_dir: 0.0 must be < 0"),
        (
            ["gate_alpha_early=0.05"],
            "gate_alpha_early: 0.05 must be < gate_alpha (0.05) when gate_mode is hybrid",
        ),
        (
            ["run_error_policy=elond"],
            "gate_mode: 'hybrid' must be 'anytime' when run_error_policy is 'elond'",
        ),
        (
            ["ladder_p_low=0.9", "ladder_p_high=0.5"],
            "ladder_p_low: 0.9 must be < ladder_p_high (0.5)",
        ),
        # unknown keys
        (["gate_alpa=0.1"], "gate_alpa: unknown key"),
        (["sim.cue_strenght=1"], "sim.cue_strenght: unknown key"),
    ],
)
def test_each_validation_layer(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, overrides, environ={}, dotenv_path=None)
    assert fragment in str(ei.value), str(ei.value)


def test_one_message_lists_every_problem() -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(
            None,
            ["gate_alpha=2", "gate_alpa=1", "batch_size=3", "min_class_per_batch=3", "epochs=0"],
            environ={},
            dotenv_path=None,
        )
    e = ei.value
    assert len(e.problems) == 4
    joined = "\n".join(e.problems)
    for f in ("gate_alpha:", "gate_alpa:", "min_class_per_batch: 3", "epochs:"):
        assert f in joined


def test_hybrid_check_skipped_when_alpha_itself_invalid() -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(None, ["gate_alpha=7"], environ={}, dotenv_path=None)
    assert len(ei.value.problems) == 1  # no spurious cross-field message about alpha_early


def test_unknown_env_key_is_an_error_but_settings_vars_are_not() -> None:
    with pytest.raises(ConfigError, match="TRM_GATE_ALPAH: no config key 'gate_alpah'"):
        load_config(None, environ={"TRM_GATE_ALPAH": "0.1"}, dotenv_path=None)
    # a section key spelled with one underscore: the variable and its right spelling are named
    with pytest.raises(ConfigError, match=r"TRM_SIM_PROFILE: .*sim section: TRM_SIM__PROFILE\)"):
        load_config(None, environ={"TRM_SIM_PROFILE": "realistic"}, dotenv_path=None)
    # engineering variables are not config keys (TRM_PROGRESS_EVERY_S is in the README and made
    # every config load fail)
    env = {"TRM_LLM_API_KEY": "sk-x", "OTHER": "1", "TRM_PROGRESS_EVERY_S": "2", "TRM_HOME": "/x"}
    assert load_config(None, environ=env, dotenv_path=None) == RunConfig()


def test_yaml_errors_are_located(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"line \d+ column \d+: invalid YAML"):
        load_config(_yaml(tmp_path, "a: 1\nb: [unclosed\n"), environ={}, dotenv_path=None)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(_yaml(tmp_path, "- 1\n- 2\n"), environ={}, dotenv_path=None)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", environ={}, dotenv_path=None)


def test_check_against_data() -> None:
    cfg = RunConfig(val_size=100, eval_min_per_class=10, test_size=50)
    check_against_data(cfg, [f"t{i}" for i in range(10)], 500)
    with pytest.raises(ConfigError, match=r"val_size: 100 must be >= .* = 10 × 11 = 110"):
        check_against_data(cfg, [f"t{i}" for i in range(11)], 500)
    with pytest.raises(ConfigError, match="leaves no diagnosis question out of the 120"):
        check_against_data(cfg, ["a"], 120)


def test_fingerprints() -> None:
    base = RunConfig()
    assert base.fingerprint() == RunConfig().fingerprint()
    assert RunConfig(concurrency=32).fingerprint() == base.fingerprint()  # speed, not decisions
    assert RunConfig(epochs=9).fingerprint() != base.fingerprint()  # budget schedule uses it
    assert RunConfig(gate_alpha=0.1).fingerprint() != base.fingerprint()
    assert RunConfig(gate_alpha=0.1).structural_fingerprint() == base.structural_fingerprint()
    assert RunConfig(seed=1).structural_fingerprint() != base.structural_fingerprint()


SECRET = "sk-test-DO-NOT-LEAK-1234567890"


def test_api_key_never_leaks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRM_LLM_API_KEY", SECRET)
    s = Settings()
    assert s.api_key_value() == SECRET
    logging.getLogger("trm").warning("settings %r %s %s", s, s, s.describe())
    for text in (
        repr(s),
        str(s),
        s.model_dump_json(),
        str(s.model_dump()),
        str(s.describe()),
        caplog.text,
    ):
        assert SECRET not in text
    # An invalid setting must not echo the key in the exception either.
    monkeypatch.setenv("TRM_LLM_TIMEOUT_S", "-1")
    with pytest.raises(ValidationError) as ei:
        Settings()
    assert SECRET not in str(ei.value)
    # The key is not part of the research config and never appears in its dump.
    cfg = load_config(None, dotenv_path=None)
    assert SECRET not in cfg.model_dump_json()


def test_openai_api_key_alias_and_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRM_LLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / ".env").write_text(
        f"OPENAI_API_KEY={SECRET}\nTRM_LLM_BASE_URL=http://127.0.0.1:9/v1\n"
    )
    s = Settings()
    assert s.api_key_value() == SECRET
    assert s.base_url == "http://127.0.0.1:9/v1"


def test_an_error_names_the_layer_its_value_came_from(tmp_path: Path) -> None:
    """The message named the YAML file for a bad value given by an environment variable or
    --set (review: `TRM_EPOCHS=abc` blamed a file that says `epochs: 2`)."""
    path = _yaml(tmp_path, "epochs: 2\nbatch_size: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(
            path,
            ["gate_alpha=2", "nope=1"],
            environ={"TRM_EPOCHS": "abc", "TRM_SIM__LENGTH_COST": "-1"},
            dotenv_path=None,
        )
    lines = str(e.value).splitlines()
    assert any(ln.startswith("  - epochs:") and ln.endswith("[from TRM_EPOCHS]") for ln in lines)
    assert any(
        "sim.length_cost:" in ln and ln.endswith("[from TRM_SIM__LENGTH_COST]") for ln in lines
    )
    assert any("gate_alpha:" in ln and ln.endswith("[from --set]") for ln in lines)
    assert any("nope: unknown key [from --set]" in ln for ln in lines)
    # the file's own value: no origin (the message names the file)
    assert any("batch_size:" in ln and "[from" not in ln for ln in lines)


def test_a_key_given_twice_and_a_bool_for_a_number_are_errors(tmp_path: Path) -> None:
    """Both were silently accepted (review of bad inputs): the later of two `gate_alpha` lines
    won; `epochs: true` trained one epoch, `agent_temperature: true` decoded at 1.0."""
    with pytest.raises(ConfigError, match=r"line 3 column 1: .*'gate_alpha' is given twice"):
        load_config(
            _yaml(tmp_path, "gate_alpha: 0.1\nepochs: 2\ngate_alpha: 0.2\n"),
            environ={},
            dotenv_path=None,
        )
    with pytest.raises(ConfigError) as e:
        load_config(
            _yaml(tmp_path, "epochs: true\nagent_temperature: true\nsim:\n  cue_strength: false\n"),
            environ={},
            dotenv_path=None,
        )
    text = str(e.value)
    for key, value in (
        ("epochs", "true"),
        ("agent_temperature", "true"),
        ("sim.cue_strength", "false"),
    ):
        assert f"{key}: expected a number, not {value}" in text
    # a real bool field still takes a bool
    cfg = load_config(_yaml(tmp_path, "gate_screen: false\n"), environ={}, dotenv_path=None)
    assert cfg.gate_screen is False
    # YAML merge keys still merge; a key that cannot be a key is still a located YAML error
    merged = "sim_defaults: &d\n  seed: 3\n"
    assert read_yaml_config(_yaml(tmp_path, merged + "sim:\n  <<: *d\n  length_cost: 0.1\n"))[
        "sim"
    ] == {"seed": 3, "length_cost": 0.1}
    with pytest.raises(ConfigError, match=r"line 1 column 1: invalid YAML \(found unhashable"):
        read_yaml_config(_yaml(tmp_path, "[1, 2]: 3\n"))


def test_a_layer_setting_another_key_of_the_section_is_not_blamed(tmp_path: Path) -> None:
    """The section prefix blamed the environment for the YAML's bad `sim.length_cost` when it
    only set `sim.seed` (review)."""
    path = _yaml(tmp_path, "sim:\n  length_cost: -1\n")
    for env, cli in (({"TRM_SIM__SEED": "3"}, []), ({}, ["sim.seed=3"])):
        with pytest.raises(ConfigError) as e:
            load_config(path, cli, environ=env, dotenv_path=None)
        (line,) = [ln for ln in str(e.value).splitlines() if "sim.length_cost" in ln]
        assert "[from" not in line
    with pytest.raises(ConfigError, match=r"sim: .* \[from --set\]"):
        load_config(path, ["sim=5"], environ={}, dotenv_path=None)


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("sim.profile=realistic",),
        # (the gate's one-pass plan: the default profile's temperature 1 with text shifts)
        ("sim.profile=realistic", "sim.text_flip_rate=0.2", "gate_fresh_temperature=2"),
        # review: a partial proposal_mix override pinned the whole mix
        ("sim.proposal_mix.harmful=0.15", "sim.proposal_mix.malformed=0.15"),
    ],
)
def test_a_dumped_config_loads_back_and_follows_a_new_profile(
    tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    """``trm config show > f.yaml`` (and a workspace's config.yaml) loads back to the same
    config; switched to another profile, the profile's keys follow it while a key the user set
    stays pinned (before, every profile value was written as a key: the new profile was only a
    label — realistic's flip rate and temperature kept under ``profile: default``)."""
    cfg = load_config(None, overrides, environ={}, dotenv_path=None)
    dump = tmp_path / "dump.yaml"
    dump.write_text(config_to_yaml(cfg), encoding="utf-8")
    assert load_config(dump, (), environ={}, dotenv_path=None) == cfg
    other = "default" if cfg.sim.profile == "realistic" else "realistic"
    moved = load_config(dump, (f"sim.profile={other}",), environ={}, dotenv_path=None)
    expected = load_config(None, (*overrides, f"sim.profile={other}"), environ={}, dotenv_path=None)
    assert moved == expected
    # every commented line is one key (uncommenting a line pins it: still valid YAML)
    text = config_to_yaml(cfg)
    comments = [ln for ln in text.splitlines() if ln.startswith("  # ")][1:]
    assert all(":" in ln and "{" not in ln for ln in comments), comments
    if comments:
        pinned = text.replace(comments[0], "  " + comments[0][4:])
        assert load_config(_yaml(tmp_path, pinned), (), environ={}, dotenv_path=None) == cfg
    assert moved.sim.text_flip_rate == (
        0.2 if "sim.text_flip_rate=0.2" in overrides else PROFILES[other]["text_flip_rate"]
    )


@pytest.mark.parametrize(
    ("path", "overrides", "before", "same"),
    [
        # fingerprints computed on 319c11a, before gate_fresh_temperature / sim.temperature_scale
        ("default.yaml", (), "afd3f96ff252f1da", True),
        ("smoke.yaml", (), "29c057cf8b666633", True),
        ("real-model.yaml", (), "79c2bc672171ec5c", True),
        ("default.yaml", ("sim.profile=realistic",), "d522481c46ee1ae6", True),
        # 0 < T < gate_fresh_temperature: the gate's plan changed, so the resume warns
        ("default.yaml", ("agent_temperature=0.5",), "47eb43f560c070a8", False),
    ],
)
def test_a_key_added_later_keeps_unchanged_configs_fingerprint(
    path: str, overrides: tuple[str, ...], before: str, same: bool
) -> None:
    """Review: adding gate_fresh_temperature changed every config's fingerprint, so every old
    checkpoint resumed with a drift warning naming nothing that had changed."""
    cfg = load_config(CONFIGS / path, overrides, environ={}, dotenv_path=None)
    assert (cfg.fingerprint() == before) is same
    moved = load_config(
        CONFIGS / path, (*overrides, "sim.temperature_scale=0.3"), environ={}, dotenv_path=None
    )
    assert moved.fingerprint() != cfg.fingerprint()  # τ > 0 is in the world (and reuse) identity

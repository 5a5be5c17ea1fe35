"""The Dagster code location loads (one experiment per registry entry, each under its own asset
key prefix), and an experiment's pools asset materializes through real Dagster."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from trm_assets.cli import main
from trm_assets.defs.build import build_experiment
from trm_assets.defs.experiments import (
    Experiment,
    ExperimentError,
    code_location_experiments,
    load_registry,
    register,
)

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_load_the_default_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    import trm_assets.definitions as definitions

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # an empty registry
    monkeypatch.delenv("TRM_DAGSTER_WORKSPACE", raising=False)
    defs = importlib.reload(definitions).defs
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_assets_def(dg.AssetKey(["default", "pools"])).key.path == [
        "default",
        "pools",
    ]
    assert {j.name for j in defs.jobs} == {
        "default__gate_step",
        "default__slow_update",
        "default__epoch",
        "default__finalize",
    }


@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")  # dagster's
def test_one_invalid_registry_entry_does_not_hide_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry whose name is invalid stopped the whole code location from loading (a
    traceback, no experiment served; review). It is now left out with a warning; `register`
    still refuses to rewrite such a registry (it writes back every entry it read)."""
    import importlib

    import trm_assets.definitions as definitions

    good = register(tmp_path, Experiment(workspace=str(tmp_path / "good")))
    with (tmp_path / "experiments.yaml").open("a", encoding="utf-8") as fh:
        fh.write("  9bad-name:\n    workspace: /tmp/x\n")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.delenv("TRM_DAGSTER_WORKSPACE", raising=False)
    with pytest.warns(UserWarning, match="experiment '9bad-name': .*; not served"):
        defs = importlib.reload(definitions).defs
    dg.Definitions.validate_loadable(defs)
    assert {j.name for j in defs.jobs} == {
        f"{good.name}__{j}" for j in ("gate_step", "slow_update", "epoch", "finalize")
    }
    with pytest.raises(ExperimentError, match="9bad-name"):
        register(tmp_path, Experiment(workspace=str(tmp_path / "other")))
    # a registry whose only entry is broken serves nothing: not the repository's `default`
    # workspace, which Materialize would then train in the user's place (review)
    only_bad = tmp_path / "only_bad"
    only_bad.mkdir()
    (only_bad / "experiments.yaml").write_text(
        "experiments:\n  my_exp:\n    workspace: /tmp/x\n    config_pth: /tmp/x.yaml\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DAGSTER_HOME", str(only_bad))
    with pytest.warns(UserWarning, match="experiment 'my_exp': .*; not served"):
        assert code_location_experiments() == []
        dg.Definitions.validate_loadable(importlib.reload(definitions).defs)


def test_registry_refuses_a_taken_name(tmp_path: Path) -> None:
    register(tmp_path, Experiment(workspace=str(tmp_path / "a" / "ws")))
    register(tmp_path, Experiment(workspace=str(tmp_path / "a" / "ws")))  # the same: no-op
    with pytest.raises(ExperimentError, match="already workspace"):
        register(tmp_path, Experiment(workspace=str(tmp_path / "b" / "ws")))
    with pytest.raises(ExperimentError, match="expected a letter"):
        Experiment(name="1x", workspace=str(tmp_path))
    # `trm train`'s derived names: another workspace gets a stable suffix, the same keeps its name
    other = register(
        tmp_path, Experiment(workspace=str(tmp_path / "b" / "ws")), rename_on_conflict=True
    )
    assert other.name.startswith("ws_") and len(other.name) == len("ws_") + 6
    again = register(
        tmp_path, Experiment(workspace=str(tmp_path / "b" / "ws")), rename_on_conflict=True
    )
    assert again.name == other.name
    assert sorted(load_registry(tmp_path)) == sorted(["ws", other.name])


def test_pools_asset_materializes_and_is_frozen(small_dataset: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    exp = Experiment(config_path=str(small_dataset / "config.yaml"), workspace=str(ws))
    built = build_experiment(exp)
    pools = built.bound().resolve_assets_def(dg.AssetKey(["ws", "pools"]))
    checks = [
        c
        for c in built.definitions.asset_checks or []
        if isinstance(c, dg.AssetChecksDefinition)
        and dg.AssetKey(["ws", "pools"]) in {k.asset_key for k in c.check_keys}
    ]
    with dg.instance_for_test() as instance:
        result = dg.materialize([pools, *checks], instance=instance)
        assert result.success
        md = result.asset_materializations_for_node("ws__pools")[0].metadata
        assert md["test"].value == 10 and md["validation"].value == 12
        assert md["diagnosis"].value == 40 - 22
        assert md["simulated"].value is True
        assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
        written = json.loads((ws / "pools.json").read_text())
        assert written["fingerprint"] == md["fingerprint"].value
        # A second materialization reuses the frozen file, even with another seed.
        exp2 = exp.model_copy(update={"overrides": ("seed=99",)})
        pools2 = build_experiment(exp2).bound().resolve_assets_def(dg.AssetKey(["ws", "pools"]))
        again = dg.materialize([pools2], instance=instance)
        md2 = again.asset_materializations_for_node("ws__pools")[0].metadata
        assert md2["fingerprint"].value == md["fingerprint"].value


def test_trm_run_reports_config_vs_data(small_dataset: Path, tmp_path: Path) -> None:
    cfg = small_dataset / "config.yaml"
    cfg.write_text(cfg.read_text().replace("eval_min_per_class: 5", "eval_min_per_class: 7"))
    args = ["run", "--config", str(cfg), "--workspace", str(tmp_path / "w")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    assert "val_size: 12 must be >= eval_min_per_class × task types = 7 × 2 = 14" in res.output
    assert not (tmp_path / "w").exists()  # nothing created before the config is valid


def test_nothing_under_defs_imports_the_code_location() -> None:
    """definitions.py gathers; the Dagster layer never imports it (the driver builds what it runs
    from defs/build.py)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "trm_assets" / "defs"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n == "trm_assets.definitions"]
    assert offenders == []


def test_llm_resource_is_picked_by_the_config_and_refuses_the_other_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trm_assets.defs.resources import OpenAICompatibleLLM, SimulatedLLM
    from trm_assets.harness.data.config import load_config
    from trm_assets.llm.factory import ProviderConfigError

    monkeypatch.setenv("TRM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TRM_LLM_API_KEY", "sk-test-not-shown")
    real = ("llm_provider=openai", "agent_temperature=1.0")
    cfg = load_config(ROOT / "data" / "configs" / "smoke.yaml", real)
    with pytest.raises(ProviderConfigError, match="bind this experiment to 'llm_openai'"):
        SimulatedLLM().providers(cfg.provider_spec())
    providers = OpenAICompatibleLLM(base_url="http://127.0.0.1:8/v1").providers(cfg.provider_spec())
    assert providers.simulated is False and providers.oracle is None
    assert "sk-test-not-shown" not in repr(OpenAICompatibleLLM())  # the key is never config
    exp = Experiment(
        workspace=str(tmp_path / "real"),
        config_path=str(ROOT / "data" / "configs" / "smoke.yaml"),
        overrides=real,
    )
    assert build_experiment(exp).scope.llm_key == "llm_openai"
    sim = exp.model_copy(update={"overrides": ()})
    assert build_experiment(sim).scope.llm_key == "llm_sim"


def test_trm_run_exits_like_the_training_it_runs(
    small_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trm run` (`make run`) printed "interrupted" after Ctrl-C and exited 0: it called `trm
    train` in click's non-standalone mode, which returns the Exit code instead of raising it."""
    from trm_assets.defs import driver

    def interrupted(*_: object, **__: object) -> None:
        raise driver.TrainingInterrupted("interrupted during step (epoch 0, step 0)")

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(driver, "drive", interrupted)
    config = small_dataset / "config.yaml"
    res = CliRunner().invoke(
        main, ["run", "--config", str(config), "--workspace", str(tmp_path / "w")]
    )
    assert res.exit_code == 130, res.output
    assert "interrupted during step (epoch 0, step 0)" in res.output


def _register_at(home: str, i: int, start: float) -> None:
    while time.time() < start:  # every process writes at the same instant
        pass
    register(home, Experiment(name=f"r{i}", workspace=f"{home}/ws{i}", config_path="c.yaml"))


def test_concurrent_registrations_keep_every_entry(tmp_path: Path) -> None:
    """Eight processes registering at once left 1 of 8 entries in experiments.yaml (each wrote
    back the registry it had read; review): the registry is changed under a lock."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start = time.time() + 0.5
    procs = [ctx.Process(target=_register_at, args=(str(tmp_path), i, start)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 8
    assert sorted(load_registry(tmp_path)) == sorted(f"r{i}" for i in range(8))


def test_a_registration_that_changes_nothing_takes_no_lock_and_a_held_lock_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of the registry lock: it was taken (the lock file created in DAGSTER_HOME) even
    when the experiment was registered already, so a read-only home failed; and a stopped
    holder made every registration wait for ever, silently."""
    import fcntl

    from trm_assets.defs import experiments

    exp = Experiment(workspace=str(tmp_path / "ws"))
    register(tmp_path, exp)
    (tmp_path / ".experiments.lock").unlink()
    before = (tmp_path / "experiments.yaml").read_bytes()
    assert register(tmp_path, exp).name == "ws"
    assert not (tmp_path / ".experiments.lock").exists()
    assert (tmp_path / "experiments.yaml").read_bytes() == before
    monkeypatch.setattr(experiments, "REGISTRY_LOCK_WAIT_S", 0.2)
    with open(tmp_path / ".experiments.lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another open file: a second holder
        with pytest.raises(ExperimentError, match=r"\.experiments\.lock: another process"):
            register(tmp_path, Experiment(workspace=str(tmp_path / "other")))
    assert sorted(load_registry(tmp_path)) == ["ws"]
    register(tmp_path, Experiment(workspace=str(tmp_path / "other")))  # released: it goes in
    assert sorted(load_registry(tmp_path)) == ["other", "ws"]


def test_a_backfill_of_epochs_is_accepted(tmp_path: Path) -> None:
    """Any backfill of the epoch asset (two epochs picked in the UI) was refused: "depends on
    non-existent partitions" of skill_versions, because @graph_multi_asset dropped the
    AllPartitionMapping and Dagster mapped epoch e0 onto a task-type partition named e0
    (review). The backfill's plan is built here with the code path the UI's launch uses."""
    from dagster._core.execution.asset_backfill import AssetBackfillData

    exp = Experiment(
        name="j",
        workspace=str(tmp_path / "ws"),
        config_path=str(ROOT / "data" / "configs" / "smoke.yaml"),
    )
    graph = build_experiment(exp).bound().resolve_asset_graph()
    outs = [dg.AssetKey(["j", "epoch_eval"]), dg.AssetKey(["j", "holdout_report"])]
    for out in outs:
        for up in ("skill_versions", "prompt_versions"):
            mapping = graph.get_partition_mapping(out, dg.AssetKey(["j", up]))
            assert isinstance(mapping, dg.AllPartitionMapping), (out, up, mapping)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("j__epochs", ["e0", "e1"])
    plan = AssetBackfillData.from_asset_partitions(
        asset_graph=graph,
        partition_names=["e0", "e1"],
        asset_selection=outs,
        dynamic_partitions_store=instance,
        backfill_start_timestamp=time.time(),
        all_partitions=False,
    )
    assert {
        k: set(s.get_partition_keys())
        for k, s in plan.target_subset.partitions_subsets_by_asset_key.items()
    } == {out: {"e0", "e1"} for out in outs}

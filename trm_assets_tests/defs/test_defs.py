"""The Dagster code location loads, and the pools asset materializes through real Dagster."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
from click.testing import CliRunner

from trm_assets.cli import main
from trm_assets.definitions import defs
from trm_assets.defs.assets.pools import pools, pools_disjoint
from trm_assets.defs.resources import TrmResource


def test_definitions_load() -> None:
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_assets_def("pools").key == dg.AssetKey("pools")


def test_pools_asset_materializes_and_is_frozen(small_dataset: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = {"trm": TrmResource(config_path=str(small_dataset / "config.yaml"), workspace=str(ws))}
    with dg.instance_for_test() as instance:
        result = dg.materialize([pools, pools_disjoint], resources=res, instance=instance)
        assert result.success
        mat = result.asset_materializations_for_node("pools")[0]
        md = mat.metadata
        assert md["test"].value == 10 and md["validation"].value == 12
        assert md["diagnosis"].value == 40 - 22
        assert md["simulated"].value is True
        assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
        written = json.loads((ws / "pools.json").read_text())
        assert written["fingerprint"] == md["fingerprint"].value
        # A second materialization reuses the frozen file, even with another seed.
        res2 = {
            "trm": TrmResource(
                config_path=str(small_dataset / "config.yaml"),
                workspace=str(ws),
                overrides=["seed=99"],
            )
        }
        again = dg.materialize([pools], resources=res2, instance=instance)
        md2 = again.asset_materializations_for_node("pools")[0].metadata
        assert md2["fingerprint"].value == md["fingerprint"].value


def test_trm_run_reports_config_vs_data(small_dataset: Path, tmp_path: Path) -> None:
    cfg = small_dataset / "config.yaml"
    cfg.write_text(cfg.read_text().replace("eval_min_per_class: 5", "eval_min_per_class: 7"))
    args = ["run", "--config", str(cfg), "--workspace", str(tmp_path / "w")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    assert "val_size: 12 must be >= eval_min_per_class × task types = 7 × 2 = 14" in res.output
    assert not (tmp_path / "w").exists()  # nothing created before the config is valid

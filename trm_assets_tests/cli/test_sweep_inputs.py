"""`trm sweep` / `trm launch` against a webserver that is not there, and a seed given twice
(review of bad inputs: the sweep created and registered its workspaces, then printed a GraphQL
query; `--seeds 0,0` made the same experiment twice)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.cli.launch import launch_cmd, sweep_cmd

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def test_nothing_is_created_when_the_webserver_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    url = f"http://127.0.0.1:{_closed_port()}"
    args = ["--name", "s", "--config", str(REPO / "data/configs/smoke.yaml"), "--seeds", "0,1"]
    res = CliRunner().invoke(sweep_cmd, [*args, "--root", str(tmp_path / "ws"), "--url", url])
    assert res.exit_code == 1, res.output
    assert "the Dagster webserver is not reachable" in res.output and "query" not in res.output
    assert not (tmp_path / "ws").exists() and not (tmp_path / "dh" / "experiments.yaml").exists()
    again = CliRunner().invoke(launch_cmd, ["--experiment", "x", "--epoch", "0", "--url", url])
    assert again.exit_code == 1 and "no experiment 'x'" in again.output  # checked first, locally


def test_a_seed_given_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    args = ["--name", "s", "--config", str(REPO / "data/configs/smoke.yaml"), "--seeds", "0,0"]
    res = CliRunner().invoke(sweep_cmd, [*args, "--root", str(tmp_path / "ws"), "--no-launch"])
    assert res.exit_code == 2 and "a seed is given twice" in res.output
    assert not (tmp_path / "ws").exists()


def test_a_config_the_data_cannot_satisfy_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trm sweep --set val_size=5000` created and registered its workspaces (exit 0), whose
    runs would all fail in the daemon; `trm init` refuses that config before anything exists."""
    from trm_assets.harness.data.config import load_config
    from trm_assets.harness.data.dataset import load_dataset

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    smoke = REPO / "data/configs/smoke.yaml"
    n = len(load_dataset(load_config(smoke), with_trees=False).questions)
    test_size = load_config(smoke).test_size
    args = ["--name", "s", "--config", str(smoke), "--seeds", "0,1", "--set", "val_size=5000"]
    res = CliRunner().invoke(sweep_cmd, [*args, "--root", str(tmp_path / "ws"), "--no-launch"])
    assert res.exit_code != 0, res.output
    expected = (
        f"test_size + val_size: {test_size + 5000} leaves no diagnosis question out of the {n}"
    )
    assert expected in res.output
    assert not (tmp_path / "ws").exists() and not (tmp_path / "dh" / "experiments.yaml").exists()


def test_two_configs_with_one_file_name_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two configs named smoke.yaml in different directories became one experiment and one
    workspace, trained with one of them, while config.yaml recorded the other (review)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    smoke = REPO / "data/configs/smoke.yaml"
    other = tmp_path / "alt" / "smoke.yaml"
    other.parent.mkdir()
    other.write_text(smoke.read_text().replace("gate_alpha: 0.10", "gate_alpha: 0.20"))
    args = ["--name", "i", "--config", str(smoke), "--config", str(other), "--seeds", "2"]
    res = CliRunner().invoke(sweep_cmd, [*args, "--root", str(tmp_path / "ws"), "--no-launch"])
    assert res.exit_code == 1, res.output
    assert f"--config {smoke} and --config {other} would both be experiment i_smoke_s<seed>" in (
        res.output.replace("\n", " ")
    )
    assert not (tmp_path / "ws").exists() and not (tmp_path / "dh" / "experiments.yaml").exists()

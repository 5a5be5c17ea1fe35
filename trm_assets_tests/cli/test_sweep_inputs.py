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

"""Out-of-process Dagster: `dagster job launch -j slow_update` against a temporary DAGSTER_HOME,
and the real web UI in headless Chromium showing an epoch's accuracy and a skill content hash."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from trm_assets.defs.driver import drive
from trm_assets.harness.reports.lineage import epoch_summary, skill_facts

from .conftest import ROOT, Trained, new_workspace, tiny_resource

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _env(home: Path, workspace: Path, config: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home),
        TRM_DAGSTER_WORKSPACE=str(workspace),
        TRM_DAGSTER_CONFIG=str(config),
    )
    return env


def test_dagster_job_launch_slow_update(trained: Trained, tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    ws = new_workspace(tmp_path / "ws")
    trm = tiny_resource(ws, trained.config)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        drive(trm, instance, max_runs=1)  # the slow update of epoch 0 is next
    config = {"ops": {"snapshot_and_rerun_validation": {"config": {"epoch": 0}}}}
    proc = subprocess.run(
        [
            str(BIN / "dagster"),
            "job",
            "launch",
            "-j",
            "slow_update",
            "-w",
            "workspace.yaml",
            "--config-json",
            json.dumps(config),
        ],
        cwd=ROOT,
        env=_env(home, ws, trained.config),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    deadline = time.monotonic() + 120
    status = None
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            runs = instance.get_runs(dg.RunsFilter(job_name="slow_update"))
            status = runs[0].status if runs else None
            if status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
                break
            time.sleep(0.5)
    assert status == dg.DagsterRunStatus.SUCCESS, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert epoch_summary(ws, 0) is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def webserver(trained: Trained) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(BIN / "dagster-webserver"),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=ROOT,
        env=_env(trained.dagster_home, trained.workspace, trained.config),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("dagster-webserver did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_ui_shows_epoch_accuracy_and_skill_hash(
    trained: Trained, webserver: str, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    summary = epoch_summary(trained.workspace, 0)
    assert summary is not None
    accuracy = str(summary["val_accuracy"])
    digest = skill_facts(
        trained.workspace, "Counting Problem", summary["val_skills_version"]
    ).content_hash
    shot = tmp_path / "epoch_eval.png"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
                "--disable-quic",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1400})
            page.goto(f"{webserver}/assets/epoch_eval?view=partitions&partition=e0")
            skip = page.get_by_role("button", name="Skip")
            with contextlib.suppress(sync_api.TimeoutError):
                skip.click(timeout=8000)  # the first-visit newsletter dialog
            page.get_by_text(accuracy).first.wait_for(timeout=30000)
            page.get_by_text(digest[:16]).first.wait_for(timeout=30000)
            page.screenshot(path=str(shot), full_page=True)
            body = page.inner_text("body")
        finally:
            browser.close()
    assert "val_accuracy" in body and accuracy in body
    assert digest[:16] in body and "counting-problem.md" in body
    assert shot.stat().st_size > 10_000

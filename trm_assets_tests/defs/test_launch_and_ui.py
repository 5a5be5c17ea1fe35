"""The real web UI in headless Debian Chromium, and `trm launch` against the real webserver.

* e1 and e2 of the trained 3-epoch experiment: every ``per_task_type`` row the page shows names a
  referenced data version equal to its content hash — itself the store's hash of the version the
  run log says was evaluated — and that data version is in ``skill_versions``' history (read from
  the same webserver's GraphQL API);
* two experiments in one instance: each catalog folder lists only its own assets, each
  ``epoch_eval``'s events are only its own partitions and runs;
* `trm launch` prints the run id and UI URL of a queued run, and refuses an epoch past the last
  one with the config key to raise (no partition added).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from click.testing import CliRunner

from trm_assets.cli.launch import launch_cmd
from trm_assets.defs.experiments import EXPERIMENT_TAG

from .conftest import Trained
from .servers import webserver

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


@pytest.fixture(scope="module")
def ui(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with webserver(trained.home, tmp_path_factory.mktemp("ui-logs")) as url:
        yield url


def graphql(url: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables}).encode()
    req = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    assert "errors" not in data, data
    result: dict[str, Any] = data["data"]
    return result


HISTORY = """
query History($path: [String!]!, $partition: String!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset { assetMaterializations(partitions: [$partition]) { tags { key value } } }
  }
}"""


def data_versions_in_history(url: str, path: list[str], partition: str) -> set[str]:
    events = graphql(url, HISTORY, {"path": path, "partition": partition})["assetOrError"]
    return {
        t["value"]
        for e in events["assetMaterializations"]
        for t in e["tags"]
        if t["key"] == "dagster/data_version"
    }


def store_hash(ws: Path, run_id: str, file: str) -> str:
    """The store's hash of ``file`` in the skills version the run log recorded for ``run_id``."""
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        row = con.execute("SELECT skills_version FROM runs WHERE run_id = ?", [run_id]).fetchone()
    assert row is not None
    meta = json.loads((ws / "store" / "skills" / str(row[0]) / "_meta.json").read_text())
    return str(meta["files"][file])[:16]


def _table_rows(page: Any, header: str) -> list[dict[str, str]]:
    """The rows of the metadata table whose header row contains ``header`` (the innermost table:
    the metadata list around it is a table too)."""
    table = page.locator("table", has=page.locator("th", has_text=header)).last
    heads = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    rows = []
    for tr in table.locator("tbody tr").all():
        cells = [c.strip() for c in tr.locator("td").all_inner_texts()]
        rows.append(dict(zip(heads, cells, strict=True)))
    return rows


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_ui_shows_exact_lineage_and_disjoint_experiments(
    trained: Trained, ui: str, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    ws, exp, other = trained.workspace, trained.lineage.name, trained.small.name
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 2400, "height": 1600})
            checked = 0
            for e in ("e1", "e2"):
                page.goto(f"{ui}/assets/{exp}/epoch_eval?view=partitions&partition={e}")
                with contextlib.suppress(sync_api.TimeoutError):
                    page.get_by_role("button", name="Skip").click(timeout=5000)  # newsletter
                page.get_by_text("referenced_data_version").first.wait_for(timeout=60000)
                body = page.inner_text("body")
                run_id = re.search(r"val_run_id\s+(train_e\d+_R2?)\b", body)
                assert run_id is not None, body[:2000]
                rows = _table_rows(page, "referenced_data_version")
                assert len(rows) == 13  # 12 task types + the prompt set
                for row in rows[:-1]:
                    truth = store_hash(ws, run_id.group(1), row["file"])
                    assert row["content_hash"] == truth, (e, row)
                    assert row["referenced_data_version"] == row["content_hash"], (e, row)
                    history = data_versions_in_history(
                        ui, [exp, "skill_versions"], row["task_type"]
                    )
                    assert row["referenced_data_version"] in history, (e, row)
                    checked += 1
                gates = _table_rows(page, "cache_hits")  # every gate of the epoch, first screen
                assert gates and all(g["verdict"].startswith(("ACCEPT", "REJECT")) for g in gates)
                page.screenshot(path=str(tmp_path / f"{e}.png"), full_page=True)
            assert checked == 24
            # two experiments, two catalog folders: neither lists the other's assets
            for mine, theirs in ((exp, other), (other, exp)):
                page.goto(f"{ui}/assets/{mine}")
                page.get_by_text("epoch_eval").first.wait_for(timeout=60000)
                text = page.inner_text("body")
                assert "skill_versions" in text and f"{theirs}/" not in text
            # and one experiment's epoch_eval events (what Plots draws) are only its own
            page.goto(f"{ui}/assets/{other}/epoch_eval?view=events")
            page.get_by_text("val_accuracy").first.wait_for(timeout=60000)
            text = page.inner_text("body")
            assert set(re.findall(r"\be\d\b", text.split("Metadata")[0])) == {"e0"}
            assert str(trained.small.workspace) in text
            assert re.search(re.escape(str(ws)) + r"(?!\w)", text) is None  # not ws's path
        finally:
            browser.close()


def test_trm_launch_prints_run_id_and_url_and_refuses_past_the_last_epoch(
    trained: Trained, ui: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(trained.home))
    exp = trained.small  # finalized after its only epoch
    args = ["--experiment", exp.name, "--url", ui]
    # the CLI journey "one more epoch": a message naming the key, nothing added
    res = CliRunner().invoke(launch_cmd, [*args, "--epoch", "1"])
    assert res.exit_code == 1, res.output
    assert "e1 is past the last epoch e0" in res.output and "`epochs: 1`" in res.output
    assert "Traceback" not in res.output
    with dg.DagsterInstance.from_config(str(trained.home)) as instance:
        assert "e1" not in instance.get_dynamic_partitions(f"{exp.name}__epochs")
        # a launch prints the run id and its UI URL; the run waits in the queue (no daemon here)
        res = CliRunner().invoke(launch_cmd, [*args, "--finalize"])
        assert res.exit_code == 0, res.output
        found = re.search(r"run ([0-9a-f-]{36}) queued", res.output)
        assert found is not None, res.output
        try:
            assert f"UI: {ui}/runs/{found.group(1)}" in res.output
            run = instance.get_run_by_id(found.group(1))
            assert run is not None and run.status == dg.DagsterRunStatus.QUEUED
            assert run.tags[EXPERIMENT_TAG] == exp.name
        finally:
            instance.delete_run(found.group(1))  # the shared instance stays as trained
    unknown = CliRunner().invoke(launch_cmd, ["--experiment", "nope", "--finalize", "--url", ui])
    assert unknown.exit_code == 1 and "no experiment 'nope'" in unknown.output


def test_dagster_job_launch_queues_the_slow_update(trained: Trained, tmp_path: Path) -> None:
    """Issue 8: `dagster job launch -j <experiment>__slow_update` as a subprocess against a
    temporary DAGSTER_HOME resolves the job in the code location and, with the shipped
    dagster.yaml's queued coordinator, queues its run with the experiment's tag and the epoch
    partition. (The daemon dequeuing such runs to SUCCESS, killed and restarted, is
    `test_scale_out.py`'s; a daemon here would add ≈ 20 s to the suite.)"""
    import subprocess

    from trm_assets.defs.driver import drive
    from trm_assets.defs.experiments import Experiment, register

    from .conftest import new_home, new_workspace
    from .servers import BIN, ROOT, dagster_env

    home = new_home(tmp_path / "home")
    ws = new_workspace(tmp_path / "ws")
    exp = register(home, Experiment(workspace=str(ws), config_path=str(trained.small_config)))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        drive(exp, instance, max_runs=1)  # init and the only step: the slow update is next
    job = f"{exp.name}__slow_update"
    launch = [str(BIN / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j", job]
    launch += ["--tags", json.dumps({"dagster/partition": "e0"})]
    proc = subprocess.run(
        launch, cwd=ROOT, env=dagster_env(home), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (run,) = instance.get_runs(dg.RunsFilter(job_name=job))
        assert run.status == dg.DagsterRunStatus.QUEUED  # the queue, not a direct launch
        assert run.tags[EXPERIMENT_TAG] == exp.name and run.tags["dagster/partition"] == "e0"
        assert run.tags["trm/workspace"] == str(ws.resolve())

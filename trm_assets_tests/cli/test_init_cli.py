"""`trm init`: a workspace whose v1 holds the prompt set; --from-seed; errors without traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.cli.init import init_cmd
from trm_assets.harness.storage import versions as store
from trm_assets.harness.storage.workspace import default_prompts_dir, read_manifest, resolve_paths

SMOKE = Path(__file__).resolve().parents[2] / "data" / "smoke"


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with a config whose data is real (init checks it before it writes)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(SMOKE / "questions.json", "q.json")
    Path("c.yaml").write_text(
        f"questions: q.json\ntrees: {SMOKE / 'trees'}\nground_truth: "
        f"{SMOKE / 'ground_truth.json'}\ntest_size: 12\nval_size: 72\neval_min_per_class: 2\n"
    )
    return tmp_path


def test_init_creates_v1_from_the_prompt_set(cwd: Path) -> None:
    res = CliRunner().invoke(init_cmd, ["--workspace", "ws", "--config", "c.yaml"])
    assert res.exit_code == 0, res.output
    assert "skills v1" in res.output
    paths = resolve_paths("ws")
    repo = store.read_tree(default_prompts_dir())
    skills = {n.split("/", 1)[1]: t for n, t in repo.items() if n.startswith("skills/")}
    prompts = {n: t for n, t in repo.items() if not n.startswith("skills/")}
    assert store.read_tree(paths.skills_dir) == skills
    assert store.read_tree(paths.prompts_dir) == prompts
    assert "agent_system.md" in prompts and "evolve_skill.md" in prompts
    assert (cwd / "ws" / "config.yaml").is_file()
    assert read_manifest("ws").config_fingerprint


def test_init_from_seed_and_errors(cwd: Path) -> None:
    repo = store.read_tree(default_prompts_dir())
    skills = {n.split("/", 1)[1]: t for n, t in repo.items() if n.startswith("skills/")}
    store.init_seed("seeds", "toy", {"a.md": "x\n"}, {"p.md": "y\n"}, questions_ref="q.json")
    store.init_seed("seeds", "base", skills, {"p.md": "y\n"}, questions_ref="q.json")
    runner = CliRunner()
    toy = runner.invoke(init_cmd, ["--workspace", "ws", "--config", "c.yaml", "--from-seed", "toy"])
    # a seed without the data's skill files is no start (only `trm train` refused it)
    assert toy.exit_code == 2 and "needs action-reasoning.md" in toy.output, toy.output
    assert not Path("ws").exists()
    res = runner.invoke(
        init_cmd, ["--workspace", "ws", "--config", "c.yaml", "--from-seed", "base"]
    )
    assert res.exit_code == 0, res.output
    assert read_manifest("ws").seed is not None
    again = runner.invoke(init_cmd, ["--workspace", "ws", "--config", "c.yaml"])
    assert again.exit_code == 0 and "archived the previous workspace" in again.output
    missing = runner.invoke(
        init_cmd, ["--workspace", "ws", "--config", "c.yaml", "--from-seed", "nope"]
    )
    assert missing.exit_code == 2 and "seed 'nope' not found" in missing.output
    assert "Traceback" not in missing.output

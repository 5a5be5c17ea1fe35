"""Workspace (seed §6): manifest pointers, idempotent record_run, init and init-from-seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trm_assets.evolution.protocols import PromptStore, SkillStore
from trm_assets.harness.storage import versions as store
from trm_assets.harness.storage import workspace
from trm_assets.harness.storage.workspace import (
    WorkspaceError,
    advance_current,
    init_workspace,
    init_workspace_from_seed,
    read_best,
    read_manifest,
    record_run,
    resolve_paths,
    update_best,
)

REPO_PROMPTS = workspace.default_prompts_dir()


def _prompt_set(root: Path) -> Path:
    (root / "skills").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "skills" / "default-strategy.md").write_text("# Default\n")
    (root / "skills" / "counting-problem.md").write_text("# Counting\n## Strategy\n- look\n")
    (root / "agent_system.md").write_text("You answer questions.\n")
    (root / "tools" / "get_overview.md").write_text("Overview of the video.\n")
    return root


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("q.json").write_text("[]")
    init_workspace(tmp_path / "ws", questions_ref="q.json", prompts_dir=_prompt_set(tmp_path / "p"))
    return tmp_path / "ws"


def test_init_splits_the_prompt_set_into_skills_and_prompts_v1(ws: Path) -> None:
    paths = resolve_paths(ws)
    assert (paths.skills_version, paths.prompts_version) == ("v1", "v1")
    assert sorted(p.name for p in paths.skills_dir.glob("*.md")) == [
        "counting-problem.md",
        "default-strategy.md",
    ]
    prompts = workspace.VersionedPromptStore(paths.prompts_dir, "v1")
    assert prompts.list_files() == ["agent_system.md", "tools/get_overview.md"]
    skills = workspace.skill_store(paths)
    assert isinstance(skills, SkillStore) and isinstance(prompts, PromptStore)
    assert skills.read("default-strategy.md") == "# Default\n"
    with pytest.raises(ValueError, match=r"plain '<name>\.md'"):
        skills.read("../../q.json")
    m = read_manifest(ws)
    assert m.best is None and m.history == [] and m.questions_ref == "q.json"


def test_init_from_the_repository_prompts_holds_the_prompt_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("q.json").write_text("[]")
    res = init_workspace(tmp_path / "w", questions_ref="q.json")
    files = store.read_tree(res.paths.skills_dir)
    assert "default-strategy.md" in files
    prompt_files = store.read_tree(res.paths.prompts_dir)
    assert not any(n.startswith("skills/") for n in prompt_files)
    assert store.read_tree(REPO_PROMPTS / "skills") == files


def test_record_run_is_idempotent(ws: Path) -> None:
    first = record_run(ws, "base_e0_s0")
    again = record_run(ws, "base_e0_s0")
    assert first == again
    assert [r.run_id for r in read_manifest(ws).history] == ["base_e0_s0"]
    assert (ws / "runs" / "base_e0_s0").is_dir()
    record_run(ws, "base_e0_s1", kind="step")
    assert [r.run_id for r in read_manifest(ws).history] == ["base_e0_s0", "base_e0_s1"]
    with pytest.raises(WorkspaceError, match="names a directory"):
        record_run(ws, "../escape")


def test_advance_current_and_best_pointer_independent(ws: Path) -> None:
    meta = advance_current(
        ws, "skills", {"counting-problem.md": "# Counting\n- new\n"}, reason="accept"
    )
    assert meta.version == "v2" and meta.parent == "v1"
    update_best(ws, skills="v1", prompts="v1", val_accuracy=0.5, run_id="r")
    paths = resolve_paths(ws)
    assert paths.skills_version == "v2"
    best = read_best(ws)
    assert best is not None and (best.skills, best.prompts, best.val_accuracy) == ("v1", "v1", 0.5)
    with pytest.raises(WorkspaceError, match="v9 does not exist"):
        update_best(ws, skills="v9", prompts="v1")
    assert record_run(ws, "r2").skills_version == "v2"


def test_manifest_holds_no_wall_clock(ws: Path) -> None:
    text = (ws / "manifest.json").read_text()
    assert "created" not in text and "time" not in text


def test_missing_manifest_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not an initialised workspace"):
        resolve_paths(tmp_path)


def test_init_from_seed_fails_fast_without_touching_the_old_workspace(
    ws: Path, tmp_path: Path
) -> None:
    record_run(ws, "old_run")
    before = sorted(str(p.relative_to(ws)) for p in ws.rglob("*"))
    seeds = tmp_path / "seeds"
    store.init_seed(seeds, "s1", {"a.md": "x\n"}, {"p.md": "y\n"}, questions_ref="gone.json")
    with pytest.raises(WorkspaceError, match=r"'gone\.json' not found"):
        init_workspace_from_seed(ws, "s1", seeds_dir=seeds)
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*")) == before
    assert not list(tmp_path.glob("ws.archive-*"))
    assert read_manifest(ws).history[0].run_id == "old_run"


def test_init_from_seed_archives_the_old_workspace_after_checks(ws: Path, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds"
    store.init_seed(seeds, "s1", {"a.md": "x\n"}, {"p.md": "y\n"}, questions_ref="q.json")
    res = init_workspace_from_seed(ws, "s1", seeds_dir=seeds)
    assert res.archived == tmp_path / "ws.archive-1"
    assert (res.archived / "manifest.json").is_file()
    m = read_manifest(ws)
    assert m.seed is not None and m.seed.name == "s1"
    assert store.read_tree(res.paths.skills_dir) == {"a.md": "x\n"}


def test_init_refuses_a_non_workspace_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("q.json").write_text("[]")
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "precious.txt").write_text("keep")
    with pytest.raises(WorkspaceError, match="not a workspace"):
        init_workspace(
            tmp_path / "stuff", questions_ref="q.json", prompts_dir=_prompt_set(tmp_path / "p")
        )
    assert (tmp_path / "stuff" / "precious.txt").read_text() == "keep"


def test_revert_files_writes_a_new_version(ws: Path) -> None:
    advance_current(ws, "skills", {"counting-problem.md": "# changed\n"}, reason="accept")
    meta = workspace.revert_files(ws, "skills", "v1", ["counting-problem.md"], reason="rollback")
    assert (meta.version, meta.parent, meta.extra["reverted_from"]) == ("v3", "v2", "v1")
    paths = resolve_paths(ws)
    assert paths.skills_version == "v3"
    assert store.read_tree(paths.skills_dir) == store.read_tree(paths.skills_root / "v1")
    with pytest.raises(WorkspaceError, match="cannot revert"):
        workspace.revert_files(ws, "skills", "v1", ["new.md"], reason="x")


def test_ensure_workspace_creates_once(ws: Path, tmp_path: Path) -> None:
    record_run(ws, "r1")
    assert workspace.ensure_workspace(ws, questions_ref="q.json").workspace == ws
    assert read_manifest(ws).history[0].run_id == "r1"
    fresh = workspace.ensure_workspace(
        tmp_path / "new", questions_ref="q.json", prompts_dir=tmp_path / "p"
    )
    assert fresh.skills_version == "v1"


def test_manifest_missing_key_is_corruption(ws: Path) -> None:
    data = json.loads((ws / "manifest.json").read_text())
    del data["history"]
    (ws / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(WorkspaceError, match=r"invalid manifest .*'history': required"):
        read_manifest(ws)


@pytest.mark.parametrize("archive", [False, True], ids=["new", "over-a-workspace"])
def test_an_init_that_fails_keeps_nothing_and_can_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archive: bool
) -> None:
    """Hostile pass (a full tmpfs): init wrote the skills store, then failed on the prompts;
    its leftovers made the directory "not empty and not a workspace" for the next init, and the
    message said to run `trm train --resume`."""
    import errno

    from trm_assets.harness.storage.atomic import StorageWriteError, storage_error

    monkeypatch.chdir(tmp_path)
    Path("q.json").write_text("[]")
    prompts = _prompt_set(tmp_path / "p")
    target = tmp_path / "ws"
    if archive:
        init_workspace(target, questions_ref="q.json", prompts_dir=prompts)
    real = workspace.write_manifest

    def full_disk(*a: object, **k: object) -> None:
        raise storage_error(target / "manifest.json", OSError(errno.ENOSPC, "No space left"))

    monkeypatch.setattr(workspace, "write_manifest", full_disk)
    with pytest.raises(StorageWriteError) as err:
        init_workspace(target, questions_ref="q.json", prompts_dir=prompts)
    assert "run `trm init` again" in str(err.value) and "--resume" not in str(err.value)
    assert {p.name for p in target.iterdir()} <= {".trm.lock"}  # nothing of the failed init
    monkeypatch.setattr(workspace, "write_manifest", real)
    res = init_workspace(target, questions_ref="q.json", prompts_dir=prompts)
    assert read_manifest(target).current.skills == "v1" and res.paths.skills_version == "v1"
    if archive:  # the first workspace was moved aside before the failure, intact
        assert read_manifest(tmp_path / "ws.archive-1").current.skills == "v1"

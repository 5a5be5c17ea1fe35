"""Store (seed §5): numeric version order, atomic versions, seeds and the strict promote check."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from trm_assets.evolution.types import text_hash
from trm_assets.harness.storage import versions as store
from trm_assets.harness.storage.runlog import RunLog
from trm_assets.harness.storage.versions import (
    META_FILE,
    StoreError,
    advance_version,
    list_versions,
    next_version,
    promote_to_seed,
    read_meta,
    read_seed,
    read_version_files,
    write_version,
)


def _make_versions(root: Path, n: int) -> None:
    write_version(root, {"a.md": "v1\n"}, parent=None, reason="init")
    for i in range(2, n + 1):
        advance_version(root, f"v{i - 1}", {"a.md": f"v{i}\n"}, reason=f"step {i}")


def test_versions_sort_numerically_and_next_is_latest_plus_one(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _make_versions(root, 11)
    (root / "v03").mkdir()  # leading zero: not a version
    (root / "notes").mkdir()
    (root / "v12.txt").write_text("stray")
    versions = list_versions(root)
    assert versions[:3] == ["v1", "v2", "v3"]
    assert versions[-2:] == ["v10", "v11"]
    assert versions.index("v2") < versions.index("v10")
    assert next_version(root) == "v12"
    assert read_version_files(root, "v10") == {"a.md": "v10\n"}


def test_parse_version_refuses_bad_names() -> None:
    for bad in ("", "v0", "v01", "1", "V2", "v2a", "../v1"):
        with pytest.raises(StoreError, match="expected 'v' followed by"):
            store.parse_version(bad)


def test_meta_records_parent_reason_edits_and_hashes(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_version(root, {"a.md": "x\n", "b.md": "y\n"}, parent=None, reason="init")
    edits = [{"index": 0, "op": "add", "status": "applied"}]
    meta = advance_version(root, "v1", {"b.md": "z\n"}, reason="accept", edits=edits)
    again = read_meta(root, "v2")
    assert again == meta
    assert meta.parent == "v1" and meta.reason == "accept" and meta.edits == edits
    assert meta.files["b.md"] == text_hash("z\n")
    assert meta.files["a.md"] == read_meta(root, "v1").files["a.md"]
    assert META_FILE not in read_version_files(root, "v2")


def test_failure_mid_write_leaves_no_partial_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "skills"
    write_version(root, {"a.md": "1\n"}, parent=None, reason="init")
    real = store._write_files
    calls = {"n": 0}

    def failing(directory: Path, files: dict[str, str], *, sync: bool = True) -> None:
        calls["n"] += 1
        real(directory, dict(list(files.items())[:1]), sync=sync)  # half, then the disk "fails"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "_write_files", failing)
    with pytest.raises(OSError, match="No space"):
        advance_version(root, "v1", {"b.md": "2\n", "c.md": "3\n"}, reason="boom")
    assert calls["n"] == 1
    assert list_versions(root) == ["v1"]
    assert [p.name for p in root.iterdir()] == ["v1"]  # temp dir removed
    monkeypatch.setattr(store, "_write_files", real)
    assert advance_version(root, "v1", {"b.md": "2\n"}, reason="retry").version == "v2"


def test_hostile_file_names_refused(tmp_path: Path) -> None:
    for bad in ("../x.md", "/etc/passwd", "a/../../x.md", ".hidden.md", META_FILE, "a\\b.md"):
        with pytest.raises(StoreError, match="relative path"):
            write_version(tmp_path / "r", {bad: "x"}, parent=None, reason="init")
    assert list_versions(tmp_path / "r") == []


def test_missing_parent_is_an_error_naming_known_versions(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _make_versions(root, 2)
    with pytest.raises(StoreError, match=r"v7 does not exist .*v1, v2"):
        advance_version(root, "v7", {"a.md": "x"}, reason="r")


# ------------------------------------------------------------------------------------------------
# Seeds


def _run_db(path: Path, runs: list[tuple[str, str | None, str | None]]) -> None:
    """A run log written with the real writer (schema of trm_assets.harness.storage.runlog)."""
    with RunLog.open(path) as log:
        for run_id, sv, pv in runs:
            log.begin_run(
                run_id, kind="eval", skills_version=sv, prompts_version=pv, questions_ref="q.json"
            )
            with log.transaction() as con:  # raw rows: this test is about extraction
                for i in range(3):
                    con.execute(
                        "INSERT INTO predictions (run_id, question_id, replicate, correct, "
                        "stop_reason) VALUES (?, ?, 0, ?, 'answer')",
                        [run_id, f"q{i}", i > 0],
                    )
                    con.execute(
                        "INSERT INTO traces (run_id, question_id, replicate, seq, step, role) "
                        "VALUES (?, ?, 0, 0, 0, 'assistant')",
                        [run_id, f"q{i}"],
                    )
            log.finish_run(run_id)


@pytest.fixture
def promotable(tmp_path: Path) -> dict[str, Path]:
    skills, prompts = tmp_path / "ws" / "skills", tmp_path / "ws" / "prompts"
    write_version(skills, {"a.md": "s1\n"}, parent=None, reason="init")
    advance_version(skills, "v1", {"a.md": "s2\n"}, reason="accept")
    write_version(prompts, {"agent_system.md": "p1\n"}, parent=None, reason="init")
    db = tmp_path / "ws" / "runs.duckdb"
    _run_db(db, [("eval_v2", "v2", "v1"), ("eval_null", None, "v1"), ("step_1", "v1", "v1")])
    return {"skills": skills, "prompts": prompts, "db": db, "seeds": tmp_path / "seeds"}


def _promote(p: dict[str, Path], version: str, run: str, name: str = "s") -> store.Seed:
    return promote_to_seed(
        seeds_dir=p["seeds"],
        name=name,
        version=version,
        eval_run_id=run,
        run_db=p["db"],
        skills_root=p["skills"],
        prompts_root=p["prompts"],
    )


def test_promote_extracts_the_run_with_its_table_definitions(promotable: dict[str, Path]) -> None:
    seed = _promote(promotable, "v2", "eval_v2", "best-1")
    assert seed.skills == {"a.md": "s2\n"} and seed.prompts == {"agent_system.md": "p1\n"}
    assert (seed.meta.skills_version, seed.meta.prompts_version) == ("v2", "v1")
    assert seed.meta.questions_ref == "q.json"
    assert read_seed(promotable["seeds"], "best-1") == seed
    assert seed.run_db is not None
    with duckdb.connect(str(seed.run_db), read_only=True) as con:
        assert con.execute("SELECT run_id FROM runs").fetchall() == [("eval_v2",)]
        assert con.execute("SELECT count(*) FROM predictions").fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM traces").fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM schema_info").fetchone() == (1,)
        sql = con.execute(
            "SELECT sql FROM duckdb_tables() WHERE table_name = 'predictions'"
        ).fetchone()
    assert sql is not None and "PRIMARY KEY" in sql[0]
    # only the seed directory is left behind: temp files were cleaned
    assert sorted(p.name for p in promotable["seeds"].iterdir()) == ["best-1"]


@pytest.mark.parametrize(
    ("version", "run", "message"),
    [
        ("v1", "eval_v2", "evaluated skills v2, not v1"),
        ("v2", "eval_null", "skills_version=None"),
        ("v2", "nope", "not found in table runs"),
        ("v2", "step_1", "evaluated skills v1, not v2"),
    ],
)
def test_promote_refuses_mismatched_or_null_versions(
    promotable: dict[str, Path], version: str, run: str, message: str
) -> None:
    with pytest.raises(StoreError, match=message):
        _promote(promotable, version, run)
    assert not promotable["seeds"].exists() or list(promotable["seeds"].iterdir()) == []


def test_promote_cleans_temp_files_when_extraction_fails(
    promotable: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*a: object, **k: object) -> list[str]:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(store, "extract_run_db", broken)
    with pytest.raises(RuntimeError, match="disk gone"):
        _promote(promotable, "v2", "eval_v2")
    assert list(promotable["seeds"].iterdir()) == []


def test_seed_is_immutable_and_verified_on_read(promotable: dict[str, Path]) -> None:
    _promote(promotable, "v2", "eval_v2", "s")
    with pytest.raises(StoreError, match="already exists"):
        _promote(promotable, "v2", "eval_v2", "s")
    (promotable["seeds"] / "s" / "skills" / "a.md").write_text("tampered")
    with pytest.raises(StoreError, match="do not match the hashes"):
        read_seed(promotable["seeds"], "s")
    meta = json.loads((promotable["seeds"] / "s" / "seed.json").read_text())
    assert meta["eval_run_id"] == "eval_v2"


def test_init_seed_and_unknown_seed(tmp_path: Path) -> None:
    seed = store.init_seed(tmp_path, "base", {"a.md": "x\n"}, {"p.md": "y\n"}, questions_ref="q")
    assert seed.meta.eval_run_id is None and seed.run_db is None
    with pytest.raises(StoreError, match=r"seed 'other' not found .*base"):
        read_seed(tmp_path, "other")
    with pytest.raises(StoreError, match="seed name"):
        read_seed(tmp_path, "../base")


def test_texts_round_trip_byte_for_byte(tmp_path: Path) -> None:
    files = {"crlf.md": "a\r\nb\r\n", "tools/x.md": "ü\n", "no-newline.md": "x"}
    meta = write_version(tmp_path, files, parent=None, reason="init")
    back = read_version_files(tmp_path, "v1")
    assert back == files
    assert store.content_hashes(back) == meta.files

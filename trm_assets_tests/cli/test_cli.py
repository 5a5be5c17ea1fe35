"""`trm data check` and `trm config show` through the real click entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trm_assets.cli import main
from trm_assets_tests.data_fixtures import tree_dict, video


def _dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    (root / "trees").mkdir(parents=True)
    (root / "questions.json").write_text(json.dumps([video("001"), video("002")]))
    for vid in ("001", "002"):
        (root / "trees" / f"vid{vid}.json").write_text(json.dumps(tree_dict(vid, f"vid{vid}")))
    return root


def test_help_lists_commands() -> None:
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    assert "data" in res.output and "config" in res.output


def test_data_check_directory_ok(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    res = CliRunner().invoke(main, ["data", "check", str(root), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["ok"] is True
    assert out["questions"] == 4 and out["trees"] == 2
    assert out["by_task_type"] == {"Counting Problem": 2, "OCR Problems": 2}
    assert out["by_duration"] == {"medium": 4}


def test_data_check_human_output(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    res = CliRunner().invoke(
        main, ["data", "check", str(root / "questions.json"), str(root / "trees")]
    )
    assert res.exit_code == 0, res.output
    assert "questions: 4 from 1 file(s)" in res.output
    assert "Counting Problem" in res.output and "trees: 2 video(s), 10 nodes" in res.output


def test_data_check_rejects_with_located_messages(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    bad = tree_dict("002", "vid002")
    bad["nodes"]["s0c0"]["end"] = 99.0
    (root / "trees" / "vid002.json").write_text(json.dumps(bad))
    v = video("003")
    v["questions"][0]["answer"] = "Z"
    (root / "more.json").write_text(json.dumps([v]))
    res = CliRunner().invoke(main, ["data", "check", str(root)])
    assert res.exit_code == 1
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert "vid002.json" in err and "node 's0c0': time range 0.0..99.0 is outside" in err
    assert "more.json" in err and "question #1 (question_id '003-1')" in err and "answer" in err


def test_data_check_missing_trees_and_unknown_file(tmp_path: Path) -> None:
    root = _dataset(tmp_path)
    (root / "trees" / "vid002.json").unlink()
    (root / "notes.json").write_text('{"hello": 1}')
    res = CliRunner().invoke(main, ["data", "check", str(root), "--json"])
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert any("have no tree file" in e and "vid002" in e for e in out["errors"])
    assert any("notes.json" in e and "not a question file" in e for e in out["errors"])


def test_config_show_resolves_and_reports_all_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    y = tmp_path / "c.yaml"
    y.write_text("gate_alpha: 0.02\n")
    res = CliRunner().invoke(
        main, ["config", "show", "--config", str(y), "--set", "seed=5", "--json"]
    )
    assert res.exit_code == 0, res.output
    body = res.output[: res.output.rindex("}") + 1]
    cfg = json.loads(body)
    assert cfg["gate_alpha"] == 0.02 and cfg["seed"] == 5
    res = CliRunner().invoke(main, ["config", "show", "--set", "gate_alpa=1", "--set", "epochs=0"])
    assert res.exit_code == 2
    assert "gate_alpa: unknown key" in res.output and "epochs:" in res.output
    assert "Traceback" not in res.output


def test_every_subcommand_shows_a_users_mistake_as_an_error_line(tmp_path: Path) -> None:
    """Commands without their own wrapper (the simulator's, the benchmarks') printed tracebacks
    for a missing file, a taken port or a config that is not a mapping (review of bad inputs);
    the top group turns them into ``error:`` lines with exit code 2."""
    import socket

    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n", encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = [
            (["sim-oracle", "--data", str(tmp_path / "nope")], "expected a readable ground-truth"),
            (["sim-serve", "--port", port, "--data", "data/smoke"], "Address already in use"),
            (["data", "synth", "--out", "/proc/synth", "--videos", "2", "--seed", "1"], "/proc"),
            (["bench", "overhead", "--config", str(listing)], "top level must be a mapping"),
        ]
        for args, says in cases:
            res = CliRunner().invoke(main, args)
            assert res.exit_code in (1, 2), (args, res.output, res.exception)
            assert says in res.output and "Traceback" not in res.output, (args, res.output)
            assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)


def test_data_check_of_a_directory_without_data_files_is_an_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["data", "check", str(tmp_path)])
    assert res.exit_code == 1 and "no question or tree file under" in res.output

"""Hostile JSON and CSV encodings (hostile pass): a byte-order mark is not an error, nesting
deeper than the parser allows is a located error (it was a raw ``RecursionError`` traceback in
`trm data check` and `trm init`), and a long string does not cost gigabytes (the trailing-comma
rewrite took 689 MB for a 5 MB caption, 6.7 GB for 50 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from trm_assets.agent.tree import TreeFormatError, load_tree
from trm_assets.cli.main import data_check
from trm_assets.domain.errors import TOO_DEEP
from trm_assets.harness.data.questions import load_questions, strip_trailing_commas

REPO = Path(__file__).resolve().parents[3]
SMOKE = REPO / "data" / "smoke"
TREE = next(iter(sorted((SMOKE / "trees").glob("*.json"))))


def _flat_csv(path: Path, bom: bool) -> None:
    rows = [
        {**{k: v for k, v in q.items() if k != "options"}, "options": json.dumps(q["options"]),
         "video_id": v["video_id"], "videoID": v["videoID"], "duration": v["duration"],
         "domain": v["domain"], "sub_category": v["sub_category"]}
        for v in json.loads((SMOKE / "questions.json").read_text(encoding="utf-8"))
        for q in v["questions"]
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False, encoding="utf-8-sig" if bom else "utf-8")


def test_a_byte_order_mark_is_not_an_error(tmp_path: Path) -> None:
    _flat_csv(tmp_path / "plain.csv", bom=False)
    _flat_csv(tmp_path / "excel.csv", bom=True)
    assert (tmp_path / "excel.csv").read_bytes()[:3] == b"\xef\xbb\xbf"
    plain = load_questions(tmp_path / "plain.csv")
    assert load_questions(tmp_path / "excel.csv") == plain and len(plain) > 0
    bom_json = tmp_path / "questions.json"
    bom_json.write_bytes(b"\xef\xbb\xbf" + (SMOKE / "questions.json").read_bytes())
    assert load_questions(bom_json) == load_questions(SMOKE / "questions.json")
    bom_tree = tmp_path / "trees" / TREE.name
    bom_tree.parent.mkdir()
    bom_tree.write_bytes(b"\xef\xbb\xbf" + TREE.read_bytes())
    assert load_tree(bom_tree) == load_tree(TREE)
    res = CliRunner().invoke(data_check, [str(bom_json), str(bom_tree.parent), "--json"])
    out = json.loads(res.output)
    assert out["trees"] == 1 and out["questions"] == len(plain), res.output
    # the one complaint left: the other videos' trees were not copied
    assert len(out["errors"]) == 1 and "have no tree file" in out["errors"][0], res.output


def test_nesting_deeper_than_the_parser_allows_is_a_located_error(tmp_path: Path) -> None:
    tree = json.loads(TREE.read_text(encoding="utf-8"))
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    text = json.dumps(tree).replace('"video":', '"provenance": ' + deep + ', "video":', 1)
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TreeFormatError) as err:
        load_tree(path)
    assert TOO_DEEP in str(err.value) and "deep.json" in str(err.value)
    qpath = tmp_path / "questions.json"
    qpath.write_text("[" + deep + "]", encoding="utf-8")
    res = CliRunner().invoke(data_check, [str(path), str(qpath)])
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    assert res.output.count(TOO_DEEP) == 2, res.output


def test_the_trailing_comma_rewrite_of_a_long_string_costs_its_size() -> None:
    text = '{"a": "' + "x" * 5_000_000 + '", "b": [1, 2,],}'
    assert strip_trailing_commas(text) == '{"a": "' + "x" * 5_000_000 + '", "b": [1, 2]}'
    # the peak of the child's own memory (VmHWM starts afresh at exec; ru_maxrss keeps the
    # forked pytest worker's, ≈ 500 MB under xdist)
    probe = (
        "from trm_assets.harness.data.questions import strip_trailing_commas as s; "
        "s('{\"a\": \"' + 'x' * 5_000_000 + '\",}'); "
        "print(next(int(ln.split()[1]) // 1024 for ln in open('/proc/self/status') "
        "if ln.startswith('VmHWM:')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert int(out.stdout) < 200, f"{out.stdout} MB"  # the per-character pattern: 689 MB

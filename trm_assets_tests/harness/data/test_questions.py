"""Question loaders: every format, both JSON key sets, and located errors for bad input."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from trm_assets.harness.data.questions import (
    QuestionFormatError,
    QuestionSummary,
    load_questions,
    strip_trailing_commas,
)
from trm_assets_tests.data_fixtures import WriteJson, flat_rows, video


def test_official_json_current_keys(write_json: WriteJson) -> None:
    p = write_json("q.json", [video("001"), video("002", 3)])
    qs = load_questions(p)
    assert [q.question_id for q in qs] == ["001-1", "001-2", "002-1", "002-2", "002-3"]
    q = qs[0]
    assert (q.duration, q.domain, q.sub_category, q.videoID) == (
        "medium",
        "Life Record",
        "Food",
        "vid001",
    )
    assert q.options[2] == "C. A green lamp." and q.option_text("C") == "A green lamp."
    assert QuestionSummary.of(qs).by_task_type == {"Counting Problem": 3, "OCR Problems": 2}


def test_official_json_older_keys(write_json: WriteJson) -> None:
    p = write_json("old.json", [video("007", old_keys=True)])
    qs = load_questions(p)
    assert qs[0].duration == "short"
    assert qs[0].domain == "Knowledge"
    assert qs[0].sub_category == "Astronomy"
    assert qs[0].videoID == "007"  # no videoID in the old format: falls back to video_id
    assert qs[0].options[0].startswith("A. ")


def test_official_template_trailing_commas_and_response(write_json: WriteJson) -> None:
    text = """[
      {"video_id": "001", "duration": "short", "domain": "Knowledge",
       "sub_category": "Humanity & History",
       "questions": [
         {"question_id": "001-1", "task_type": "Counting Problem",
          "question": "How many, really, are there?",
          "options": ["A. One.", "B. Two,]", "C. Three.", "D. Four.",],
          "answer": "C", "response": "C. Three.",},
       ],},
    ]"""
    p = write_json("template.json", None, text=text)
    qs = load_questions(p)
    assert len(qs) == 1
    assert qs[0].options[1] == "B. Two,]"  # commas inside strings are untouched
    assert qs[0].question == "How many, really, are there?"


def test_strip_trailing_commas_keeps_strings() -> None:
    assert json.loads(strip_trailing_commas('{"a": ",}", "b": [1, 2,],}')) == {
        "a": ",}",
        "b": [1, 2],
    }


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """The flat rows as a CSV file (options as a JSON list), one column per key of the first."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({**r, "options": json.dumps(r["options"])})
    return path


def test_csv(tmp_path: Path) -> None:
    rows = flat_rows([video("001"), video("002")])
    p = write_csv(tmp_path / "q.csv", rows)
    qs = load_questions(p)
    assert len(qs) == 4 and qs[3].question_id == "002-2"
    assert qs[0].url == "https://example.invalid/001"


def test_parquet_hf_schema(tmp_path: Path) -> None:
    rows = flat_rows([video("001"), video("002")])
    rows[0]["language"] = "English"
    for r in rows[1:]:
        r["language"] = None
    p = tmp_path / "test-00000-of-00001.parquet"
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t (video_id VARCHAR, duration VARCHAR, domain VARCHAR, sub_category VARCHAR,"
        " url VARCHAR, videoID VARCHAR, question_id VARCHAR, task_type VARCHAR, question VARCHAR,"
        " options VARCHAR[], answer VARCHAR, language VARCHAR)"
    )
    con.executemany(
        "INSERT INTO t VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", [list(r.values()) for r in rows]
    )
    con.execute(f"COPY t TO '{p}' (FORMAT parquet)")
    qs = load_questions(p)
    assert [q.question_id for q in qs] == ["001-1", "001-2", "002-1", "002-2"]
    assert qs[0].language == "English" and qs[1].language is None
    assert qs[2].options == tuple(rows[2]["options"])


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (lambda v: v["questions"][1].update(answer="E"), ["question #2", "001-2", "answer"]),
        (lambda v: v["questions"][0].pop("task_type"), ["question #1", "task_type", "missing"]),
        (
            lambda v: v["questions"][0].update(options=["A. x", "B. y", "C. z"]),
            ["question #1", "options"],
        ),
        (
            lambda v: v["questions"][0].update(options=["B. x", "A. y", "C. z", "D. w"]),
            ["options", "must start with 'A. '"],
        ),
        (lambda v: v.update(duration="tiny"), ["video #1", "duration", "tiny"]),
        (lambda v: v["questions"][0].update(colour="red"), ["unknown key", "colour"]),
        (lambda v: v.pop("questions"), ["video #1", "'questions'"]),
    ],
)
def test_malformed_json_is_located(
    write_json: WriteJson, mutate: Callable[[dict[str, Any]], object], fragments: list[str]
) -> None:
    v = video("001")
    mutate(v)
    p = write_json("bad.json", [v])
    with pytest.raises(QuestionFormatError) as ei:
        load_questions(p)
    msg = str(ei.value)
    assert str(p) in msg
    for f in fragments:
        assert f in msg, (f, msg)


def test_invalid_json_syntax_names_line(write_json: WriteJson) -> None:
    p = write_json("broken.json", None, text='[\n {"video_id": "1",\n  "questions": [}\n]')
    with pytest.raises(QuestionFormatError, match=r"line 3 column"):
        load_questions(p)


def test_csv_bad_row_names_row_number(tmp_path: Path) -> None:
    rows = flat_rows([video("001")])
    rows[1]["duration"] = "forever"
    p = write_csv(tmp_path / "q.csv", rows)
    with pytest.raises(QuestionFormatError) as ei:
        load_questions(p)
    assert "row 3" in str(ei.value) and "duration" in str(ei.value)


def test_csv_missing_columns(tmp_path: Path) -> None:
    p = tmp_path / "q.csv"
    p.write_text("question_id,question\n1,hi\n", encoding="utf-8")
    with pytest.raises(QuestionFormatError, match="answer, options, task_type"):
        load_questions(p)


def test_duplicate_question_ids_and_bad_suffix(write_json: WriteJson, tmp_path: Path) -> None:
    v = video("001")
    v["questions"][1]["question_id"] = "001-1"
    with pytest.raises(QuestionFormatError, match="unique question ids"):
        load_questions(write_json("dup.json", [v]))
    other = tmp_path / "q.txt"
    other.write_text("x")
    with pytest.raises(QuestionFormatError, match=r"\.json, \.parquet, \.csv"):
        load_questions(other)
    with pytest.raises(QuestionFormatError, match="existing question file"):
        load_questions(tmp_path / "missing.json")


def test_the_frozen_pools_name_the_pooled_questions_that_changed(tmp_path: Path) -> None:
    """A resume on other data is refused naming the pooled questions that changed; a question
    added to the file (in no frozen pool) or a field nothing reads (url) changes nothing
    (review: the first digest, of the whole file, refused both and named none)."""
    from trm_assets.domain.errors import DataFormatError
    from trm_assets.harness.storage.pools import build_or_load_pools, load_pools
    from trm_assets_tests.tiny import tiny_config

    cfg = tiny_config()
    qs = tuple(load_questions(Path(cfg.questions)))
    path = tmp_path / "pools.json"
    pools = build_or_load_pools(cfg, qs, path)
    pooled = sorted(pools.validation)
    extra = qs[0].model_copy(update={"question_id": "999-1"})
    relinked = tuple(
        q.model_copy(
            update={"url": "https://elsewhere", "options": tuple(f"{o}  " for o in q.options)}
        )
        for q in qs
    )  # a url, and spaces the agent's message folds away
    assert load_pools(path, (*relinked, extra)) == pools
    moved = tuple(
        q.model_copy(update={"domain": "Elsewhere"}) if q.question_id == pooled[0] else q
        for q in qs
    )  # the prompt set may show the domain (review)
    with pytest.raises(
        DataFormatError, match=rf"1 pooled question\(s\) changed since \({pooled[0]}:"
    ):
        load_pools(path, moved)
    changed = tuple(
        q.model_copy(update={"answer": "B" if q.answer == "A" else "A"})
        if q.question_id in pooled[:2]
        else q
        for q in qs
    )
    with pytest.raises(DataFormatError) as err:
        load_pools(path, changed, source="q.json")
    msg = str(err.value)
    assert f"2 pooled question(s) changed since ({pooled[0]}, {pooled[1]}:" in msg
    assert "q.json" in msg and "trm init" in msg

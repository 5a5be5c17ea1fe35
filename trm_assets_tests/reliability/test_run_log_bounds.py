"""Issue 18.7: model text is stored with a size limit, usage numbers cannot crash an insert.

Before: ``predictions.final_text`` and the traces kept whole replies (540 MB of run log for a
smoke run with 1 MB replies, 4.95 GB peak memory with 10 MB replies), and
``usage.prompt_tokens = 10**20`` crashed the DuckDB insert with a traceback. Now every model-text
value is cut to ``text_cap_bytes`` (64 KiB by default) before it is buffered, the original size
is kept (``final_text_bytes``, ``content_bytes``), and counts are clamped into 0..2**31-1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from trm_assets.harness.storage.runlog import RunLog
from trm_assets_tests.reliability.conftest import run_child

CAP = 64 * 1024


def rollout(i: int, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "r",
        "question_id": f"q{i}",
        "replicate": 0,
        "stop_reason": "final_text",
        "final_text": text,
        **extra,
    }


def trace(seq: int, content: str, **extra: Any) -> dict[str, Any]:
    return {"seq": seq, "step": seq, "role": "assistant", "content": content, **extra}


def test_long_replies_are_cut_on_a_character_boundary_with_their_size(tmp_path: Path) -> None:
    reply = "é" * 600_000 + "THE END"  # 1,200,007 bytes of UTF-8, 2 bytes per "é"
    size = len(reply.encode("utf-8"))
    assert size == 1_200_007
    with RunLog.open(tmp_path / "runs.duckdb") as log:
        log.add_rollout(
            rollout(0, reply, error="x" * 200_000, evidence={"visited_nodes": ["n"] * 50_000}),
            [trace(0, reply, arguments="{" + "a" * 100_000)],
        )
        log.add_rollout(rollout(1, "short answer: B"), [trace(0, "B")])
    with duckdb.connect(str(tmp_path / "runs.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT question_id, final_text, final_text_bytes, error, evidence "
            "FROM predictions ORDER BY question_id"
        ).fetchall()
        traces = con.execute(
            "SELECT question_id, content, content_bytes, arguments FROM traces ORDER BY question_id"
        ).fetchall()
    (_, text, n, error, evidence), (_, short, n_short, _, _) = rows
    assert n == size and len(text.encode("utf-8")) <= CAP
    mark = f"\n…[cut by the run log: {size} bytes, {CAP}-byte cap]"
    assert text.endswith(mark) and set(text[: -len(mark)]) == {"é"}  # no half character
    assert len(text.encode("utf-8")) > CAP - 10  # as much as fits
    assert len(error.encode("utf-8")) <= CAP and error.startswith("x" * 1000)
    assert json.loads(evidence) == {
        "truncated_bytes": len(json.dumps({"visited_nodes": ["n"] * 50_000}).encode())
    }
    assert (short, n_short) == ("short answer: B", len(b"short answer: B"))
    (_, content, content_bytes, arguments), (_, b_text, b_bytes, _) = traces
    assert content == text and content_bytes == size
    assert len(arguments.encode("utf-8")) <= CAP
    assert (b_text, b_bytes) == ("B", 1)


def test_absurd_usage_numbers_are_clamped_not_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    with RunLog.open(db) as log:
        log.begin_run("r")
        log.add_rollout(
            rollout(0, "A", prompt_tokens=10**20, completion_tokens=-5, n_llm_calls=2**40),
            [trace(0, "A", prompt_tokens=10**12, completion_tokens=float("inf"))],
        )
        log.add_rollout(rollout(1, "B", prompt_tokens=10**19, completion_tokens="12"))
        log.finish_run("r")
    with duckdb.connect(str(db), read_only=True) as con:
        preds = con.execute(
            "SELECT prompt_tokens, completion_tokens, n_llm_calls FROM predictions "
            "ORDER BY question_id"
        ).fetchall()
        tr = con.execute("SELECT prompt_tokens, completion_tokens FROM traces").fetchall()
        run = con.execute("SELECT prompt_tokens, completion_tokens FROM runs").fetchall()
    top = 2**31 - 1
    assert preds == [(top, 0, top), (top, 12, None)]
    assert tr == [(top, None)]
    assert run == [(2 * top, 12)]


CHILD = """
import random, resource, sys
from pathlib import Path
from trm_assets.harness.storage.runlog import RunLog
db = Path(sys.argv[1])
# one 10 MB reply (incompressible hex), reused: the agent holds it anyway
reply = random.Random(0).randbytes(5 * 1024 * 1024).hex()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with RunLog.open(db) as log:
    log.begin_run("r")
    for i in range(24):
        log.add_rollout(
            {"run_id": "r", "question_id": f"q{i}", "replicate": 0, "final_text": reply},
            [{"seq": s, "step": s, "role": "assistant", "content": reply} for s in range(2)],
        )
    log.finish_run("r")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - base) // 1024, db.stat().st_size // (1024 * 1024))
"""


def test_ten_megabyte_replies_use_bounded_memory_and_disk(tmp_path: Path) -> None:
    """72 stored copies of a 10 MB reply (720 MB of text) in one flush."""
    res = run_child(["-c", CHILD, str(tmp_path / "runs.duckdb")], timeout_s=300)
    assert res.returncode == 0, res.stderr
    extra_rss_mb, file_mb = map(int, res.stdout.split()[-2:])  # after any progress bar
    assert file_mb < 16, file_mb  # 72 values of 64 KiB = 4.5 MB (+ DuckDB's blocks)
    assert extra_rss_mb < 200, extra_rss_mb


def test_the_cap_is_a_config_key_the_loop_opens_its_run_log_with(tmp_path: Path) -> None:
    """Issue 18: "bounded storage of model text (configurable cap, size recorded)" — the cap was
    a constant (contract audit). `run_log_text_cap_bytes` reaches the workspace's run log; its
    default is the run log's own and stays out of the decision fingerprint (an older checkpoint
    resumes without a drift warning), and another value is in it."""
    import pytest

    from trm_assets.harness.data.config import RUN_LOG_TEXT_CAP_DEFAULT, ConfigError
    from trm_assets.harness.loop.context import loop_context
    from trm_assets.harness.storage.runlog import DEFAULT_TEXT_CAP_BYTES
    from trm_assets.harness.storage.workspace import init_workspace
    from trm_assets.llm.factory import build_providers
    from trm_assets_tests.tiny import tiny_config

    assert RUN_LOG_TEXT_CAP_DEFAULT == DEFAULT_TEXT_CAP_BYTES == CAP
    default = tiny_config()
    assert "run_log_text_cap_bytes" not in default.decision_values()
    cfg = tiny_config("run_log_text_cap_bytes=2048")
    assert cfg.decision_values()["run_log_text_cap_bytes"] == 2048
    assert cfg.fingerprint() != default.fingerprint()
    for bad in (100, 16 * 1024 * 1024 + 1):  # a cap is a bound: not off, not huge
        with pytest.raises(ConfigError, match="run_log_text_cap_bytes"):
            tiny_config(f"run_log_text_cap_bytes={bad}")
    ws = tmp_path / "ws"
    init_workspace(ws, questions_ref=cfg.questions)
    reply = "x" * 10_000
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        assert ctx.log.text_cap_bytes == 2048
        ctx.log.add_rollout(rollout(0, reply), [trace(0, reply)])
        ctx.log.flush()
    with duckdb.connect(str(ws / "runs.duckdb"), read_only=True) as con:
        ((text, n),) = con.sql("SELECT final_text, final_text_bytes FROM predictions").fetchall()
        ((content, m),) = con.sql("SELECT content, content_bytes FROM traces").fetchall()
    mark = "\n…[cut by the run log: 10000 bytes, 2048-byte cap]"
    assert (n, m) == (10_000, 10_000) and text == content
    assert text == "x" * (2048 - len(mark.encode("utf-8"))) + mark

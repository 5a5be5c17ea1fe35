"""run_inference: the pessimistic row, infra vs task failures, replicates and seeds, fail-fast
configuration checks, and end to end with the simulated model (in process and over HTTP)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from trm_assets.agent.loop import rollout_seed
from trm_assets.agent.messages import SkillNotFoundError
from trm_assets.agent.tools import Toolbox, ToolPackError
from trm_assets.domain.question import Question
from trm_assets.harness.loop.rollouts import InferenceProgress, InferenceResult, run_inference
from trm_assets.harness.storage.runlog import RunLog
from trm_assets.llm.protocol import ChatResponse, InfraError, Message
from trm_assets_tests.agent.fixtures import (
    REPO,
    ScriptedLLM,
    explorer,
    kitchen_tree,
    prompts,
    question,
    skills_for,
)

TASKS = ["Object Recognition", "OCR Problems"]
SKILLS = skills_for(TASKS)
QS = [
    question("001-1", answer="A"),
    question("001-2", answer="B"),
    question("001-3", task_type="OCR Problems", answer="A"),
]


def qid_of(messages: list[Message]) -> str:
    content: str = messages[1]["content"]
    for line in content.splitlines():
        if line.startswith("Question id: "):
            return line.removeprefix("Question id: ")
    raise AssertionError("no question id line")


def infer(llm: Any, log: RunLog | None, questions: list[Any] = QS, **kw: Any) -> InferenceResult:
    args: dict[str, Any] = dict(
        llm=llm,
        tools=Toolbox({"vidA": kitchen_tree()}),
        log=log,
        run_id="run_1",
        concurrency=2,
        max_steps=5,
        skills=SKILLS,
        prompts=prompts(),
    )
    args.update(kw)
    return asyncio.run(run_inference(questions, **args))


@pytest.fixture
def log(tmp_path: Path) -> Any:
    with RunLog.open(tmp_path / "runs.duckdb") as lg:
        yield lg


@pytest.mark.parametrize("run_id", ["", "   "])
def test_empty_run_id_is_refused(run_id: str) -> None:
    llm = ScriptedLLM(explorer())
    with pytest.raises(ValueError, match="run_id is required"):
        infer(llm, None, run_id=run_id)
    assert llm.calls == []


def test_rows_results_and_replicates(log: RunLog) -> None:
    seen: list[InferenceProgress] = []
    llm = ScriptedLLM(explorer(lambda m: "A"))
    res = infer(
        llm, log, replicates=2, progress=seen.append, skills_version="v2", prompts_version="p1"
    )
    assert (
        res.n == 6 and res.n_correct == 4 and res.n_task_failures == 2 and res.n_infra_failures == 0
    )
    assert res.accuracy == pytest.approx(4 / 6)
    assert [(p.question_id, p.replicate) for p in res.predictions] == [
        (q, r) for q in ("001-1", "001-2", "001-3") for r in (0, 1)
    ]
    assert res.by_task_type()["Object Recognition"].accuracy == 0.5
    assert [s.done for s in seen] == [1, 2, 3, 4, 5, 6] and seen[-1].total == 6
    # Seeds: a deterministic function of (run_id, question_id, replicate), sent on every call.
    for p in res.predictions:
        assert p.seed == rollout_seed("run_1", p.question_id, p.replicate)
    assert {c[2] for c in llm.calls} == {p.seed for p in res.predictions}
    # The database agrees with the in-memory result.
    assert log.correctness("run_1") == res.correctness()
    rows = {(r["question_id"], r["replicate"]): r for r in log.predictions("run_1")}
    r = rows[("001-2", 1)]
    assert (r["stop_reason"], r["predicted"], r["correct"], r["failure_kind"]) == (
        "answer",
        "A",
        False,
        "task",
    )
    assert r["skill_files"] == '["object-recognition.md", "default-strategy.md"]'
    assert '"visited_nodes"' in r["evidence"]
    assert len(log.traces("run_1", "001-2", 1)) == 6
    run = log.run("run_1")
    assert run is not None
    assert (run["status"], run["n_rollouts"], run["model"], run["is_simulated"]) == (
        "done",
        6,
        "scripted",
        True,
    )
    assert (run["skills_version"], run["prompts_version"]) == ("v2", "p1")


def test_explicit_replicate_pairs_and_duplicates() -> None:
    llm = ScriptedLLM(explorer())
    res = infer(llm, None, questions=[(QS[0], 3), (QS[0], 7)])
    assert [p.replicate for p in res.predictions] == [3, 7]
    with pytest.raises(ValueError, match="duplicate"):
        infer(llm, None, questions=[QS[0], (QS[0], 0)])


def test_infra_failure_is_recorded_as_infra_and_overwritten_by_a_later_success(log: RunLog) -> None:
    def flaky(messages: list[Message], seed: int | None) -> ChatResponse:
        if qid_of(messages) == "001-2":
            raise InfraError("http_status", "HTTP 503 after retries", status=503)
        return explorer()(messages, seed)

    res = infer(ScriptedLLM(flaky), log)
    p = {x.question_id: x for x in res.predictions}["001-2"]
    assert (p.stop_reason, p.correct, p.failure_kind, p.outcome) == ("error", None, "infra", None)
    assert res.n_infra_failures == 1 and res.accuracy == pytest.approx(1.0)
    row = {r["question_id"]: r for r in log.predictions("run_1")}["001-2"]
    assert row["stop_reason"] == "error" and row["failure_kind"] == "infra"
    assert "503" in row["error"]
    # The same rollout run again (same run id and replicate) replaces the pessimistic row only.
    infer(ScriptedLLM(explorer(lambda m: "B")), log)
    rows = {r["question_id"]: r for r in log.predictions("run_1")}
    assert (rows["001-2"]["stop_reason"], rows["001-2"]["correct"]) == ("answer", True)
    assert rows["001-1"]["predicted"] == "A"  # completed rows are never overwritten


def test_a_bug_aborts_the_run_but_rows_are_written(log: RunLog) -> None:
    def buggy(messages: list[Message], seed: int | None) -> ChatResponse:
        if qid_of(messages) == "001-2":
            raise KeyError("oops")
        return explorer()(messages, seed)

    with pytest.raises(KeyError, match="oops"):
        infer(ScriptedLLM(buggy), log, concurrency=3)
    rows = {r["question_id"]: r for r in log.predictions("run_1")}
    assert rows["001-2"]["stop_reason"] == "error" and rows["001-2"]["failure_kind"] is None
    assert rows["001-2"]["error"].startswith("bug: KeyError")
    run = log.run("run_1")
    assert run is not None and run["status"] == "failed"


def test_configuration_errors_fail_before_any_rollout(log: RunLog) -> None:
    llm = ScriptedLLM(explorer())
    with pytest.raises(ToolPackError, match="no tree: vidQ"):
        infer(llm, log, questions=[*QS, question("9-1", videoID="vidQ")])
    with pytest.raises(SkillNotFoundError, match=r"temporal-reasoning\.md"):
        infer(llm, log, questions=[*QS, question("9-2", task_type="Temporal Reasoning")])
    with pytest.raises(ValueError, match="skill_mode"):
        infer(llm, log, skill_mode="some")
    assert llm.calls == [] and log.predictions("run_1") == []
    # skill_mode="none" needs no skill file at all.
    res = infer(llm, log, skills={}, skill_mode="none")
    assert res.n == 3


def test_periodic_flushes_happen_off_the_event_loop(log: RunLog) -> None:
    qs = [question(f"001-{i}") for i in range(10)]
    infer(ScriptedLLM(explorer(), latency_s=0.001), log, questions=qs, flush_every=2, concurrency=4)
    assert len(log.predictions("run_1")) == 10 and log.pending == 0


# ------------------------------------------------------------------------------------------------
# End to end with the simulated world (smoke sample)

SMOKE = REPO / "data" / "smoke"
needs_smoke = pytest.mark.skipif(
    not (SMOKE / "ground_truth.json").exists(), reason="the smoke sample is not generated yet"
)


def _smoke() -> tuple[list[Question], Toolbox, dict[str, str], Any]:
    from trm_assets.agent.tree import load_trees
    from trm_assets.harness.data.questions import load_questions
    from trm_assets.llm.sim.world import load_world

    qs = load_questions(SMOKE / "questions.json")
    skills = {p.name: p.read_text() for p in (REPO / "prompts" / "skills").glob("*.md")}
    return qs, Toolbox(load_trees(SMOKE / "trees")), skills, load_world(SMOKE / "ground_truth.json")


@needs_smoke
def test_simulated_model_end_to_end_in_process_and_over_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trm_assets.llm.openai_compat import OpenAICompatProvider
    from trm_assets.llm.sim.provider import SimulatedProvider
    from trm_assets.llm.sim.server import SimServer
    from trm_assets.llm.sim_config import SimConfig

    caplog.set_level(logging.DEBUG)
    qs, tools, skills, world = _smoke()
    qs = qs[:60]

    def run(llm: Any, log: RunLog, run_id: str) -> InferenceResult:
        # temperature 1: the default world's sampling agent, fresh draws per run id
        return infer(
            llm,
            log,
            qs,
            tools=tools,
            run_id=run_id,
            concurrency=8,
            skills=skills,
            max_steps=8,
            temperature=1.0,
        )

    secret = "sk-e2e-NEVER-STORE-31337"
    with RunLog.open(tmp_path / "runs.duckdb") as log:
        a = run(SimulatedProvider(world, SimConfig()), log, "sim_a")
        assert a.n == 60 and a.n_infra_failures == 0
        assert all(p.stop_reason == "answer" for p in a.predictions)
        assert 0.15 < (a.accuracy or 0) < 0.9
        # Deterministic for the same run id; fresh draws for another run id.
        again = run(SimulatedProvider(world, SimConfig()), RunLog.open(":memory:"), "sim_a")
        assert again.correctness() == a.correctness()
        other = run(SimulatedProvider(world, SimConfig()), RunLog.open(":memory:"), "sim_b")
        assert [p.predicted for p in other.predictions] != [p.predicted for p in a.predictions]
        # The same conversation over real HTTP (sim-serve) through the OpenAI-compatible provider.
        with SimServer(SimulatedProvider(world, SimConfig(), inject_faults=False)) as srv:
            http = OpenAICompatProvider(
                base_url=srv.base_url, model="sim", api_key=SecretStr(secret), max_concurrency=8
            )
            b = run(http, log, "sim_a_http")
        assert b.n == 60 and b.n_infra_failures == 0
        assert log.run("sim_a_http")["model"] == "sim"  # type: ignore[index]
        # provenance: the request named "sim", the server reported the model it serves
        served = SimulatedProvider(world, SimConfig()).model
        assert served != "sim"
        rows = log.query(
            "SELECT run_id, model, served_model, count(*) AS n FROM predictions "
            "GROUP BY ALL ORDER BY run_id"
        )
        assert rows == [
            {"run_id": "sim_a", "model": served, "served_model": served, "n": 60},
            {"run_id": "sim_a_http", "model": "sim", "served_model": served, "n": 60},
        ]
    blob = (tmp_path / "runs.duckdb").read_bytes()
    assert secret.encode() not in blob and b"Bearer" not in blob
    assert secret not in caplog.text


@needs_smoke
def test_http_and_in_process_give_identical_outcomes() -> None:
    from trm_assets.llm.openai_compat import OpenAICompatProvider
    from trm_assets.llm.sim.provider import SimulatedProvider
    from trm_assets.llm.sim.server import SimServer
    from trm_assets.llm.sim_config import SimConfig

    qs, tools, skills, world = _smoke()
    qs = qs[:30]

    def run(llm: Any) -> InferenceResult:
        return infer(
            llm, None, qs, tools=tools, run_id="same", concurrency=6, max_steps=8, skills=skills
        )

    a = run(SimulatedProvider(world, SimConfig(), inject_faults=False))
    with SimServer(SimulatedProvider(world, SimConfig(), inject_faults=False)) as srv:
        b = run(OpenAICompatProvider(base_url=srv.base_url, model="sim", max_concurrency=6))
    assert b.correctness() == a.correctness()
    assert [p.n_llm_calls for p in b.predictions] == [p.n_llm_calls for p in a.predictions]


@needs_smoke
def test_simulated_faults_become_infra_failures_not_crashes() -> None:
    from trm_assets.llm.sim.provider import SimulatedProvider
    from trm_assets.llm.sim_config import SimConfig

    qs, tools, skills, world = _smoke()
    cfg = SimConfig(fault_http_5xx_rate=0.1, fault_timeout_rate=0.05, fault_malformed_rate=0.05)
    res = asyncio.run(
        run_inference(
            qs,
            llm=SimulatedProvider(world, cfg),
            tools=tools,
            log=RunLog.open(":memory:"),
            run_id="faulty",
            concurrency=8,
            max_steps=8,
            skills=skills,
            prompts=prompts(),
        )
    )
    kinds = {p.failure_kind for p in res.predictions}
    assert res.n_infra_failures > 0 and "task" in kinds
    for p in res.predictions:
        if p.failure_kind == "infra":
            assert p.stop_reason == "error" and p.correct is None
        else:
            assert p.stop_reason != "error" and p.correct is not None


def test_resume_skips_completed_rollouts_and_returns_what_the_log_holds(log: RunLog) -> None:
    def flaky(messages: list[Message], seed: int | None) -> ChatResponse:
        if qid_of(messages) == "001-2":
            raise InfraError("timeout", "slow")
        return explorer(lambda m: "A")(messages, seed)

    first = infer(ScriptedLLM(flaky), log)
    assert first.n_infra_failures == 1
    with pytest.raises(ValueError, match="needs a run log"):
        infer(ScriptedLLM(explorer()), None, resume=True)
    llm = ScriptedLLM(explorer(lambda m: "B"))
    second = infer(llm, log, resume=True)
    assert {qid_of(c[0]) for c in llm.calls} == {"001-2"}  # only the infra failure is re-run
    by_q = {p.question_id: p for p in second.predictions}
    assert by_q["001-1"].resumed and by_q["001-1"].predicted == "A" and by_q["001-1"].correct
    assert not by_q["001-2"].resumed and by_q["001-2"].correct is True
    assert second.correctness() == log.correctness("run_1")


def test_heartbeat_reports_while_no_rollout_has_finished(log: RunLog) -> None:
    """A slow model (0.6 s per call here, minutes on a CPU server): with ``heartbeat_s`` the
    progress callback is called at that cadence before the first rollout completes, so the
    terminal shows the barrier is alive; without it, only on completions."""
    beats: list[InferenceProgress] = []
    llm = ScriptedLLM(explorer(lambda m: "A"), latency_s=0.6)
    res = infer(llm, log, concurrency=3, progress=beats.append, heartbeat_s=0.1)
    early = [b for b in beats if b.done == 0]
    assert len(early) >= 3 and all(b.total == 3 and b.elapsed_s > 0 for b in early)
    assert beats[-1].done == res.n == 3
    quiet: list[InferenceProgress] = []
    infer(ScriptedLLM(explorer(lambda m: "A"), latency_s=0.3), log, run_id="run_2",
          concurrency=3, progress=quiet.append)  # fmt: skip
    assert [q.done for q in quiet] == [1, 2, 3]


def test_served_model_is_capped_and_keeps_first_seen_order() -> None:
    """A server's model name is not trusted to be short (issue 18.7 caps every model-supplied
    value): the joined names are cut at SERVED_MODEL_CAP characters with a mark."""
    from trm_assets.harness.loop.rollouts import SERVED_MODEL_CAP, _served

    assert _served(()) is None
    assert _served(("b", "a")) == "b, a"
    long = _served(("m" * 5_000_000,))
    assert long is not None and len(long) == SERVED_MODEL_CAP and long.endswith("…")
    assert long[:-1] == "m" * (SERVED_MODEL_CAP - 1)

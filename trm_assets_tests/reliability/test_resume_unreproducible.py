"""A unit killed mid-barrier, resumed against a server that does not reproduce its samples.

A real server at temperature > 0 draws a new answer for the same request (and at temperature 0
many are not bitwise deterministic either: batching, an OpenAI endpoint), so a unit re-run after
a kill gets other outcomes and, from the evolver, possibly another candidate. The simulated
world reproduces every sample from its seed, which hid that the re-run's outcomes were what the
unit decided on while the run log kept the killed attempt's rows (the first row of a key wins):
init's accuracy in the checkpoint was not the accuracy of the rows on record, and a gate's
evidence was not the candidate rows on record. :class:`Unreproducible` salts every request's
sample index per process attempt, as such a server would answer. Now the re-run deletes the
rows it will not use; at temperature 0 it resumes the rows of its own prompt.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trm_assets.agent.loop import rollout_seed
from trm_assets.domain.question import skill_file_name
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.harness.storage.integrity import check_workspace
from trm_assets.harness.storage.runlog import RunLog, RunLogReader
from trm_assets.llm.factory import build_providers
from trm_assets.llm.protocol import (
    ChatResponse,
    DelegatingProvider,
    LLMProvider,
    Message,
    ToolSpec,
)
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


class Killed(Exception):
    """Stands for the process being killed in the middle of a barrier."""


class Unreproducible(DelegatingProvider):
    """``inner`` with each request's sample index salted by ``salt`` (a second attempt of the
    same request is another sample); killed (:class:`Killed`) at the ``kill_at``-th call whose
    seed is in ``watch`` (every call when ``watch`` is None)."""

    def __init__(
        self,
        inner: LLMProvider,
        salt: int,
        kill_at: int | None = None,
        watch: frozenset[int] | None = None,
    ) -> None:
        super().__init__(inner)
        self._salt, self._kill_at, self._watch = salt, kill_at, watch
        self.calls = 0
        self.watched = 0

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        self.calls += 1
        self.watched += int(self._watch is None or seed in self._watch)
        if self._kill_at is not None and self.watched >= self._kill_at:
            raise Killed(f"killed at call {self.calls}")
        salted = (seed or 0) * 7919 + self._salt
        return await super().chat(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, seed=salted
        )


def _attempt(
    ws: Path,
    cfg: RunConfig,
    salt: int,
    *,
    units: int,
    kill_at: int | None = None,
    watch: frozenset[int] | None = None,
) -> Unreproducible:
    """``units`` units of ``trm train`` in one process against an unreproducible server, killed
    as :class:`Unreproducible` says."""
    providers = build_providers(cfg.provider_spec())
    agent = Unreproducible(providers.agent, salt, kill_at, watch)
    evolve = Unreproducible(providers.evolve, salt)
    with loop_context(ws, cfg, dataclasses.replace(providers, agent=agent, evolve=evolve)) as ctx:
        if kill_at is None:
            train(ctx, max_units=units)
        else:
            with pytest.raises(Killed):
                train(ctx, max_units=units)
    return agent


def _candidate_seeds(cfg: RunConfig) -> frozenset[int]:
    """The sample indices of every rollout the gates of step e0 s0 may run in a candidate arm
    (any question, replicates 0–7): what :class:`Unreproducible` watches to kill in one."""
    questions = load_dataset(cfg).by_id().values()
    runs = {
        f"train_e0_s0_gate_{skill_file_name(t).removesuffix('.md')}_cand"
        for t in {q.task_type for q in questions}
    }
    return frozenset(
        rollout_seed(run, q.question_id, rep) for run in runs for q in questions for rep in range(8)
    )


def _rows(ws: Path, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    with RunLogReader.open(ws / "runs.duckdb") as r:
        return r.query(sql, list(params))


def _outcomes(ws: Path, run_id: str, *, completed: bool = False) -> dict[str, bool | None]:
    where = " AND stop_reason <> 'error'" if completed else ""
    rows = _rows(
        ws, f"SELECT question_id, correct FROM predictions WHERE run_id = ?{where}", [run_id]
    )
    return {r["question_id"]: r["correct"] for r in rows}


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_a_killed_init_decides_on_the_rows_on_record(tmp_path: Path, temperature: float) -> None:
    passes = "gate_passes=4" if temperature > 0 else "gate_passes=1"
    cfg = tiny_config(f"agent_temperature={temperature}", passes, "concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=1, kill_at=30)
    first = _outcomes(ws, "train_init", completed=True)
    assert 0 < len(first) < 24, "the kill should leave some of the 24 rollouts completed"
    second = _attempt(ws, cfg, salt=2, units=1)
    on_record = _outcomes(ws, "train_init")
    assert len(on_record) == 24
    state = json.loads((ws / "state.json").read_text())
    assert state["correctness"] == on_record
    (run,) = _rows(ws, "SELECT accuracy, n_rollouts FROM runs WHERE run_id = 'train_init'")
    assert run["n_rollouts"] == 24
    assert state["eval_prev_acc"] == pytest.approx(run["accuracy"])
    assert state["eval_prev_acc"] == pytest.approx(sum(map(bool, on_record.values())) / 24)
    assert check_workspace(ws).ok, check_workspace(ws).problems
    alone = new_workspace(tmp_path / "alone", cfg)
    full = _attempt(alone, cfg, salt=2, units=1)
    if temperature > 0:
        # every row rolled out again (a kept row would over-represent quick answers): the
        # second attempt made the calls of an uninterrupted init, and its draws are on record
        assert second.calls == full.calls
        assert on_record == _outcomes(alone, "train_init")
        assert any(on_record[q] != c for q, c in first.items())  # the salt drew other answers
    else:
        # the completed rollouts were resumed, not run again; at temperature 0 they are what a
        # re-run answers
        assert second.calls < full.calls
        assert first.items() <= on_record.items()
        assert on_record == _outcomes(alone, "train_init")


def test_a_gate_killed_and_re_run_with_another_candidate_keeps_only_its_rows(
    tmp_path: Path,
) -> None:
    """Temperature 0: the evolver (a real server, another sample) wrote another candidate for
    the same gate run; the killed attempt's candidate rows are deleted, so the gate's evidence
    and the rows on record are the same outcomes."""
    cfg = tiny_config("sim.profile=realistic", "gate_passes=1", "concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    watch = _candidate_seeds(cfg)
    _attempt(ws, cfg, salt=1, units=1)  # init
    _attempt(ws, cfg, salt=1, units=1, kill_at=12, watch=watch)  # killed in a candidate arm
    killed = {
        r["run_id"]: r["meta"]
        for r in _rows(ws, "SELECT run_id, meta FROM runs WHERE run_id LIKE '%\\_cand' ESCAPE '\\'")
    }
    assert killed, "the kill should land in a gate's candidate arm"
    stale = {run: _outcomes(ws, run, completed=True) for run in killed}
    assert any(stale.values()), "some candidate rollouts should have completed before the kill"
    (killed_at,) = _rows(ws, "SELECT max(created_at) AS t FROM predictions")
    _attempt(ws, cfg, salt=2, units=1)
    after = {
        r["run_id"]: r["meta"]
        for r in _rows(ws, "SELECT run_id, meta FROM runs WHERE run_id IN "
                           f"({', '.join(repr(k) for k in killed)})")
    }  # fmt: skip
    changed = [run for run in killed if after.get(run) != killed[run]]
    assert changed, "the re-run should have gated another candidate under the same run id"
    marks = ", ".join("?" for _ in changed)
    kept = _rows(
        ws,
        f"SELECT count(*) AS n FROM predictions WHERE run_id IN ({marks}) AND created_at <= ?",
        [*changed, killed_at["t"]],
    )[0]["n"]
    assert kept == 0, f"{kept} row(s) of the killed candidate kept under the new candidate's run"
    evidence = _rows(
        ws,
        "SELECT gate_run_id, question_id, replicate, candidate FROM gate_evidence "
        "WHERE row_kind = 'question' AND candidate IS NOT NULL",
    )
    checked = 0
    for run in changed:
        gate = run.removesuffix("_cand")
        rows = {
            (r["question_id"], r["replicate"]): r["correct"]
            for r in _rows(
                ws,
                "SELECT question_id, replicate, correct FROM predictions WHERE run_id = ?",
                [run],
            )
        }
        for e in evidence:
            if e["gate_run_id"] == gate and (e["question_id"], e["replicate"]) in rows:
                assert bool(rows[(e["question_id"], e["replicate"])]) == bool(e["candidate"])
                checked += 1
    assert checked > 0
    assert check_workspace(ws).ok, check_workspace(ws).problems


def test_check_finds_rows_that_are_not_what_the_loop_decided_on(tmp_path: Path) -> None:
    """`trm check` compares what the checkpoint and the gates quote with the rows on record:
    a workspace re-run the old way (the killed attempt's first rows kept) is a problem, named."""
    cfg = tiny_config("agent_temperature=1.0", "concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=2)  # init, step e0 s0 (with gates)
    assert check_workspace(ws).ok, check_workspace(ws).problems
    with RunLog.open(ws / "runs.duckdb") as log, log.transaction() as con:
        # what the old re-run left: other outcomes on record than the ones decided on
        con.execute("UPDATE predictions SET correct = NOT correct WHERE run_id = 'train_init' "
                    "AND question_id IN (SELECT min(question_id) FROM predictions "
                    "WHERE run_id = 'train_init')")  # fmt: skip
        con.execute("UPDATE runs SET accuracy = (SELECT avg(CASE WHEN correct THEN 1.0 ELSE 0.0 "
                    "END) FROM predictions WHERE run_id = 'train_init') "
                    "WHERE run_id = 'train_init'")  # fmt: skip
        (gate,) = con.execute(
            "SELECT min(gate_run_id) FROM gate_evidence WHERE row_kind = 'question' "
            "AND candidate IS NOT NULL AND NOT coalesce(candidate_imputed, false)"
        ).fetchone() or (None,)
        assert gate is not None
        keys = con.execute(
            "SELECT question_id, replicate FROM gate_evidence WHERE gate_run_id = ? "
            "AND row_kind = 'question' AND candidate IS NOT NULL "
            "AND NOT coalesce(candidate_imputed, false) ORDER BY position LIMIT 2",
            [gate],
        ).fetchall()
        for qid, rep in keys:
            con.execute(
                "UPDATE predictions SET correct = NOT correct WHERE run_id = ? "
                "AND question_id = ? AND replicate = ?",
                [f"{gate}_cand", qid, rep],
            )
    problems = check_workspace(ws).problems
    init = [p for p in problems if "'train_init'" in p and "rows on record give" in p]
    assert init and any("seed_eval" in p for p in init), problems
    assert any(f"gate {gate!r}: 2 candidate outcome(s)" in p for p in problems), problems


def test_init_re_run_at_temperature_one_rebuilds_its_ladder_and_best(tmp_path: Path) -> None:
    """Init's barrier done, its checkpoint lost (a kill before it landed): the re-run draws other
    outcomes, and the cold ladder and the best are built from those, not from the first draws
    (folding the same run into the old ladder again was a no-op; the best was kept)."""
    cfg = tiny_config("agent_temperature=1.0", "concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=1)
    first = _outcomes(ws, "train_init")
    (ws / "state.json").unlink()
    _attempt(ws, cfg, salt=2, units=1)
    rows = _outcomes(ws, "train_init")
    assert rows != first  # another sample
    ladder = json.loads((ws / "ladder.json").read_text())
    observed = {e[0]: e[2] > 0.5 for e in ladder["entries"]}  # one observation: p̂ above ½ = right
    assert observed == {q: bool(c) for q, c in rows.items()}
    best = json.loads((ws / "manifest.json").read_text())["best"]
    assert best["run_id"] == "train_init"
    assert best["val_accuracy"] == pytest.approx(sum(map(bool, rows.values())) / len(rows))
    assert check_workspace(ws).ok, check_workspace(ws).problems


def test_a_run_being_re_run_is_not_left_done_with_its_old_counts(tmp_path: Path) -> None:
    """The re-run deletes the rows it will not use at once; a kill before its first rows land
    must not leave the run "done" with the deleted rows' counts."""
    cfg = tiny_config("agent_temperature=1.0", "concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=1)
    (ws / "state.json").unlink()
    providers = build_providers(cfg.provider_spec())
    with loop_context(ws, cfg, providers) as ctx:
        assert ctx._reconcile_earlier("train_init", {}) is False  # what the barrier does first
    (run,) = _rows(ws, "SELECT status, n_rollouts, accuracy FROM runs WHERE run_id = 'train_init'")
    assert run == {"status": "running", "n_rollouts": None, "accuracy": None}
    assert not _outcomes(ws, "train_init")
    assert check_workspace(ws).ok, check_workspace(ws).problems


def test_a_step_re_run_keeps_no_evidence_of_the_killed_attempts_gates(tmp_path: Path) -> None:
    """Temperature 1, a step killed in a gate's candidate arm after an earlier block's evidence
    landed; the re-run draws other outcomes and decides its gates in other blocks (or not at
    all): every gate's evidence is the re-run's, as the step report says."""
    cfg = tiny_config("agent_temperature=1.0", "concurrency=2", "gate_block=4")
    ws = new_workspace(tmp_path / "ws", cfg)
    watch = _candidate_seeds(cfg)
    _attempt(ws, cfg, salt=1, units=1)  # init
    _attempt(ws, cfg, salt=1, units=1, kill_at=16, watch=watch)
    before = _rows(ws, "SELECT DISTINCT gate_run_id FROM gate_evidence")
    assert before, "the kill should come after a block's evidence landed"
    _attempt(ws, cfg, salt=6, units=1)
    reports = {
        r["gate_run_id"]: r["blocks"]
        for r in _rows(
            ws, "SELECT gate_run_id, blocks FROM step_report WHERE gate_run_id IS NOT NULL"
        )
    }
    evidence = {
        r["gate_run_id"]: r["b"] + 1
        for r in _rows(ws, "SELECT gate_run_id, max(block) AS b FROM gate_evidence GROUP BY 1")
    }
    assert evidence == {g: b for g, b in reports.items() if b}
    quads = {r["g"] for r in _rows(ws, "SELECT DISTINCT gate_run_id AS g FROM quadrant_pair")}
    assert quads <= set(evidence), quads


def test_a_step_run_for_the_first_time_does_not_flush_when_it_opens(tmp_path: Path) -> None:
    """The purge of a killed attempt's evidence costs a step nothing when there was no killed
    attempt: a flush at the open would wait for the previous unit's checkpoint still landing
    (docs/decision-commit-behind.md)."""
    cfg = tiny_config("concurrency=2")
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=1)  # init
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        log = ctx.log
        flushes: list[int] = []
        real = log.flush

        def counted_flush() -> int:
            flushes.append(1)
            return real()

        log.flush = counted_flush  # type: ignore[method-assign]  # spy on this one log
        ctx.forget_killed_gates("train_e0_s0_gate_")
        assert flushes == []
        ctx._earlier = {**(ctx._earlier or {}), "train_e0_s0_gate_x_cand": {}}  # a killed attempt
        ctx.forget_killed_gates("train_e0_s0_gate_")
        assert flushes == [1]


def test_the_epoch_counts_the_infra_failures_of_its_runs_only(tmp_path: Path) -> None:
    """A gate of the killed attempt that the re-run never reaches keeps its rows (not in the
    manifest's history, which the re-run rolled back): its infra failures are not the epoch's.
    Found with HTTP faults on a quarter of the calls: the report said 54, the runs the history
    records hold 49, the orphan gate runs 5."""
    cfg = tiny_config(
        "agent_temperature=1.0", "concurrency=2", "gate_block=4",
        "sim.fault_http_5xx_rate=0.25", "infra_outage_rate=1.0",
    )  # fmt: skip
    ws = new_workspace(tmp_path / "ws", cfg)
    _attempt(ws, cfg, salt=1, units=1)  # init
    _attempt(ws, cfg, salt=1, units=1, kill_at=16, watch=_candidate_seeds(cfg))
    _attempt(ws, cfg, salt=7, units=100)  # to the end
    history = {h["run_id"] for h in json.loads((ws / "manifest.json").read_text())["history"]}
    runs = _rows(
        ws, "SELECT run_id, n_infra_failures AS n FROM runs WHERE run_id LIKE 'train_e0_%'"
    )
    orphans = {r["run_id"]: r["n"] for r in runs if r["run_id"] not in history}
    assert sum(n or 0 for n in orphans.values()) > 0, (
        f"no orphan run with infra failures: {orphans}"
    )
    recorded = sum(r["n"] or 0 for r in runs if r["run_id"] in history)
    state = json.loads((ws / "state.json").read_text())
    assert state["history"][0]["infra_failures"] == recorded

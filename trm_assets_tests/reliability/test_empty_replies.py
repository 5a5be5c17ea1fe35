"""A server whose every reply is empty stops the unit; it is not a model answering wrong.

A reasoning model on llama.cpp puts its thinking in ``reasoning_content``; when the token limit
runs out first, ``content`` is null and ``finish_reason`` is ``"length"``. Every rollout then
ended as ``final_text`` with no letter and scored as a wrong answer, and the loop went on
deciding on zeros (hostile review). On a real endpoint, ``EMPTY_REPLY_STREAK`` empty replies in
a row stop the unit before its checkpoint, with the likely causes named; a model that only
sometimes replies empty is data, as before."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from trm_assets.harness.loop.context import (
    EMPTY_REPLY_MIN,
    EMPTY_REPLY_STREAK,
    InfraOutage,
    loop_context,
)
from trm_assets.harness.loop.runner import train
from trm_assets.harness.storage.checkpoint import load_state
from trm_assets.harness.storage.runlog import RunLogReader
from trm_assets.llm.factory import build_providers
from trm_assets.llm.protocol import (
    ChatResponse,
    DelegatingProvider,
    LLMProvider,
    Message,
    ToolSpec,
)
from trm_assets_tests.harness.loop.conftest import digest
from trm_assets_tests.tiny import tiny_config
from trm_bench.overhead import new_workspace


class _Reasoner(DelegatingProvider):
    """The simulated agent behind a server that loses the output: each reply keeps its usage
    and drops its text and tool calls (``content: null``, ``finish_reason: "length"``) — for
    every conversation, or (``some``) for a quarter of the questions, by a hash of the first
    user message."""

    def __init__(self, inner: LLMProvider, *, some: bool) -> None:
        super().__init__(inner)
        self._some = some
        self.empty = 0

    @property
    def is_simulated(self) -> bool:
        return False

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        resp = await super().chat(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, seed=seed
        )
        first = json.dumps([m for m in messages if m.get("role") == "user"][:1], sort_keys=True)
        if self._some and hashlib.sha256(first.encode()).digest()[0] % 4 != 0:
            return resp
        self.empty += 1
        return ChatResponse(
            content=None, usage=resp.usage, model=resp.model, finish_reason="length"
        )


def _train(ws: Path, *, empty: str | None, extra: tuple[str, ...] = ()) -> _Reasoner | None:
    cfg = tiny_config(*extra)
    providers = build_providers(cfg.provider_spec())
    agent = None if empty is None else _Reasoner(providers.agent, some=empty == "some")
    if agent is not None:  # a real endpoint (the guards of the simulated world differ)
        providers = dataclasses.replace(providers, agent=agent, simulated=False)
    with loop_context(ws, cfg, providers) as ctx:
        train(ctx)
    return agent


@pytest.mark.parametrize(
    "extra", [(), ("agent_temperature=0", "gate_passes=1")], ids=["fresh-draws", "temperature-0"]
)
def test_every_reply_empty_stops_the_first_unit_and_resume_ends_like_a_clean_run(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """At temperature 0 the empty rows would be served again — to the resumed run (same prompt
    keys: a server flag is not in them) and to any later run of the same prompt — so the
    stopped run's rows are discarded: the resume redoes it, and its accuracy and every later
    decision equal the reference's."""
    cfg = tiny_config(*extra)
    ref = new_workspace(tmp_path / "ref", cfg)
    _train(ref, empty=None, extra=extra)
    ws = new_workspace(tmp_path / "ws", cfg)
    with pytest.raises(InfraOutage) as err:
        _train(ws, empty="all", extra=extra)
    msg = str(err.value)
    assert (
        f"empty (no content and no tool call) in each of the first {EMPTY_REPLY_STREAK} rollouts"
        in msg
    )
    assert "reasoning_content" in msg and "trm train --resume" in msg
    state = load_state(ws / "state.json", cfg)
    assert state is None or not state.initialized  # nothing was checkpointed on the zeros
    with RunLogReader.open(ws / "runs.duckdb") as r:
        stopped = r.query("SELECT run_id, status FROM runs")
        left = r.query("SELECT count(*) AS n FROM predictions")[0]["n"]
    assert [row["status"] for row in stopped] == ["outage"] and left == 0
    _train(ws, empty=None, extra=extra)  # the server is fixed: --resume ends where ref did
    assert digest(ws) == digest(ref)
    query = "SELECT run_id, status, accuracy, n_rollouts FROM runs ORDER BY run_id"
    empty = (
        "SELECT count(*) AS n FROM predictions WHERE stop_reason = 'final_text' AND predicted = ''"
    )
    with RunLogReader.open(ws / "runs.duckdb") as r, RunLogReader.open(ref / "runs.duckdb") as q:
        assert r.query(query) == q.query(query)
        assert r.query(empty) == q.query(empty)


@pytest.mark.parametrize(
    "extra", [(), ("val_size=96", "concurrency=16")], ids=["tiny", "96-per-pool"]
)
def test_a_model_that_sometimes_replies_empty_is_data(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """With 96 validation questions about 20 go quiet; a barrier's longest-first order starts
    their one-call rollouts together at its end, 20 empty replies in a row — a review stopped
    this healthy run that way before the guard looked only at a process's first replies."""
    cfg = tiny_config(*extra)
    ws = new_workspace(tmp_path / "ws", cfg)
    agent = _train(ws, empty="some", extra=extra)
    assert agent is not None and agent.empty >= EMPTY_REPLY_STREAK  # many, never 20 in a row
    state = load_state(ws / "state.json", cfg)
    assert state is not None and state.finalized
    with RunLogReader.open(ws / "runs.duckdb") as r:
        rows = r.query(
            "SELECT count(*) AS n FROM predictions WHERE stop_reason = 'final_text' "
            "AND (predicted IS NULL OR predicted = '')"
        )
    assert rows[0]["n"] >= agent.empty // 2


def test_a_small_eval_of_empty_replies_stops_and_records_nothing(tmp_path: Path) -> None:
    """`trm eval` on the tiny config's 12-question test pool is one barrier, under the streak's
    20: it finished `done` at accuracy 0.0 and offered to promote (a review). The barrier's end
    applies the same rule: all of its live rollouts empty, none other in the process."""
    import asyncio

    from trm_assets.harness.loop.step import evaluate
    from trm_assets.harness.storage.workspace import eval_command_kind

    cfg = tiny_config()
    ws = new_workspace(tmp_path / "ws", cfg)
    providers = build_providers(cfg.provider_spec())
    quiet = dataclasses.replace(
        providers, agent=_Reasoner(providers.agent, some=False), simulated=False
    )
    run_id, kind = "eval_v1_v1_test", eval_command_kind("test")
    with loop_context(ws, cfg, quiet) as ctx:
        qs = ctx.pool_questions("test")
        assert EMPTY_REPLY_MIN <= len(qs) < EMPTY_REPLY_STREAK
        with pytest.raises(InfraOutage) as err:
            asyncio.run(evaluate(ctx, run_id, "v1", "v1", qs, kind))
    assert f"each of the first {len(qs)} rollouts" in str(err.value)
    assert "run the same `trm eval` again" in str(err.value)
    with RunLogReader.open(ws / "runs.duckdb") as r:
        assert r.query("SELECT status FROM runs WHERE run_id = ?", [run_id]) == [
            {"status": "outage"}
        ]
        assert r.query("SELECT count(*) AS n FROM predictions")[0]["n"] == 0
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        res = asyncio.run(evaluate(ctx, run_id, "v1", "v1", ctx.pool_questions("test"), kind))
    assert res.n == len(qs) and not any(p.empty_reply for p in res.predictions)

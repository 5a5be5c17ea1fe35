"""Async batch inference: many questions (× replicates) through the agent loop, logged.

Contract of :func:`run_inference` (seed §7; GATE.md §2):

* ``run_id`` is required; an empty one raises ``ValueError`` (rows without a run are useless to
  the gate and to the ladder refresh, which select runs by id pattern).
* Concurrency: at most ``concurrency`` model calls in flight (an ``asyncio.Semaphore`` around
  each agent call, :class:`_CallSlots`), up to ``ROLLOUTS_PER_SLOT × concurrency`` rollouts
  started, all gathered. A slot is a server request, not a rollout: while one rollout runs its
  tools or waits to be handled, another's call takes the slot (a barrier of 72 four-call
  rollouts on 32 slots needs 9 call latencies, not the 12 of three rollout waves).
* Everything is checked **before** the first rollout (missing trees, missing skill files, an
  incomplete tool pack, duplicate (question, replicate) keys): a configuration error never
  costs a half-finished run.
* **A prediction row is always written**, starting from the pessimistic default
  ``stop_reason="error"``, overwritten when the rollout completes. ``failure_kind`` records
  the class of the outcome that the gate needs:

  ===========================================  ===============  ===========  ============
  outcome                                      stop_reason      correct      failure_kind
  ===========================================  ===============  ===========  ============
  right letter                                 answer / final…  True         None
  wrong / empty letter, max_steps, context     as reached       False        ``"task"``
  InfraError (model or VLM, after retries)     ``"error"``      None         ``"infra"``
  any other exception (a bug) or cancellation  ``"error"``      None         None, and the
                                                                             run raises
  ===========================================  ===============  ===========  ============

  A bug (or a :class:`~trm_assets.llm.protocol.ProviderRequestError`: bad key, model,
  URL) cancels the other rollouts, writes the rows of the started ones as aborted and re-raises:
  it is not data. (Rollouts cancelled before they started have no row.)
* Non-string evidence is stored as JSON text
  (:func:`~trm_assets.harness.storage.runlog.to_text_field`).
* The :class:`InferenceResult` is aggregated from memory, never re-read from the database.
* Replicates: each question runs ``replicates`` times with replicate indices
  ``replicate_start … replicate_start + replicates - 1`` (or pass explicit ``(question, replicate)``
  pairs). The chat ``seed`` of a rollout is :func:`~trm_assets.agent.loop.rollout_seed` of
  (run_id, question_id, replicate), so the gate draws fresh, reproducible samples by using a new
  run id or new replicate indices.
* Skills are a mapping file name → text, so callers can run a candidate without writing it
  anywhere; ``prompts`` is the agent prompt set (system, user template, tool pack).

Why it is long: the barrier's concurrency, pessimistic rows, buffered writes, resume and progress
are one async procedure whose invariants (a row always written, outcome aggregated from memory) are
easier to keep in one place.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from trm_assets.agent.loop import STOP_ERROR, AgentLoop, AgentOutcome, rollout_seed
from trm_assets.agent.messages import SKILL_MODES, AgentPrompts, SkillMode, active_skill_files
from trm_assets.agent.tools import Toolbox
from trm_assets.domain.question import Question
from trm_assets.harness.storage.runlog import (
    FLAG_ANCHOR,
    FLAG_FRAME_HEALTH,
    FLAG_REUSE,
    FLAG_VALIDATION,
    RunLog,
)
from trm_assets.llm.protocol import (
    ChatResponse,
    DelegatingProvider,
    LLMProvider,
    Message,
    ProviderRequestError,
    ToolSpec,
    Usage,
)

FAILURE_TASK = "task"
FAILURE_INFRA = "infra"
#: rollouts started per model-call slot: enough waiting calls to keep every slot busy, bounded so
#: a pool of thousands is not one conversation each in memory (nor as many tool/VLM calls)
ROLLOUTS_PER_SLOT: Final = 4

RolloutSpec = Question | tuple[Question, int]


@dataclass(frozen=True)
class Prediction:
    """One rollout's outcome, as recorded (see the module docstring for the classes)."""

    run_id: str
    question_id: str
    replicate: int
    task_type: str
    video_id: str
    truth: str
    predicted: str | None
    correct: bool | None
    stop_reason: str
    failure_kind: str | None
    error: str | None
    seed: int
    skill_files: tuple[str, ...]
    n_llm_calls: int = 0
    n_tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    llm_latency_s: float = 0.0
    resumed: bool = False
    reused: bool = False  # served from an earlier rollout of the same prompt (temperature 0)
    # the model's last reply had no text and no tool call (this process's rollouts only): a
    # server whose every reply is empty is misconfigured, not a model answering wrong
    empty_reply: bool = False

    @property
    def outcome(self) -> bool | None:
        """The gate's view (GATE.md §2): True/False, or None for an infra failure or abort."""
        return None if self.failure_kind == FAILURE_INFRA else self.correct


@dataclass(frozen=True)
class TaskTypeStats:
    n: int
    n_correct: int
    n_infra: int

    @property
    def accuracy(self) -> float | None:
        """Correct / rollouts without infra failure (None when there are none)."""
        scored = self.n - self.n_infra
        return self.n_correct / scored if scored else None


@dataclass(frozen=True)
class InferenceResult:
    """All rollouts of one :func:`run_inference` call, in input order, aggregated in memory."""

    run_id: str
    predictions: tuple[Prediction, ...]
    wall_s: float
    usage: Usage

    @property
    def n(self) -> int:
        return len(self.predictions)

    @property
    def n_reused(self) -> int:
        """Rollouts served from an earlier rollout of the same prompt (no model call)."""
        return sum(1 for p in self.predictions if p.reused)

    @property
    def n_correct(self) -> int:
        return sum(1 for p in self.predictions if p.correct)

    @property
    def n_task_failures(self) -> int:
        return sum(1 for p in self.predictions if p.failure_kind == FAILURE_TASK)

    @property
    def n_infra_failures(self) -> int:
        return sum(1 for p in self.predictions if p.failure_kind == FAILURE_INFRA)

    @property
    def accuracy(self) -> float | None:
        """Correct / rollouts without infra failure (the evaluation view); None if none."""
        scored = self.n - self.n_infra_failures
        return self.n_correct / scored if scored else None

    @property
    def llm_latency_s(self) -> float:
        """Σ of the model calls' latencies over all rollouts (the benchmark's ideal numerator)."""
        return sum(p.llm_latency_s for p in self.predictions)

    def correctness(self) -> dict[tuple[str, int], bool | None]:
        """(question_id, replicate) → True / False / None (infra), for the gate and the ladder."""
        return {(p.question_id, p.replicate): p.outcome for p in self.predictions}

    def by_task_type(self) -> dict[str, TaskTypeStats]:
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for p in self.predictions:
            a = acc[p.task_type]
            a[0] += 1
            a[1] += int(bool(p.correct))
            a[2] += int(p.failure_kind == FAILURE_INFRA)
        return {t: TaskTypeStats(*v) for t, v in sorted(acc.items())}


@dataclass(frozen=True)
class InferenceProgress:
    """Passed to the optional progress callback after every finished rollout."""

    run_id: str
    done: int
    total: int
    n_correct: int
    n_infra: int
    elapsed_s: float
    llm_calls: int = 0
    tokens: int = 0  # prompt + completion

    def eta_s(self) -> float | None:
        """Seconds left at the barrier's rate so far (None before the first rollout)."""
        if self.done <= 0 or self.elapsed_s <= 0:
            return None
        return self.elapsed_s / self.done * (self.total - self.done)


def expand_rollouts(
    questions: Sequence[RolloutSpec], replicates: int = 1, replicate_start: int = 0
) -> list[tuple[Question, int]]:
    """(question, replicate) pairs: plain questions × the replicate range, pairs as given."""
    if replicates < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    if replicate_start < 0:
        raise ValueError(f"replicate_start must be >= 0, got {replicate_start}")
    out: list[tuple[Question, int]] = []
    for item in questions:
        if isinstance(item, Question):
            out.extend((item, replicate_start + r) for r in range(replicates))
        else:
            q, rep = item
            if not isinstance(q, Question) or not isinstance(rep, int) or rep < 0:
                raise TypeError(f"expected Question or (Question, replicate >= 0), got {item!r}")
            out.append((q, rep))
    seen: set[tuple[str, int]] = set()
    dupes = []
    for q, rep in out:
        key = (q.question_id, rep)
        if key in seen:
            dupes.append(key)
        seen.add(key)
    if dupes:
        raise ValueError(
            f"{len(dupes)} duplicate (question_id, replicate) rollout(s), e.g. {dupes[:3]}; each "
            "rollout of a run needs its own replicate index"
        )
    return out


async def run_inference(
    questions: Sequence[RolloutSpec],
    *,
    llm: LLMProvider,
    tools: Toolbox,
    log: RunLog | None,
    run_id: str,
    concurrency: int,
    max_steps: int,
    skill_mode: SkillMode = "task",
    skills: Mapping[str, str],
    prompts: AgentPrompts,
    replicates: int = 1,
    replicate_start: int = 0,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    progress: Callable[[InferenceProgress], None] | None = None,
    run_kind: str | None = None,
    skills_version: str | None = None,
    prompts_version: str | None = None,
    questions_ref: str | None = None,
    flush_every: int = 256,
    flush_interval_s: float = 5.0,
    resume: bool = False,
    run_meta: Mapping[str, Any] | None = None,
    reuse: Mapping[str, Mapping[str, Any]] | None = None,
    heartbeat_s: float | None = None,
    start_order: Sequence[int] | None = None,
    write_behind: Callable[[Callable[[], None]], None] | None = None,
    on_rollout: Callable[[Prediction], None] | None = None,
) -> InferenceResult:
    """Run every (question, replicate) through :class:`AgentLoop`; see the module docstring.

    ``log=None`` runs without recording (benchmarks of the loop alone); otherwise the run's
    ``runs`` row is created/updated and every rollout is buffered and written off the event loop
    (``asyncio.to_thread``) when ``flush_every`` rollouts are pending or ``flush_interval_s`` has
    passed since the last write, and at the end. (A batch write has a fixed cost of tens of
    milliseconds, so small batches would steal time from the event loop.)

    ``resume=True`` (needs ``log``): rollouts whose row is already complete in the log (any
    ``stop_reason`` but ``"error"``) are not run again; their stored outcome is returned as is
    (``Prediction.resumed``), so the result always equals what the log holds. Without it, a
    completed rollout run again keeps its *first* stored row (inserts are idempotent) while the
    result reports the new attempt: use a new run id or replicate for fresh samples.

    ``reuse`` (temperature 0 only; question id → a completed row of an earlier run whose prompt
    was the same, :meth:`~trm_assets.harness.loop.context.LoopContext.known_outcomes`): those
    questions are not rolled out; the stored outcome is recorded under this run with no model
    call and no tokens, flagged ``reuse/same_prompt`` with the source run (``Prediction.reused``).

    ``heartbeat_s``: also call ``progress`` every that many seconds while rollouts are running,
    whether or not one finished (a slow real model takes minutes per rollout: the reporter's
    cadence must not depend on completions).

    ``start_order``: a permutation of the rollouts' indices, the order in which they take the
    ``concurrency`` slots (default: input order). Results stay in input order.

    ``write_behind``: given the call that starts writing the run's last rows behind, schedules
    it (the loop: once the next barrier's first calls are out, so the writer thread's work does
    not contend with the loop between barriers); default: at once.

    ``on_rollout``: called with each rollout run here once it has ended (not with served or
    resumed ones); what it raises stops the barrier as a failure would (the others are
    cancelled, the run is recorded ``failed``): the loop's outage guard gives up on an endpoint
    that fails every rollout without waiting for the barrier's end.
    """
    if not isinstance(run_id, str) or not run_id.strip():
        raise ValueError(f"run_id is required (a non-empty string), got {run_id!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if skill_mode not in SKILL_MODES:
        raise ValueError(f"skill_mode must be one of {SKILL_MODES}, got {skill_mode!r}")
    if resume and log is None:
        raise ValueError("resume=True needs a run log to resume from")
    rollouts = expand_rollouts(questions, replicates, replicate_start)
    tools.check_questions(q for q, _ in rollouts)
    for task_type in sorted({q.task_type for q, _ in rollouts}):
        active_skill_files(task_type, skills, skill_mode)  # raises for a missing skill file
    agent = AgentLoop(
        _CallSlots(llm, concurrency),
        prompts,
        max_steps=max_steps,
        temperature=temperature,
        max_tokens=max_tokens,
    )
    if log is not None:
        log.begin_run(
            run_id,
            kind=run_kind,
            model=llm.model,
            is_simulated=llm.is_simulated,
            skill_mode=skill_mode,
            max_steps=max_steps,
            concurrency=concurrency,
            skills_version=skills_version,
            prompts_version=prompts_version,
            questions_ref=questions_ref,
            meta=run_meta,
            defer=True,  # written with the first rollouts: one commit, not two
        )

    sem = asyncio.Semaphore(concurrency * ROLLOUTS_PER_SLOT)
    results: list[Prediction | None] = [None] * len(rollouts)
    counters = {"done": 0, "correct": 0, "infra": 0, "calls": 0, "tokens": 0}
    flushing: list[asyncio.Task[int]] = []
    t_start = time.perf_counter()

    last_flush = [time.perf_counter()]

    def maybe_flush() -> None:
        if log is None or (flushing and not flushing[-1].done()):
            return
        now = time.perf_counter()
        if log.pending >= flush_every or now - last_flush[0] >= flush_interval_s:
            last_flush[0] = now
            flushing.append(asyncio.ensure_future(asyncio.to_thread(log.flush)))

    def snapshot() -> InferenceProgress:
        return InferenceProgress(
            run_id,
            counters["done"],
            len(rollouts),
            counters["correct"],
            counters["infra"],
            time.perf_counter() - t_start,
            counters["calls"],
            counters["tokens"],
        )

    async def one(i: int, q: Question, rep: int) -> None:
        row = _row_identity(run_id, q, rep, llm.model)
        row["stop_reason"] = STOP_ERROR  # pessimistic default, overwritten on completion
        seed = row["seed"]
        outcome: AgentOutcome | None = None
        t0 = time.perf_counter()
        try:
            async with sem:
                outcome = await agent.run(
                    q, tools=tools.session(q), skills=skills, skill_mode=skill_mode, seed=seed
                )
            row.update(_outcome_columns(outcome, q))
        except asyncio.CancelledError:
            row["error"] = "aborted: the run was cancelled before this rollout finished"
            raise
        except BaseException as e:
            kind = "systemic" if isinstance(e, ProviderRequestError) else "bug"
            row["error"] = f"{kind}: {type(e).__name__}: {e}"
            raise
        finally:
            row.setdefault("latency_s", time.perf_counter() - t0)
            pred = _prediction(row, outcome)
            results[i] = pred
            if log is not None:
                log.add_rollout(
                    row,
                    _trace_rows(outcome) if outcome else (),
                    _flags(outcome, tools) if outcome else (),
                )
            counters["done"] += 1
            counters["correct"] += int(bool(pred.correct))
            counters["infra"] += int(pred.failure_kind == FAILURE_INFRA)
            counters["calls"] += pred.n_llm_calls
            counters["tokens"] += pred.usage.prompt_tokens + pred.usage.completion_tokens
            if progress is not None:
                progress(snapshot())
        maybe_flush()
        if on_rollout is not None:
            on_rollout(pred)

    done_rows = _completed_rows(log, run_id) if resume and log is not None else {}
    for i, (q, rep) in enumerate(rollouts):
        source = reuse.get(q.question_id) if reuse and log is not None else None
        stored = done_rows.get((q.question_id, rep))
        if source is not None:
            assert log is not None
            row = _reused_row(source, run_id, q, rep, llm.model)
            pred = replace(_prediction(row, None), reused=True)
            log.add_rollout(
                row, (), [{"kind": FLAG_REUSE, "name": "same_prompt",
                           "detail": {"from_run": source["run_id"]}}],
            )  # fmt: skip
        elif stored is not None:
            pred = _stored_prediction(stored, q)
        else:
            continue
        results[i] = pred
        counters["done"] += 1
        counters["correct"] += int(bool(pred.correct))
        counters["infra"] += int(pred.failure_kind == FAILURE_INFRA)
    order = list(range(len(rollouts))) if start_order is None else list(start_order)
    if sorted(order) != list(range(len(rollouts))):
        raise ValueError(f"start_order must be a permutation of 0..{len(rollouts) - 1}")
    tasks = [asyncio.ensure_future(one(i, *rollouts[i])) for i in order if results[i] is None]

    async def heartbeat(every: float, report: Callable[[InferenceProgress], None]) -> None:
        while True:
            await asyncio.sleep(every)
            report(snapshot())

    beat = (
        asyncio.ensure_future(heartbeat(heartbeat_s, progress))
        if heartbeat_s is not None and progress is not None and tasks
        else None
    )
    status = "failed"
    try:
        await asyncio.gather(*tasks)
        status = "done"
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if beat is not None:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
        wall = time.perf_counter() - t_start
        if log is not None:
            outcomes = await asyncio.gather(*flushing, return_exceptions=True)
            write_errors = [e for e in outcomes if isinstance(e, BaseException)]
            log.finish_run(run_id, status=status, wall_s=wall, defer=True)
            # The last rollouts and the run's row in one commit, written behind the caller (the
            # next flush — every checkpoint flushes — waits for it and raises its error); or,
            # with ``write_behind``, whenever the caller schedules it.
            if write_behind is None:
                log.flush_behind()
            else:
                write_behind(log.flush_behind)
            if write_errors and status == "done":
                raise write_errors[0]  # a failed batch write is a bug, never silently dropped
    preds = tuple(p for p in results if p is not None)
    usage = Usage()
    for p in preds:
        usage = usage + p.usage
    return InferenceResult(run_id=run_id, predictions=preds, wall_s=wall, usage=usage)


class _CallSlots(DelegatingProvider):
    """``llm`` with at most ``concurrency`` :meth:`chat` calls in flight (the server's slots)."""

    def __init__(self, llm: LLMProvider, concurrency: int) -> None:
        super().__init__(llm)
        self._slots = asyncio.Semaphore(concurrency)

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> ChatResponse:
        async with self._slots:
            return await super().chat(
                messages, tools=tools, temperature=temperature, max_tokens=max_tokens, seed=seed
            )


#: characters of ``served_model`` kept (a name is short; a server's is not trusted)
SERVED_MODEL_CAP: Final = 256


def _served(names: Sequence[str]) -> str | None:
    """The model names a rollout's replies reported, joined, cut at SERVED_MODEL_CAP."""
    text = ", ".join(names)
    if len(text) > SERVED_MODEL_CAP:
        text = text[: SERVED_MODEL_CAP - 1] + "…"
    return text or None


def _outcome_columns(o: AgentOutcome, q: Question) -> dict[str, Any]:
    cols: dict[str, Any] = {
        "n_llm_calls": o.n_llm_calls,
        "n_tool_calls": o.n_tool_calls,
        "n_tool_errors": o.n_tool_errors,
        "prompt_tokens": o.usage.prompt_tokens,
        "completion_tokens": o.usage.completion_tokens,
        "latency_s": o.latency_s,
        "skill_files": list(o.skill_files),
        "evidence": {
            "visited_nodes": list(o.visited_nodes[:100]),
            "inspect": list(o.inspect_sources),
        },
        "final_text": o.final_text,
        "served_model": _served(o.served_models),
    }
    if o.infra_error is not None:
        # stop_reason stays "error": the rollout did not complete (GATE §2: infra → None).
        cols.update(failure_kind=FAILURE_INFRA, error=f"infra: {o.infra_error}", correct=None)
        return cols
    correct = o.letter == q.answer
    cols.update(
        stop_reason=o.stop_reason,
        predicted=o.letter,
        correct=correct,
        failure_kind=None if correct else FAILURE_TASK,
        error=o.context_error,
    )
    return cols


def _prediction(row: Mapping[str, Any], o: AgentOutcome | None) -> Prediction:
    return Prediction(
        run_id=row["run_id"],
        question_id=row["question_id"],
        replicate=row["replicate"],
        task_type=row["task_type"],
        video_id=row["video_id"],
        truth=row["truth"],
        predicted=row.get("predicted"),
        correct=row.get("correct"),
        stop_reason=row["stop_reason"],
        failure_kind=row.get("failure_kind"),
        error=row.get("error"),
        seed=row["seed"],
        skill_files=o.skill_files if o else (),
        n_llm_calls=o.n_llm_calls if o else 0,
        n_tool_calls=o.n_tool_calls if o else 0,
        usage=o.usage if o else Usage(),
        latency_s=float(row.get("latency_s") or 0.0),
        llm_latency_s=sum(s.latency_s for s in o.steps if s.role == "assistant") if o else 0.0,
        empty_reply=o is not None and o.is_empty_reply,
    )


#: the outcome columns a reused row copies from its source (no usage: nothing was called)
REUSED_COLUMNS: Final = (
    "stop_reason", "predicted", "correct", "failure_kind", "error", "n_tool_calls",
    "n_tool_errors", "skill_files", "evidence", "final_text", "served_model",
)  # fmt: skip


def _row_identity(run_id: str, q: Question, rep: int, model: str) -> dict[str, Any]:
    """The columns of a prediction row that name the rollout (the outcome is added after)."""
    return {
        "run_id": run_id,
        "question_id": q.question_id,
        "replicate": rep,
        "video_id": q.tree_key,
        "task_type": q.task_type,
        "duration": q.duration,
        "truth": q.answer,
        "seed": rollout_seed(run_id, q.question_id, rep),
        "model": model,
    }


def _reused_row(
    source: Mapping[str, Any], run_id: str, q: Question, rep: int, model: str
) -> dict[str, Any]:
    row = _row_identity(run_id, q, rep, model)
    row.update(n_llm_calls=0, prompt_tokens=0, completion_tokens=0, latency_s=0.0)
    for col in REUSED_COLUMNS:
        if col in source:
            value = source[col]
            if col in ("skill_files", "evidence") and isinstance(value, str):
                value = json.loads(value)
            row[col] = value
    return row


def _completed_rows(log: RunLog, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    rows = log.query(
        "SELECT * FROM predictions WHERE run_id = ? AND stop_reason <> 'error'", [run_id]
    )
    return {(r["question_id"], r["replicate"]): r for r in rows}


def _stored_prediction(r: Mapping[str, Any], q: Question) -> Prediction:
    files = json.loads(r["skill_files"]) if r.get("skill_files") else []
    return Prediction(
        run_id=r["run_id"],
        question_id=r["question_id"],
        replicate=r["replicate"],
        task_type=q.task_type,
        video_id=q.tree_key,
        truth=q.answer,
        predicted=r["predicted"],
        correct=r["correct"],
        stop_reason=r["stop_reason"],
        failure_kind=r["failure_kind"],
        error=r["error"],
        seed=int(r["seed"])
        if r.get("seed") is not None
        else rollout_seed(r["run_id"], q.question_id, r["replicate"]),
        skill_files=tuple(files),
        n_llm_calls=r.get("n_llm_calls") or 0,
        n_tool_calls=r.get("n_tool_calls") or 0,
        usage=Usage(r.get("prompt_tokens") or 0, r.get("completion_tokens") or 0),
        latency_s=float(r.get("latency_s") or 0.0),
        resumed=True,
    )


def _trace_rows(o: AgentOutcome) -> list[dict[str, Any]]:
    return [
        {
            "seq": s.seq,
            "step": s.step,
            "role": s.role,
            "tool_name": s.tool_name,
            "tool_call_id": s.tool_call_id,
            "arguments": s.arguments,
            "content": s.content,
            "result_chars": s.result_chars,
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens,
            "latency_s": s.latency_s,
            "error": s.error,
        }
        for s in o.steps
    ]


def _flags(o: AgentOutcome, tools: Toolbox) -> list[dict[str, Any]]:
    """Quality flags of one rollout (one ``flags`` table, ``kind`` column)."""
    out: list[dict[str, Any]] = []

    def flag(kind: str, name: str, detail: Any) -> None:
        out.append({"kind": kind, "name": name, "detail": detail})

    if o.infra_error is None:
        if o.stop_reason == "final_text":
            text = (o.final_text or "")[:300]
            if o.letter:
                flag(FLAG_VALIDATION, "free_text_answer", {"letter": o.letter, "text": text})
            else:
                flag(FLAG_VALIDATION, "no_letter", {"text": text})
        if o.n_tool_errors:
            flag(FLAG_VALIDATION, "tool_errors", {"count": o.n_tool_errors})
        if o.letter and not o.visited_nodes:
            flag(FLAG_ANCHOR, "no_evidence", {"n_tool_calls": o.n_tool_calls})
    if "stored_captions" in o.inspect_sources:
        name = "vlm_without_frames" if tools.vlm is not None else "stored_captions_fallback"
        flag(FLAG_FRAME_HEALTH, name, {"calls": o.inspect_sources.count("stored_captions")})
    if o.infra_error is not None and o.steps and o.steps[-1].tool_name == "inspect_frames":
        flag(FLAG_FRAME_HEALTH, "vlm_infra_error", {"error": o.infra_error[:300]})
    return out

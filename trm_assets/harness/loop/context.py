"""What every unit of training work needs, opened once per process: config, data, pools, models,
tools, the workspace paths and the run log (SPEC 5; seed §15's ``Runner`` dependencies).

A :class:`LoopContext` holds no training state (that is
:mod:`trm_assets.harness.storage.checkpoint`, on disk): a step or a slow-update function can run in
a fresh process from the workspace and the config alone. ``ctx.paths`` is resolved again on every
access because the current version moves.

Why it is long: the context is the loop's one binding of everything a unit needs (data, pools,
models, tools, version reads, the rollout call and its parameters, the outage guard, the kernel
parameters, the oracle's report); each part is short, and together they are what every unit
receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Final, TypeVar

from trm_assets.agent.messages import AgentPrompts, load_agent_prompts
from trm_assets.agent.tools import Toolbox
from trm_assets.domain.edits import EditBudgetSchedule
from trm_assets.domain.errors import TrmError
from trm_assets.domain.gate import GateParams
from trm_assets.domain.ladder import LadderParams
from trm_assets.domain.pools import Pools
from trm_assets.domain.probation import ProbationParams
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question, skill_file_name
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.data.dataset import Dataset, load_dataset
from trm_assets.harness.loop.observer import LoopObserver
from trm_assets.harness.loop.rollouts import (
    FAILURE_INFRA,
    ROLLOUTS_PER_SLOT,
    InferenceProgress,
    InferenceResult,
    Prediction,
    RolloutSpec,
    run_inference,
)
from trm_assets.harness.storage.observation import prepare_tables
from trm_assets.harness.storage.pools import build_or_load_pools
from trm_assets.harness.storage.runlog import RunLog, run_meta
from trm_assets.harness.storage.versions import read_version_files, verify_version
from trm_assets.harness.storage.workspace import (
    RUN_BASE,
    ResolvedPaths,
    WorkspaceError,
    is_eval_command_kind,
    open_run_log,
    read_manifest,
    resolve_paths,
)
from trm_assets.llm.providers import Providers
from trm_assets.llm.sim_config import answer_world, world_file

T = TypeVar("T")


async def overlapped(barrier: Awaitable[T], work: Callable[[], None]) -> T:
    """Await ``barrier`` (rollouts), doing ``work`` once its model calls are sent: two turns of
    the event loop let the inference run start its rollouts and each rollout send its first
    request. A failed ``work`` cancels the barrier."""
    task = asyncio.ensure_future(barrier)
    for _ in range(2):
        await asyncio.sleep(0)
    try:
        work()
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    return await task


#: a real endpoint's first rollouts of a process whose last reply was empty that stop the unit
EMPTY_REPLY_STREAK: Final = 20
#: ... and at a barrier's end, its live rollouts when they are fewer (and at least this many)
EMPTY_REPLY_MIN: Final = 5


class InfraOutage(TrmError):
    """Most recent rollouts failed for infrastructure reasons: stop, do not decide."""


class EmptyReplies(InfraOutage):
    """The endpoint answers, but with nothing: the barrier's rows are not outcomes."""


@dataclass
class LoopContext:
    """Dependencies of the loop (no mutable training state)."""

    workspace: Path
    cfg: RunConfig
    dataset: Dataset
    pools: Pools
    providers: Providers
    toolbox: Toolbox
    base: str = RUN_BASE
    observers: tuple[LoopObserver, ...] = ()  # benchmarks, progress displays (observer.py)
    _log: RunLog | None = field(default=None, repr=False)
    # the process's last infra_outage_window rollouts: (model calls, counting a failed one;
    # whether it ended in an infra failure)
    _recent_infra: deque[tuple[int, bool]] = field(
        default_factory=lambda: deque(maxlen=20), repr=False
    )
    # a live rollout of this process ended on a reply with text or a tool call: the endpoint
    # can answer, and the empty-reply guard is off for the process
    _replied: bool = field(default=False, repr=False)
    # prompts version → (the verified meta it was loaded under, the prompts): a barrier reads its
    # prompt set once per version, not once per barrier
    _prompts: dict[str, tuple[object, AgentPrompts]] = field(default_factory=dict, repr=False)
    # question id → model calls of its latest rollout in this process: the expected length that
    # orders a barrier's starts longest first (scheduling only; no result depends on it)
    _calls_seen: dict[str, int] = field(default_factory=dict, repr=False)
    # durable bookkeeping nothing reads before the unit's commit, done once the next barrier's
    # first model calls are out (after_next_launch)
    _later: list[Callable[[], object]] = field(default_factory=list, repr=False)
    # the runs on record when this process opened the run log: run id → the decoding and prompt
    # keys its rows were rolled out with (None once a barrier of this process reconciled them)
    _earlier: dict[str, Mapping[str, Any] | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._recent_infra = deque(maxlen=self.cfg.infra_outage_window)

    # -- workspace ------------------------------------------------------------------------------

    @property
    def paths(self) -> ResolvedPaths:
        return resolve_paths(self.workspace)

    @property
    def log(self) -> RunLog:
        """The process's run-log writer (reopened lazily after :meth:`close_log`)."""
        if self._log is None or self._log._closed:
            # this workspace's own run log: a foreign one is refused, a lost one never re-created
            self._log = open_run_log(self.workspace, text_cap_bytes=self.cfg.run_log_text_cap_bytes)
            prepare_tables(self._log)
            if self._earlier is None:  # read before this process writes anything
                rows = self._log.query("SELECT run_id, meta FROM runs")
                self._earlier = {str(r["run_id"]): run_meta(r["meta"]) for r in rows}
        return self._log

    def flush_log_quietly(self) -> None:
        """Write what the open run log buffers, if one is open; a failed write keeps the rows
        buffered (for the close) and is not raised (the caller is raising its own error)."""
        if self._log is not None and not self._log._closed:
            with contextlib.suppress(Exception):
                self._log._join_behind()  # a failed background write is reported elsewhere
            with contextlib.suppress(Exception):
                self._log.flush()

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- data -----------------------------------------------------------------------------------

    @cached_property
    def questions(self) -> dict[str, Question]:
        return self.dataset.by_id()

    def pool_questions(self, name: str) -> list[Question]:
        return [self.questions[q] for q in self.pools.pool(name)]

    def _by_type(self, qids: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for qid in qids:
            out.setdefault(self.questions[qid].task_type, []).append(qid)
        return {t: tuple(sorted(v)) for t, v in sorted(out.items())}

    @cached_property
    def validation_by_type(self) -> dict[str, tuple[str, ...]]:
        return self._by_type(self.pools.validation)

    @cached_property
    def diagnosis_by_type(self) -> dict[str, tuple[str, ...]]:
        return self._by_type(self.pools.diagnosis)

    @cached_property
    def task_of_skill(self) -> dict[str, str]:
        return {skill_file_name(t): t for t in self.dataset.task_types}

    # -- versions -------------------------------------------------------------------------------

    def skills(self, version: str) -> dict[str, str]:
        return read_version_files(self.paths.skills_root, version)

    def prompt_files(self, version: str) -> dict[str, str]:
        return read_version_files(self.paths.prompts_root, version)

    def agent_prompts(self, version: str) -> AgentPrompts:
        root = self.paths.prompts_root
        # the files match their recorded hashes; an unchanged version gives back the same meta
        # object (versions._verified), so the prompts loaded under it are still these files
        meta = verify_version(root, version)
        hit = self._prompts.get(version)
        if hit is not None and hit[0] is meta:
            return hit[1]
        prompts = load_agent_prompts(root / version)
        self._prompts[version] = (meta, prompts)
        return prompts

    def _decoding(self) -> dict[str, object]:
        decoding: dict[str, object] = {
            "provider": self.cfg.llm_provider,
            "model": self.providers.agent.model,
            "temperature": self.cfg.effective_agent_temperature(),
            "max_steps": self.cfg.max_agent_steps,
            "skill_mode": self.cfg.skill_mode,
        }
        if self.cfg.llm_provider == "sim":  # the simulated model is its world: another answers
            decoding["world"] = answer_world(self.cfg.sim)
        mode = getattr(self.providers.agent, "tool_mode", "native")
        if mode != "native":  # TRM_LLM_TOOL_MODE=text is another prompt and another protocol
            decoding["tool_mode"] = mode  # (native keeps the hash it had before the key)
        return decoding

    @cached_property
    def data_digest(self) -> str:
        """What a rollout reads besides its prompt and its question (whose content ``pools.json``
        guards): the video trees its tools return and, with the simulator, the world file its
        answers come from. Recorded per run (``runs.meta.data``): an outcome on record is served
        again (temperature 0), resumed, or taken as a ``trm eval``'s only under the same data
        (:meth:`same_data`)."""
        h = hashlib.sha256()
        trees = self.dataset.trees
        for video in sorted(trees):
            h.update(f"{video}\0{trees[video].model_dump_json()}\0".encode())
        if self.cfg.llm_provider == "sim" and self.cfg.ground_truth:
            # the file the provider read (a sample directory names its ground_truth.json)
            world = json.loads(world_file(self.cfg.ground_truth).read_text(encoding="utf-8"))
            h.update(json.dumps(world, sort_keys=True).encode())
        return h.hexdigest()[:16]

    def same_data(self, meta: Mapping[str, Any]) -> bool:
        """Whether a run's ``runs.meta`` says it read this data. Runs recorded before the key
        carry none and are taken as the current data's, as before (the SQL of
        :meth:`same_prompt_rows` applies the same rule)."""
        return bool((meta.get("data") or self.data_digest) == self.data_digest)  # null: none

    def decoding_hash(self) -> str:
        """What besides the version pair decides a rollout's answer: provider, model,
        temperature, max steps, skill mode, a text tool mode (recorded on every run:
        runs.meta.decoding)."""
        return _short_hash(self._decoding())

    def context_hash(self, skills: Mapping[str, str]) -> str:
        """GATE §6.3 R4: everything besides the task skill and prompts version that changes the
        baseline's output distribution (the decoding, and the other skills it reads)."""
        others = (
            {DEFAULT_SKILL_FILE: skills.get(DEFAULT_SKILL_FILE, "")}
            if self.cfg.skill_mode == "task"
            else dict(sorted(skills.items()))
        )
        digests = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in others.items()}
        return _short_hash({**self._decoding(), "others": digests})

    def baseline_context_hash(self, skills: Mapping[str, str]) -> str:
        """The gate-baseline cache's R4 context (:mod:`trm_assets.domain.baseline_cache`):
        :meth:`context_hash` and the data the draws read (:attr:`data_digest`). A baseline drawn
        over other video trees or another simulated world file is another distribution; served to
        a gate whose candidate reads this data, it paired two data sets (review: a fresh-temperature
        run resumed over edited trees did). Entries written before the key are not served: the
        baselines are drawn again (cost only)."""
        return _short_hash({"context": self.context_hash(skills), "data": self.data_digest})

    def prompt_key(self, task_type: str, skills: Mapping[str, str], prompts_version: str) -> str:
        """What a question of ``task_type`` reads, as one hash: its skill file, the other skills
        it reads, the prompts version and the decoding. At temperature 0 two rollouts of a
        question with the same key are the same answer (recorded per run: ``runs.meta``)."""
        task = hashlib.sha256(skills.get(skill_file_name(task_type), "").encode()).hexdigest()
        return _short_hash(
            {"prompts": prompts_version, "task": task, "context": self.context_hash(skills)}
        )

    def same_prompt_rows(
        self,
        task_type: str,
        key: str,
        qids: Iterable[str],
        *,
        not_run: str | None = None,
        not_run_prefix: str | None = None,
    ) -> dict[str, dict[str, Any]]:
        """At temperature 0, the completed rows of earlier runs in which a question of
        ``task_type`` read the prompt ``key`` (:meth:`prompt_key`, recorded per run in
        ``runs.meta.prompt_keys``) over the same data (:attr:`data_digest`): question id → the
        first such row by run id (deterministic, so a resumed unit reuses what an uninterrupted
        one reuses). A question whose stored outcomes
        disagree (a server that is not deterministic after all), or that only failed for
        infrastructure reasons, is left out; so are the run ``not_run`` and the runs whose id
        starts with ``not_run_prefix``."""
        wanted = set(qids)
        rows = self.log.query(
            "SELECT p.* FROM predictions p JOIN runs r ON r.run_id = p.run_id "
            "WHERE json_extract_string(r.meta, ?) = ? AND p.task_type = ? "
            "AND coalesce(json_extract_string(r.meta, '$.data'), ?) = ? "
            "AND p.correct IS NOT NULL AND p.stop_reason <> 'error' "
            "AND p.failure_kind IS DISTINCT FROM 'infra' "
            + ("AND p.run_id <> ? " if not_run is not None else "")
            + ("AND NOT starts_with(r.run_id, ?) " if not_run_prefix is not None else "")
            + "ORDER BY p.run_id, p.replicate",
            [
                f"$.prompt_keys.{json.dumps(task_type)}",
                key,
                task_type,
                self.data_digest,
                self.data_digest,
                *(x for x in (not_run, not_run_prefix) if x is not None),
            ],
        )
        out: dict[str, dict[str, Any]] = {}
        seen: dict[str, set[bool]] = {}
        for r in rows:
            qid = str(r["question_id"])
            if qid in wanted:
                seen.setdefault(qid, set()).add(bool(r["correct"]))
                out.setdefault(qid, dict(r))
        return {q: r for q, r in out.items() if len(seen[q]) == 1}

    def known_outcomes(
        self, run_id: str, specs: Sequence[RolloutSpec], keys: Mapping[str, str]
    ) -> dict[str, dict[str, Any]]:
        """The evaluation's questions whose prompt (``keys``: task type → prompt key) was
        already rolled out (:meth:`same_prompt_rows`). With fresh draws: nothing."""
        if self.cfg.fresh_draws():
            return {}
        wanted: dict[str, set[str]] = {}
        for spec in specs:
            q = _question(spec)
            wanted.setdefault(q.task_type, set()).add(q.question_id)
        out: dict[str, dict[str, Any]] = {}
        for task_type, qids in sorted(wanted.items()):
            out.update(self.same_prompt_rows(task_type, keys[task_type], qids, not_run=run_id))
        return out

    # -- rollouts -------------------------------------------------------------------------------

    def after_next_launch(self, work: Callable[[], object]) -> None:
        """Do ``work`` — a durable write nothing reads before the unit's commit (a run's record in
        the manifest before its rows, a gate's cache file and evidence rows) — once the next
        barrier's first model calls are sent (:meth:`rollouts`), or at the latest when the
        unit commits (:meth:`drain_later`): it then costs no time between barriers."""
        self._later.append(work)

    def drain_later(self) -> None:
        """Do every queued :meth:`after_next_launch` work now, in order."""
        while self._later:
            self._later.pop(0)()

    def forget_later(self) -> None:
        """Drop the queued :meth:`after_next_launch` work of a unit that failed before its
        commit (called when a unit opens): its records and cache entries belong to an attempt
        the open rolls back, and must not be written after it."""
        self._later.clear()

    async def rollouts(
        self,
        run_id: str,
        specs: Sequence[RolloutSpec],
        skills: Mapping[str, str],
        prompts_version: str,
        *,
        kind: str,
        skills_version: str | None,
    ) -> InferenceResult:
        """Every agent rollout of the loop goes through here: one binding of the rollout
        parameters (model, tools, run log, concurrency, max steps, skill mode, temperature)."""
        cfg = self.cfg
        keys = {
            t: self.prompt_key(t, skills, prompts_version)
            for t in sorted({_question(s).task_type for s in specs})
        }
        reuse = (
            self.known_outcomes(run_id, specs, keys)
            if kind in REUSE_KINDS or is_eval_command_kind(kind)
            else {}
        )
        resume = self._reconcile_earlier(run_id, keys)
        try:
            result = await overlapped(
                run_inference(
                    specs,
                    llm=self.providers.agent,
                    tools=self.toolbox,
                    log=self.log,
                    run_id=run_id,
                    concurrency=cfg.concurrency,
                    max_steps=cfg.max_agent_steps,
                    skill_mode=cfg.skill_mode,
                    skills=skills,
                    prompts=self.agent_prompts(prompts_version),
                    temperature=cfg.effective_agent_temperature(),
                    run_kind=kind,
                    skills_version=skills_version,
                    prompts_version=prompts_version,
                    questions_ref=self.dataset.questions_ref,
                    progress=self._on_rollouts if self.observers else None,
                    heartbeat_s=HEARTBEAT_S,
                    reuse=reuse,
                    resume=resume,
                    run_meta={
                        "decoding": self.decoding_hash(),
                        "prompt_keys": keys,
                        "data": self.data_digest,
                    },
                    start_order=self._longest_first(specs),
                    write_behind=self.after_next_launch,
                    on_rollout=self._outage_streak(run_id, kind),
                ),
                self.drain_later,
            )
            if not _test_pool_kind(kind):  # the test pool orders nothing (leakage), not calls
                for p in result.predictions:
                    if p.n_llm_calls:
                        self._calls_seen[p.question_id] = p.n_llm_calls
            for o in self.observers:
                o.on_barrier(result)
            self._check_outage(result, kind)
            self._check_empty(result, kind)
        except InfraOutage as e:
            # given up mid-barrier (the streak) or after it (_check_outage): the run's row says
            # so, not "failed" nor "done" (a later `trm eval` reused a "done" one)
            if self._log is not None:
                if isinstance(e, EmptyReplies):
                    # its empty replies are complete rows: at temperature 0 the resumed run
                    # (same prompt keys: a server flag is not in them) and any later run of the
                    # same prompt would take them as answers — the run is redone whole
                    self._log.discard_rows(run_id)
                self._log.finish_run(run_id, status="outage", defer=True)
            raise
        return result

    def _reconcile_earlier(self, run_id: str, keys: Mapping[str, str]) -> bool:
        """Whether ``run_id``'s completed rows on record are this barrier's outcomes
        (``run_inference(resume=True)``), after deleting those that are not.

        A run already on record when this process opened the run log is a unit killed and
        re-run, or a ``trm eval`` again after an outage. Its earlier attempt's rows stay on
        record unless deleted (the first row of a key is kept), so the re-run must either use
        them or delete them; otherwise it decides on outcomes the run log does not hold. A real
        server does not reproduce a sample: at temperature > 0 it draws again, and at any
        temperature the evolver may have written another candidate for the same gate run. So:

        * temperature 0 (the decoding is a function of the prompt): the rows whose prompt
          (``runs.meta.prompt_keys`` of the type, and the decoding) is this barrier's are
          resumed, not rolled out again — a kill hours into a real model's barrier loses only
          the rollouts in flight — and the others are deleted and rolled out;
        * temperature > 0: every earlier row is deleted and rolled out again. Keeping the
          completed ones would bias the sample: the rollouts still in flight at a kill are the
          long ones, so kept rows over-represent quick answers
          (``docs/decision-resume-a-killed-barrier.md``).
        """
        log = self.log  # opening it reads the runs on record
        earlier = self._earlier if self._earlier is not None else {}
        if run_id not in earlier:
            return False
        resume = not self.cfg.fresh_draws()
        meta = earlier[run_id]
        if meta is None:
            return resume  # reconciled by an earlier barrier of this run
        earlier[run_id] = None
        stored = meta.get("prompt_keys")
        if (
            not resume
            or meta.get("decoding") != self.decoding_hash()
            or not self.same_data(meta)
            or not isinstance(stored, Mapping)
        ):
            log.discard_rows(run_id)
            return resume
        on_record = log.query(
            "SELECT DISTINCT task_type FROM predictions WHERE run_id = ?", [run_id]
        )
        other = [
            t for t in (str(r["task_type"]) for r in on_record) if stored.get(t) != keys.get(t)
        ]
        log.discard_rows(run_id, other)
        return True

    def forget_killed_gates(self, prefix: str) -> None:
        """A step re-run after a kill: delete the observation rows its killed attempt's gates
        left (``gate_evidence``, ``quadrant_pair`` of the gate runs starting with ``prefix``).
        The re-run writes its own; a gate it does not reach again, or reaches with fewer
        blocks, would otherwise keep the killed attempt's evidence. Only when a run of this
        step was on record when the process opened the run log: a step run for the first time
        reads and writes nothing here (no flush waiting for a checkpoint still landing)."""
        log = self.log
        if not any(r.startswith(prefix) for r in self._earlier or {}):
            return
        log.flush()
        with log.transaction() as con:
            for table in ("gate_evidence", "quadrant_pair"):
                con.execute(f"DELETE FROM {table} WHERE starts_with(gate_run_id, ?)", [prefix])

    def _longest_first(self, specs: Sequence[RolloutSpec]) -> list[int] | None:
        """The order to start a barrier's rollouts in when they outnumber the slots: the longest
        expected first (each question's model calls in its latest rollout here; unseen ones as
        the mean), ties in input order — a rollout started last then tends to be a short one, so
        the barrier ends sooner (LPT). The order changes when calls are made, never their
        answers: every rollout's draws are keyed by its own run, question and replicate."""
        if len(specs) <= self.cfg.concurrency or not self._calls_seen:
            return None
        seen = self._calls_seen
        mean = sum(seen.values()) / len(seen)
        expected = [seen.get(_question(s).question_id, mean) for s in specs]
        return sorted(range(len(specs)), key=lambda i: (-expected[i], i))

    def _on_rollouts(self, progress: InferenceProgress) -> None:
        for o in self.observers:
            o.on_rollouts(progress)

    def _check_outage(self, result: InferenceResult, kind: str) -> None:
        """Issue 18.3: a unit whose rollouts mostly ended in infra failures is not a result: its
        accuracy would be taken over the few that got through. The rollouts are watched over
        the barrier itself, or the last ``infra_outage_window`` rollouts of the process when the
        barrier is smaller (gate blocks); past ``infra_outage_rate`` of them ended in an infra
        failure, the unit stops before its checkpoint (so it is re-run, rolled back, on resume)
        and nothing is decided or finalized on an outage. Occasional faults — a few rollouts
        failing after their retries — stay data: the gate's own INFRA guard handles those.
        A real endpoint's rollouts count, not its model calls: a rollout that made three good
        calls and failed at its fourth (after the provider's retries) is as lost as one that
        never connected — a gateway refusing long requests failed 66 of 72 rollouts in 1 of 4
        calls, and the unit was checkpointed on the 6 left. A rollout served from the
        temperature-0 cache (0 calls), or a task failure, is a result. The simulated world
        counts model calls: its ``sim.fault_*_rate`` are per-call draws with no retry, which a
        drill sets high (25% of calls fails half of its rollouts), and its faults are the same
        draws on every attempt, so a stop there would recur at each resume.

        Until the window holds ``min(infra_outage_window, 10)`` rollouts (a small unit, a fresh
        process: every Dagster run has its own), a real endpoint's unit stops only when *every*
        rollout of the window ended in an infra failure: such a unit of an unreachable endpoint
        was checkpointed with accuracy n/a. Not in the simulated world (its small units never
        stop, for the same reason)."""
        window = self._recent_infra
        barrier = [
            (p.n_llm_calls + int(p.failure_kind == FAILURE_INFRA), p.failure_kind == FAILURE_INFRA)
            for p in result.predictions
        ]
        window.extend(barrier)
        watched = barrier if len(barrier) > len(window) else list(window)
        cfg = self.cfg
        failed = sum(infra for _, infra in watched)
        if len(watched) < min(cfg.infra_outage_window, 10):
            outage = not self.providers.simulated and failed == len(watched) > 0
            what = f"every one of the last {len(watched)} rollout(s)"
        elif self.providers.simulated:
            calls = sum(c for c, _ in watched)
            outage = failed / max(calls, 1) > cfg.infra_outage_rate
            what = f"{failed} of the last {calls} model calls"
        else:
            outage = failed / len(watched) > cfg.infra_outage_rate
            what = f"{failed} of the last {len(watched)} rollouts"
        if outage:
            window.clear()
            errors = sorted({p.error for p in result.predictions if p.error})
            raise self._outage(what, result.run_id, errors, kind)

    def _check_empty(self, result: InferenceResult, kind: str) -> None:
        """At a barrier's end: a barrier smaller than ``EMPTY_REPLY_STREAK`` (a gate block, a
        `trm eval` of a small pool) whose live rollouts — at least ``EMPTY_REPLY_MIN`` — all
        ended on an empty reply, in a process that has had no other, stops as the streak
        does (:meth:`_outage_streak`); a larger one was stopped there already."""
        if self.providers.simulated or self._replied:
            return
        live = [
            p
            for p in result.predictions
            if p.n_llm_calls and not (p.reused or p.resumed) and p.failure_kind != FAILURE_INFRA
        ]
        if len(live) >= EMPTY_REPLY_MIN and all(p.empty_reply for p in live):
            raise self._empty_replies(len(live), result.run_id, kind)

    def _outage_streak(self, run_id: str, kind: str) -> Callable[[Prediction], None] | None:
        """While a barrier runs (:func:`run_inference`'s ``on_rollout``): a real endpoint that
        lost ``max(infra_outage_window, 10)`` rollouts in a row *beyond the rollouts in flight*
        (``concurrency × ROLLOUTS_PER_SLOT``) is given up at once, not at the barrier's end. A
        server that hangs costs each rollout its timeout and retries (≈ 5 min at the defaults):
        a hostile pass waited 3 min 20 s for a 72-rollout barrier at a 5 s timeout, and 600
        validation questions would have taken ≈ 6 hours to say "outage". The rollouts in flight
        are counted in: a blip of half a minute ends every one of them in failure at once (a
        review stopped a healthy endpoint after 20 lost of 600 that way). A streak, not a
        share: the first rollouts to end are not a sample of the barrier (a refused connection
        ends at once, an answer takes its time), and an endpoint that still answers breaks it.
        Not in the simulated world (its faults recur at each resume).

        The same watch stops a barrier whose first ``EMPTY_REPLY_STREAK`` rollouts ended on an
        empty reply (no text, no tool call; :meth:`_empty_replies`) while no rollout of the
        process has ended on a real one: the endpoint answers, but nothing it says can be
        scored. Once one reply had content the guard is off for the process: a model that goes
        quiet on some questions is data, and the barrier's longest-first order starts the
        one-call rollouts — every empty reply — together at its end, so a streak there is no
        sign of a broken setup (a review stopped a healthy run that way)."""
        if self.providers.simulated:
            return None
        need = max(self.cfg.infra_outage_window, 10) + self.cfg.concurrency * ROLLOUTS_PER_SLOT
        streak: list[str] = []
        empty = [0]

        def watch(p: Prediction) -> None:
            if p.failure_kind != FAILURE_INFRA:
                streak.clear()
                if not p.empty_reply:
                    self._replied = True
                elif not self._replied:
                    empty[0] += 1
                    if empty[0] >= EMPTY_REPLY_STREAK:
                        raise self._empty_replies(empty[0], run_id, kind)
                return
            streak.append(p.error or "")
            if len(streak) >= need:
                what = f"{need} rollouts in a row (the barrier was given up before its end)"
                raise self._outage(what, run_id, sorted(set(streak)), kind)

        return watch

    def check_model_calls(self, what: str, run_id: str, errors: list[str], calls: int) -> None:
        """A unit's evolution, diagnosis, momentum or system/tool calls: when a real endpoint
        failed every one of them for infrastructure reasons (after the provider's retries), the
        model is down, not the proposal empty — stop the unit before its checkpoint, as a
        rollout outage does (``--resume`` redoes it). A single failed call among others stays
        an ``INFRA`` no-edit; the simulated world's injected faults stay results (its drills are
        deterministic: a re-run would fail the same way); ``infra_outage_rate`` 1.0 turns the
        guard off, as it does the rollouts' (a drill through a faulty endpoint)."""
        if self.providers.simulated or calls == 0 or len(errors) < calls:
            return
        if self.cfg.infra_outage_rate >= 1.0:  # a share of failures never exceeds 1.0
            return
        raise self._outage(what, run_id, errors, "step")

    def _empty_replies(self, n: int, run_id: str, kind: str) -> InfraOutage:
        """A real endpoint whose replies carry neither text nor a tool call, ``n`` rollouts and
        no other: every one would score as a wrong answer, and the run would go on deciding on
        them (a reasoning model whose output stays in ``reasoning_content``, a token limit
        spent before any answer, a chat template that drops the output)."""
        return EmptyReplies(
            f"the agent model's last reply was empty (no content and no tool call) in each of "
            f"the first {n} rollouts (run {run_id}; model {self.providers.agent.model!r}): the "
            "server answers, but nothing it says can be scored — a reasoning model whose "
            "answer stays in reasoning_content (llama.cpp: --reasoning-format none), a token "
            "limit spent before the answer, or a chat template that drops the output; "
            + _then(kind, "fix the server or the model")
        )

    def _outage(self, what: str, run_id: str, errors: list[str], kind: str) -> InfraOutage:
        fix = (
            "the simulated world injects these faults (sim.fault_*_rate): lower them, or "
            "raise infra_outage_rate"
            if self.providers.simulated
            else "fix the endpoint (TRM_LLM_BASE_URL, TRM_LLM_API_KEY)"
        )
        return InfraOutage(
            f"{what} failed for infrastructure reasons (run {run_id}; model endpoint unreachable "
            f"or failing: {'; '.join(e for e in errors[:3] if e) or 'no detail'}); "
            + _then(kind, fix)
        )

    # -- parameters -----------------------------------------------------------------------------

    def gate_params(self) -> GateParams:
        return gate_params_of(self.cfg)

    def ladder_params(self) -> LadderParams:
        c = self.cfg
        return LadderParams(
            p_low=c.ladder_p_low,
            p_high=c.ladder_p_high,
            gamma=c.ladder_gamma,
            probe_every=c.ladder_probe_every,
        )

    def probation_params(self) -> ProbationParams:
        c = self.cfg
        return ProbationParams(
            alpha_harm=c.probation_alpha_harm,
            rollback_margin=int(c.probation_rollback_margin),
            min_pairs=c.probation_min_pairs,
            grid_k=c.gate_grid_k,
            grid_max=c.gate_grid_max,
        )

    def budget_schedule(self) -> EditBudgetSchedule:
        c = self.cfg
        return EditBudgetSchedule(
            start=c.edit_budget_start,
            end=c.edit_budget_end,
            epochs=c.epochs,
            steps_per_epoch=c.steps_per_epoch,
        )

    # -- simulated oracle -----------------------------------------------------------------------

    def expected_accuracy(
        self, skills_version: str, prompts_version: str, qids: tuple[str, ...] | list[str]
    ) -> float | None:
        """The simulated world's noise-free expected accuracy of a version pair (None for a real
        model: there is no oracle). A report, never an input to a decision."""
        oracle = self.providers.oracle
        if oracle is None or not qids:
            return None
        prompts = self.agent_prompts(prompts_version)
        probs = oracle.expected_by_question(
            list(qids),
            self.skills(skills_version),
            system_prompt=prompts.system,
            tool_descriptions=prompts.tool_texts(),
            skill_mode=self.cfg.skill_mode,
        )
        return sum(probs.values()) / len(probs)


def _then(kind: str, fix: str) -> str:
    """What a stopped unit (or `trm eval`) left, and how to go on."""
    if is_eval_command_kind(kind):
        return f"the evaluation recorded no result — {fix} and run the same `trm eval` again"
    return f"the unit was stopped before its checkpoint — {fix} and run `trm train --resume`"


def _short_hash(value: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def gate_params_of(cfg: RunConfig) -> GateParams:
    """The kernel's gate parameters from the config (GATE §11 fields)."""
    return GateParams(
        alpha=cfg.gate_alpha,
        mode=cfg.gate_mode,
        alpha_early=cfg.gate_alpha_early,
        alpha_harm=cfg.gate_alpha_harm,
        lambda0=cfg.gate_lambda0,
        lambda_dir=cfg.gate_lambda_dir,
        grid_k=cfg.gate_grid_k,
        grid_max=cfg.gate_grid_max,
        block=cfg.gate_block,
        infra_max_rate=cfg.gate_infra_max_rate,
        infra_min_denominator=cfg.gate_infra_min_denominator,
        futility_power=cfg.gate_futility_power,
    )


def open_context(workspace: str | Path, cfg: RunConfig, providers: Providers) -> LoopContext:
    """Load everything a unit of work needs (the workspace must exist: ``trm init``). The model
    clients come from the composition root (:func:`trm_assets.llm.factory.build_providers`)."""
    ws = Path(workspace)
    paths = resolve_paths(ws)
    ref = read_manifest(ws).questions_ref
    if Path(ref) != Path(cfg.questions):
        raise WorkspaceError(
            f"{paths.manifest}: the workspace was initialised for questions {ref!r} but the config "
            f"uses {cfg.questions!r}; use the workspace's config ({paths.config}) or `trm init` a "
            "new workspace"
        )
    dataset = load_dataset(cfg)
    pools = build_or_load_pools(cfg, dataset.questions, paths.pools)
    return LoopContext(ws, cfg, dataset, pools, providers, Toolbox(dataset.trees))


@contextmanager
def loop_context(
    workspace: str | Path, cfg: RunConfig, providers: Providers
) -> Iterator[LoopContext]:
    ctx = open_context(workspace, cfg, providers)
    try:
        yield ctx
    finally:
        ctx.close_log()


#: How often a running barrier reports to the observers even when no rollout finished (their
#: own cadence decides what is shown: ``TRM_PROGRESS_EVERY_S``).
HEARTBEAT_S: Final = 1.0

#: Evaluation runs whose consumers read outcomes only (not traces): at temperature 0 their
#: questions are served from earlier rollouts of the same prompt (step batches feed diagnosis
#: traces and gates have their own reuse, so neither is served here).
REUSE_KINDS: Final = frozenset({"seed_eval", "slow_R", "slow_R2", "holdout"})


def _test_pool_kind(kind: str) -> bool:
    """Runs over the held-out test pool (``holdout``) or a ``trm eval`` (``eval_*``): their
    model-call counts must not order later barriers (:meth:`LoopContext._longest_first`)."""
    return kind == "holdout" or is_eval_command_kind(kind)


def _question(spec: RolloutSpec) -> Question:
    return spec if isinstance(spec, Question) else spec[0]

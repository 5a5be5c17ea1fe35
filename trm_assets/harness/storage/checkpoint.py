"""Training state and its checkpoint (SPEC 5.7, seed §13 ``checkpoint.py``).

``state.json`` holds every field of the seed's persisted state — correctness, eval_prev_acc,
eval_prev_run_id, baseline_skills_version, baseline_prompts_version, steps_since_best_improved,
epoch_start_skills, changed_task_types_this_epoch, rejected_buffer, system_packs, tool_packs,
probations, gate_cooldown, gate_epoch_observed — plus the progress the planner reads (epoch, next
step, slow-update functions done), the epoch's saved batches, the slow update's intermediate
results, the budget ledger and the per-epoch summaries.

Rules:

* written atomically (temp + ``os.replace``), deterministic JSON (sorted keys), no wall clock;
* **every key is required on read**: a missing key is corruption and raises
  :class:`CheckpointError` (never a default);
* a change of the config's *structural* fingerprint (pools, batches, seed) refuses resume; a
  change of the *decision* fingerprint only warns;
* ``workspace_mark`` records the store and manifest as they were at the checkpoint, so a unit of
  work killed half-way is rolled back to exactly that point before it runs again
  (:func:`restore_workspace_to_mark`): resume lands where an uninterrupted run would.

Why it is long: it is the checkpoint's one module — the state's fields, the one codec of the typed
records, the cached load with its fingerprint checks, and the workspace mark with the rollback and
the verification of referenced versions that opening a unit needs.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
import types
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import Field, asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel

if TYPE_CHECKING:
    from trm_assets.harness.storage.runlog import RunLog

from trm_assets.domain.edits import RejectedEdit
from trm_assets.domain.errors import TrmError
from trm_assets.evolution.types import SystemCasePack, ToolCasePack, to_jsonable
from trm_assets.harness.data.config import RunConfig
from trm_assets.harness.storage.atomic import (
    atomic_write_text,
    before_every_write,
    file_identity,
    fsync_paths,
    json_text,
    take_unsynced,
)
from trm_assets.harness.storage.records import (
    BudgetLedger,
    CounterName,
    EpochCounters,
    EpochSummary,
    FinalReport,
    PhaseUsage,
    SeedEval,
    SlowRecords,
)
from trm_assets.harness.storage.versions import (
    IntegrityError,
    StoreError,
    list_versions,
    parse_version,
    verify_version,
)
from trm_assets.harness.storage.workspace import (
    BestPointer,
    VersionPair,
    check_run_log,
    is_eval_command_kind,
    read_manifest,
    store_roots,
    write_manifest,
)

STATE_FORMAT: Final = "trm.train_state/1"
N_SLOW_STEPS: Final = 10


class CheckpointError(TrmError):
    """A state file that is corrupt, or that belongs to an incompatible configuration."""


class ConfigDriftWarning(UserWarning):
    """The decision-relevant config changed since the checkpoint (resume continues)."""


@dataclass
class Probation:
    """An open probation for one skill file (GATE §7): the anchor before its accepted edits."""

    skill_file: str
    task_type: str
    anchor_skills_version: str
    anchor_prompts_version: str
    anchor_run_id: str | None  # the evaluation whose draws are the anchor (never a gate run)
    anchor_default_hash: str  # default-strategy.md at the anchor (a change confounds)
    correctness_snapshot: dict[str, bool | None]  # the type's validation questions, pre-merge
    pending_edits: list[dict[str, Any]]  # applied edits of every accepted bundle, with evidence
    opened_epoch: int
    opened_step: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Probation:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


@dataclass
class TrainState:
    """Everything the loop needs to continue (see the module docstring)."""

    config_fingerprint: str
    structural_fingerprint: str
    # -- progress (read by plan.next_action) --
    initialized: bool = False
    epoch: int = 0
    epoch_started: int = -1
    next_step: int = 0
    slow_done: int = 0
    early_stopped: bool = False
    finalized: bool = False
    batches: list[list[str]] = field(default_factory=list)
    # -- the seed's persisted state (SPEC 5.7) --
    correctness: dict[str, bool | None] = field(default_factory=dict)
    eval_prev_acc: float | None = None
    eval_prev_run_id: str | None = None
    baseline_skills_version: str | None = None
    baseline_prompts_version: str | None = None
    steps_since_best_improved: int = 0  # counted in slow updates (epochs), used by early stop
    epoch_start_skills: dict[str, str] = field(default_factory=dict)  # file -> content hash
    changed_task_types_this_epoch: list[str] = field(default_factory=list)
    rejected_buffer: dict[str, list[RejectedEdit]] = field(default_factory=dict)
    system_packs: SystemCasePack = field(default_factory=SystemCasePack)
    tool_packs: dict[str, ToolCasePack] = field(default_factory=dict)
    probations: dict[str, Probation] = field(default_factory=dict)
    gate_cooldown: dict[str, int] = field(default_factory=dict)
    gate_epoch_observed: bool = False
    # -- epoch bookkeeping --
    epoch_start_versions: dict[str, str] = field(default_factory=dict)  # skills, prompts
    epoch_start_correctness: dict[str, bool | None] = field(default_factory=dict)
    epoch_start_best: dict[str, Any] | None = None
    epoch_counters: EpochCounters = field(default_factory=EpochCounters)
    slow: SlowRecords = field(default_factory=SlowRecords)  # the slow update's outputs so far
    gates_total: int = 0
    accepts_total: int = 0
    budget: BudgetLedger = field(default_factory=dict)
    history: tuple[EpochSummary, ...] = ()
    seed_eval: SeedEval | None = None
    final: FinalReport | None = None
    workspace_mark: dict[str, Any] = field(default_factory=dict)

    # -- budget ledger --------------------------------------------------------------------------

    def charge(
        self,
        scope: str,
        phase: str,
        *,
        rollouts: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        llm_calls: int = 0,
    ) -> None:
        """Account rollouts and tokens to ``scope`` (``init``, ``e0``, …, ``final``) × phase."""
        zero = PhaseUsage(rollouts=0, prompt_tokens=0, completion_tokens=0, llm_calls=0)
        row = self.budget.setdefault(scope, {}).setdefault(phase, zero)
        row["rollouts"] += rollouts
        row["prompt_tokens"] += prompt_tokens
        row["completion_tokens"] += completion_tokens
        row["llm_calls"] += llm_calls

    def count(self, name: CounterName, amount: float = 1) -> None:
        c = self.epoch_counters
        self.epoch_counters = replace(c, **{name: getattr(c, name) + amount})


SEED_FIELDS: Final[tuple[str, ...]] = (
    "correctness",
    "eval_prev_acc",
    "eval_prev_run_id",
    "baseline_skills_version",
    "baseline_prompts_version",
    "steps_since_best_improved",
    "epoch_start_skills",
    "changed_task_types_this_epoch",
    "rejected_buffer",
    "system_packs",
    "tool_packs",
    "probations",
    "gate_cooldown",
    "gate_epoch_observed",
)
STATE_KEYS: Final[tuple[str, ...]] = tuple(f.name for f in fields(TrainState))
assert set(SEED_FIELDS) <= set(STATE_KEYS)
# the fields holding typed records (harness/storage/records.py), through encode/decode_record
_RECORD_FIELDS: Final[Mapping[str, Any]] = {
    name: get_type_hints(TrainState)[name]
    for name in ("epoch_counters", "slow", "history", "seed_eval", "final")
}


def new_state(cfg: RunConfig) -> TrainState:
    return TrainState(cfg.fingerprint(), cfg.structural_fingerprint())


def state_to_dict(state: TrainState) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for f in fields(TrainState):
        value = getattr(state, f.name)
        if f.name == "probations":
            d[f.name] = {k: asdict(v) for k, v in sorted(value.items())}
        elif f.name == "rejected_buffer":
            d[f.name] = {k: [asdict(r) for r in v] for k, v in sorted(value.items())}
        elif f.name == "changed_task_types_this_epoch":
            d[f.name] = sorted(set(value))
        elif f.name in _RECORD_FIELDS:
            d[f.name] = encode_record(value)
        else:
            d[f.name] = to_jsonable(value)
    return {"format": STATE_FORMAT, **d}


#: The planner's progress fields and their allowed ranges (inclusive; None: unbounded).
_PROGRESS_INTS: Final[Mapping[str, tuple[int, int | None]]] = {
    "epoch": (0, None),
    "epoch_started": (-1, None),
    "next_step": (0, None),
    "slow_done": (0, N_SLOW_STEPS),
    "steps_since_best_improved": (0, None),
}
_PROGRESS_BOOLS: Final = ("initialized", "early_stopped", "finalized", "gate_epoch_observed")


def _check_progress(kw: Mapping[str, Any], source: str) -> None:
    """The fields the planner reads have their types and ranges, and ``epoch`` agrees with the
    epoch history (the last slow update appends the epoch's entry, then the epoch advances): a
    hand-edited ``"epoch": 99`` finalized silently, ``"zero"`` was a TypeError in the planner."""
    bad = [
        f"{k}: {kw[k]!r} (expected true or false)"
        for k in _PROGRESS_BOOLS
        if not isinstance(kw[k], bool)
    ]
    for k, (lo, hi) in _PROGRESS_INTS.items():
        v = kw[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            bad.append(f"{k}: {v!r} (expected an integer in {lo}..{'' if hi is None else hi})")
    if not bad and not kw["epoch"] <= len(kw["history"]) <= kw["epoch"] + 1:
        bad.append(
            f"epoch: {kw['epoch']} disagrees with the history of {len(kw['history'])} finished "
            "epoch(s)"
        )
    if bad:
        raise CheckpointError(f"{source}: corrupt checkpoint: " + "; ".join(bad))


def state_from_dict(data: Mapping[str, Any], source: str = "state.json") -> TrainState:
    """Rebuild the state; any missing key is corruption (hard failure, naming the keys)."""
    if data.get("format") != STATE_FORMAT:
        raise CheckpointError(
            f"{source}: format {data.get('format')!r}, expected {STATE_FORMAT!r} (not a training "
            "checkpoint of this version; start a new workspace)"
        )
    missing = [k for k in STATE_KEYS if k not in data]
    unknown = sorted(set(data) - set(STATE_KEYS) - {"format"})
    if missing or unknown:
        raise CheckpointError(
            f"{source}: corrupt checkpoint: missing key(s) {missing}, unknown key(s) {unknown}; "
            "a checkpoint is never completed with defaults — restore it or start a new workspace"
        )
    try:
        kw: dict[str, Any] = {k: data[k] for k in STATE_KEYS}
        kw["rejected_buffer"] = {
            k: [RejectedEdit(**r) for r in v] for k, v in data["rejected_buffer"].items()
        }
        kw["system_packs"] = SystemCasePack.from_dict(data["system_packs"])
        kw["tool_packs"] = {k: ToolCasePack.from_dict(v) for k, v in data["tool_packs"].items()}
        kw["probations"] = {k: Probation.from_dict(v) for k, v in data["probations"].items()}
        kw["changed_task_types_this_epoch"] = list(data["changed_task_types_this_epoch"])
        for name, tp in _RECORD_FIELDS.items():
            kw[name] = decode_record(tp, data[name], f"{source}: {name}")
        _check_progress(kw, source)
        return TrainState(**kw)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: corrupt checkpoint ({type(e).__name__}: {e})") from None


# ------------------------------------------------------------------------------------------------
# The one (de)serialization of the typed records (harness/storage/records.py)


def encode_record(value: Any) -> Any:
    """A record (or a mapping / sequence of them) as the JSON values the untyped dictionaries
    were: dataclass fields by name (an ``OMIT_NONE`` field only when set), pydantic models by
    ``model_dump``, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in fields(value):
            v = getattr(value, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = encode_record(v)
        return out
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, Mapping):
        return {str(k): encode_record(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_record(v) for v in value]
    return value


def decode_record(tp: Any, value: Any, where: str) -> Any:
    """The inverse of :func:`encode_record` for the type ``tp`` (a record, ``X | None``,
    ``Mapping[str, X]``, ``tuple[X, ...]``, a typed dict or a plain JSON value). A record's key
    that is missing (other than an ``OMIT_NONE`` / ``ZERO_IF_ABSENT`` field) or unknown is
    corruption: :class:`CheckpointError` naming it."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in get_args(tp) if a is not type(None)]
        return decode_record(inner, value, where)
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise CheckpointError(f"{where}: expected an object, got {type(value).__name__}")
        typed = _typed_fields(tp)
        unknown = sorted(set(value) - {f.name for f, _ in typed})
        kw: dict[str, Any] = {}
        for f, hint in typed:
            if f.name in value:
                kw[f.name] = decode_record(hint, value[f.name], f"{where}.{f.name}")
            elif f.metadata.get("omit_none"):
                kw[f.name] = None
            elif f.metadata.get("zero_if_absent"):
                kw[f.name] = f.default
            else:
                raise CheckpointError(f"{where}: corrupt checkpoint: missing key {f.name!r}")
        if unknown:
            raise CheckpointError(f"{where}: corrupt checkpoint: unknown key(s) {unknown}")
        return tp(**kw)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.model_validate(value)
    if origin in (dict, Mapping):
        _, vt = get_args(tp)
        return {str(k): decode_record(vt, v, f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        inner = get_args(tp)[0]
        return tuple(decode_record(inner, v, f"{where}[{i}]") for i, v in enumerate(value))
    return value  # str, int, float, bool, a typed dict (the budget ledger): as written


@functools.cache
def _typed_fields(tp: type) -> tuple[tuple[Field[Any], Any], ...]:
    """A record's fields with their resolved type hints (resolved once per class)."""
    hints = get_type_hints(tp)
    return tuple((f, hints[f.name]) for f in fields(tp))


# One read of state.json per unit of work (issue 14): the text of the checkpoint this process
# last read or wrote, keyed by the file's identity (inode, size, mtime: an atomic write is a new
# inode); every load decodes a fresh TrainState from it, so a unit's mutations never reach the
# cache (decoding the text is several times cheaper than a deep copy of the decoded object).
_STATE_CACHE: dict[Path, tuple[tuple[int, int, int], str]] = {}


# Checkpoints still landing (save_state_behind): path → (the text being written, its task).
_LANDING: dict[Path, tuple[str, Future[None]]] = {}
_LANDING_LOCK = threading.Lock()
_COMMITTER = threading.local()  # set on the thread writing a checkpoint (it never waits for itself)
# every checkpoint task whose outcome is not yet reported, with its state file
_INFLIGHT: list[tuple[Path, Future[None]]] = []
_REPORTED: list[BaseException] = []  # the last errors raised (each is raised once)


def wait_for_commits() -> None:
    """Block until every checkpoint still landing has landed; raise the first one's error (the
    unit it checkpointed then did not commit: a resume re-runs it)."""
    if getattr(_COMMITTER, "active", False):
        return
    with _LANDING_LOCK:
        futures = [f for _, f in _INFLIGHT]
    errors = [e for f in futures if (e := f.exception()) is not None]  # waits, in order
    with _LANDING_LOCK:
        _INFLIGHT[:] = [(p, f) for p, f in _INFLIGHT if not any(f is g for g in futures)]
    _raise_new(errors)


def _failed_landings(key: Path) -> list[BaseException]:
    """The errors of checkpoint tasks that have already failed (no wait); the finished tasks
    of ``key`` (a state file) and the ones that landed leave :data:`_INFLIGHT`; another
    workspace's failure stays for :func:`wait_for_commits`. Call with ``_LANDING_LOCK`` held."""
    done = [(p, f) for p, f in _INFLIGHT if f.done()]  # one read: a task finishing now stays
    _INFLIGHT[:] = [
        (p, f)
        for p, f in _INFLIGHT
        if not any(f is g for _, g in done) or (p != key and f.exception() is not None)
    ]
    return [e for p, f in done if p == key and (e := f.exception()) is not None]


def _raise_new(errors: list[BaseException]) -> None:
    """Raise the first of ``errors`` not raised before (each failure is raised once)."""
    with _LANDING_LOCK:
        new = [e for e in errors if not any(e is r for r in _REPORTED)]
        _REPORTED[:] = [*_REPORTED, *new][-8:]
    if new:
        raise new[0]


before_every_write(wait_for_commits)


def read_state_text(path: Path) -> str:
    """The text of a ``state.json``; bytes that are not UTF-8 are a :class:`CheckpointError`."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {e.start})") from None


def parse_state_json(text: str, path: Path) -> dict[str, Any]:
    """The JSON object of a ``state.json`` text; :class:`CheckpointError` naming the file for
    anything else (a truncated or hand-edited file is a message, not a traceback)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def read_state_file(path: Path) -> TrainState:
    """The checkpoint at ``path`` as written, not checked against a config (reports; deciding
    whether a finished run has anything left): every corruption a :class:`CheckpointError`."""
    return state_from_dict(parse_state_json(read_state_text(path), path), str(path))


def load_state(path: Path, cfg: RunConfig) -> TrainState | None:
    """The checkpoint at ``path`` (None if there is none), checked against ``cfg``; a checkpoint
    of this process still landing (:func:`save_state_behind`) is read from memory."""
    with _LANDING_LOCK:
        landing = _LANDING.get(path.absolute())
        failed = _failed_landings(path.absolute())
    # A checkpoint of this process that failed to land: the file is behind the units this
    # process ran, so planning from it would run a unit again in this process (rolling back
    # what it wrote). Its error is raised here, before anything is planned; a resume starts
    # from the file.
    _raise_new(failed)
    if landing is not None:
        text: str | None = landing[0]
    else:
        key = file_identity(path)
        if key is None:
            return None
        cached = _STATE_CACHE.get(path.absolute())
        text = cached[1] if cached is not None and cached[0] == key else None
        if text is None:
            text = read_state_text(path)
        _STATE_CACHE[path.absolute()] = (key, text)
    assert text is not None
    state = state_from_dict(parse_state_json(text, path), str(path))
    if state.structural_fingerprint != cfg.structural_fingerprint():
        changed = _structural_changes(path, state.structural_fingerprint, cfg)
        raise CheckpointError(
            f"{path}: the checkpoint was written with a different structural configuration "
            f"(fingerprint {state.structural_fingerprint}, now {cfg.structural_fingerprint()}"
            f"{'; ' + '; '.join(changed) if changed else ''}): "
            "seed, data, pool sizes or batching changed, so the saved pools, batches and "
            "correctness no longer apply. Resume with the original config or start a new workspace."
        )
    if state.config_fingerprint != cfg.fingerprint():
        where, drift = str(path.absolute()), (state.config_fingerprint, cfg.fingerprint())
        if _DRIFT_TOLD.get(where) != drift:  # the planner and the unit both load: tell it once
            _DRIFT_TOLD[where] = drift
            warnings.warn(
                drift_message(path, state.config_fingerprint, cfg),
                ConfigDriftWarning,
                stacklevel=2,
            )
        state.config_fingerprint = cfg.fingerprint()
    return state


def _structural_changes(path: Path, fingerprint: str, cfg: RunConfig) -> list[str]:
    """``key: old → new`` for the structural keys, when the workspace's own ``config.yaml`` (the
    config it was created with) is the one the checkpoint was written with; else nothing (the
    refusal then names the fingerprints only)."""
    from trm_assets.harness.data.config import STRUCTURAL_FIELDS, load_config

    try:
        old = load_config(path.parent / "config.yaml", environ={}, dotenv_path=None)
    except Exception:  # informational only: an unreadable or edited file names no key
        return []
    if old.structural_fingerprint() != fingerprint:
        return []
    fields = set(STRUCTURAL_FIELDS)
    return changed_settings(
        old.model_dump(mode="json", include=fields), cfg.model_dump(mode="json", include=fields)
    )


#: The drift last told per checkpoint in this process: the same drift loaded again is not told
#: again, any other one is (A → B, B → A, A → B in a long-lived process: three warnings).
_DRIFT_TOLD: dict[str, tuple[str, str]] = {}


#: Next to ``state.json``: the decision-relevant values of every config a unit of this workspace
#: ran with, keyed by fingerprint, so a drift warning names the keys that changed. Informational
#: (no decision reads it): a missing or unreadable file only makes the warning less specific.
DECISION_CONFIGS_FILE: Final = "decision-configs.json"
_DECISION_CONFIGS_FORMAT: Final = "trm.decision_configs/1"
_DECISION_CONFIGS_KEPT: Final = 32  # the most recent configs; an older one names no keys
_DRIFT_KEYS_SHOWN: Final = 8


def decision_configs(state_path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((state_path.parent / DECISION_CONFIGS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    entries = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [
        e
        for e in entries
        if isinstance(e, dict)
        and isinstance(e.get("fingerprint"), str)
        and isinstance(e.get("values"), dict)
    ]


def record_decision_config(state_path: Path, cfg: RunConfig) -> None:
    """Add ``cfg``'s decision values to :data:`DECISION_CONFIGS_FILE` unless they are there
    (a unit opening, under the workspace lock; written once per config, not per unit)."""
    fp = cfg.fingerprint()
    entries = decision_configs(state_path)
    if any(e["fingerprint"] == fp for e in entries):
        return
    entries = [*entries, {"fingerprint": fp, "values": cfg.decision_values()}]
    body = {"format": _DECISION_CONFIGS_FORMAT, "configs": entries[-_DECISION_CONFIGS_KEPT:]}
    atomic_write_text(state_path.parent / DECISION_CONFIGS_FILE, json_text(body))


_UNSET: Final = object()


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old → new`` for every setting that differs (nested ones dotted, ``sim.ability``),
    in key order; a key on one side only shows ``unset`` on the other."""
    out: list[str] = []

    def walk(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str) -> None:
        for key in sorted(set(a) | set(b)):
            x, y = a.get(key, _UNSET), b.get(key, _UNSET)
            if isinstance(x, Mapping) and isinstance(y, Mapping):
                walk(x, y, f"{prefix}{key}.")
            elif x != y:
                out.append(f"{prefix}{key}: {_shown(x)} → {_shown(y)}")

    walk(old, new, "")
    return out


def _shown(value: Any) -> str:
    return "unset" if value is _UNSET else json.dumps(value, sort_keys=True)


def drift_message(path: Path, old_fingerprint: str, cfg: RunConfig) -> str:
    """The drift warning: the changed keys with both values when the earlier config is on
    record (:data:`DECISION_CONFIGS_FILE`), else the two fingerprints."""
    new_fp = cfg.fingerprint()
    old = next(
        (e["values"] for e in decision_configs(path) if e["fingerprint"] == old_fingerprint),
        None,
    )
    changes = changed_settings(old, cfg.decision_values()) if old is not None else []
    if changes:
        more = len(changes) - _DRIFT_KEYS_SHOWN
        what = ", ".join(changes[:_DRIFT_KEYS_SHOWN]) + (f" and {more} more" if more > 0 else "")
    else:
        what = f"fingerprint {old_fingerprint} → {new_fp}; the earlier values are not on record"
    return (
        f"{path}: decision-relevant settings changed since the checkpoint ({what}); "
        "resuming with the new values"
    )


def save_state(path: Path, state: TrainState, workspace: Path) -> None:
    """Checkpoint: record the workspace mark, sync what the unit wrote new with its sync
    deferred (:func:`~trm_assets.harness.storage.atomic.deferred_sync`), then write
    ``state.json`` atomically."""
    wait_for_commits()
    state.workspace_mark = workspace_mark(workspace)
    fsync_paths(take_unsynced())
    _write_state(path, json_text(state_to_dict(state)))


def _write_state(path: Path, text: str) -> None:
    _STATE_CACHE.pop(path.absolute(), None)
    atomic_write_text(path, text)
    key = file_identity(path)
    if key is not None:
        _STATE_CACHE[path.absolute()] = (key, text)


def save_state_behind(path: Path, state: TrainState, workspace: Path, log: RunLog) -> None:
    """The same checkpoint, landing behind the caller (``docs/decision-commit-behind.md``): the
    workspace mark and the text are taken now; the run log's flush and the atomic write of
    ``state.json`` run on the run log's writer thread, in that order. Until they have landed,
    :func:`load_state` reads this text from memory, every atomic write of the process waits
    (:func:`wait_for_commits`), and the run log writes the next rows after them — so the next
    unit can open and send its first model calls, but nothing of it is durable before this
    checkpoint is. A kill before it lands resumes this unit, as a kill inside a commit did.
    Checkpoints land in the order they were taken (the writer thread takes its tasks in
    order), so this one does not wait for the one before."""
    state.workspace_mark = workspace_mark(workspace)
    text = json_text(state_to_dict(state))
    key = path.absolute()
    unsynced = take_unsynced()

    def land() -> None:
        _COMMITTER.active = True
        try:
            fsync_paths(unsynced)
            _write_state(path, text)
        finally:
            _COMMITTER.active = False

    with _LANDING_LOCK:
        fut = log.commit_behind(land)
        _LANDING[key] = (text, fut)
        _INFLIGHT.append((key, fut))  # its error is raised even if a later checkpoint replaces it

    def landed(f: Future[None]) -> None:  # landed or failed: the file is the truth again
        with _LANDING_LOCK:
            if key in _LANDING and _LANDING[key][1] is f:
                del _LANDING[key]

    fut.add_done_callback(landed)


# ------------------------------------------------------------------------------------------------
# Workspace mark: roll back a half-finished unit of work


def workspace_mark(workspace: Path) -> dict[str, Any]:
    m = read_manifest(workspace)
    skills_root, prompts_root = store_roots(workspace)
    return {
        "skills_latest": _latest_number(skills_root),
        "prompts_latest": _latest_number(prompts_root),
        "history_len": len(m.history),
        "current": m.current.model_dump(),
        "best": m.best.model_dump() if m.best is not None else None,
    }


def _latest_number(root: Path) -> int:
    versions = list_versions(root)
    return parse_version(versions[-1]) if versions else 0


def restore_workspace_to_mark(workspace: Path, mark: Mapping[str, Any]) -> list[str]:
    """Undo what a killed unit of work left behind after the checkpoint: versions created after
    it (never referenced by the checkpoint), manifest pointers and history entries. Returns what
    was removed (empty when the workspace is already at the mark)."""
    if not mark:
        return []
    removed: list[str] = []
    skills_root, prompts_root = store_roots(workspace)
    for root, key in ((skills_root, "skills_latest"), (prompts_root, "prompts_latest")):
        for v in list_versions(root):
            if parse_version(v) > int(mark[key]):
                shutil.rmtree(root / v)
                removed.append(f"{root.name}/{v}")
    m = read_manifest(workspace)
    best = BestPointer(**mark["best"]) if mark["best"] is not None else None
    restored = m.model_copy(
        update={
            "current": VersionPair(**mark["current"]),
            "best": best,
            # a `trm eval` run between units is not the killed unit's: it stays
            "history": [
                *m.history[: int(mark["history_len"])],
                *(h for h in m.history[int(mark["history_len"]) :] if is_eval_command_kind(h.kind)),
            ],
        }
    )
    if restored != m:
        write_manifest(workspace, restored)
        removed.append("manifest entries")
    return removed


def open_unit(
    workspace: Path, state_path: Path, cfg: RunConfig, cache_dir: Path, run_prefix: str
) -> TrainState:
    """Load the checkpoint for a unit of work and roll the workspace back to it: versions,
    manifest pointers/history and baseline-cache entries (runs starting with ``run_prefix``)
    left by a previous attempt of this unit that was killed half-way."""
    from trm_assets.harness.storage.cache_store import purge_cache_runs

    state = load_state(state_path, cfg)
    if state is None:
        raise CheckpointError(
            f"{state_path}: no training state; run `trm train` (which initialises it) first"
        )
    restore_workspace_to_mark(workspace, state.workspace_mark)
    purge_cache_runs(cache_dir, run_prefix)
    # Issue 18.5: a deleted or hand-edited version the loop will decide with is found here, at
    # the start of the unit, not after the unit's work (the slow update reads best at the end).
    verify_referenced_versions(workspace, state)
    check_run_log(workspace)  # issue 18.6: a foreign or lost run log, before it is trusted
    return state


def referenced_versions(workspace: Path, state: TrainState | None) -> list[tuple[str, str, str]]:
    """(who refers, store kind, version) for every version the manifest and the checkpoint
    point at: current, best, the baseline, the epoch start, probation anchors, the seed eval."""
    m = read_manifest(workspace)
    refs: list[tuple[str, str, str]] = [
        ("manifest.json current", "skills", m.current.skills),
        ("manifest.json current", "prompts", m.current.prompts),
    ]
    if m.best is not None:
        refs += [("manifest.json best", "skills", m.best.skills)]
        refs += [("manifest.json best", "prompts", m.best.prompts)]
    if state is not None:
        pairs: list[tuple[str, Mapping[str, Any] | None]] = [
            (
                "state.json baseline",
                {
                    "skills": state.baseline_skills_version,
                    "prompts": state.baseline_prompts_version,
                },
            ),
            ("state.json epoch_start_versions", state.epoch_start_versions),
            ("state.json epoch_start_best", state.epoch_start_best),
        ]
        if state.seed_eval is not None:
            pairs.append(
                (
                    "state.json seed_eval",
                    {
                        "skills": state.seed_eval.skills_version,
                        "prompts": state.seed_eval.prompts_version,
                    },
                )
            )
        for name, p in sorted(state.probations.items()):
            pairs.append(
                (
                    f"state.json probation of {name}",
                    {"skills": p.anchor_skills_version, "prompts": p.anchor_prompts_version},
                )
            )
        for who, pair in pairs:
            for kind in ("skills", "prompts"):
                v = (pair or {}).get(kind)
                if isinstance(v, str):
                    refs.append((who, kind, v))
    seen: set[tuple[str, str]] = set()
    out = []
    for who, kind, v in refs:
        if (kind, v) not in seen:
            seen.add((kind, v))
            out.append((who, kind, v))
    return out


def verify_referenced_versions(workspace: Path, state: TrainState | None) -> None:
    """Every referenced version (:func:`referenced_versions`) exists and matches its hashes;
    raises :class:`~trm_assets.harness.storage.versions.IntegrityError` naming the reference."""
    skills_root, prompts_root = store_roots(workspace)
    for who, kind, version in referenced_versions(workspace, state):
        root = skills_root if kind == "skills" else prompts_root
        try:
            verify_version(root, version)
        except StoreError as e:
            raise IntegrityError(
                f"{workspace}: {who} refers to {kind} version {version}, which is unusable: {e}"
            ) from None

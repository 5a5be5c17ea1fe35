"""One experiment's directory: manifest, versioned skills/prompts, runs (seed §6, SPEC §6).

Layout (``docs/decision-store-layout.md``)::

    <workspace>/
      manifest.json          current + best pointers, run history, questions ref, seed
      config.yaml            the resolved config the workspace was created with (informational)
      store/skills/vN/       immutable skill versions (trm_assets.harness.storage.versions)
      store/prompts/vN/      immutable prompt versions (agent system prompt, tools/, evolve prompts)
      runs/<run_id>/         one directory per recorded run
      runs.duckdb            the run log
      pools.json, ladder.json, state.json, baseline_cache/, tmp/   (owned by the training loop)
      decision-configs.json  each config's decision values, so a drift warning names keys

The workspace has no mutable working copy of the skills: :func:`resolve_paths` points at the
immutable directories of the *current* versions, and advancing a version moves the pointer.

The manifest holds no wall-clock time, so two runs that made the same decisions write the same
manifest (resume equivalence, SPEC 5.7); times live in version meta only.

Why it is long: it owns the manifest (its models, the cached read, the atomic write) and every
operation that moves a pointer in it — current, best, run records, advancing and reverting versions,
creating a workspace from the prompt set or a seed, promoting a version to a seed — so the
manifest's invariants are enforced in one module.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Unpack

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trm_assets.domain.edits import resolve_skill_file
from trm_assets.domain.errors import TrmError
from trm_assets.harness.storage.atomic import (
    RESUME_ADVICE,
    StorageWriteError,
    atomic_write_json,
    atomic_write_text,
    file_identity,
)
from trm_assets.harness.storage.lock import LOCK_FILE, workspace_lock
from trm_assets.harness.storage.runlog import DEFAULT_TEXT_CAP_BYTES, MissingRunLogError, RunLog
from trm_assets.harness.storage.versions import (
    Seed,
    SeedRef,
    StoreError,
    VersionMeta,
    VersionNote,
    advance_version,
    check_relative_name,
    parse_json_model,
    parse_version,
    promote_to_seed,
    read_seed,
    read_tree,
    read_version_files,
    version_dir,
    write_version,
)

MANIFEST_FILE = "manifest.json"
RUN_DB_FILE = "runs.duckdb"
SKILLS_SUBDIR = "skills"  # inside prompts/ of the repository: the seed skills
StoreKind = Literal["skills", "prompts"]
INIT_COMMAND = "trm init"
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class WorkspaceError(TrmError):
    """A workspace that is missing, not initialised, or whose manifest is invalid."""


def default_prompts_dir() -> Path:
    """The repository's ``prompts/`` (the product's prompt set: v1 of every fresh workspace)."""
    return Path(__file__).resolve().parents[3] / "prompts"


# ------------------------------------------------------------------------------------------------
# Manifest


def _check_version(v: str) -> str:
    try:
        parse_version(v)
    except StoreError as e:
        raise ValueError(str(e)) from None
    return v


class VersionPair(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    skills: str
    prompts: str

    _v = field_validator("skills", "prompts")(_check_version)


class BestPointer(BaseModel):
    """The best (skills, prompts) pair so far; independent of ``current`` (seed §6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    skills: str
    prompts: str
    val_accuracy: float | None = None
    run_id: str | None = None

    _v = field_validator("skills", "prompts")(_check_version)


class RunRecord(BaseModel):
    """One entry of the run history: the run id and the versions it ran with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    skills_version: str | None
    prompts_version: str | None
    kind: str | None = None


class Manifest(BaseModel):
    """``manifest.json``. Every field is required on read (a missing key is corruption), except
    ``workspace_id``, absent from workspaces created before identities existed (issue 18.6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1]
    current: VersionPair
    best: BestPointer | None
    history: list[RunRecord]
    questions_ref: str
    seed: SeedRef | None
    config_fingerprint: str | None
    # A random id made by `trm init`, recorded in the run log too: a run log copied from another
    # workspace, or a deleted one, is detected instead of trusted or silently re-created. Not a
    # result: two workspaces that made the same decisions differ only here.
    workspace_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")

    def run(self, run_id: str) -> RunRecord | None:
        for r in self.history:
            if r.run_id == run_id:
                return r
        return None


#: The training loop's run ids (``LoopContext.base``): train_init, train_e{E}_s{S},
#: train_e{E}_s{S}_gate_<skill>_base, …
RUN_BASE: Final = "train"


def runs_past_init(manifest: Manifest) -> list[str]:
    """Training runs recorded after the init unit (steps, gates, slow updates): each can only
    start from a committed ``state.json``, so with the state missing they mean it was lost."""
    return [r.run_id for r in manifest.history if r.run_id.startswith(f"{RUN_BASE}_e")]


def lost_state_message(state_path: Path, runs: list[str]) -> str:
    return (
        f"{state_path}: missing, but the workspace trained past its start ({len(runs)} "
        f"training run(s) recorded, the last {runs[-1]}): the training state cannot be "
        "rebuilt from the skills (a new start would evaluate evolved skills as the seed). "
        "Restore state.json from a backup, or start over with `trm init` on a new workspace"
    )


def manifest_path(workspace: str | Path) -> Path:
    return Path(workspace) / MANIFEST_FILE


# One read of manifest.json per unit of work (issue 14): the manifest this process last read or
# wrote, keyed by the file's identity (inode, size, mtime). An atomic write replaces the file (a
# new inode), so any other writer's change — or a hand edit — is seen at the next read.
_MANIFEST_CACHE: dict[Path, tuple[tuple[int, int, int], Manifest]] = {}


def read_manifest(workspace: str | Path) -> Manifest:
    path = manifest_path(workspace)
    ws = Path(workspace)
    if ws.exists() and not ws.is_dir():
        raise WorkspaceError(f"{ws}: exists and is not a directory; a workspace is a directory")
    key = file_identity(path)
    cached = _MANIFEST_CACHE.get(path.absolute())
    if key is not None and cached is not None and cached[0] == key:
        return cached[1]
    manifest = _read_manifest_file(path, workspace)
    if key is not None:
        _MANIFEST_CACHE[path.absolute()] = (key, manifest)
    return manifest


def _read_manifest_file(path: Path, workspace: str | Path) -> Manifest:
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise WorkspaceError(
            f"{path}: not found; {workspace} is not an initialised workspace "
            "(create one with `trm init --workspace DIR --config FILE`)"
        ) from None
    except UnicodeDecodeError:
        raise WorkspaceError(f"{path}: not UTF-8 text (not a manifest)") from None
    except OSError as e:
        raise WorkspaceError(f"{path}: cannot be read ({e.strerror})") from None
    return parse_json_model(path, text, Manifest, "invalid manifest", WorkspaceError)


def write_manifest(workspace: str | Path, manifest: Manifest) -> None:
    path = manifest_path(workspace)
    _MANIFEST_CACHE.pop(path.absolute(), None)
    atomic_write_json(path, manifest.model_dump(mode="json"))
    key = file_identity(path)
    if key is not None:
        _MANIFEST_CACHE[path.absolute()] = (key, manifest)


# ------------------------------------------------------------------------------------------------
# Paths


@dataclass(frozen=True)
class ResolvedPaths:
    """Every path of a workspace, with the skills/prompts directories of the current versions.

    ``skills_dir``/``prompts_dir`` are immutable version directories: never write into them;
    create a new version instead (:func:`advance_current`).
    """

    workspace: Path
    skills_version: str
    prompts_version: str
    skills_dir: Path  # store/skills/<skills_version>
    prompts_dir: Path  # store/prompts/<prompts_version>
    skills_root: Path  # store/skills (all versions)
    prompts_root: Path  # store/prompts
    manifest: Path
    runs_dir: Path  # runs/<run_id>/
    run_db: Path  # runs.duckdb
    pools: Path
    ladder: Path
    state: Path
    baseline_cache: Path
    tmp_dir: Path  # unique temp dirs for candidates are created under here
    config: Path

    def store_root(self, kind: StoreKind) -> Path:
        return self.skills_root if kind == "skills" else self.prompts_root


def store_roots(workspace: str | Path) -> tuple[Path, Path]:
    ws = Path(workspace)
    return ws / "store" / "skills", ws / "store" / "prompts"


def resolve_paths(workspace: str | Path) -> ResolvedPaths:
    """Resolve a workspace's paths from its manifest (the current versions must exist)."""
    ws = Path(workspace)
    m = read_manifest(ws)
    skills_root, prompts_root = store_roots(ws)
    try:
        skills_dir = version_dir(skills_root, m.current.skills)
        prompts_dir = version_dir(prompts_root, m.current.prompts)
    except StoreError as e:
        raise WorkspaceError(f"{manifest_path(ws)}: current pointer is broken: {e}") from None
    return ResolvedPaths(
        workspace=ws,
        skills_version=m.current.skills,
        prompts_version=m.current.prompts,
        skills_dir=skills_dir,
        prompts_dir=prompts_dir,
        skills_root=skills_root,
        prompts_root=prompts_root,
        manifest=manifest_path(ws),
        runs_dir=ws / "runs",
        run_db=ws / RUN_DB_FILE,
        pools=ws / "pools.json",
        ladder=ws / "ladder.json",
        state=ws / "state.json",
        baseline_cache=ws / "baseline_cache",
        tmp_dir=ws / "tmp",
        config=ws / "config.yaml",
    )


# ------------------------------------------------------------------------------------------------
# Pointers and history


def update_current(
    workspace: str | Path, *, skills: str | None = None, prompts: str | None = None
) -> Manifest:
    """Move the current pointer(s); each named version must exist in the store."""
    ws = Path(workspace)
    m = read_manifest(ws)
    skills_root, prompts_root = store_roots(ws)
    new = VersionPair(
        skills=_existing(skills_root, skills) if skills else m.current.skills,
        prompts=_existing(prompts_root, prompts) if prompts else m.current.prompts,
    )
    m2 = m.model_copy(update={"current": new})
    write_manifest(ws, m2)
    return m2


def update_best(
    workspace: str | Path,
    *,
    skills: str,
    prompts: str,
    val_accuracy: float | None = None,
    run_id: str | None = None,
) -> Manifest:
    """Set the best pointer (may name a stored version that is not current). Deciding *whether*
    it is better (strictly greater accuracy, SPEC 5.6 step 5) is the caller's job."""
    ws = Path(workspace)
    m = read_manifest(ws)
    skills_root, prompts_root = store_roots(ws)
    best = BestPointer(
        skills=_existing(skills_root, skills),
        prompts=_existing(prompts_root, prompts),
        val_accuracy=val_accuracy,
        run_id=run_id,
    )
    m2 = m.model_copy(update={"best": best})
    write_manifest(ws, m2)
    return m2


def read_best(workspace: str | Path) -> BestPointer | None:
    return read_manifest(workspace).best


def _existing(root: Path, version: str) -> str:
    try:
        version_dir(root, version)
    except StoreError as e:
        raise WorkspaceError(str(e)) from None
    return version


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
        raise WorkspaceError(
            f"run id {run_id!r}: expected letters, digits, '.', '_' or '-' (it names a directory)"
        )
    return run_id


#: The ``kind`` of the runs `trm eval` records (``eval_<pool>``): a command between units of
#: work, not part of one, so rolling a killed unit back keeps them (``restore_workspace_to_mark``).
EVAL_COMMAND_KIND = "eval_"


def eval_command_kind(pool: str) -> str:
    return f"{EVAL_COMMAND_KIND}{pool}"


def is_eval_command_kind(kind: str | None) -> bool:
    return (kind or "").startswith(EVAL_COMMAND_KIND)


def record_run(
    workspace: str | Path,
    run_id: str,
    *,
    skills_version: str | None = None,
    prompts_version: str | None = None,
    kind: str | None = None,
    use_current: bool = True,
) -> RunRecord:
    """Append ``run_id`` to the history (with the current versions unless given) and create
    ``runs/<run_id>/``. Idempotent: a run id already in the history is returned unchanged (the
    first record wins) and its directory is created with ``exist_ok``."""
    ws = Path(workspace)
    check_run_id(run_id)
    m = read_manifest(ws)
    rec = RunRecord(
        run_id=run_id,
        skills_version=skills_version or (m.current.skills if use_current else None),
        prompts_version=prompts_version or (m.current.prompts if use_current else None),
        kind=kind,
    )
    # A missing or tampered version (symlink, non-UTF-8 file) fails here, before anything of the
    # run is written (issue 9: no partial writes on bad input).
    skills_root, prompts_root = store_roots(ws)
    for root, version in ((skills_root, rec.skills_version), (prompts_root, rec.prompts_version)):
        if version is not None:
            read_version_files(root, version)
    (ws / "runs" / run_id).mkdir(parents=True, exist_ok=True)
    existing = m.run(run_id)
    if existing is not None:
        return existing
    # The run log exists (with this workspace's identity) before the history says a run was
    # recorded, so "history but no run log" always means a lost run log (issue 18.6).
    if not (ws / RUN_DB_FILE).exists() and not RunLog.is_open(ws / RUN_DB_FILE):
        open_run_log(ws).close()
    write_manifest(ws, m.model_copy(update={"history": [*m.history, rec]}))
    return rec


# ------------------------------------------------------------------------------------------------
# The run log of a workspace (identity, issue 18.6)


def new_workspace_id() -> str:
    """A random identity (not a seeded choice: it never influences a result)."""
    return uuid.uuid4().hex


def open_run_log(workspace: str | Path, *, text_cap_bytes: int = DEFAULT_TEXT_CAP_BYTES) -> RunLog:
    """The process's writer of the workspace's run log, bound to the workspace's identity: a run
    log of another workspace is refused, and a missing one is refused once runs were recorded
    (never re-created empty). ``text_cap_bytes``: the config's ``run_log_text_cap_bytes``."""
    ws = Path(workspace)
    m = read_manifest(ws)
    return RunLog.open(
        ws / RUN_DB_FILE,
        workspace_id=m.workspace_id,
        must_exist=bool(m.history),
        text_cap_bytes=text_cap_bytes,
    )


def check_run_log(workspace: str | Path) -> None:
    """Refuse a foreign or missing run log without keeping a connection open (the start of a
    unit of work). A run log without an identity (older code) is given the workspace's."""
    ws = Path(workspace)
    m = read_manifest(ws)
    path = ws / RUN_DB_FILE
    if not path.exists():
        if m.history:
            raise MissingRunLogError(
                f"{path}: missing, but manifest.json records {len(m.history)} run(s); the run "
                "log is never re-created empty, which would drop every earlier prediction. "
                "Restore it from a backup, or start a new workspace (`trm init`)"
            )
        return
    if m.workspace_id is None:
        return  # a workspace older than identities: nothing to compare with
    if RunLog.is_open(path):
        RunLog.open(path, workspace_id=m.workspace_id)
        return
    with RunLog.open(path, workspace_id=m.workspace_id):
        pass


# ------------------------------------------------------------------------------------------------
# Versions


def advance_current(
    workspace: str | Path, kind: StoreKind, changes: Mapping[str, str], **note: Unpack[VersionNote]
) -> VersionMeta:
    """Write a new immutable version = current + ``changes`` and move the current pointer to it
    (``note``: the new version's reason, edits and extra meta).

    A crash between the two steps leaves an orphan version that is never current (harmless:
    ``next_version`` skips it) — never a current pointer to a missing version.
    """
    ws = Path(workspace)
    m = read_manifest(ws)
    root = store_roots(ws)[0 if kind == "skills" else 1]
    parent = m.current.skills if kind == "skills" else m.current.prompts
    meta = advance_version(root, parent, changes, **note)
    update_current(ws, **{kind: meta.version})
    return meta


def revert_files(
    workspace: str | Path,
    kind: StoreKind,
    from_version: str,
    names: Sequence[str] | None = None,
    *,
    reason: str,
    extra: Mapping[str, Any] | None = None,
) -> VersionMeta:
    """File-level revert (SPEC 5.6 step 4): a *new* current version whose ``names`` (default: every
    file) have the content they had in ``from_version``. History is never rewound; files that
    did not exist in ``from_version`` are an error (nothing to revert to)."""
    root = store_roots(workspace)[0 if kind == "skills" else 1]
    old = read_version_files(root, from_version)
    wanted = sorted(old) if names is None else sorted(names)
    missing = [n for n in wanted if n not in old]
    if missing:
        raise WorkspaceError(
            f"{root / from_version}: cannot revert {missing}: not in {kind} version {from_version}"
        )
    merged_extra = {"reverted_from": from_version, **dict(extra or {})}
    return advance_current(
        workspace, kind, {n: old[n] for n in wanted}, reason=reason, extra=merged_extra
    )


# ------------------------------------------------------------------------------------------------
# SkillStore / PromptStore (trm_assets.evolution.protocols) over resolved paths


class _VersionDirectory:
    """One immutable version directory of a store; reads are verified against its meta."""

    def __init__(self, directory: Path, version: str) -> None:
        self.directory = directory
        self._version = version

    @property
    def version(self) -> str:
        return self._version

    def _files(self) -> dict[str, str]:
        return read_version_files(self.directory.parent, self._version)

    def list_files(self) -> list[str]:
        raise NotImplementedError

    def _read(self, name: str, kind: str) -> str:
        text = self._files().get(name)
        if text is None:
            raise WorkspaceError(
                f"{self.directory / name}: not in {kind} version {self.version} (files: "
                f"{', '.join(self.list_files()) or 'none'})"
            )
        return text


class VersionedSkillStore(_VersionDirectory):
    """Skill files of one immutable version directory (``*.md``)."""

    def list_files(self) -> list[str]:
        return sorted(n for n in self._files() if "/" not in n and n.endswith(".md"))

    def read(self, name: str) -> str:
        resolve_skill_file(self.directory, name)  # refuses hostile names
        return self._read(name, "skills")


class VersionedPromptStore(_VersionDirectory):
    """Prompt files of one immutable version directory (relative paths, subdirectories allowed)."""

    def list_files(self) -> list[str]:
        return sorted(self._files())

    def read(self, name: str) -> str:
        return self._read(check_relative_name(name), "prompts")


def skill_store(paths: ResolvedPaths) -> VersionedSkillStore:
    return VersionedSkillStore(paths.skills_dir, paths.skills_version)


def prompt_store(paths: ResolvedPaths) -> VersionedPromptStore:
    return VersionedPromptStore(paths.prompts_dir, paths.prompts_version)


# ------------------------------------------------------------------------------------------------
# Creation


def read_prompt_set(prompts_dir: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """Split a prompts directory into (skills, prompts): ``skills/*.md`` vs everything else."""
    d = Path(prompts_dir)
    files = read_tree(d)
    skills = {
        name.split("/", 1)[1]: text
        for name, text in files.items()
        if name.startswith(f"{SKILLS_SUBDIR}/") and name.endswith(".md") and name.count("/") == 1
    }
    prompts = {n: t for n, t in files.items() if not n.startswith(f"{SKILLS_SUBDIR}/")}
    if not skills:
        raise WorkspaceError(
            f"{d / SKILLS_SUBDIR}: expected the seed skill files (*.md, one per task type plus "
            "default-strategy.md)"
        )
    for name in skills:
        try:
            resolve_skill_file(d / SKILLS_SUBDIR, name)  # refuse hostile names early
        except ValueError as e:
            raise WorkspaceError(f"{d / SKILLS_SUBDIR}: {e}") from None
    return skills, prompts


def _check_questions_ref(ref: str, what: str) -> str:
    if not Path(ref).is_file():
        raise WorkspaceError(
            f"{what}: questions file {ref!r} not found (relative paths are resolved from "
            f"{Path.cwd()}); fix the path or run from the directory the path is relative to"
        )
    return ref


def _holds_anything(workspace: Path) -> bool:
    """Whether a directory holds more than a workspace lock file (left by an interrupted init)."""
    return any(p.name != LOCK_FILE for p in workspace.iterdir())


def _check_target(workspace: Path) -> None:
    """Refuse a target that is a file, or a non-empty directory that is not a workspace."""
    if not workspace.exists():
        return
    if not workspace.is_dir():
        raise WorkspaceError(f"{workspace}: exists and is not a directory")
    if _holds_anything(workspace) and not manifest_path(workspace).is_file():
        raise WorkspaceError(
            f"{workspace}: not empty and not a workspace (no {MANIFEST_FILE}); refusing to move "
            "it aside — choose an empty or new directory"
        )


def _archive_existing(workspace: Path) -> Path | None:
    """Rename an existing workspace to ``<name>.archive-<k>`` (the caller holds its lock);
    returns the archive path, or None when there was nothing to move aside."""
    _check_target(workspace)
    if not workspace.exists() or not _holds_anything(workspace):
        return None
    k = 1
    while (archive := workspace.with_name(f"{workspace.name}.archive-{k}")).exists():
        k += 1
    os.rename(workspace, archive)
    return archive


@dataclass(frozen=True)
class InitResult:
    paths: ResolvedPaths
    archived: Path | None  # where a previous workspace was moved, if any


@dataclass(frozen=True)
class _NewWorkspace:
    """What a new workspace is made of: its ``v1`` files, questions, provenance and config."""

    skills: Mapping[str, str]
    prompts: Mapping[str, str]
    questions_ref: str
    reason: str
    extra: Mapping[str, Any]
    seed: SeedRef | None
    config_yaml: str | None
    config_fingerprint: str | None


def _create(workspace: Path, new: _NewWorkspace) -> InitResult:
    try:
        _check_target(workspace)  # before the lock: never leave a lock file in a foreign directory
    except WorkspaceError:
        if (workspace / LOCK_FILE).is_file():
            # another init writing it, not a foreign directory: say who (hostile pass: the loser
            # of two inits got "not empty and not a workspace")
            with workspace_lock(workspace, command=INIT_COMMAND):
                pass
        raise
    # One writer (issue 18.1): an existing workspace is moved aside only while nobody trains it
    # (its lock moves with it), and the new one is written under its own lock, taken before the
    # moved one is released (no moment in which another init could take the new directory).
    with workspace_lock(workspace, command=INIT_COMMAND, create=True):
        archived = _archive_existing(workspace)
        if archived is None:
            return InitResult(_write_new_or_nothing(workspace, new), None)
        with workspace_lock(workspace, command=INIT_COMMAND, create=True):
            return InitResult(_write_new_or_nothing(workspace, new), archived)


def _write_new_or_nothing(workspace: Path, new: _NewWorkspace) -> ResolvedPaths:
    """:func:`_write_new`, or nothing: on any failure (a full disk) what it wrote is removed,
    so `trm init` can simply run again (hostile pass: the leftovers made the directory "not
    empty and not a workspace", and the message said `trm train --resume`). Everything in the
    directory but its lock is this init's: the target was empty, or moved aside."""
    try:
        return _write_new(workspace, new)
    except BaseException as e:
        for p in workspace.iterdir():
            if p.name != LOCK_FILE:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        if isinstance(e, StorageWriteError):
            raise StorageWriteError(
                str(e).replace(RESUME_ADVICE, "run `trm init` again (it kept nothing)"),
                code=e.errno,
            ) from None
        raise


def _write_new(workspace: Path, new: _NewWorkspace) -> ResolvedPaths:
    skills_root, prompts_root = store_roots(workspace)
    s_meta = write_version(skills_root, new.skills, parent=None, reason=new.reason, extra=new.extra)
    p_meta = write_version(
        prompts_root, new.prompts, parent=None, reason=new.reason, extra=new.extra
    )
    if new.config_yaml is not None:
        atomic_write_text(workspace / "config.yaml", new.config_yaml)
    (workspace / "runs").mkdir(exist_ok=True)
    manifest = Manifest(
        format_version=1,
        current=VersionPair(skills=s_meta.version, prompts=p_meta.version),
        best=None,
        history=[],
        questions_ref=new.questions_ref,
        seed=new.seed,
        config_fingerprint=new.config_fingerprint,
        workspace_id=new_workspace_id(),
    )
    write_manifest(workspace, manifest)  # last: a workspace without a manifest is not one
    return resolve_paths(workspace)


def init_workspace(
    workspace: str | Path,
    *,
    questions_ref: str,
    prompts_dir: str | Path | None = None,
    config_yaml: str | None = None,
    config_fingerprint: str | None = None,
) -> InitResult:
    """A fresh workspace whose ``v1`` (skills and prompts) is the repository's prompt set.

    Every check (questions file, prompt set) runs before an existing workspace is archived.
    """
    ws = Path(workspace)
    _check_questions_ref(questions_ref, "trm init")
    src = Path(prompts_dir) if prompts_dir is not None else default_prompts_dir()
    skills, prompts = read_prompt_set(src)
    return _create(
        ws,
        _NewWorkspace(
            skills,
            prompts,
            questions_ref=questions_ref,
            reason="init: the repository's prompt set",
            extra={"source": str(src)},
            seed=None,
            config_yaml=config_yaml,
            config_fingerprint=config_fingerprint,
        ),
    )


def ensure_workspace(
    workspace: str | Path,
    *,
    questions_ref: str,
    prompts_dir: str | Path | None = None,
    config_yaml: str | None = None,
    config_fingerprint: str | None = None,
) -> ResolvedPaths:
    """The workspace's paths, creating it from the prompt set first if it has no manifest
    (``make run`` on a fresh checkout). An existing workspace is used as is, never re-created."""
    if manifest_path(workspace).is_file():
        return resolve_paths(workspace)
    return init_workspace(
        workspace,
        questions_ref=questions_ref,
        prompts_dir=prompts_dir,
        config_yaml=config_yaml,
        config_fingerprint=config_fingerprint,
    ).paths


def init_workspace_from_seed(
    workspace: str | Path,
    seed_name: str,
    *,
    seeds_dir: str | Path,
    questions_ref: str | None = None,
    config_yaml: str | None = None,
    config_fingerprint: str | None = None,
) -> InitResult:
    """A workspace whose ``v1`` is seed ``seed_name``'s (skills, prompts).

    Fail fast (seed §6): the seed (and its hashes), the questions file the seed was evaluated on
    (when recorded) and ``questions_ref`` (the config's, when given) are checked **before** an
    existing workspace is archived, so a missing file never costs the old workspace. The
    manifest's ``questions_ref`` is ``questions_ref``, else the seed's.
    """
    ws = Path(workspace)
    seed: Seed = read_seed(seeds_dir, seed_name)
    recorded = seed.meta.questions_ref
    if recorded is not None:
        _check_questions_ref(
            recorded, f"seed {seed_name!r} ({seed.directory}), the questions it was evaluated on"
        )
    if questions_ref is not None:
        _check_questions_ref(questions_ref, "the config's questions")
    ref = questions_ref or recorded
    if ref is None:
        raise WorkspaceError(
            f"seed {seed_name!r} records no questions file and none was given; pass the config "
            "whose `questions` the workspace should use"
        )
    ref_model = SeedRef.of(seed.meta)
    return _create(
        ws,
        _NewWorkspace(
            seed.skills,
            seed.prompts,
            questions_ref=ref,
            reason=f"init: seed {seed_name}",
            extra={"seed": seed_name},
            seed=ref_model,
            config_yaml=config_yaml,
            config_fingerprint=config_fingerprint,
        ),
    )


def promote_version(
    workspace: str | Path,
    *,
    version: str,
    eval_run_id: str,
    name: str,
    seeds_dir: str | Path,
) -> Seed:
    """``trm promote``: make skills ``version`` of this workspace seed ``name`` (store rules)."""
    with workspace_lock(workspace, command="trm promote"):
        return _promote(workspace, version, eval_run_id, name, seeds_dir)


def _promote(
    workspace: str | Path, version: str, eval_run_id: str, name: str, seeds_dir: str | Path
) -> Seed:
    paths = resolve_paths(workspace)
    return promote_to_seed(
        seeds_dir=seeds_dir,
        name=name,
        version=version,
        eval_run_id=eval_run_id,
        run_db=paths.run_db,
        skills_root=paths.skills_root,
        prompts_root=paths.prompts_root,
        source=str(paths.workspace),
    )

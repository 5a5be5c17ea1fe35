"""Immutable numbered versions of a text directory, and named seeds (seed §5, SPEC §6).

A *version root* is a directory holding ``v1/``, ``v2/``, … — one per version of the skills
directory, or of the prompts directory. A version never changes once written: a new version is
built in a temp directory beside the root and renamed into place in one step, so a crash leaves
either no version or a complete one (never a partial one). Each version carries its meta in
``_meta.json`` *inside* the version directory (parent, reason, edits with their apply report,
per-file content hashes, time), so the meta is part of the same atomic rename.

Versions sort numerically (``v10`` after ``v2``); ``next_version`` is the latest + 1.

A *seed* is a named (skills, prompts) pair promoted from an evaluation run whose recorded versions
match, together with that run's records, extracted from the run database with the original table
definitions (primary keys kept). Seeds live in a seeds directory shared across workspaces.

Layout (``docs/decision-store-layout.md``)::

    <version root>/v1/_meta.json, v1/<files…>, v2/…
    <seeds dir>/<name>/seed.json, skills/<files…>, prompts/<files…>, run.duckdb

This module is the stable, cross-experiment infrastructure;
:mod:`trm_assets.harness.storage.workspace` builds on it (never the other way round).

Why it is long: it is the whole immutable store — version names, content hashes and their
verification, the meta, atomic version writes and derivation, and the seed store built on the same
primitives; they share the hash and atomic-write rules that every other storage module relies on.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Required, TypedDict, TypeVar, Unpack

import duckdb
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trm_assets.domain.errors import TrmError, describe_validation_error
from trm_assets.evolution.types import text_hash
from trm_assets.harness.storage.atomic import (
    atomic_write_json,
    json_text,
    run_before_write,
    storage_error,
    sync_later,
)

META_FILE = "_meta.json"
SEED_FILE = "seed.json"
SEED_RUN_DB = "run.duckdb"
_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TMP_PREFIX = ".tmp-"
_Model = TypeVar("_Model", bound=BaseModel)


class StoreError(TrmError):
    """A version or seed that is missing, malformed or would be overwritten."""


# ------------------------------------------------------------------------------------------------
# Version names


def parse_version(name: str) -> int:
    """``"v12"`` → 12. Only ``v`` followed by a positive integer without leading zeros is valid."""
    m = _VERSION_RE.match(name) if isinstance(name, str) else None
    if m is None:
        raise StoreError(
            f"version {name!r}: expected 'v' followed by a positive number (v1, v2, … v10)"
        )
    return int(m.group(1))


def format_version(number: int) -> str:
    if number < 1:
        raise StoreError(f"version number {number}: expected >= 1")
    return f"v{number}"


def list_versions(root: str | Path) -> list[str]:
    """The versions under ``root`` in numeric order (``v2`` before ``v10``).

    Anything that is not a ``v<number>`` directory (temp dirs of an interrupted write, stray
    files) is ignored.
    """
    r = Path(root)
    if not r.is_dir():
        return []
    found = [p.name for p in r.iterdir() if p.is_dir() and _VERSION_RE.match(p.name)]
    return sorted(found, key=parse_version)


def latest_version(root: str | Path) -> str | None:
    versions = list_versions(root)
    return versions[-1] if versions else None


def next_version(root: str | Path) -> str:
    """The latest version + 1 (``v1`` for an empty root). Gaps are never filled."""
    latest = latest_version(root)
    return format_version(1 if latest is None else parse_version(latest) + 1)


def version_dir(root: str | Path, version: str) -> Path:
    """The directory of an existing version; a missing one is an error naming the known ones."""
    parse_version(version)
    d = Path(root) / version
    if not d.is_dir():
        known = list_versions(root)
        shown = ", ".join(known[-10:]) if known else "none"
        raise StoreError(
            f"{d}: version {version} does not exist (known versions under {root}: {shown})"
        )
    return d


# ------------------------------------------------------------------------------------------------
# Content


def content_hashes(files: Mapping[str, str]) -> dict[str, str]:
    """Per-file content hashes, keyed by relative path, sorted."""
    return {name: text_hash(files[name]) for name in sorted(files)}


def tree_hash(files: Mapping[str, str]) -> str:
    """One hash over a whole directory's content (names and texts)."""
    return _hash_of_hashes(content_hashes(files))


def _hash_of_hashes(hashes: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(hashes):
        h.update(f"{name}\0{hashes[name]}\n".encode())
    return h.hexdigest()


def check_relative_name(name: str, *, where: str = "file name") -> str:
    """A safe relative POSIX path inside a version: no absolute path, no ``..``, no backslash."""
    p = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or "\0" in name
        or p.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or name == META_FILE
        or p.parts[0].startswith(".")
    ):
        raise StoreError(
            f"{where} {name!r}: expected a relative path inside the directory "
            f"(no leading '/', no '..', no hidden names, not {META_FILE!r})"
        )
    return p.as_posix()


def read_text_exact(path: Path) -> str:
    """A UTF-8 file's text without newline translation, so the hash of what is read equals the
    hash of what was written (``Path.read_text`` would turn ``\\r\\n`` into ``\\n``)."""
    return path.read_bytes().decode("utf-8")


def read_tree(directory: str | Path) -> dict[str, str]:
    """Every regular text file under ``directory`` as ``{relative posix path: text}``, sorted.

    Skips the version meta, hidden entries and temp files; refuses symbolic links (a version must
    hold its own content, never point outside itself).
    """
    base = Path(directory)
    if not base.is_dir():
        raise StoreError(f"{base}: expected a directory of text files")
    out: dict[str, str] = {}
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base)
        if any(part.startswith(".") for part in rel.parts) or rel.as_posix() == META_FILE:
            continue
        if path.is_symlink():
            raise StoreError(f"{path}: symbolic links are not allowed in a versioned directory")
        if path.is_file():
            try:
                out[rel.as_posix()] = read_text_exact(path)
            except UnicodeDecodeError:
                raise StoreError(f"{path}: expected a UTF-8 text file") from None
    return out


def read_version_files(root: str | Path, version: str) -> dict[str, str]:
    """The files of one version, ``{relative path: text}``, without its meta, **verified**
    against the per-file hashes of its ``_meta.json`` (:func:`verify_version`)."""
    return dict(_verified(root, version)[1])


def verify_version(root: str | Path, version: str) -> VersionMeta:
    """Check that a version holds exactly the files its meta lists, with their hashes.

    A file edited, added (``evil.md``) or removed after the version was written raises
    :class:`IntegrityError` naming the file and the version (issue 18.5: a hand edit must never
    change results silently). Cheap to repeat: a version whose files' (inode, size, mtime,
    ctime) are unchanged since it was last verified in this process is not hashed again.
    """
    return _verified(root, version)[0]


class IntegrityError(StoreError):
    """A version whose content no longer matches the hashes recorded when it was written."""


# Versions verified in this process: resolved directory -> (stat signature, meta, files). A
# signature that differs (any file touched, added or removed) re-reads and re-verifies.
_VERIFIED: OrderedDict[Path, tuple[tuple[Any, ...], VersionMeta, dict[str, str]]] = OrderedDict()
_VERIFIED_MAX = 512


def _signature(directory: Path) -> tuple[Any, ...]:
    """(relative path, mode, inode, size, mtime, ctime) of every entry, in a stable order.
    ``os.scandir`` keeps this at a few microseconds per file (it runs on every read)."""
    out: list[Any] = []
    pending = [("", os.fspath(directory))]
    while pending:
        prefix, path = pending.pop()
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                rel = prefix + entry.name
                out.append((rel, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
                if entry.is_dir(follow_symlinks=False):
                    pending.append((rel + "/", entry.path))
    out.sort()
    return tuple(out)


def _verified(root: str | Path, version: str) -> tuple[VersionMeta, dict[str, str]]:
    d = version_dir(root, version)
    key = d.resolve()
    sig = _signature(d)  # before reading: a change after this point re-verifies next time
    hit = _VERIFIED.get(key)
    if hit is not None and hit[0] == sig:
        _VERIFIED.move_to_end(key)
        return hit[1], hit[2]
    files = read_tree(d)
    meta = read_meta(root, version)
    problems = integrity_problems(d, Path(root).name, version, meta, files)
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if problems[1:] else ""
        raise IntegrityError(problems[0] + more)
    _VERIFIED[key] = (sig, meta, files)
    while len(_VERIFIED) > _VERIFIED_MAX:
        _VERIFIED.popitem(last=False)
    return meta, files


def integrity_problems(
    directory: Path, kind: str, version: str, meta: VersionMeta, files: Mapping[str, str]
) -> list[str]:
    """What differs between a version's files and its meta, one human line each."""
    meta_path = directory / META_FILE
    fix = (
        "versions are immutable: restore the original content (changed skills belong in a new "
        "workspace, `trm init`); `trm check WORKSPACE` lists every problem"
    )
    problems: list[str] = []
    if meta.version != version:
        problems.append(f"{meta_path}: describes version {meta.version}, not {version} ({fix})")
    actual = content_hashes(files)
    for name in sorted(set(actual) | set(meta.files)):
        where = f"{directory / name}"
        if name not in meta.files:
            problems.append(
                f"{where}: not part of {kind} version {version} (not listed in {meta_path}); {fix}"
            )
        elif name not in actual:
            problems.append(
                f"{where}: missing from {kind} version {version} (listed in {meta_path}); {fix}"
            )
        elif actual[name] != meta.files[name]:
            problems.append(
                f"{where}: edited after {kind} version {version} was written (its content does "
                f"not match the hash in {meta_path}); {fix}"
            )
    if not problems and _hash_of_hashes(meta.files) != meta.content_hash:
        problems.append(f"{meta_path}: content_hash does not match its per-file hashes ({fix})")
    return problems


# ------------------------------------------------------------------------------------------------
# Meta


class VersionMeta(BaseModel):
    """``_meta.json`` of one version. ``created_at`` is informational only (never compared)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    parent: str | None
    reason: str
    edits: list[dict[str, Any]] = Field(default_factory=list)
    files: dict[str, str]  # relative path -> sha256 of the text
    content_hash: str
    extra: dict[str, Any] = Field(default_factory=dict)
    created_at: str


def read_meta(root: str | Path, version: str) -> VersionMeta:
    path = version_dir(root, version) / META_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StoreError(f"{path}: missing (every version carries its meta)") from None
    return parse_json_model(path, text, VersionMeta, "not a version meta")


def parse_json_model(
    path: Path,
    text: str,
    model: type[_Model],
    problem: str,
    error: Callable[[str], Exception] = StoreError,
) -> _Model:
    """``text`` (the contents of ``path``) as a ``model``: invalid JSON or a wrong shape raises
    ``error`` naming the file (``"<path>: <problem> (<what is wrong>)"`` for a wrong shape)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        lines = "; ".join(describe_validation_error(e))
        raise error(f"{path}: {problem} ({lines})") from None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_files(directory: Path, files: Mapping[str, str], *, sync: bool = True) -> None:
    for name in sorted(files):
        target = directory / check_relative_name(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="") as fh:
            fh.write(files[name])
            fh.flush()
            if sync:
                os.fsync(fh.fileno())


def _subdirs(files: Mapping[str, str]) -> list[str]:
    """The directories below a version's root that its files sit in, deepest first (each
    directory's entry is synced before its parent's)."""
    dirs = {str(p) for n in files for p in PurePosixPath(n).parents if str(p) != "."}
    return sorted(dirs, key=lambda d: (-d.count("/"), d))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean_stale_tmp(root: Path) -> None:
    # One writer per workspace (SPEC §8): temp dirs left here are from a killed write.
    for p in root.glob(f"{_TMP_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True)


def write_version(
    root: str | Path,
    files: Mapping[str, str],
    *,
    parent: str | None,
    reason: str,
    edits: Sequence[Mapping[str, Any]] = (),
    extra: Mapping[str, Any] | None = None,
) -> VersionMeta:
    """Write ``files`` (the complete content) as the next version under ``root``; return its meta.

    Atomic: the version is built in ``root/.tmp-*`` and renamed to ``root/vN`` in one step; any
    failure removes the temp dir and leaves no ``vN``. ``parent`` must exist (or be None for the
    first version of a root).
    """
    r = Path(root)
    r.mkdir(parents=True, exist_ok=True)
    if parent is not None:
        version_dir(r, parent)
    for name in files:
        check_relative_name(name)
    _clean_stale_tmp(r)
    version = next_version(r)
    meta = VersionMeta(
        version=version,
        parent=parent,
        reason=reason,
        edits=[dict(e) for e in edits],
        files=content_hashes(files),
        content_hash=tree_hash(files),
        extra=dict(extra or {}),
        created_at=_now(),
    )
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{version}-", dir=r))
    except OSError as e:
        raise storage_error(r / version, e, f"cannot write version {version}") from None
    # inside a unit of work the fsyncs wait for its checkpoint (atomic.deferred_sync)
    later = sync_later([]) is True
    try:
        try:
            run_before_write()
            _write_files(tmp, files, sync=not later)
            with open(tmp / META_FILE, "w", encoding="utf-8", newline="") as fh:
                fh.write(json_text(meta.model_dump(mode="json")))
                fh.flush()
                if not later:
                    os.fsync(fh.fileno())
            if not later:  # the entries of nested files (tools/x.md), then the version's own
                for d in _subdirs(files):
                    _fsync_dir(tmp / d)
                _fsync_dir(tmp)
        except OSError as e:
            raise storage_error(r / version, e, f"cannot write version {version}") from None
        try:
            os.rename(tmp, r / version)
        except OSError as e:
            raise StoreError(
                f"{r / version}: cannot create version {version} ({e.strerror}); another "
                "writer may have created it — only one process may write a workspace at a time"
            ) from None
        if later:
            done = r / version
            sync_later(
                [
                    *(done / n for n in sorted(files)),
                    done / META_FILE,
                    *(done / d for d in _subdirs(files)),
                    done,
                    r,
                ]
            )
        else:
            _fsync_dir(r)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return meta


class VersionNote(TypedDict, total=False):
    """Why a version was derived from its parent (:func:`write_version`'s meta arguments)."""

    reason: Required[str]
    edits: Sequence[Mapping[str, Any]]
    extra: Mapping[str, Any] | None


def advance_version(
    root: str | Path, parent: str, changes: Mapping[str, str], **note: Unpack[VersionNote]
) -> VersionMeta:
    """New version = ``parent``'s files with ``changes`` (relative path → new text) applied."""
    files = read_version_files(root, parent)
    for name, text in changes.items():
        files[check_relative_name(name)] = text
    return write_version(root, files, parent=parent, **note)


# ------------------------------------------------------------------------------------------------
# Seeds


class SeedRef(BaseModel):
    """Which seed a workspace started from (its manifest's ``seed``): the seed's name, versions,
    evaluation run and questions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    skills_version: str | None
    prompts_version: str | None
    eval_run_id: str | None
    questions_ref: str | None

    @classmethod
    def of(cls, meta: SeedRef) -> SeedRef:
        """The reference part of a seed's meta (a plain ``SeedRef``, not the meta itself)."""
        return cls(**{k: getattr(meta, k) for k in SeedRef.model_fields})


class SeedMeta(SeedRef):
    """``seed.json``: where a seed came from. ``created_at`` is informational only."""

    skills_hash: str
    prompts_hash: str
    source: str  # the workspace (or directory) the seed was taken from
    tables: list[str] = Field(default_factory=list)  # tables extracted into run.duckdb
    created_at: str


@dataclass(frozen=True)
class Seed:
    """A seed on disk. ``skills``/``prompts`` are ``{relative path: text}``."""

    directory: Path
    meta: SeedMeta
    skills: dict[str, str]
    prompts: dict[str, str]

    @property
    def run_db(self) -> Path | None:
        p = self.directory / SEED_RUN_DB
        return p if p.is_file() else None


def seeds_directory(seeds_dir: str | Path, *, create: bool = False) -> Path:
    """The seeds directory (``--seeds-dir``): a directory, created when ``create``."""
    sd = Path(seeds_dir)
    if sd.exists() and not sd.is_dir():
        raise StoreError(
            f"{sd}: the seeds directory (--seeds-dir) is a file; expected a directory holding "
            "one sub-directory per seed (e.g. seeds/)"
        )
    if create:
        try:
            sd.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise storage_error(sd, e, "cannot create the seeds directory") from None
    return sd


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise StoreError(
            f"{what} {name!r}: expected letters, digits, '.', '_' or '-' (at most 128, "
            "starting with a letter or digit)"
        )
    return name


def _seed_target(seeds_dir: Path, name: str) -> Path:
    check_name(name, "seed name")
    target = seeds_dir / name
    if target.exists():
        raise StoreError(
            f"{target}: seed {name!r} already exists; seeds are immutable, choose another name"
        )
    return target


def _finish_seed(tmp: Path, target: Path) -> None:
    try:
        os.rename(tmp, target)
    except OSError as e:
        raise StoreError(f"{target}: cannot create the seed ({e.strerror})") from None
    _fsync_dir(target.parent)


def init_seed(
    seeds_dir: str | Path,
    name: str,
    skills: Mapping[str, str],
    prompts: Mapping[str, str],
    *,
    questions_ref: str | None = None,
    source: str = "",
) -> Seed:
    """Create a seed from file contents (e.g. the repository's ``prompts/``), without a run."""
    sd = seeds_directory(seeds_dir, create=True)
    target = _seed_target(sd, name)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name}-", dir=sd))
    try:
        _write_seed_content(tmp, name, skills, prompts, questions_ref, source, None, None, None, [])
        _finish_seed(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return read_seed(sd, name)


def _write_seed_content(
    tmp: Path,
    name: str,
    skills: Mapping[str, str],
    prompts: Mapping[str, str],
    questions_ref: str | None,
    source: str,
    skills_version: str | None,
    prompts_version: str | None,
    eval_run_id: str | None,
    tables: list[str],
) -> None:
    if not skills:
        raise StoreError(f"seed {name!r}: expected at least one skill file")
    _write_files(tmp / "skills", skills)
    _write_files(tmp / "prompts", prompts)
    meta = SeedMeta(
        name=name,
        skills_version=skills_version,
        prompts_version=prompts_version,
        eval_run_id=eval_run_id,
        questions_ref=questions_ref,
        skills_hash=tree_hash(skills),
        prompts_hash=tree_hash(prompts),
        source=source,
        tables=tables,
        created_at=_now(),
    )
    atomic_write_json(tmp / SEED_FILE, meta.model_dump(mode="json"))


def list_seeds(seeds_dir: str | Path) -> list[str]:
    sd = seeds_directory(seeds_dir)
    if not sd.is_dir():
        return []
    return sorted(p.name for p in sd.iterdir() if (p / SEED_FILE).is_file())


def read_seed(seeds_dir: str | Path, name: str) -> Seed:
    """Load a seed; a missing or malformed one is an error naming the file and the known seeds."""
    check_name(name, "seed name")
    d = seeds_directory(seeds_dir) / name
    meta_path = d / SEED_FILE
    if not meta_path.is_file():
        known = ", ".join(list_seeds(seeds_dir)) or "none"
        raise StoreError(
            f"{meta_path}: seed {name!r} not found (seeds in {seeds_dir}: {known}); create one "
            "with `trm promote`"
        )
    text = meta_path.read_text(encoding="utf-8")
    meta = parse_json_model(meta_path, text, SeedMeta, "not a seed description")
    skills = read_tree(d / "skills")
    prompts = read_tree(d / "prompts") if (d / "prompts").is_dir() else {}
    if tree_hash(skills) != meta.skills_hash or tree_hash(prompts) != meta.prompts_hash:
        raise StoreError(
            f"{d}: the seed's files do not match the hashes in {SEED_FILE} (edited by hand?); "
            "seeds are immutable — promote a new one instead"
        )
    return Seed(d, meta, skills, prompts)


@dataclass(frozen=True)
class EvalRunRecord:
    """The versions an evaluation run recorded in the run database's ``runs`` table, and how it
    ended."""

    run_id: str
    skills_version: str | None
    prompts_version: str | None
    questions_ref: str | None
    status: str | None = None
    accuracy: float | None = None


def read_eval_run(run_db: str | Path, run_id: str) -> EvalRunRecord:
    """The ``runs`` row of ``run_id``, read through the run log's read-only reader."""
    from trm_assets.harness.storage.runlog import RunLogReader

    with RunLogReader.open(run_db) as reader:
        try:
            row = reader.run(run_id)
        except duckdb.Error as e:
            raise StoreError(f"{run_db}: cannot read table runs ({e})") from None
    if row is None:
        raise StoreError(f"{run_db}: run {run_id!r} not found in table runs (check `trm report`)")
    missing = sorted({"skills_version", "prompts_version"} - set(row))
    if missing:
        raise StoreError(
            f"{run_db}: table runs lacks column(s) {missing}; expected the run-log schema of "
            "trm_assets.harness.storage.runlog"
        )

    def text(key: str) -> str | None:
        value = row.get(key)
        return None if value is None else str(value)

    accuracy = row.get("accuracy")
    return EvalRunRecord(
        run_id,
        text("skills_version"),
        text("prompts_version"),
        text("questions_ref"),
        text("status"),
        None if accuracy is None else float(accuracy),
    )


def extract_run_db(run_db: str | Path, run_id: str, out_db: str | Path) -> list[str]:
    """Copy the records of ``run_id`` into a new database ``out_db``; return the tables copied.

    Each table is re-created from its original ``CREATE TABLE`` statement (``duckdb_tables().sql``)
    so primary keys and constraints are kept. Tables with a ``run_id`` column get that run's rows;
    tables without one (``schema_info``) are metadata and are copied whole. Reads go through the
    run log's reader, so this works beside the process's own writer.
    """
    from trm_assets.harness.storage.runlog import RunLogReader

    out = Path(out_db)
    if out.exists():
        raise StoreError(f"{out}: already exists; extraction writes a new database")
    copied: list[str] = []
    with RunLogReader.open(run_db) as reader, duckdb.connect(str(out)) as dst:
        tables = reader.query(
            "SELECT table_name, sql FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main' "
            "ORDER BY table_name"
        )
        for t in tables:
            name = str(t["table_name"])
            cols = [
                str(r["column_name"])
                for r in reader.query(
                    "SELECT column_name FROM duckdb_columns() WHERE database_name = "
                    "current_database() AND schema_name = 'main' AND table_name = ? "
                    "ORDER BY column_index",
                    [name],
                )
            ]
            dst.execute(str(t["sql"]))
            quoted = _ident(name)
            if "run_id" in cols:
                rows = reader.query(f"SELECT * FROM {quoted} WHERE run_id = ?", [run_id])
            else:
                rows = reader.query(f"SELECT * FROM {quoted}")
            if rows:
                frame = pd.DataFrame(rows, columns=cols)
                dst.register("_rows", frame)
                try:
                    dst.execute(f"INSERT INTO {quoted} BY NAME SELECT * FROM _rows")
                finally:
                    dst.unregister("_rows")
            copied.append(name)
        dst.execute("CHECKPOINT")
    return copied


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def promote_to_seed(
    *,
    seeds_dir: str | Path,
    name: str,
    version: str,
    eval_run_id: str,
    run_db: str | Path,
    skills_root: str | Path,
    prompts_root: str | Path,
    prompts_version: str | None = None,
    source: str = "",
) -> Seed:
    """Promote skills ``version`` as seed ``name``, proven by evaluation run ``eval_run_id``.

    Strict (seed §5): the run's recorded ``skills_version`` must equal ``version`` and its
    ``prompts_version`` must be recorded (and equal ``prompts_version`` when given); a NULL on
    either side is refused, never defaulted. The run's rows are extracted into the seed's
    ``run.duckdb`` with the original table definitions. Temp files are always removed.
    """
    parse_version(version)
    seeds_directory(seeds_dir)  # a --seeds-dir that is a file fails before any work
    record = read_eval_run(run_db, eval_run_id)
    if record.status != "done" or record.accuracy is None:
        ended = f"ended {record.status!r}" if record.status != "done" else "has no accuracy"
        raise StoreError(
            f"{run_db}: run {eval_run_id!r} {ended}: a seed needs a finished evaluation with "
            "an accuracy (an outage or an interrupted run proves nothing); run `trm eval` "
            "again and promote that run"
        )
    if record.skills_version is None or record.prompts_version is None:
        raise StoreError(
            f"{run_db}: run {eval_run_id!r} recorded skills_version={record.skills_version!r}, "
            f"prompts_version={record.prompts_version!r}; a seed needs an evaluation run whose "
            "versions were recorded (run `trm eval --version vN` and promote that run)"
        )
    if record.skills_version != version:
        raise StoreError(
            f"{run_db}: run {eval_run_id!r} evaluated skills {record.skills_version}, not "
            f"{version}; promote with --version {record.skills_version} or evaluate {version} first"
        )
    if prompts_version is not None and record.prompts_version != prompts_version:
        raise StoreError(
            f"{run_db}: run {eval_run_id!r} evaluated prompts {record.prompts_version}, not "
            f"{prompts_version}"
        )
    skills = read_version_files(skills_root, version)
    prompts = read_version_files(prompts_root, record.prompts_version)
    sd = seeds_directory(seeds_dir, create=True)
    target = _seed_target(sd, name)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name}-", dir=sd))
    try:
        tables = extract_run_db(run_db, eval_run_id, tmp / SEED_RUN_DB)
        _write_seed_content(
            tmp,
            name,
            skills,
            prompts,
            record.questions_ref,
            source,
            version,
            record.prompts_version,
            eval_run_id,
            tables,
        )
        _finish_seed(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return read_seed(sd, name)

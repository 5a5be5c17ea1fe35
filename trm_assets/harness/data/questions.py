"""Loaders for Video-MME question files: the HF parquet, the official per-video JSON (current and
older key sets, trailing commas tolerated) and CSV. All produce :class:`Question` values.

Every problem is reported with the file, the row (or video/question index), the field and what was
expected; all problems of a file are collected (up to :data:`MAX_PROBLEMS`) before raising.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trm_assets.domain.errors import TOO_DEEP, DataFormatError, describe_validation_error
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question, skill_file_name

MAX_PROBLEMS = 25
QUESTION_SUFFIXES = (".json", ".parquet", ".csv")
# Current official keys → older official keys (README @07d7282, template @5a90af9).
_VIDEO_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "duration": ("duration_category",),
    "domain": ("video_category",),
    "sub_category": ("video_subcategory", "video_sub_category"),
}
_QUESTION_KEY_ALIASES: dict[str, tuple[str, ...]] = {"options": ("choices",)}
# Keys of the official template that are not part of a question (model output, bookkeeping).
_IGNORED_QUESTION_KEYS = {"response"}
# a string (unrolled: one step per run of plain characters, not one per character, so a 50 MB
# caption costs its size, not gigabytes of backtracking state), or a trailing comma
_STRING_OR_TRAILING_COMMA = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")|,(\s*[\]}])')


class QuestionFormatError(DataFormatError):
    """A question file that does not follow any supported Video-MME format."""


@dataclass(frozen=True)
class QuestionSummary:
    n: int
    by_task_type: dict[str, int]
    by_duration: dict[str, int]

    @classmethod
    def of(cls, questions: Sequence[Question]) -> QuestionSummary:
        return cls(
            n=len(questions),
            by_task_type=dict(sorted(Counter(q.task_type for q in questions).items())),
            by_duration=dict(sorted(Counter(q.duration for q in questions).items())),
        )


def strip_trailing_commas(text: str) -> str:
    """Remove JSON trailing commas (``[1, 2,]``) without touching commas inside strings."""
    return _STRING_OR_TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)


def loads_lenient(text: str) -> Any:
    """``json.loads``, tolerating trailing commas (only a file that needs it pays for the
    rewrite). Raises ``json.JSONDecodeError``, or ``RecursionError`` for nesting deeper than the
    parser allows."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(strip_trailing_commas(text))


class _Collector:
    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def add(self, where: str, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{where}: {message}")
        elif len(self.problems) == MAX_PROBLEMS:
            self.problems.append("... (more problems not shown)")

    def build(self, where: str, record: Mapping[str, Any]) -> Question | None:
        try:
            return Question.model_validate(dict(record))
        except ValidationError as e:
            for line in describe_validation_error(e):
                self.add(where, line)
            return None

    def raise_if_any(self) -> None:
        if self.problems:
            raise QuestionFormatError.from_messages(self.source, self.problems)


def _pick(obj: Mapping[str, Any], key: str, aliases: Mapping[str, tuple[str, ...]]) -> Any:
    if key in obj:
        return obj[key]
    for alt in aliases.get(key, ()):
        if alt in obj:
            return obj[alt]
    return None


def _normalize_options(value: Any) -> Any:
    """Options as a list: JSON text, a numpy array (parquet) or ``"A. x\\nB. y"`` lines."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return value
        return [line.strip() for line in text.splitlines() if line.strip()]
    if value is not None and not isinstance(value, list | tuple) and hasattr(value, "tolist"):
        return value.tolist()
    return value


def _clean_scalar(value: Any) -> Any:
    """Parquet/CSV cells: NaN/empty → None; numbers that should be ids → str."""
    if value is None:
        return None
    if isinstance(value, float) and value != value:  # NaN
        return None
    if isinstance(value, str) and value == "":
        return None
    return value


_ROW_FIELDS = (
    "question_id",
    "video_id",
    "duration",
    "domain",
    "sub_category",
    "task_type",
    "question",
    "answer",
    "url",
    "videoID",
    "language",
)


def _row_record(row: Mapping[str, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    for key in _ROW_FIELDS:
        if key in row:
            v = _clean_scalar(row[key])
            if v is not None:
                rec[key] = str(v) if isinstance(v, int | float) else v
    if "options" in row:
        rec["options"] = _normalize_options(row["options"])
    return rec


def load_questions_json(path: Path) -> list[Question]:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not an error
    except OSError as e:
        raise QuestionFormatError(source, None, None, f"a readable file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise QuestionFormatError(source, f"byte {e.start}", None, "UTF-8 text") from None
    try:
        data = loads_lenient(text)
    except json.JSONDecodeError as e:
        raise QuestionFormatError(
            source, f"line {e.lineno} column {e.colno}", None, f"valid JSON ({e.msg})"
        ) from None
    except RecursionError:
        raise QuestionFormatError(source, None, None, TOO_DEEP) from None
    if isinstance(data, dict) and isinstance(data.get("videos"), list):
        data = data["videos"]
    if not isinstance(data, list):
        raise QuestionFormatError(
            source, None, None, "a list of videos, each with a 'questions' list (Video-MME JSON)"
        )
    col = _Collector(source)
    out: list[Question] = []
    for vi, video in enumerate(data):
        vwhere = f"video #{vi + 1}"
        if not isinstance(video, dict):
            col.add(vwhere, f"expected an object, got {type(video).__name__}")
            continue
        vid = video.get("video_id")
        if vid is not None:
            vwhere += f" (video_id {vid!r})"
        qs = video.get("questions")
        if not isinstance(qs, list):
            col.add(vwhere, "field 'questions': expected a list of questions")
            continue
        base = {
            k: _pick(video, k, _VIDEO_KEY_ALIASES) for k in ("duration", "domain", "sub_category")
        }
        base.update({k: video.get(k) for k in ("video_id", "url", "videoID", "language")})
        for qi, q in enumerate(qs):
            qwhere = f"{vwhere} question #{qi + 1}"
            if not isinstance(q, dict):
                col.add(qwhere, f"expected an object, got {type(q).__name__}")
                continue
            unknown = set(q) - {
                "question_id",
                "task_type",
                "question",
                "options",
                "choices",
                "answer",
                *_IGNORED_QUESTION_KEYS,
            }
            if unknown:
                col.add(qwhere, f"unknown key(s) {sorted(unknown)}")
            rec = {k: v for k, v in base.items() if v is not None}
            rec.update(
                {
                    "question_id": q.get("question_id"),
                    "task_type": q.get("task_type"),
                    "question": q.get("question"),
                    "options": _normalize_options(_pick(q, "options", _QUESTION_KEY_ALIASES)),
                    "answer": q.get("answer"),
                }
            )
            if "question_id" in q and q["question_id"] is not None:
                qwhere += f" (question_id {q['question_id']!r})"
            built = col.build(qwhere, {k: v for k, v in rec.items() if v is not None})
            if built is not None:
                out.append(built)
    col.raise_if_any()
    return out


def load_questions_csv(path: Path) -> list[Question]:
    source = str(path)
    col = _Collector(source)
    out: list[Question] = []
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:  # Excel writes a BOM
            reader = csv.DictReader(fh)
            missing = {"question_id", "task_type", "options", "answer"} - set(
                reader.fieldnames or []
            )
            if missing:
                raise QuestionFormatError(
                    source, "header", ", ".join(sorted(missing)), "Video-MME columns"
                )
            for i, row in enumerate(reader, start=2):  # row 1 is the header
                built = col.build(f"row {i}", _row_record(row))
                if built is not None:
                    out.append(built)
    except OSError as e:
        raise QuestionFormatError(source, None, None, f"a readable file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise QuestionFormatError(source, f"byte {e.start}", None, "UTF-8 text") from None
    col.raise_if_any()
    return out


def load_questions_parquet(path: Path) -> list[Question]:
    import duckdb

    source = str(path)
    try:
        con = duckdb.connect()
        cur = con.execute("SELECT * FROM read_parquet(?)", [str(path)])
        columns = [d[0] for d in cur.description or []]
        rows = cur.fetchall()
        con.close()
    except duckdb.Error as e:
        raise QuestionFormatError(source, None, None, f"a readable parquet file ({e})") from None
    missing = {"question_id", "task_type", "options", "answer"} - set(columns)
    if missing:
        raise QuestionFormatError(source, "schema", ", ".join(sorted(missing)), "Video-MME columns")
    col = _Collector(source)
    out: list[Question] = []
    for i, values in enumerate(rows):
        built = col.build(f"row {i}", _row_record(dict(zip(columns, values, strict=True))))
        if built is not None:
            out.append(built)
    col.raise_if_any()
    return out


def load_questions(path: str | Path) -> list[Question]:
    """Load one question file by its suffix; question ids must be unique."""
    p = Path(path)
    if not p.is_file():
        raise QuestionFormatError(str(p), None, None, "an existing question file")
    suffix = p.suffix.lower()
    if suffix == ".json":
        qs = load_questions_json(p)
    elif suffix == ".csv":
        qs = load_questions_csv(p)
    elif suffix == ".parquet":
        qs = load_questions_parquet(p)
    else:
        raise QuestionFormatError(
            str(p), None, None, f"a file ending in one of {', '.join(QUESTION_SUFFIXES)}"
        )
    dupes = sorted(qid for qid, n in Counter(q.question_id for q in qs).items() if n > 1)
    if dupes:
        raise QuestionFormatError(
            str(p), None, "question_id", f"unique question ids (repeated: {dupes[:5]})"
        )
    if not qs:
        raise QuestionFormatError(str(p), None, None, "at least one question")
    _check_skill_files(str(p), qs)
    return qs


def _check_skill_files(source: str, qs: Sequence[Question]) -> None:
    """Every task type names its own skill file (``skill_file_name``): a type without letters
    or digits crashed ``trm train`` with a traceback after init; two types of one name ("Action
    Reasoning", "action  reasoning") silently shared a file, one type's gates editing it while
    the other's questions were never validated; a type named like the shared default strategy
    overwrote it."""
    files: dict[str, list[str]] = {}
    for q in qs:
        try:
            name = skill_file_name(q.task_type)
        except ValueError:
            raise QuestionFormatError(
                source,
                f"question {q.question_id!r}",
                "task_type",
                f"a name with letters or digits (it names the type's skill file), got "
                f"{q.task_type!r}",
            ) from None
        types = files.setdefault(name, [])
        if q.task_type not in types:
            types.append(q.task_type)
    for name, types in sorted(files.items()):
        if len(types) > 1:
            raise QuestionFormatError(
                source,
                None,
                "task_type",
                f"task types that name distinct skill files: {sorted(types)} would share {name}",
            )
        if name == DEFAULT_SKILL_FILE:
            raise QuestionFormatError(
                source,
                None,
                "task_type",
                f"a task type other than {types[0]!r} ({name} is the default strategy every "
                "type reads)",
            )


def task_types_of(questions: Iterable[Question]) -> list[str]:
    """The task types present in the data, sorted (nothing hard-codes their count)."""
    return sorted({q.task_type for q in questions})

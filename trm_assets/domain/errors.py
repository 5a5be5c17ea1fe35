"""Errors for humans: each message names the source, location, field and what was expected."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class _ValidationErrorLike(Protocol):
    def errors(self) -> Sequence[Any]: ...


class TrmError(Exception):
    """Base class of every error meant to be shown to a user as is (no traceback needed)."""


class DataFormatError(TrmError, ValueError):
    """A data file (questions, tree, pools, checkpoint …) that does not follow its format."""

    def __init__(
        self,
        source: str,
        location: str | None,
        field: str | None,
        expected: str,
        *,
        problems: Sequence[str] | None = None,
    ) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.expected = expected
        self.problems: tuple[str, ...] = tuple(problems or ())
        if self.problems:
            body = "\n".join(f"  - {p}" for p in self.problems)
            msg = f"{source}: {len(self.problems)} problem(s):\n{body}"
        else:
            where = ", ".join(x for x in (location, f"field {field!r}" if field else None) if x)
            msg = f"{source}" + (f" ({where})" if where else "") + f": expected {expected}"
        super().__init__(msg)

    @classmethod
    def from_messages(cls, source: str, problems: Sequence[str]) -> DataFormatError:
        return cls(source, None, None, "a valid file", problems=list(problems))

    @classmethod
    def decode_json(cls, text: str, source: str) -> Any:
        """``json.loads(text)``; invalid JSON raises this error naming its line and column."""
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise cls(
                source, f"line {e.lineno} column {e.colno}", None, f"valid JSON ({e.msg})"
            ) from None
        except RecursionError:
            raise cls(source, None, None, TOO_DEEP) from None


#: What a JSON file nested deeper than the parser allows was expected to be.
TOO_DEEP = "JSON nested less deeply (the parser's recursion limit was reached)"


def describe_validation_error(
    err: _ValidationErrorLike, loc_fmt: Callable[[tuple[int | str, ...]], str] | None = None
) -> list[str]:
    """Turn a pydantic ``ValidationError`` into one human line per problem.

    Each line names the location (dotted path, or ``loc_fmt(loc)``), what was wrong and the value
    (truncated), never the raw pydantic dump.
    """
    lines: list[str] = []
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        where = loc_fmt(loc) if loc_fmt else "field " + repr(".".join(str(p) for p in loc))
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden":
            msg = "unknown key (typo?)"
        elif e.get("type") == "missing":
            msg = "required but missing"
        value = e.get("input")
        shown = "" if e.get("type") == "missing" else f" (got {_short(value)})"
        lines.append(f"{where}: {msg}{shown}")
    return lines


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""Engineering and secret settings (API key, base URL, timeouts) from the environment / ``.env``.

Kept apart from :class:`~trm_assets.harness.data.config.RunConfig` on purpose: these never enter a
config fingerprint, a checkpoint, DuckDB, logs or Dagster metadata. The key is a ``SecretStr``:
``repr``/``str``/dumps show ``**********``; only :meth:`Settings.api_key_value` reveals it, for the
HTTP client's constructor.

Variables: ``TRM_LLM_API_KEY`` (or ``OPENAI_API_KEY``), ``TRM_LLM_BASE_URL``, ``TRM_LLM_TIMEOUT_S``,
``TRM_LLM_MAX_RETRIES``, ``TRM_LLM_MAX_CONCURRENCY``, ``TRM_LLM_PRICE_PROMPT_PER_1K``,
``TRM_LLM_PRICE_COMPLETION_PER_1K``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trm_assets.domain.errors import TrmError
from trm_assets.llm.redact import redact_url

ENV_PREFIX = "TRM_LLM_"
#: Fields whose (bad) value an error may show: numbers and choices only. The key and the URL (it
#: may carry credentials) are never shown, not even cut short.
_SHOWN_FIELDS = frozenset(
    {
        "timeout_s",
        "max_retries",
        "max_concurrency",
        "price_prompt_per_1k",
        "price_completion_per_1k",
        "tool_mode",
    }
)

#: The longest bad value an error shows (``"1e-3"``, ``"natve"``): longer ones may be a secret.
_SHOWN_MAX = 12


class SettingsError(TrmError, ValueError):
    """An invalid ``TRM_LLM_*`` variable: one line per problem, naming the variable."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,  # an infinite timeout or price passes gt/ge and breaks later
    )

    api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("TRM_LLM_API_KEY", "OPENAI_API_KEY")
    )
    base_url: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)
    max_concurrency: int = Field(16, ge=1, le=1024)
    price_prompt_per_1k: float | None = Field(None, ge=0)
    price_completion_per_1k: float | None = Field(None, ge=0)
    # native: OpenAI tool calls; text: tools described in the prompt, calls read from the reply
    # (servers or models without tool calling; llm/text_tools.py)
    tool_mode: Literal["native", "text"] = "native"

    @field_validator("api_key")
    @classmethod
    def _key_is_a_header_value(cls, v: SecretStr | None) -> SecretStr | None:
        # The key goes into an HTTP header: non-ASCII or whitespace (a trailing newline from a
        # key file) fails inside the client on every call, after the run has started.
        if v is None:
            return v
        key = v.get_secret_value()
        if not key:
            raise ValueError("is empty; unset it, or set the key")
        bad = [i for i, ch in enumerate(key) if not ("!" <= ch <= "~")]
        if bad:
            shown = ", ".join(str(i + 1) for i in bad[:5]) + (" …" if len(bad) > 5 else "")
            kinds = []
            if any(key[i].isspace() for i in bad):
                kinds.append("whitespace (a trailing newline from a key file?)")
            if any(ord(key[i]) > 127 for i in bad):
                kinds.append("non-ASCII characters (a typographic quote or dash from copy-paste?)")
            if not kinds:
                kinds.append("control characters")
            raise ValueError(
                f"contains {' and '.join(kinds)} at character(s) {shown} of {len(key)}; an HTTP "
                "header carries printable ASCII only — fix the value (it is never shown)"
            )
        return v

    @field_validator("base_url")
    @classmethod
    def _url_is_http(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        try:
            parts = urlsplit(v)
            parts.port  # noqa: B018 - raises ValueError for a malformed port
        except ValueError:
            raise ValueError("is not a URL (expected e.g. http://127.0.0.1:8000/v1)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "expected an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1"
            )
        if parts.query or parts.fragment:
            # the client appends /chat/completions to the URL: a query would swallow the path
            # (and a token in it would reach error messages); its value is never shown
            raise ValueError(
                "has a query string or fragment (?… or #…), which the request path cannot follow; "
                "give the endpoint's base path only (e.g. http://127.0.0.1:8000/v1) and the key in "
                "TRM_LLM_API_KEY"
            )
        return v

    def api_key_value(self) -> str | None:
        """The raw key, for the HTTP client only. Never log or store the result."""
        return self.api_key.get_secret_value() if self.api_key is not None else None

    def describe(self) -> dict[str, object]:
        """A loggable view: the key is reduced to whether it is set."""
        return {
            "api_key": "set" if self.api_key is not None else "unset",
            "base_url": redact_url(self.base_url) if self.base_url else None,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "max_concurrency": self.max_concurrency,
            "tool_mode": self.tool_mode,
        }


def env_names(field: str) -> str:
    """The variable(s) that set ``field`` (a field name or one of its aliases)."""
    if field.upper() in ("API_KEY", f"{ENV_PREFIX}API_KEY", "OPENAI_API_KEY"):
        return f"{ENV_PREFIX}API_KEY (or OPENAI_API_KEY)"
    name = field.upper()
    return name if name.startswith(ENV_PREFIX) else ENV_PREFIX + name


def settings_problems(err: ValidationError) -> list[str]:
    """One line per invalid variable: its name, what is wrong, and its value unless secret."""
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e.get("loc", ())]
        field = loc[0] if loc else "?"
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        value: Any = e.get("input")
        shown = ""
        if field in _SHOWN_FIELDS and value is not None and e.get("type") != "missing":
            text = repr(value)
            # a number or a choice is short; a long value is a paste into the wrong variable
            # (a key in TRM_LLM_TIMEOUT_S was shown whole): its length only
            shown = (
                f" (got {text})"
                if len(str(value)) <= _SHOWN_MAX
                else f" (got a {len(str(value))}-character value, not shown)"
            )
        lines.append(f"{env_names(field)}: {msg}{shown} (environment or .env)")
    return lines


def load_settings(**values: Any) -> Settings:
    """:class:`Settings` from the environment / ``.env``; invalid variables raise
    :class:`SettingsError` (one human line each, never a pydantic dump or a secret)."""
    env_file = values.get("_env_file", ".env")
    unknown = unknown_variables({**_dotenv_names(env_file), **os.environ})
    try:
        settings = Settings(**values)
    except ValidationError as e:
        raise SettingsError([*unknown, *settings_problems(e)]) from None
    if unknown:
        raise SettingsError(unknown)
    return settings


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``TRM_LLM_*`` names that set nothing (a typo would otherwise be ignored and the default
    used), each with the closest known name."""
    known = [f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields]
    out = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            out.append(f"{name}: no such setting ({hint})")
    return out


def _dotenv_names(env_file: str | Path | None) -> dict[str, str]:
    """The variables of the ``.env`` file :class:`Settings` reads (names only matter)."""
    from dotenv import dotenv_values  # shipped with pydantic-settings

    if env_file is None or not Path(env_file).is_file():
        return {}
    path = Path(env_file)
    return {k: v or "" for k, v in dotenv_values(path).items()}

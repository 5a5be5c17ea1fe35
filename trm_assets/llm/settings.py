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

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from trm_assets.llm.redact import redact_url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TRM_LLM_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
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

"""Read-only ports the evolution calls use (seed §16): where the current texts come from.

The harness implements them over a workspace's resolved version directories
(:class:`trm_assets.harness.storage.workspace.VersionedSkillStore` / ``VersionedPromptStore``);
tests may implement them over a dict. A store is bound to one version: after an accept advances the
version, the caller builds a new instance.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class SkillStore(Protocol):
    """The skill files of one version: plain ``<name>.md`` files."""

    @property
    def version(self) -> str: ...

    def list_files(self) -> list[str]:
        """Skill file names, sorted."""
        ...

    def read(self, name: str) -> str:
        """The text of one skill file; a missing or unsafe name raises (never returns "")."""
        ...


@runtime_checkable
class PromptStore(Protocol):
    """The prompt files of one version: relative paths such as ``agent_system.md`` or
    ``tools/search_captions.md``."""

    @property
    def version(self) -> str: ...

    def list_files(self) -> list[str]:
        """Relative paths, sorted."""
        ...

    def read(self, name: str) -> str:
        """The text of one prompt file; a missing or unsafe name raises."""
        ...

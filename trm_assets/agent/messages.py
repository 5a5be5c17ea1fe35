"""Rendering of the agent's conversation: the system message (prompt + active skills) and the user
message (the question), exactly as the agent conversation contract states.

Contract (a real model and the simulated one both read exactly this; do not change it silently):

* **System message** = the text of ``agent_system.md``, then, for each active skill, a block::

      <skill file="NAME.md">
      ...skill text...
      </skill>

  blocks separated by one blank line. Active skills by ``skill_mode``:
  ``"task"`` (default) → the question's task-type skill (:func:`skill_file_name`) then
  ``default-strategy.md``; ``"all"`` → every skill file, sorted, the task-type one moved first;
  ``"none"`` → no skill block. Texts are stripped of surrounding whitespace.
* **User message** = ``agent_user.md`` rendered with :class:`string.Template`; placeholders
  ``$question_id``, ``$video_id`` (the question's ``videoID``, the tree key), ``$task_type``,
  ``$question``, ``$options`` (the four ``"A. …"`` lines as given, one per line), and optionally
  ``$duration``, ``$domain``, ``$sub_category``. The template must produce the lines
  ``Question id: …``, ``Video id: …``, ``Task type: …``, ``Question: …`` and the option lines.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from trm_assets.domain.errors import TrmError
from trm_assets.domain.question import DEFAULT_SKILL_FILE, Question, skill_file_name

SkillMode = Literal["task", "all", "none"]
SKILL_MODES: tuple[str, ...] = ("task", "all", "none")

SYSTEM_PROMPT_FILE = "agent_system.md"
USER_PROMPT_FILE = "agent_user.md"
TOOLS_DIR = "tools"

REQUIRED_USER_PLACEHOLDERS: tuple[str, ...] = (
    "question_id",
    "video_id",
    "task_type",
    "question",
    "options",
)
OPTIONAL_USER_PLACEHOLDERS: tuple[str, ...] = ("duration", "domain", "sub_category")
_REQUIRED_USER_LINES: tuple[str, ...] = ("Question id: ", "Video id: ", "Task type: ", "Question: ")


class PromptError(TrmError, ValueError):
    """An agent prompt file that is missing or does not follow the contract."""


class SkillNotFoundError(TrmError, KeyError):
    """A skill file that the skill mode needs is not in the skill set."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class AgentPrompts:
    """The evolvable prompt set of the agent: system prompt, user template and the tool pack.

    ``tool_descriptions`` maps a tool name to its description (``prompts/tools/<name>.md``); the
    JSON parameter schemas are code (:mod:`trm_assets.agent.tools`), not prompts.
    """

    system: str
    user_template: str
    tool_descriptions: Mapping[str, str] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        check_user_template(self.user_template, f"{self.source}/{USER_PROMPT_FILE}")

    def tool_texts(self) -> list[str]:
        """The tool descriptions in tool-name order (what a simulated oracle reads beside the
        system prompt)."""
        return [self.tool_descriptions[k] for k in sorted(self.tool_descriptions)]


def check_user_template(template: str, source: str = USER_PROMPT_FILE) -> None:
    """Refuse a user template that misses a required placeholder or uses an unknown one."""
    tpl = string.Template(template)
    if not tpl.is_valid():
        raise PromptError(
            f"{source}: invalid '$' placeholder syntax (write '$$' for a literal '$')"
        )
    names = set(tpl.get_identifiers())
    missing = [n for n in REQUIRED_USER_PLACEHOLDERS if n not in names]
    unknown = sorted(names - set(REQUIRED_USER_PLACEHOLDERS) - set(OPTIONAL_USER_PLACEHOLDERS))
    problems = []
    if missing:
        problems.append("missing placeholder(s) " + ", ".join("$" + n for n in missing))
    if unknown:
        allowed = ", ".join(
            "$" + n for n in REQUIRED_USER_PLACEHOLDERS + OPTIONAL_USER_PLACEHOLDERS
        )
        problems.append(
            "unknown placeholder(s) "
            + ", ".join("$" + n for n in unknown)
            + f" (allowed: {allowed})"
        )
    if problems:
        raise PromptError(f"{source}: " + "; ".join(problems))


def load_agent_prompts(
    prompts_dir: str | Path, tool_names: Iterable[str] | None = None
) -> AgentPrompts:
    """Read ``agent_system.md``, ``agent_user.md`` and ``tools/<name>.md`` from a prompts directory.

    Every tool in ``tool_names`` (default: all tools of :mod:`trm_assets.agent.tools`) needs a
    non-empty description file.
    """
    from trm_assets.agent.tools import TOOL_NAMES

    d = Path(prompts_dir)
    names = tuple(tool_names) if tool_names is not None else TOOL_NAMES

    def read(rel: str) -> str:
        p = d / rel
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PromptError(f"{p}: missing (the agent prompt set needs this file)") from None
        except OSError as e:
            raise PromptError(f"{p}: cannot be read ({e.strerror})") from None
        if not text.strip():
            raise PromptError(f"{p}: is empty")
        return text

    descriptions = {n: read(f"{TOOLS_DIR}/{n}.md").strip() for n in names}
    return AgentPrompts(
        system=read(SYSTEM_PROMPT_FILE),
        user_template=read(USER_PROMPT_FILE),
        tool_descriptions=descriptions,
        source=str(d),
    )


def active_skill_files(
    task_type: str, skills: Mapping[str, str], skill_mode: SkillMode
) -> tuple[str, ...]:
    """The skill files shown to the agent for a question of ``task_type``, in order.

    Raises :class:`SkillNotFoundError` when ``skill_mode="task"`` needs a file that is not in
    ``skills`` (a silent fallback would evaluate a different agent than the one named).
    """
    if skill_mode == "none":
        return ()
    own = skill_file_name(task_type)
    if skill_mode == "task":
        missing = [f for f in (own, DEFAULT_SKILL_FILE) if f not in skills]
        if missing:
            have = ", ".join(sorted(skills)) or "none"
            raise SkillNotFoundError(
                f"skill_mode='task' needs {' and '.join(missing)} for task type {task_type!r}, "
                f"but the skill set has: {have}. Add the file(s) to the skills directory, or run "
                "with skill_mode='none'."
            )
        return (own, DEFAULT_SKILL_FILE)
    if skill_mode == "all":
        rest = sorted(f for f in skills if f != own)
        return ((own,) if own in skills else ()) + tuple(rest)
    raise ValueError(f"skill_mode must be one of {SKILL_MODES}, got {skill_mode!r}")


def skill_block(file_name: str, text: str) -> str:
    """One ``<skill file="NAME.md">`` block."""
    return f'<skill file="{file_name}">\n{text.strip()}\n</skill>'


def render_system_message(
    prompts: AgentPrompts, skills: Mapping[str, str], skill_files: Iterable[str]
) -> str:
    """System prompt text, then one skill block per active file, separated by blank lines."""
    parts = [prompts.system.strip()]
    parts.extend(skill_block(f, skills[f]) for f in skill_files)
    return "\n\n".join(parts)


def option_lines(question: Question) -> str:
    """The four options as given (``"A. …"`` … ``"D. …"``), one per line."""
    return "\n".join(o.strip() for o in question.options)


def render_user_message(prompts: AgentPrompts, question: Question) -> str:
    """The user message of a question (see the module docstring for the placeholders)."""
    values = {
        "question_id": question.question_id,
        "video_id": question.tree_key,
        "task_type": question.task_type,
        "question": _one_line(question.question),
        "options": option_lines(question),
        "duration": question.duration,
        "domain": question.domain,
        "sub_category": question.sub_category,
    }
    text = string.Template(prompts.user_template).substitute(values)
    missing = [ln.strip() for ln in _REQUIRED_USER_LINES if ln not in text]
    if missing:
        raise PromptError(
            f"{prompts.source}/{USER_PROMPT_FILE}: the rendered user message lacks the line(s) "
            f"{missing} that the agent contract requires"
        )
    return text


def _one_line(text: str) -> str:
    """Questions are one line in the contract; fold internal newlines into spaces."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


def build_messages(
    prompts: AgentPrompts,
    question: Question,
    skills: Mapping[str, str],
    skill_mode: SkillMode,
) -> tuple[list[dict[str, object]], tuple[str, ...]]:
    """The initial conversation ``[system, user]`` and the active skill files."""
    files = active_skill_files(question.task_type, skills, skill_mode)
    return (
        [
            {"role": "system", "content": render_system_message(prompts, skills, files)},
            {"role": "user", "content": render_user_message(prompts, question)},
        ],
        files,
    )

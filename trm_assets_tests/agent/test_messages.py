"""The agent conversation contract: system message with skill blocks, user message lines."""

from __future__ import annotations

import re

import pytest

from trm_assets.agent.messages import (
    AgentPrompts,
    PromptError,
    SkillNotFoundError,
    active_skill_files,
    build_messages,
    load_agent_prompts,
)
from trm_assets.agent.tools import TOOL_NAMES, tool_specs
from trm_assets.domain.question import DEFAULT_SKILL_FILE
from trm_assets_tests.agent.fixtures import PROMPTS_DIR, prompts, question, skills_for

SKILLS = skills_for(["Object Recognition", "OCR Problems", "Counting Problem"])


def _text(msg: dict[str, object]) -> str:
    """A built message's content, which is always text."""
    content = msg["content"]
    assert isinstance(content, str), content
    return content


def _blocks(system: str) -> list[str]:
    return re.findall(r'<skill file="([^"]+)">\n', system)


def test_task_mode_shows_the_task_skill_then_default() -> None:
    msgs, files = build_messages(prompts(), question(), SKILLS, "task")
    assert files == ("object-recognition.md", DEFAULT_SKILL_FILE)
    system = _text(msgs[0])
    assert system.startswith(prompts().system.strip())
    assert _blocks(system) == list(files)
    assert '\n\n<skill file="object-recognition.md">\n# Object Recognition\n' in system
    assert system.endswith("Look before you answer.\n</skill>")
    assert "</skill>\n\n<skill" in system  # blocks separated by one blank line


def test_all_mode_sorts_with_the_task_skill_first_and_none_mode_has_no_blocks() -> None:
    _, files = build_messages(prompts(), question(task_type="OCR Problems"), SKILLS, "all")
    assert files[0] == "ocr-problems.md"
    assert list(files[1:]) == sorted(f for f in SKILLS if f != "ocr-problems.md")
    msgs, files = build_messages(prompts(), question(), SKILLS, "none")
    assert files == () and "<skill" not in _text(msgs[0])


def test_missing_task_skill_is_an_error_for_humans() -> None:
    with pytest.raises(SkillNotFoundError, match=r"temporal-reasoning\.md.*skill_mode='none'"):
        active_skill_files("Temporal Reasoning", SKILLS, "task")


def test_user_message_has_the_contract_lines() -> None:
    q = question("007-2", videoID="vidZ")
    msgs, _ = build_messages(prompts(), q, SKILLS, "task")
    lines = _text(msgs[1]).splitlines()
    assert "Question id: 007-2" in lines
    assert "Video id: vidZ" in lines
    assert "Task type: Object Recognition" in lines
    assert "Question: What vegetable does the chef chop?" in lines
    i = lines.index("A. Red onions.")
    assert lines[i : i + 4] == list(q.options)
    assert "answer" in _text(msgs[1]) and "bare letter" in _text(msgs[1])


def test_user_template_placeholders_are_checked() -> None:
    with pytest.raises(PromptError, match=r"missing placeholder\(s\) \$options"):
        AgentPrompts(
            system="s", user_template="Question id: $question_id $video_id $task_type $question"
        )
    with pytest.raises(PromptError, match=r"unknown placeholder\(s\) \$answer"):
        AgentPrompts(
            system="s",
            user_template="$question_id $video_id $task_type $question $options $answer",
        )


def test_repository_prompt_set_covers_every_tool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = load_agent_prompts(PROMPTS_DIR)
    specs = tool_specs(p.tool_descriptions)
    assert [s["function"]["name"] for s in specs] == list(TOOL_NAMES)
    assert all(len(s["function"]["description"]) > 80 for s in specs)
    # A missing description file is named.
    (tmp_path / "tools").mkdir()
    for name in ("agent_system.md", "agent_user.md"):
        (tmp_path / name).write_text((PROMPTS_DIR / name).read_text())
    with pytest.raises(PromptError, match=r"tools/get_overview\.md: missing"):
        load_agent_prompts(tmp_path)

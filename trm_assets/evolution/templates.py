"""Rendering of the prompt templates in ``prompts/`` (``$name`` placeholders, string.Template).

Templates use ``$name`` so the JSON examples they contain need no brace escaping; a literal
dollar sign is written ``$$``. A missing value is an error naming the placeholder, never a silent
gap in a prompt.
"""

from __future__ import annotations

import string
from pathlib import Path

from trm_assets.domain.errors import TrmError


class TemplateError(TrmError, ValueError):
    """A template with invalid ``$`` syntax, or a render call missing one of its placeholders."""


def placeholders(template_text: str) -> list[str]:
    """The placeholder names of a template, in order of first appearance."""
    tpl = string.Template(template_text)
    if not tpl.is_valid():
        raise TemplateError("invalid '$' placeholder syntax (write '$$' for a literal '$')")
    return tpl.get_identifiers()


def render(template_text: str, /, *, source: str = "template", **values: object) -> str:
    """Substitute every ``$name`` of ``template_text`` with ``str(values[name])``.

    Raises :class:`TemplateError` naming the missing placeholder(s) or the invalid syntax.
    """
    names = placeholders(template_text)
    missing = [n for n in names if n not in values]
    if missing:
        given = ", ".join(sorted(values)) or "none"
        raise TemplateError(
            f"{source}: no value for placeholder(s) {', '.join('$' + n for n in missing)} "
            f"(values given: {given})"
        )
    try:
        return string.Template(template_text).substitute({k: str(v) for k, v in values.items()})
    except (KeyError, ValueError) as e:  # defensive: placeholders() already checked both
        raise TemplateError(f"{source}: cannot render ({e})") from None


def render_file(path: str | Path, /, **values: object) -> str:
    """Read a template file and :func:`render` it (errors name the file)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TemplateError(f"{p}: cannot be read ({e.strerror})") from None
    return render(text, source=str(p), **values)

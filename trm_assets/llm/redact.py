"""Masking of secrets in every string that leaves the provider (issue 18.2).

:func:`redact` is the one function: it removes credentials from URLs (``http://user:KEY@host/v1``
→ ``http://***@host/v1``) and masks every run of at least :data:`MIN_FRAGMENT` consecutive
characters of any secret, matched case-insensitively, in the text and in the two encodings a
server may echo it in:

* the secret itself and any fragment of it — a key cut by a truncation, the ``sk-...`` prefix plus
  last 8 characters that OpenAI's 401 body shows, a key split across lines (each piece of
  >= 6 characters);
* its percent-encoded form (a key in a URL's userinfo);
* its base64 form at each of the three byte alignments (an echoed ``Authorization: Basic …``
  header carries ``base64(user:password)``; the secret's bytes then sit at any offset): the
  characters that depend on the neighbouring bytes are left out, every other run of >= 6 is
  masked.

Mask first, cut second: callers pass the whole text (or a window larger than the cut by the
longest secret, :func:`excerpt` does this) so that a key straddling the cut is still seen whole.
Fragments shorter than 6 characters are not secret enough to mask without destroying ordinary
text; a secret shorter than 6 characters is masked only where it occurs whole.

Rejected: masking only the exact key (what the code did before: 23 of 25 characters of a key cut
by the 300-character excerpt survived); masking by a pattern of "key-like" strings (misses keys
without a known prefix, masks ids the user needs to see).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import quote, unquote, urlsplit

MIN_FRAGMENT = 6
MASK = "**********"
URL_MASK = "***"
_MIN_WHOLE = 3  # shorter secrets cannot be masked at all without masking ordinary text

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s@?#]*)@")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) replaced by ``***@``."""
    return _URL_USERINFO.sub(lambda m: m.group("scheme") + URL_MASK + "@", url)


def url_secrets(url: str) -> tuple[str, ...]:
    """The user name and password of a URL's userinfo (raw and percent-decoded), if any."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ()
    out: list[str] = []
    for v in (parts.username, parts.password):
        if v:
            out.extend({v, unquote(v)})
    return tuple(out)


def _variants(secret: str) -> list[str]:
    """The secret and the encodings it may be echoed in (see the module docstring)."""
    out = [secret]
    quoted = quote(secret, safe="")
    if quoted != secret:
        out.append(quoted)
    raw = secret.encode("utf-8", "replace")
    for offset in range(3):
        b64 = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        # Leading characters depend on the bytes before the secret, trailing ones on the bytes
        # after it: keep the stable middle (4 characters per 3 bytes).
        start = 4 if offset else 0
        stable = b64[start : 4 * ((offset + len(raw)) // 3)]
        if len(stable) >= MIN_FRAGMENT:
            out.append(stable)
    return out


@lru_cache(maxsize=64)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    grams: set[str] = set()
    for s in secrets:
        if len(s) < _MIN_WHOLE:
            continue
        for v in _variants(s) if len(s) >= MIN_FRAGMENT else [s]:
            low = v.translate(_ASCII_LOWER)
            if len(low) < MIN_FRAGMENT:
                grams.add(low)
            else:
                grams.update(low[i : i + MIN_FRAGMENT] for i in range(len(low) - MIN_FRAGMENT + 1))
    if not grams:
        return None
    alternatives = "|".join(re.escape(g) for g in sorted(grams, key=lambda g: (-len(g), g)))
    return re.compile(f"(?=({alternatives}))")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` without URL credentials and without any fragment (>= 6 characters) of a secret.

    Masked runs become ``**********``; URL userinfo becomes ``***@``. Linear in ``len(text)``.
    """
    if not text:
        return text
    text = redact_url(text)
    key = tuple(sorted({s for s in secrets if s}))
    pattern = _pattern(key) if key else None
    if pattern is None:
        return text
    low = text.translate(_ASCII_LOWER)  # same length as text: indices line up
    spans: list[list[int]] = []
    for m in pattern.finditer(low):
        start, end = m.start(), m.start() + len(m.group(1))
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for start, end in spans:
        out.append(text[pos:start])
        out.append(MASK)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def excerpt(text: str, secrets: Iterable[str | None], limit: int) -> str:
    """One line of at most ``limit`` characters (+ "…") of ``text``, masked *before* the cut.

    Only a window of ``limit`` + the longest secret variant is scanned, so a huge body costs no
    more than its first few hundred characters, and a secret straddling the cut is still seen.
    """
    secret_list = [s for s in secrets if s]
    longest = max((len(v) for s in secret_list for v in _variants(s)), default=0)
    window = text[: limit + longest + MIN_FRAGMENT].strip().replace("\r", " ").replace("\n", " ")
    masked = redact(window, secret_list)
    if len(masked) > limit or len(text.strip()) > len(window):
        return masked[:limit] + "…"
    return masked

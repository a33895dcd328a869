"""The Markdown of README.md and docs/: its pages, the anchors of their headings and their
relative links, read the way GitHub renders them (the forge the docs are browsed on)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
#: ``[text](target)`` and ``![alt](target)``; the text may hold one level of brackets
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/, in a stable order."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def prose_lines(markdown: str) -> list[str]:
    """The lines of ``markdown`` outside fenced code blocks (a ``#`` there is a comment, a
    bracket an array)."""
    lines: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer (GitHub's rule) gives the headings of a document: lower
    case, punctuation dropped, spaces as hyphens, ``-1``, ``-2``, … after repeats."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(markdown):
        heading = re.match(r"^#+ (.+)$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(markdown: str) -> list[str]:
    """The targets of the links and images of ``markdown`` that point inside the repository
    (no scheme, no leading ``/``), outside code; an anchor of the same page is ``#anchor``."""
    targets: list[str] = []
    for line in prose_lines(markdown):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            targets.append(target)
    return targets

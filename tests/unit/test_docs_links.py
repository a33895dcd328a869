"""The docs hold together: every relative link of README.md and docs/ reaches a file that
exists (and a heading of it, where the link names one), and every page of docs/ is reachable
from docs/index.md by following links."""

from __future__ import annotations

from pathlib import Path

from tests.support.docs import DOCS, REPO, anchors, pages, relative_links


def _resolve(page: Path, target: str) -> tuple[Path, str]:
    """The file a link of ``page`` points to and the anchor it names ('' for none)."""
    path, _, anchor = target.partition("#")
    return (page.parent / path).resolve() if path else page, anchor


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    """A moved or renamed page, or a renamed heading, leaves no link behind pointing at
    nothing."""
    broken: list[str] = []
    for page in pages():
        for target in relative_links(page.read_text(encoding="utf-8")):
            path, anchor = _resolve(page, target)
            where = f"{page.relative_to(REPO)}: {target}"
            if not path.is_file():
                broken.append(f"{where} (no such file)")
            elif (
                anchor
                and path.suffix == ".md"
                and anchor not in anchors(path.read_text(encoding="utf-8"))
            ):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def test_every_docs_page_is_reachable_from_the_index() -> None:
    """docs/index.md leads to every page of docs/, directly or through the pages it links."""
    index = DOCS / "index.md"
    reached = {index}
    todo = [index]
    while todo:
        page = todo.pop()
        for target in relative_links(page.read_text(encoding="utf-8")):
            path, _ = _resolve(page, target)
            if path.suffix == ".md" and path.is_file() and path not in reached:
                reached.add(path)
                todo.append(path)
    unreached = sorted(str(p.relative_to(REPO)) for p in DOCS.rglob("*.md") if p not in reached)
    assert unreached == []


def test_the_link_reader_sees_what_a_renderer_links() -> None:
    """The reader the tests above rely on: links and images in prose count, code does not;
    anchors follow GitHub's rule, repeats numbered."""
    markdown = (
        "# Decisions at few positives\n"
        "See [a](../reference/metrics.md#π0-calibration-the-paper-31) and ![b](story.svg),\n"
        "not `[c](nowhere.md)` nor <https://example.org> or [d](https://example.org).\n"
        "```sh\n"
        "# not a heading [e](nowhere.md)\n"
        "```\n"
        "## `calmon evaluate`\n"
        "## `calmon evaluate`\n"
    )
    assert relative_links(markdown) == [
        "../reference/metrics.md#π0-calibration-the-paper-31",
        "story.svg",
    ]
    assert anchors(markdown) == {
        "decisions-at-few-positives",
        "calmon-evaluate",
        "calmon-evaluate-1",
    }

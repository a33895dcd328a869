"""Write ``docs/story.svg``, the README's picture: the prior / likelihood split chart of the
report on ``examples/story.csv`` (daily windows, the first one the reference), as the web view
draws it, with the page's chart styles inlined so the file stands alone::

    .venv/bin/python examples/make_picture.py

Needs calmon installed (``pip install -e ./client -e .``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from calmon.offline.csv_input import parse_csv
from calmon.offline.html_report import report_from_rows
from calmon.ui.pages import STYLE

ROOT: Final = Path(__file__).resolve().parent.parent
SOURCE: Final = ROOT / "examples" / "story.csv"
TARGET: Final = ROOT / "docs" / "story.svg"
CHART: Final = "split"


def picture() -> str:
    """The split chart of the story's report as a standalone SVG document."""
    rows = parse_csv(SOURCE.read_bytes(), score_kind="probability", required=["timestamp"])
    html = report_from_rows(
        rows, window="1d", threshold=0.5, pi0=[], score_kind="probability", title="story"
    ).html
    start = html.index(f'<svg class="chart wide" id="{CHART}"')
    svg = html[start : html.index("</svg>", start) + len("</svg>")]
    # the chart's own rules: those of svg elements and of the series' colour classes
    rules = [
        r
        for r in re.findall(r"[^{}]+\{[^}]*\}", STYLE)
        if "svg" in r or re.match(r"\s*\.(?:s\d|ref)\{", r)
    ]
    style = "".join(r.strip() for r in rules) + "svg{background:#fff}"
    head = '<svg xmlns="http://www.w3.org/2000/svg" '
    return svg.replace("<svg ", head, 1).replace(">", f"><style>{style}</style>", 1) + "\n"


def main() -> None:
    TARGET.write_text(picture(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

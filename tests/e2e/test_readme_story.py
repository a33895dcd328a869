"""The README's offline line, run exactly as written, tells the story of ``examples/story.csv``.

The line is read from README.md (the ``calmon evaluate examples/story.csv … --html`` command of
its code blocks) and run with bash in a fresh directory holding ``.venv/bin/calmon`` (the
installed command) and ``examples/``, as in a clone after the quick start. The report it
writes must show, window by window, the reference period, then the class ratio moving while
the model stays the same, then the model getting worse; the command says where it wrote the
report; the file links nowhere (it is read offline). An undated file gets a report that names
its window by number and shows no date at all.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from calmon.verdict import VERDICT_WORDS, Verdict
from harness.processes import clean_environment

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: a verdict cell of the report's table (newest window first)
VERDICT_CELL = re.compile(r'<td class="text verdict"><span class="(?:v-[\w-]+|ok)">([^<]+)</span>')
#: anything that reads as a calendar date
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:Jan|Dec) \d{1,2} \d{2}:\d{2}\b")


def readme_offline_line() -> str:
    """The README's one command that writes the story's HTML report."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    lines = [
        line.split("  #")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.startswith(".venv/bin/calmon evaluate examples/story.csv") and "--html" in line
    ]
    assert len(lines) == 1, lines
    return str(lines[0])


def _clone(directory: Path) -> Path:
    """A directory as after the quick start: ``.venv/bin/calmon`` (the installed command of
    the environment running the tests) and the repository's ``examples/``."""
    bin_dir = directory / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    installed = Path(sys.executable).parent / "calmon"
    assert installed.is_file(), "calmon is not installed in the test environment"
    (bin_dir / "calmon").symlink_to(installed)
    (directory / "examples").symlink_to(REPO / "examples")
    return directory


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def _verdicts(html: str) -> list[str]:
    """The verdict of each window of a report, oldest first."""
    table = html.split('<table id="verdicts"', 1)[1].split("</table>", 1)[0]
    return VERDICT_CELL.findall(table)[::-1]


def _links(html: str) -> list[str]:
    return re.findall(r'(?:href|src|action)="([^"]*)"', html)


def test_the_readme_report_shows_the_ratio_move_then_the_model_get_worse(
    tmp_path: Path,
) -> None:
    line = readme_offline_line()
    report = Path(line.split("--html ", 1)[1].split()[0])
    clone = _clone(tmp_path)
    done = _run(line, clone)

    written = (clone / report).resolve()
    assert f"report written to {written}" in done.stderr.splitlines()
    assert done.stdout.startswith("window 2026-11-01T00:00Z/")  # the table, as without --html
    html = written.read_text(encoding="utf-8")
    verdicts = _verdicts(html)
    assert len(verdicts) >= 6, verdicts
    assert verdicts[0] == VERDICT_WORDS[Verdict.STABLE]
    moved = verdicts.index(VERDICT_WORDS[Verdict.RATIO])
    assert VERDICT_WORDS[Verdict.WORSE] in verdicts[moved + 1 :], verdicts
    # the model unchanged while the ratio moved, the ratio steady while the model got worse
    worse = verdicts.index(VERDICT_WORDS[Verdict.WORSE])
    assert set(verdicts[moved:worse]) == {VERDICT_WORDS[Verdict.RATIO]}, verdicts
    assert set(verdicts[worse:]) == {VERDICT_WORDS[Verdict.WORSE]}, verdicts
    # a file read offline: no link to a server or to another page
    assert "?segment=" not in html
    assert all(link.startswith("#") for link in _links(html)), _links(html)


def test_an_undated_file_gets_numbered_windows_and_no_date(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    rows = (REPO / "examples" / "story.csv").read_text(encoding="utf-8").splitlines()
    header = rows[0].split(",")
    score, label = header.index("score"), header.index("label")
    undated = "\n".join(
        ",".join((fields[score], fields[label])) for fields in (r.split(",") for r in rows)
    )
    (clone / "undated.csv").write_text(undated + "\n", encoding="utf-8")
    done = _run(".venv/bin/calmon evaluate undated.csv --html undated.html", clone)

    assert f"report written to {clone.resolve() / 'undated.html'}" in done.stderr
    html = (clone / "undated.html").read_text(encoding="utf-8")
    assert DATE.findall(html) == []
    assert ">window 1</td>" in html
    assert "<h2>Window 1</h2>" in html
    assert _verdicts(html) == [VERDICT_WORDS[Verdict.STABLE]]
    assert "?segment=" not in html

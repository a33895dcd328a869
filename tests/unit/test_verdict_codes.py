"""The verdicts' codes have one home (:mod:`calmon.verdict`): the record's types are its
aliases, every code has its words, and no other module of ``calmon`` writes a code as a string.

Every module under ``calmon/`` is parsed with :mod:`ast`; a string constant equal to a code is a
violation outside ``calmon/verdict.py``, except where the same word means something else
(:data:`HOMONYMS`, each with its meaning, and NumPy's sort ``kind="stable"``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from calmon import records
from calmon.verdict import (
    ESTIMATE_WORDS,
    VERDICT_WORDS,
    DecisionVerdict,
    Estimate,
    EstimateVerdict,
    Verdict,
)

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "calmon"
HOME = APP / "verdict.py"
#: every code a record stores, decisions' and estimates'
CODES = frozenset(str(code) for code in [*Verdict, *Estimate])
#: (module, word) -> what the word means there, which is no verdict
HOMONYMS: dict[tuple[str, str], str] = {
    ("calmon/simulation/stream.py", "stable"): "the simulated stream's reference phase",
    ("calmon/services/stored_windows.py", "both"): "the model's all-predictions and segment pairs",
}


def code_literals(source: str) -> list[tuple[int, str]]:
    """(line, code) of each string constant of ``source`` that is a verdict code, leaving out
    the value of a ``kind=`` keyword argument (NumPy's ``kind="stable"`` sort)."""
    tree = ast.parse(source)
    sort_kinds = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "kind"
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in CODES
        and id(node) not in sort_kinds
    ]


def violations() -> list[str]:
    """``path:line code`` of every verdict code written outside its home and :data:`HOMONYMS`."""
    found: list[str] = []
    for path in sorted(APP.rglob("*.py")):
        if path == HOME:
            continue
        name = path.relative_to(ROOT).as_posix()
        found.extend(
            f"{name}:{line} {code}"
            for line, code in code_literals(path.read_text(encoding="utf-8"))
            if (name, code) not in HOMONYMS
        )
    return found


def test_no_module_but_the_verdict_module_writes_a_verdict_code() -> None:
    assert violations() == []


def test_the_scan_finds_a_code_compared_or_keyed_and_leaves_a_sort_kind() -> None:
    source = (
        'if verdict == "stable":\n'
        '    css = {"model_got_worse": "v-worse"}\n'
        'order = np.argsort(values, kind="stable")\n'
        'text = "the stable period"\n'
    )
    assert code_literals(source) == [(1, "stable"), (2, "model_got_worse")]


def test_every_homonym_is_still_there() -> None:
    for (name, code), _ in HOMONYMS.items():
        assert code in dict(code_literals((ROOT / name).read_text(encoding="utf-8"))).values()


def test_the_records_types_are_the_codes_of_the_verdict_module() -> None:
    assert get_args(DecisionVerdict) == tuple(Verdict)
    assert get_args(EstimateVerdict) == tuple(Estimate)
    assert vars(records)["DecisionVerdict"] is DecisionVerdict
    assert vars(records)["EstimateVerdict"] is EstimateVerdict


def test_every_code_has_its_words() -> None:
    assert list(VERDICT_WORDS) == list(Verdict)
    assert list(ESTIMATE_WORDS) == list(Estimate)
    assert all(words and "_" not in words for words in [*VERDICT_WORDS.values()])
    assert all(words and "_" not in words for words in [*ESTIMATE_WORDS.values()])

"""No function, method or class of ``calmon``, ``bench``, ``harness``, ``studies`` or
``client`` is more complex than :data:`LIMIT`, as radon measures cyclomatic complexity
(``radon cc``: rank D and worse is above 20).

A function past the limit is split into helpers that each do one job; the test names every
offender with its file, line and complexity. Nested functions and classes are checked too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from radon.complexity import cc_visit

REPO = Path(__file__).resolve().parents[2]
#: the folders whose Python code is held to the limit
ROOTS = ("calmon", "bench", "harness", "studies", "client")
#: the highest cyclomatic complexity a block may have (radon's rank C ends here)
LIMIT = 20


def _blocks(blocks: Iterable[Any]) -> Iterator[Any]:
    """Every block radon found, with the closures of functions and the inner classes of
    classes (``cc_visit`` lists functions, classes and methods, not what they nest)."""
    for block in blocks:
        yield block
        yield from _blocks(getattr(block, "closures", ()))
        yield from _blocks(getattr(block, "inner_classes", ()))


def offenders(source: str, where: str) -> list[str]:
    """``where:line name (complexity)`` of each block of ``source`` above :data:`LIMIT`."""
    return [
        f"{where}:{block.lineno} {block.fullname} ({block.complexity})"
        for block in _blocks(cc_visit(source))
        if block.complexity > LIMIT
    ]


def test_no_block_of_the_code_is_above_the_limit() -> None:
    paths = sorted(path for root in ROOTS for path in (REPO / root).rglob("*.py"))
    assert paths
    found = [
        offender
        for path in paths
        for offender in offenders(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert not found, (
        f"cyclomatic complexity above {LIMIT} (split these into helpers): " + "; ".join(found)
    )


def test_the_check_names_a_function_above_the_limit() -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(LIMIT))
    source = f"def tangled(x):\n{branches}    return -1\n\n\ndef plain(x):\n    return x\n"
    assert offenders(source, "m.py") == [f"m.py:1 tangled ({LIMIT + 1})"]

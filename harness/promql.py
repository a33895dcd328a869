"""Find the series selectors of a PromQL expression (enough of PromQL to check names and labels).

Syntax is promtool's job; this only lists which series an expression reads and with which
label matchers, so tests can hold dashboards and rules to the series contract. Grafana
variables (``$model``, ``${segment}``, ``$__rate_interval``) are accepted where Grafana allows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
_TOKEN = re.compile(
    rf"""
    (?P<space>\s+|\#[^\n]*)
    | (?P<string>{_STRING})
    | (?P<range>\[[^\]]*\])
    | (?P<braces>\{{(?:{_STRING}|[^}}"'`])*\}})
    | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*)
    | (?P<variable>\$\{{\w+(?::\w+)?\}}|\$\w+)
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(),@])
    """,
    re.VERBOSE,
)
_MATCHER = re.compile(rf"\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*({_STRING})\s*(?:,|$)")

AGGREGATORS = frozenset(
    {
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})


class PromQLScanError(ValueError):
    """The expression holds text that is not PromQL."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a selector, e.g. ``pi0="reference"``."""

    label: str
    op: str
    value: str


@dataclass(frozen=True)
class Selector:
    """A series selector: its metric name (``None`` for ``{__name__=...}`` forms) and matchers."""

    name: str | None
    matchers: tuple[Matcher, ...]


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromQLScanError(f"unexpected text at {pos}: {expr[pos : pos + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append((kind, match.group()))
        pos = match.end()
    return out


def _matchers(block: str) -> tuple[Matcher, ...]:
    inner = block[1:-1].strip()
    found: list[Matcher] = []
    pos = 0
    while pos < len(inner):
        match = _MATCHER.match(inner, pos)
        if match is None:
            raise PromQLScanError(f"bad label matchers {block!r}")
        label, op, quoted = match.groups()
        found.append(Matcher(label=label, op=op, value=quoted[1:-1]))
        pos = match.end()
    return tuple(found)


def selectors(expr: str) -> list[Selector]:
    """Every series selector of ``expr``, in order of appearance."""
    tokens = _tokens(expr)
    found: list[Selector] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "ident" and text in _GROUPING:
            if following[1] == "(":
                i = tokens.index(("op", ")"), i)
        elif kind == "ident" and text.lower() in _KEYWORDS:
            if text == "offset":
                i += 1
        elif kind == "ident" and (text in AGGREGATORS or following[1] == "("):
            pass
        elif kind == "ident":
            if following[0] == "braces":
                found.append(Selector(name=text, matchers=_matchers(following[1])))
                i += 1
            else:
                found.append(Selector(name=text, matchers=()))
        elif kind == "braces":
            found.append(Selector(name=None, matchers=_matchers(text)))
        i += 1
    return found

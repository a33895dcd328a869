"""A metric's name is written in two places only: its row of the catalogue
(:data:`calmon.catalogue.METRICS`) and its formula module; every other list of metric names, in
the engine, the exporter, the web view, ``calmon windows`` and the simulation, is read from the
table. Adding a metric is one row and one formula.

Every string constant of ``calmon/`` that equals a metric's name (parsed with :mod:`ast`;
docstrings and comments never equal one) must lie in :data:`FORMULA_MODULES`' module of that
metric or in ``calmon/catalogue.py``, or be one of :data:`ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from calmon import catalogue, verdict
from calmon.catalogue import BY_NAME, METRICS
from calmon.exporter import snapshot
from calmon.metrics import decision, intervals, split
from calmon.offline import html_report

APP = Path(__file__).resolve().parents[2] / "calmon"
CATALOGUE = "catalogue.py"

#: the module that computes each metric's value, by the formula its descriptor names
FORMULA_MODULES: dict[str, str] = {
    **dict.fromkeys(("precision", "recall", "fpr", "f1"), "metrics/thresholded.py"),
    **dict.fromkeys(
        ("roc_auc", "ks", "average_precision", "best_f1", "best_f1_threshold", "pr_gain_auc"),
        "metrics/curves.py",
    ),
    "ks_abc": "metrics/evaluation.py",
    **dict.fromkeys(
        ("brier", "brier_skill", "brier_pos", "brier_neg", "log_loss", "ece", "mce"),
        "metrics/probability.py",
    ),
}

_INTERVAL_FORMULAS = (
    "the formulas of the 95% intervals (docs/reference/intervals.md), one per method"
)
_ADVICE = (
    "the advice's expected precision, recall and false positive rate at an advised threshold: "
    "the advice's own quantities (records.AdviceExpected), not the catalogue's metrics"
)
_ADVICE_READ = "reads records.AdviceExpected, whose keys a TypedDict takes as literals only"

#: (module, metric name) -> why the name is written there
ALLOWED: dict[tuple[str, str], str] = {
    **{
        ("records.py", metric.name): "the record's schema: its TypedDicts take literal keys"
        for metric in METRICS
    },
    **{
        ("metrics/intervals.py", name): _INTERVAL_FORMULAS
        for name in (
            "precision",
            "recall",
            "fpr",
            "f1",
            "roc_auc",
            "average_precision",
            "ks_abc",
            "brier",
            "brier_pos",
            "brier_neg",
            "log_loss",
            "brier_skill",
        )
    },
    **{("metrics/advice.py", name): _ADVICE for name in ("precision", "recall", "fpr")},
    **{
        ("metrics/label_free.py", name): (
            "the label-free estimate's own formulas of ROC AUC and AP, summed per isotonic "
            "level in closed form (not the curves module's per-score ones)"
        )
        for name in ("roc_auc", "average_precision")
    },
    **{("exporter/snapshot.py", name): _ADVICE_READ for name in ("precision", "recall")},
    **{("ui/pages.py", name): _ADVICE_READ for name in ("precision", "recall")},
    **{
        ("simulation/population.py", name): (
            "the simulated population's true values in closed form (binormal scores): a "
            "formula of its own, keyed like the record it is compared with"
        )
        for name in ("roc_auc", "average_precision", "precision", "recall", "f1")
    },
}


def name_constants() -> dict[tuple[str, str], int]:
    """(module path under ``calmon/``, metric name) -> how many string constants of the module
    equal the name."""
    found: dict[tuple[str, str], int] = defaultdict(int)
    for path in sorted(APP.rglob("*.py")):
        module = path.relative_to(APP).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in BY_NAME:
                found[(module, node.value)] += 1
    return dict(found)


def misplaced(found: dict[tuple[str, str], int]) -> list[str]:
    """Every (module, name) of ``found`` outside the catalogue, the name's formula module and
    :data:`ALLOWED`."""
    return sorted(
        f"{module}: {name!r}"
        for module, name in found
        if module not in (CATALOGUE, FORMULA_MODULES[name]) and (module, name) not in ALLOWED
    )


def test_every_metric_has_its_formula_module_and_the_descriptor_names_it() -> None:
    assert FORMULA_MODULES.keys() == BY_NAME.keys()
    for name, module in FORMULA_MODULES.items():
        assert module == f"metrics/{BY_NAME[name].formula}.py", name
        assert (APP / module).is_file()


def test_a_metric_name_is_written_in_its_row_and_its_formula_only() -> None:
    found = name_constants()
    assert misplaced(found) == []
    for name, module in FORMULA_MODULES.items():
        assert (CATALOGUE, name) in found, name
        assert (module, name) in found, name


def test_every_allowance_is_still_needed() -> None:
    found = name_constants()
    assert sorted(key for key in ALLOWED if key not in found) == []


def test_the_scan_finds_a_name_written_elsewhere() -> None:
    found = {("ui/charts.py", "roc_auc"): 1, ("metrics/curves.py", "roc_auc"): 2}
    assert misplaced(found) == ["ui/charts.py: 'roc_auc'"]
    assert misplaced({("records.py", "ece"): 1, ("metrics/advice.py", "fpr"): 1}) == []
    assert misplaced({("metrics/advice.py", "roc_auc"): 1}) == ["metrics/advice.py: 'roc_auc'"]


@pytest.mark.parametrize(
    ("derived", "expected"),
    [
        (
            intervals.REGULAR_INTERVAL_METRICS,
            (
                "precision",
                "recall",
                "fpr",
                "f1",
                "roc_auc",
                "average_precision",
                "best_f1",
                "pr_gain_auc",
                "ks",
            ),
        ),
        (
            intervals.CALIBRATED_INTERVAL_METRICS,
            ("precision", "f1", "average_precision", "best_f1", "pr_gain_auc"),
        ),
        (intervals.NO_INTERVAL, ("best_f1", "pr_gain_auc", "ks")),
        (intervals.MEAN_METRICS, ("brier", "brier_pos", "brier_neg", "log_loss", "brier_skill")),
        (intervals.COUNT_REGULAR, ("precision", "recall", "fpr", "f1")),
        (intervals.BOOTSTRAP_CALIBRATED, ("average_precision",)),
        (split.PART_INTERVAL_METRICS, ("precision", "f1", "average_precision")),
        (intervals.BOOTSTRAP_REGULAR, ("roc_auc", "average_precision")),
    ],
)
def test_the_engine_lists_come_from_the_rows_in_the_stored_order(
    derived: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """The lists' order is the records' (their bytes keep it), read from the rows."""
    assert derived == expected


def test_the_defaults_are_the_rows_that_say_so() -> None:
    assert [m.name for m in METRICS if m.decides] == [catalogue.DECISION_METRIC]
    assert [m.name for m in METRICS if m.chart] == [catalogue.CHART_METRIC]
    assert vars(decision)["DECISION_METRIC"] is catalogue.DECISION_METRIC
    assert verdict.VERDICT_METRIC is catalogue.DECISION_METRIC
    assert html_report.DEFAULT_METRIC is catalogue.CHART_METRIC
    assert (
        frozenset((*intervals.REGULAR_INTERVAL_METRICS[:6], "ks_abc", *intervals.MEAN_METRICS))
        == snapshot.INTERVAL_METRICS
    )

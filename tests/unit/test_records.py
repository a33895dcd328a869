"""The window record is declared once, as the TypedDicts of :mod:`calmon.records`, from which
pydantic generates its OpenAPI schema: no pydantic model of the package redeclares one of them,
every key of the record carries a description, and real computed records (the golden file, which
``tests/integration/scheduler/test_golden_records.py`` proves the scheduler stores byte for byte)
validate against the declaration and hold exactly its keys."""

from __future__ import annotations

import ast
import json
import types
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest
from pydantic import BaseModel
from typing_extensions import is_typeddict

from calmon import records

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "windows" / "golden_records.json"

#: A key's entry: (required, the kinds its value may take).
Entry = tuple[bool, frozenset[str]]


def _members(annotation: Any) -> tuple[Any, ...]:
    """The members of a union (an annotation that is not one is its only member)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def _fields(shape: Any) -> dict[str, tuple[bool, Any]]:
    """key -> (required, annotation) of a schema model or a TypedDict."""
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        return {
            name: (field.is_required(), field.annotation)
            for name, field in shape.model_fields.items()
        }
    hints = get_type_hints(shape)
    return {name: (name in shape.__required_keys__, hints[name]) for name in hints}


def _prior_map_value(model: type[BaseModel]) -> Any:
    """The value annotation of a schema model keyed by prior (``reference`` and open keys)."""
    (extra,) = get_args(get_type_hints(model)["__pydantic_extra__"])[1:]
    return model.model_fields["reference"].annotation | extra


def _walk(annotation: Any, path: str, out: dict[str, Entry]) -> frozenset[str]:
    """The kinds of value ``annotation`` allows; the entries of every key below it go to
    ``out`` by path (``a.b``, ``a[]`` for array items, ``a{}`` for map values)."""
    kinds: set[str] = set()
    for member in _members(annotation):
        origin = get_origin(member)
        if member is type(None) or member is None:
            kinds.add("null")
        elif isinstance(member, type) and issubclass(member, BaseModel):
            if member.model_config.get("extra") == "allow":
                kinds.add("map")
                _walk(_prior_map_value(member), f"{path}{{}}", out)
            else:
                kinds.add("object")
                _object(member, path, out)
        elif is_typeddict(member):
            kinds.add("object")
            _object(member, path, out)
        elif origin is dict:
            kinds.add("map")
            _walk(get_args(member)[1], f"{path}{{}}", out)
        elif origin in (list, tuple):
            kinds.add("array")
            (item,) = set(get_args(member)) - {Ellipsis}
            out[f"{path}[]"] = (True, _walk(item, f"{path}[]", out))
        elif origin is Literal:
            kinds.update(f"literal {value!r}" for value in get_args(member))
        elif member in (str, datetime):
            kinds.add("string")
        else:
            kinds.add(member.__name__)
    return frozenset(kinds)


def _object(shape: Any, path: str, out: dict[str, Entry]) -> None:
    for name, (required, annotation) in _fields(shape).items():
        key = f"{path}.{name}"
        out[key] = (required, _walk(annotation, key, out))


def _paths(shape: Any) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    _object(shape, "record", out)
    return out


def test_the_walk_sees_optional_nullable_and_nested_keys() -> None:
    paths = _paths(records.WindowRecord)
    assert paths["record.reliability"] == (False, frozenset({"array", "null"}))
    assert paths["record.decision"] == (True, frozenset({"object"}))
    assert paths["record.advice"] == (True, frozenset({"object", "null"}))
    assert paths["record.decision.positives_shift.z"] == (True, frozenset({"float"}))
    assert paths["record.regular.brier"] == (False, frozenset({"float", "null"}))
    assert paths["record.calibrated"] == (True, frozenset({"map"}))
    assert paths["record.calibrated{}.precision"] == (True, frozenset({"float", "null"}))
    assert paths["record.reliability[]"] == (True, frozenset({"object"}))
    assert paths["record.prior_interval"] == (True, frozenset({"array", "null"}))
    assert paths["record.start"] == (True, frozenset({"string"}))
    assert len(paths) > 150


def _golden() -> list[Any]:
    stored: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return [json.loads(text) for text in stored.values()]


def _missing_and_unknown(value: Any, shape: Any, path: str) -> list[str]:
    """Keys of ``value`` below ``path`` the typed ``shape`` lacks, and required keys of it
    that ``value`` lacks, as ``+path`` / ``-path``."""
    found: list[str] = []
    for member in _members(shape):
        origin = get_origin(member)
        if value is None:
            return found
        if is_typeddict(member) and isinstance(value, dict):
            fields = _fields(member)
            found += [f"+{path}.{key}" for key in value.keys() - fields.keys()]
            required = {key for key, (needed, _) in fields.items() if needed}
            found += [f"-{path}.{key}" for key in required - value.keys()]
            for key in value.keys() & fields.keys():
                found += _missing_and_unknown(value[key], fields[key][1], f"{path}.{key}")
            return found
        if origin is dict and isinstance(value, dict):
            for key, item in value.items():
                found += _missing_and_unknown(item, get_args(member)[1], f"{path}{{{key}}}")
            return found
        if origin is list and isinstance(value, list):
            for item in value:
                found += _missing_and_unknown(item, get_args(member)[0], f"{path}[]")
            return found
    return found


@pytest.mark.parametrize("index", range(9))
def test_a_computed_record_validates_and_holds_exactly_the_typed_keys(index: int) -> None:
    record = _golden()[index]
    records.WINDOW_RECORD.validate_python(record)
    assert _missing_and_unknown(record, records.WindowRecord, "record") == []


def _present(value: Any, shape: Any, path: str, out: set[str]) -> None:
    """Add to ``out`` the path (as :func:`_paths` names it) of every key present below
    ``path`` in ``value``, read as the typed ``shape``."""
    for member in _members(shape):
        origin = get_origin(member)
        if is_typeddict(member) and isinstance(value, dict):
            fields = _fields(member)
            for key in value.keys() & fields.keys():
                out.add(f"{path}.{key}")
                if value[key] is not None:
                    _present(value[key], fields[key][1], f"{path}.{key}", out)
        elif origin is dict and isinstance(value, dict):
            for item in value.values():
                _present(item, get_args(member)[1], f"{path}{{}}", out)
        elif origin is list and isinstance(value, list) and value:
            out.add(f"{path}[]")
            for item in value:
                _present(item, get_args(member)[0], f"{path}[]", out)


def test_the_computed_records_between_them_hold_every_typed_key() -> None:
    """Optional keys included: only the objectives the golden model does not configure are
    missing."""
    present: set[str] = set()
    for record in _golden():
        _present(record, records.WindowRecord, "record", present)
    keys = {path for path in _paths(records.WindowRecord) if not path.endswith("[]")}
    assert sorted(keys - present) == [
        "record.advice.objective.alert_rate",
        "record.advice.objective.target_precision",
    ]


def test_older_shapes_do_not_validate() -> None:
    """Records of an older shape (version 1, never served) are refused: a positives' shift
    test of the Mann-Whitney page (no ``mann_whitney_z``/``placement_z``) or of the
    Mann-Whitney and placement page (no ``location_z``), a label-shift check of the method
    before its upper-tail statistic, a record without ``decision``, ``advice`` or
    ``intervals.absent``, an estimate without ``cannot_see``. Every verdict of the vocabulary
    validates, and a verdict outside it does not."""
    record = next(r for r in _golden() if r["decision"]["positives_shift"] is not None)
    estimated = next(r for r in _golden() if r["estimated"] is not None)
    older: dict[str, Any] = {
        "mann_whitney": lambda r: r["decision"].update(
            positives_shift={"method": "mann_whitney", "z": 0.4, "p_value": 0.34}
        ),
        "mann_whitney_and_placement": lambda r: r["decision"].update(
            positives_shift={
                "method": "mann_whitney_and_placement",
                "z": 0.4,
                "p_value": 0.68,
                "mann_whitney_z": 0.4,
                "placement_z": -0.2,
            }
        ),
        "no decision": lambda r: r.pop("decision"),
        "no decision reference": lambda r: r["decision"].pop("reference"),
        "no advice": lambda r: r.pop("advice"),
        "no absent intervals": lambda r: r["intervals"].pop("absent"),
    }
    for name, breaking in older.items():
        old = json.loads(json.dumps(record))
        breaking(old)
        with pytest.raises(ValueError, match="validation error"):
            records.WINDOW_RECORD.validate_python(old)
        assert _missing_and_unknown(old, records.WindowRecord, "record") != [], name
    for breaking in (
        lambda r: r["estimated"]["label_shift"].update(method="cvm_mixture_bootstrap"),
        lambda r: r["estimated"].pop("cannot_see"),
    ):
        old = json.loads(json.dumps(estimated))
        breaking(old)
        with pytest.raises(ValueError, match="validation error"):
            records.WINDOW_RECORD.validate_python(old)
    for verdict in ("both", "model_may_be_worse", "class_ratio_moved_model_may_be_worse"):
        new = json.loads(json.dumps(record))
        new["decision"]["verdict"] = verdict
        records.WINDOW_RECORD.validate_python(new)
    wrong = json.loads(json.dumps(record))
    wrong["decision"]["verdict"] = "may_be_worse"
    with pytest.raises(ValueError, match="verdict"):
        records.WINDOW_RECORD.validate_python(wrong)


def test_the_declaration_refuses_what_breaks_it() -> None:
    """The declaration is closed and typed: what the OpenAPI schema would refuse, validation
    refuses too."""
    record = next(r for r in _golden() if r["split"] is not None and r["estimated"] is not None)
    breakages: dict[str, Any] = {
        "unknown field": lambda r: r.update(surprise=1),
        "unknown metric": lambda r: r["regular"].update(accuracy=0.9),
        "interval of three": lambda r: r["intervals"]["regular"].update(f1=[0.1, 0.2, 0.3]),
        "missing part": lambda r: r["split"]["average_precision"].pop("likelihood"),
        "bad π0 entry": lambda r: r["calibrated"].update({"0.2": {"precision": 0.5}}),
        "unknown method": lambda r: r["estimated"].update(method="guess"),
        "count as text": lambda r: r.update(n="12"),
    }
    for breaking in breakages.values():
        broken = json.loads(json.dumps(record))
        breaking(broken)
        with pytest.raises(ValueError, match="validation error"):
            records.WINDOW_RECORD.validate_python(broken, strict=True)


def _typed_dicts() -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(records).items()
        if is_typeddict(value) and value.__module__ == records.__name__
    }


def test_no_model_of_the_package_redeclares_a_record_part() -> None:
    """One declaration: no pydantic model or TypedDict elsewhere in ``calmon`` has the name of a
    part of the record (the OpenAPI document would otherwise hold two schemas of one shape).
    The engine's dataclasses of the same names (``Advice``) are computed values, not records."""
    package = Path(records.__file__).resolve().parent
    declared = set(_typed_dicts())
    twins = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in declared:
                bases = {ast.unparse(base) for base in node.bases}
                if path.name != "records.py" and bases & {"BaseModel", "TypedDict"}:
                    twins.append(f"{path.relative_to(package)}:{node.name}")
    assert twins == []


def test_every_key_of_the_record_is_described() -> None:
    """The OpenAPI document shows a description for every key of every part of the record."""
    schema = records.WINDOW_RECORD.json_schema()
    parts = {"WindowRecord": schema, **schema["$defs"]}
    undescribed = [
        f"{name}.{key}"
        for name, part in parts.items()
        for key, field in part.get("properties", {}).items()
        if not field.get("description")
    ]
    assert undescribed == []
    assert all(part.get("description") for part in parts.values())
    assert set(parts) >= {"Decision", "Estimated", "Advice", "Split", "ReferenceSummary"}

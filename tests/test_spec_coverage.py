"""Spec coverage: every clause in spec/ is checked by a property; unknown clauses fail collection."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from suite_runner import bad_mark_collection

from conformance import spec_index

REPO = Path(__file__).resolve().parent.parent


def _named_clauses() -> dict[str, list[str]]:
    """clause ID -> the conformance tests that name it with @pytest.mark.clause."""
    named: dict[str, list[str]] = {}
    for path in sorted((REPO / "conformance").glob("test_*.py")):
        module = importlib.import_module(f"conformance.{path.stem}")
        module_marks = list(getattr(module, "pytestmark", []))
        for name, obj in vars(module).items():
            if not name.startswith("test_") or not callable(obj):
                continue
            for mark in module_marks + list(getattr(obj, "pytestmark", [])):
                if mark.name == "clause":
                    for clause in mark.args:
                        named.setdefault(clause, []).append(f"{path.name}::{name}")
    return named


def test_every_spec_clause_is_checked_by_a_property():
    """Each clause heading in spec/*.md is named by at least one conformance test (or is a rule)."""
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    named = _named_clauses()
    unchecked = [c for c, clause in clauses.items() if c not in named and clause.rule is None]
    assert not unchecked, f"spec clauses no conformance test names: {unchecked}"


def test_rule_clauses_are_marked_in_the_spec_and_properties_name_only_spec_clauses():
    """Rule clauses carry their *Rule:* line in the spec; clause marks refer to real spec clauses."""
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    assert {c for c, clause in clauses.items() if clause.rule} >= {"TOL-TABLE", "ACT-TOL"}
    assert set(_named_clauses()) <= set(clauses)


def test_spec_index_rejects_duplicate_clauses(tmp_path):
    """A clause ID defined twice is an error naming both places."""
    (tmp_path / "a.md").write_text("### X-ONE: first\n")
    (tmp_path / "b.md").write_text("text\n### X-ONE: again\n")
    with pytest.raises(ValueError, match=r"b\.md:2: clause X-ONE already defined at .*a\.md:1"):
        spec_index.load_clauses(str(tmp_path))


def test_unknown_clause_fails_collection(tmp_path_factory):
    """A property that names a clause missing from spec/ is a collection error, not a silent pass."""
    run = bad_mark_collection(tmp_path_factory)
    assert run["returncode"] == 2, run["output"]  # pytest: interrupted by collection errors
    output = run["errors"].get("test_bogus.py", "")
    assert "unknown clause(s) ['ACT-NO-SUCH-CLAUSE']" in output, run["output"]

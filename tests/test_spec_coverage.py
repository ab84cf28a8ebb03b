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
    (tmp_path / "a.md").write_text("### X-ONE: first\n*Level:* MUST.\n")
    (tmp_path / "b.md").write_text("text\n### X-ONE: again\n*Level:* MUST.\n")
    with pytest.raises(ValueError, match=r"b\.md:2: clause X-ONE already defined at .*a\.md:1"):
        spec_index.load_clauses(str(tmp_path))


def test_unknown_clause_fails_collection(tmp_path_factory):
    """A property that names a clause missing from spec/ is a collection error, not a silent pass."""
    run = bad_mark_collection(tmp_path_factory)
    assert run["returncode"] == 2, run["output"]  # pytest: interrupted by collection errors
    output = run["errors"].get("test_bogus.py", "")
    assert "unknown clause(s) ['ACT-NO-SUCH-CLAUSE']" in output, run["output"]


def _properties() -> dict[str, list[str]]:
    """``module::test`` -> the clauses its @pytest.mark.clause marks name."""
    found: dict[str, list[str]] = {}
    for clause, tests in _named_clauses().items():
        for test in tests:
            found.setdefault(test, []).append(clause)
    return found


def test_every_clause_has_a_level_and_bad_input_is_should():
    """Levels (spec/README.md): every clause MUST or SHOULD; every -ERRORS clause SHOULD, with its reason."""
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    assert {c.level for c in clauses.values()} == {"MUST", "SHOULD"}
    errors = {c: clause for c, clause in clauses.items() if c.endswith("-ERRORS")}
    assert errors and all(c.level == "SHOULD" and c.kind == "bad input" and c.why for c in errors.values())
    assert all(c.why for c in clauses.values() if c.level == "SHOULD")


def test_a_property_names_clauses_of_one_level_and_says_it():
    """WPT's rule: a test's level is in its name. A SHOULD property is ``test_should_...``, a MUST one is
    not, and no property mixes the levels (its failures would not have one)."""
    clauses = spec_index.load_clauses(str(REPO / "spec"))
    wrong = []
    for test, named in _properties().items():
        levels = {clauses[c].level for c in named}
        should_name = test.partition("::")[2].startswith("test_should_")
        if len(levels) != 1 or (levels == {"SHOULD"}) != should_name:
            wrong.append(f"{test}: {sorted(levels)}")
    assert not wrong, wrong


def test_a_clause_without_a_level_line_is_refused(tmp_path):
    """The level is the clause's first line; without it the spec does not load, naming the place."""
    (tmp_path / "a.md").write_text("### X-ONE: first\nbody text\n")
    with pytest.raises(ValueError, match=r"a\.md:1: clause X-ONE: its first line must be '\*Level:\* MUST"):
        spec_index.load_clauses(str(tmp_path))
    (tmp_path / "a.md").write_text("### X-ONE: first\n*Level:* SHOULD, ties: no model passes it.\n")
    clause = spec_index.load_clauses(str(tmp_path))["X-ONE"]
    assert (clause.level, clause.kind, clause.why) == ("SHOULD", "ties", "no model passes it.")

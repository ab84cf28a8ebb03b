"""The report's words from a document alone: a cell's n/m counts the cases that ran, and
report.md / report.html open with the failures, root cause first."""

from __future__ import annotations

from conformance import results
from opconform import render


def _case(nodeid, outcome, *, op="gelu_and_mul", clauses=("ACT-ERRORS",), level="SHOULD", **more):
    return {"nodeid": nodeid, "outcome": outcome, "backend": "acme", "device": "cpu", "op": op,
            "clauses": list(clauses), "level": level, **more}  # fmt: skip


def _document(cases):
    data = {"schema": results.SCHEMA, "version": results.VERSION, "results": cases, "backends": ["acme"]}
    return results.Document.from_dict(data).to_dict()


def test_cell_counts_only_the_cases_that_ran():
    """ACT-ERRORS read `should-fail 4/46` for 4 failures of the 4 cases that ran beside 42 n/i: the
    m of n/m is the cases that ran to a verdict, the n/i and skipped ones counted apart."""
    cases = [_case(f"t.py::t[acme-cpu-{i}]", "failed (SHOULD)") for i in range(4)]
    cases += [_case(f"t.py::t[acme-cpu-n{i}]", "not implemented", reason="n/i") for i in range(40)]
    cases += [_case(f"t.py::t[acme-cpu-s{i}]", "skipped", reason="no float16 here") for i in range(2)]
    cases += [_case("t.py::g[acme-cpu]", "failed", clauses=("ACT-GEGLU",), level="MUST"),
              _case("t.py::h[acme-cpu]", "passed", clauses=("ACT-GEGLU",), level="MUST")]  # fmt: skip
    document = _document(cases)
    text = render.text(document)
    assert "should-fail 4/4 (40 n/i, 2 skip)" in text and "4/46" not in text, text
    assert "FAIL 1/2" in text and "FAIL 1/2 (" not in text, text
    assert "| ACT-ERRORS | - | should-fail 4/4 (40 n/i, 2 skip) |" in render.markdown(document)
    assert ">should-fail 4/4 (40 n/i, 2 skip)<" in render.html_page(document)

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


def test_report_files_open_with_the_failures_root_cause_first():
    """report.md and report.html opened with the summary and the matrix while the README said the
    report opens with the root causes: the files now open with the MUST failures by root cause, then
    the SHOULD ones, then the summary and matrix; the terminal keeps them last, in view."""
    cases = [_case("t.py::e[acme-cpu]", "failed (SHOULD)"),
             _case("t.py::g[acme-cpu]", "failed", clauses=("ACT-GEGLU",), level="MUST",
                   failure={"clause": "ACT-GEGLU", "message": "[ACT-GEGLU] got 2, expected 1"})]  # fmt: skip
    document = _document(cases)
    md = render.markdown(document)
    assert md.index("## MUST failures (1)") < md.index("## SHOULD failures (1)") < md.index("## Summary")
    assert md.index("## Summary") < md.index("## Matrix")
    page = render.html_page(document)
    assert (
        page.index("MUST failures, by root cause (1)")
        < page.index("SHOULD failures")
        < page.index(">Summary<")
    )
    text = render.text(document)
    assert text.index("opconform summary") < text.index("MUST failures (1)")

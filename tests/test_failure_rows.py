"""A crashed or timed-out case, from a hand-built document: its clause row in the matrix and its
failure line in the text, Markdown and HTML reports (no empty "clause ," where none is known)."""

from __future__ import annotations

import re

from conformance import results
from conformance.harness import recorder
from conformance.results import Case, Failure, Outcome
from opconform import render, report

CRASHED = "test_norms.py::test_rms_norm_matches_oracle[abort-cpu]"
WORKER_LINE = f"worker 'gw0' crashed while running '{CRASHED}'"
LIMIT_LINE = "the case ran past the per-case time limit of 2 s"


def _document(crash_clauses: list[str]) -> dict:
    crash = {
        "nodeid": CRASHED, "when": "???", "outcome": "crash", "backend": "abort", "device": "cpu",
        "op": "rms_norm", "clauses": crash_clauses, "dtype": None, "expectations": [],
        "failure": {"clause": None, "dtype": None, "largest_abs_error": None, "largest_rel_error": None,
                    "rerun": f"python -m pytest {CRASHED}", "error": WORKER_LINE},
    }  # fmt: skip
    timeout = {
        "nodeid": "test_norms.py::test_rms_norm_matches_oracle[hang-cpu]", "when": "call",
        "outcome": "timeout", "backend": "hang", "device": "cpu", "op": "rms_norm",
        "clauses": ["NORM-RMS"], "dtype": None, "expectations": [],
        "failure": {"clause": "NORM-RMS", "dtype": None, "largest_abs_error": None,
                    "largest_rel_error": None, "rerun": "python -m pytest x", "error": LIMIT_LINE},
    }  # fmt: skip
    document = {
        "schema": "opconform-results", "version": 2, "backends": ["abort", "hang"], "devices": ["cpu"],
        "clauses": {"NORM-RMS": {"title": "RMSNorm", "family": "norms", "rule": None}},
        "expectations": [], "results": [crash, timeout], "exitstatus": 1,
    }  # fmt: skip
    return results.Document.from_dict(document).to_dict()  # a document the schema accepts


def _failure_lines(text: str) -> list[str]:
    """Each failure's ``case:`` line (its id and facts, under its verdict line)."""
    return [
        line for line in text.splitlines() if "case: test_norms.py::test_rms_norm_matches_oracle[" in line
    ]


def test_crash_and_timeout_lines_say_what_happened():
    """The crash line says the worker died, the clauses the case checks and xdist's line; the
    timeout line its clause and the time limit; neither has an empty clause or "raised"."""
    document = _document(["NORM-RMS"])
    for rendered in (render.text(document), render.markdown(document)):
        crash, timeout = _failure_lines(rendered)
        assert crash.endswith(
            f"{CRASHED} (crash: the worker running it died, checks NORM-RMS, {WORKER_LINE})"
        )
        assert timeout.endswith(f"[hang-cpu] (clause NORM-RMS, timeout: {LIMIT_LINE})"), timeout
        assert not re.search(r"clause ?[,)]|clause  |raised", crash + timeout), (crash, timeout)
    page = render.html_page(document)
    details = re.findall(r"<summary>([^<]*)</summary><p>([^<]*)</p>", page)
    worker_line = WORKER_LINE.replace("'", "&#x27;")
    assert details == [
        (worker_line, f"{CRASHED}: crash: the worker running it died; checks NORM-RMS; {worker_line}"),
        (LIMIT_LINE, f"{CRASHED.replace('abort', 'hang')}: clause NORM-RMS; timeout: {LIMIT_LINE}"),
    ], details  # the summary, the line that shows, is the verdict: here the error (a version-2 record)


def test_crash_without_known_clauses_names_none():
    """A crash whose clauses are unknown (a document from before they were filled in) is in the
    "(no clause)" row and its line names no clause at all."""
    document = _document([])
    matrix = report.build_matrix(document)
    assert matrix.cell(report.NO_CLAUSE, "abort@cpu").state == report.CRASH
    (crash, _) = _failure_lines(render.text(document))
    assert crash.endswith(f"{CRASHED} (crash: the worker running it died, {WORKER_LINE})"), crash


def test_crash_cell_is_in_the_clause_row_of_its_property():
    """With its clauses filled in, the crash is a CRASH cell of NORM-RMS, not of "(no clause)"."""
    matrix = report.build_matrix(_document(["NORM-RMS"]))
    assert matrix.cell("NORM-RMS", "abort@cpu").state == report.CRASH
    assert matrix.cell(report.NO_CLAUSE, "abort@cpu") is None


def test_crash_facts_come_from_what_other_workers_collected():
    """Two workers' collections merge per test function; a crash takes its function's clauses
    and the op its parameters name (failure.clause stays None: which clause broke is unknown)."""
    gated = "test_activations.py::test_gated_input_not_modified"
    first = {"entries": ["a"], "clauses": ["ACT-PURE"], "files": ["test_activations.py"],
             "tests": {gated: {"ops": ["gelu_and_mul"], "clauses": ["ACT-PURE"]}}}  # fmt: skip
    tests = {gated: {"ops": ["silu_and_mul"], "clauses": ["ACT-PURE"]},
             CRASHED.split("[")[0]: {"ops": ["rms_norm"], "clauses": ["NORM-RMS"]}}  # fmt: skip
    second = {"entries": ["b"], "clauses": ["NORM-RMS"], "files": ["test_norms.py"], "tests": tests}
    merged = recorder.merge_collected(recorder.merge_collected({}, first), second)
    assert merged["entries"] == ["a", "b"] and merged["files"] == ["test_activations.py", "test_norms.py"]
    assert merged["tests"][gated] == {"ops": ["gelu_and_mul", "silu_and_mul"], "clauses": ["ACT-PURE"]}
    failure = Failure(error="worker 'gw1' crashed")
    cases = [
        Case(nodeid=f"{gated}[abort-cpu-silu_and_mul]", outcome=Outcome.CRASH, failure=failure),
        Case(nodeid=CRASHED, outcome=Outcome.CRASH, failure=failure),
        Case(nodeid="test_norms.py::test_not_collected[abort-cpu]", outcome=Outcome.CRASH),
    ]
    for case in cases:
        recorder.crash_facts(case, merged["tests"])
    assert [(c.op, c.clauses) for c in cases] == [
        ("silu_and_mul", ["ACT-PURE"]),
        ("rms_norm", ["NORM-RMS"]),
        (None, []),
    ]
    assert cases[0].failure.clause is None

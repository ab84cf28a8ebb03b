"""Failure records from a real run with failing backends (tests/report_runs.py, ``undeclared``): the
record's fields, root causes first, and no suite source in any report field, report.md,
report.html or the run's terminal output."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from report_runs import shared_reports

from conformance import checks
from opconform import report

REPO = Path(__file__).resolve().parent.parent
SUITE_SOURCE = [*REPO.glob("conformance/**/*.py"), *REPO.glob("reference/*.py")]
SHORTEST = 30  # shorter source lines (")", "return out") say nothing about where a text came from
PATTERNS = re.compile(r"raise ConformanceError\(|^\s*def |^    assert |^>\s", re.M)


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    runs = shared_reports(tmp_path_factory)
    return runs["undeclared"]


@pytest.fixture(scope="module")
def document(broken):
    return report.load(Path(broken["dir"]) / "report.json")


def suite_lines() -> set[str]:
    lines = set()
    for path in SUITE_SOURCE:
        for line in path.read_text(encoding="utf-8").splitlines():
            if len(line.strip()) >= SHORTEST and not line.strip().startswith("#"):
                lines.add(line.strip())
    return lines


def source_in(text: str, lines: set[str]) -> list[str]:
    """The suite's source lines (and traceback markers) found in ``text``."""
    found = [line for line in lines if line in text]
    return found + [m.group(0) for m in PATTERNS.finditer(text)]


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_the_detector_finds_a_traceback():
    """The check can fail: pytest's long form of assert_close is its source."""
    lines = suite_lines()
    assert source_in(inspect.getsource(checks.assert_close), lines)
    assert source_in(">       raise ConformanceError(\n", set())


def test_no_suite_source_in_any_report_or_the_terminal(broken, document):
    """Every string of report.json, report.md, the visible report.html and the run's stdout and
    stderr (pytest's failures included) hold none of the suite's source lines."""
    lines = suite_lines()
    out = Path(broken["dir"])
    texts = {
        "report.json": "\n".join(strings(json.loads((out / "report.json").read_text()))),
        "report.md": (out / "report.md").read_text(),
        "report.html": (out / "report.html").read_text(),
        "terminal": broken["stdout"] + broken["stderr"],
    }
    found = {name: source_in(text, lines) for name, text in texts.items()}
    assert not any(found.values()), found
    assert document["results"] and report.failures(document)


def test_failure_records_hold_verdict_example_violation_and_rerun(document):
    """The numeric failure's record: the verdict, the example Hypothesis shrank, the worst element;
    the backend's own exception: its verdict names it, and its rerun is its own."""
    failures = [
        r
        for r in report.failures(document) + report.failures(document, level="SHOULD")
        if r["backend"] in ("accepting", "raising")
    ]
    cases = {(r["backend"], r["nodeid"].split("::")[1].split("[")[0]): r for r in failures}
    geglu = cases["accepting", "test_geglu_matches_oracle"]["failure"]
    assert geglu["message"].startswith("[ACT-GEGLU] gelu_and_mul on backend 'accepting' @ cpu")
    # the shrunk shape itself is the strategy's business (its size regions, spec/README.md Ranges)
    assert re.match(r"TensorRecipe\(shape=\(\d+,\)", geglu["example"]["arguments"]["recipe"]), geglu[
        "example"
    ]
    assert geglu["example"]["reproduce_failure"].startswith("@reproduce_failure(")
    violation = geglu["largest_violation"]
    assert violation["abs_error"] > violation["allowed"] and violation["got"] != violation["expected"]
    assert violation["abs_error"] == pytest.approx(abs(violation["got"] - violation["expected"]))
    raised = cases["raising", "test_silu_and_mul_matches_oracle"]["failure"]
    assert raised["message"] == (
        "[ACT-SWIGLU] silu_and_mul on backend 'raising' @ cpu: raised RuntimeError: "
        "silu_and_mul: no kernel image for this device"
    )
    assert re.fullmatch(r"at \S*report_backends\.py:\d+ in _launch", raised["frames"][-1]), raised["frames"]
    reruns = [r["failure"]["rerun"] for r in failures]
    assert len(set(reruns)) == len(reruns) == 4


def test_terminal_shows_each_failure_once_must_by_root_cause_then_should(broken):
    """opconform run prints each failure once (pytest's failure section and short summary are off):
    the backend's own exception with its frames in the user's code, the MUST failures by root cause,
    then the bad input apart as SHOULD failures."""
    stdout = broken["stdout"]
    assert "= FAILURES =" not in stdout and "FAILED " not in stdout, stdout[-3000:]
    must = stdout.split("MUST failures (", 1)[1].split("SHOULD failures (", 1)[0]
    assert "accepting@cpu gelu_and_mul: 1 failure (ACT-GEGLU)" in must, must
    assert "raising@cpu silu_and_mul: 1 failure (ACT-SWIGLU)" in must, must
    assert re.search(r"at \S*report_backends\.py:\d+ in _launch", must), must
    failures = re.findall(r"^    \[([A-Z-]+)\] \w+ on backend '(\w+)'", must, re.M)
    assert failures == [("ACT-GEGLU", "deviating"), ("ACT-GEGLU", "accepting"), ("ACT-SWIGLU", "raising")], (
        failures
    )
    should = stdout.split("SHOULD failures (", 1)[1]
    assert re.findall(r"^    \[(ACT-ERRORS)\] \w+ on backend '(\w+)'", should, re.M) == [
        ("ACT-ERRORS", "accepting"),
        ("ACT-ERRORS", "raising"),
    ], should
    for result in report.failures(report.load(Path(broken["dir"]) / "report.json")):
        assert stdout.count(result["failure"]["rerun"]) == 1, result["failure"]["rerun"]

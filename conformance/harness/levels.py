"""Levels at test time (spec/README.md, Levels): a SHOULD clause's failure is its own outcome.

``level_should`` (called by the recorder in ``pytest_runtest_makereport``, in the process that ran
the case) gives each case its level and turns a failure of a SHOULD clause into outcome
"failed (SHOULD)"; unless ``--opconform-strict`` the report is then counted apart, the way pytest
counts an xfail: it does not fail the run, ``-x`` and the backend maxfail ignore it. ``Levels``
(registered by the plugin at configure time) names that outcome in pytest's progress and last
line (``N SHOULD failed``) and lists those failures after pytest's own, each once.
"""

from __future__ import annotations

import pytest

from conformance import failure_record, results, spec_index
from conformance.harness.activation import state
from conformance.results import Outcome

CASE = "opconform_case"  # the recorder's user_properties key of a case's facts (conformance.harness.recorder)
SHOULD_FAILED = "SHOULD failed"  # pytest's category (its stats key, the word in its last line)


def strict(config) -> bool:
    """--opconform-strict: SHOULD failures fail the run too (spec/README.md, Levels)."""
    return bool(config.getoption("opconform_strict", False))


def level_should(config, report, case: dict, info: dict) -> None:
    """The case's level (a failure's is its clause's); a SHOULD failure still failed after the
    expectations becomes outcome "failed (SHOULD)" and, unless --opconform-strict, does not fail the
    run: pytest counts it apart, as it counts an xfail (``pytest_report_teststatus`` names it)."""
    failure = case.get("failure") or {}
    outcome = case.get("outcome") or report.outcome
    clauses = state(config).clauses
    case["level"] = results.level_of_case(outcome, failure.get("clause"), info["clauses"], clauses)
    if not (report.failed and case["level"] == spec_index.SHOULD):
        return
    case["outcome"] = Outcome.SHOULD_FAILED.value
    if not strict(config):
        report.outcome = "skipped"
        report.wasxfail = f"SHOULD clause {failure.get('clause')} failed (--opconform-strict fails the run)"


def should_failed(report) -> bool:
    """Whether ``report`` is a case's SHOULD failure (``level_should``)."""
    facts = dict(getattr(report, "user_properties", None) or ()).get(CASE) or {}
    return facts.get("outcome") == Outcome.SHOULD_FAILED.value


class Levels:
    """pytest's words for a SHOULD failure, and its own section after the failures."""

    @pytest.hookimpl(tryfirst=True)  # before pytest's own xfail status: a SHOULD failure is no xfail
    def pytest_report_teststatus(self, report, config):
        if report.when == "call" and report.skipped and should_failed(report):
            return SHOULD_FAILED, "s", ("SHOULD FAILED", {"yellow": True})
        return None

    def pytest_terminal_summary(self, terminalreporter):
        should_section(terminalreporter)


def should_section(terminal) -> None:
    """After pytest's failures: the SHOULD clauses' failures (counted apart, not failing the run
    unless --opconform-strict), each once: its verdict line and its rerun. Nothing under --tb=no
    (``opconform run`` prints them in its own report) or when there are none."""
    reports = terminal.stats.get(SHOULD_FAILED) or []
    if not reports or terminal.config.getoption("tbstyle", "auto") == "no":
        return
    title = f"SHOULD failures ({len(reports)}): robustness the field does not promise"
    terminal.write_sep("=", title, yellow=True)
    terminal.write_line("(they do not fail the run; --opconform-strict makes them; spec/README.md, Levels)")
    for report in reports:
        failure = (dict(report.user_properties).get(CASE) or {}).get("failure") or {}
        verdict, *_ = failure_record.lines(failure) or [report.nodeid]
        terminal.write_line(verdict)
        if failure.get("rerun"):
            terminal.write_line(f"  rerun: {failure['rerun']}")

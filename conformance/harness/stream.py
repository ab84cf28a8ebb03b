"""A first verdict fast: the run order, the streamed broken-clause lines, --opconform-first-failure.

``FastVerdict`` is registered by the plugin at configure time and acts only on the suite's items
and on reports that carry their verdict facts (an xdist controller collects nothing, and streams):

- ``pytest_collection_modifyitems``: the suite's items in the order of conformance/harness/ordering.py
  (the properties that pin a mechanism first, bad input last);
- ``pytest_runtest_makereport`` (in the process that runs the case, an xdist worker too): a
  failed case of the suite's modules gets its verdict facts (``VERDICT`` in its
  ``user_properties``, which travel to the controlling process): clause, op, backend, device,
  the ConformanceError text's first line, its got/expected line, and Hypothesis's falsifying
  example as one line;
- ``pytest_runtest_logreport`` (in the controlling process only): the first failure of each
  clause on each backend and device is printed as one line the moment its report arrives
  (``opconform: broken CLAUSE ...``), before pytest's summary;
- ``pytest_runtest_setup``: the skip of --opconform-first-failure (conformance/harness/failfast.py).
"""

from __future__ import annotations

import re

import pytest

from conformance import errors, failure_record
from conformance.harness import activation, failfast, ordering, recorder

VERDICT = "opconform_verdict"  # user_properties key: the facts of the streamed line
PREFIX = "opconform: FAIL"
TIMEOUT_PREFIX = "opconform: TIMEOUT"  # a case stopped at its time limit: no verdict on the kernel's result
EXAMPLE_LIMIT = 400  # characters of the falsifying example kept (the line is cut at LINE_LIMIT)
LINE_LIMIT = 200  # a streamed line's length: the decisive values come first


def example_line(exc: BaseException | None, parameters=("backend", "device")) -> str | None:
    """Hypothesis's "Falsifying example: test(...)" ("Failing test case:") note as one line,
    without its comments and the arguments named in ``parameters`` (pytest's: the streamed line
    names backend, device and op); None when there is none."""
    for current in errors.exceptions_under(exc):
        for note in getattr(current, "__notes__", ()):
            prefix = next((p for p in failure_record.EXAMPLE_PREFIXES if note.startswith(p)), None)
            if prefix is None:
                continue
            lines = note.removeprefix(prefix).splitlines()
            flat = " ".join(re.sub(r"\s+# .*$", "", line).strip() for line in lines)
            match = re.match(r"\s*([\w.]+)\((.*)\)\s*$", flat)
            if not match:
                return flat.strip()[:EXAMPLE_LIMIT]
            drop = tuple(f"{name}=" for name in parameters)
            kept = [a for a in failure_record.split_arguments(match.group(2)) if not a.startswith(drop)]
            return ", ".join(kept)[:EXAMPLE_LIMIT] or None
    return None


def verdict_facts(item, call) -> dict:
    """The streamed line's facts of a failed call of ``item``."""
    exc = call.excinfo.value if call.excinfo else None
    error = errors.conformance_error(exc)
    marks = ordering.item_clauses(item)
    if error is not None:
        message, relation = str(error).splitlines()[0], error.relation
    else:
        raised = exc
        while getattr(raised, "exceptions", None):
            raised = raised.exceptions[0]
        message = (f"{type(raised).__name__}: {raised}".splitlines() or [""])[0]
        relation = f"raised {message}"
        if isinstance(raised, recorder.CaseTimeout):
            message = relation = str(raised) or "the case ran past its time limit"
    params = getattr(getattr(item, "callspec", None), "params", {})
    op_mark = item.get_closest_marker("op")
    return {
        "clause": getattr(error, "clause", None) or (marks[0] if marks else None),
        "op": op_mark.args[0] if op_mark else params.get("op"),
        "backend": getattr(params.get("backend"), "name", None),
        "device": getattr(params.get("device"), "type", None),
        "relation": relation,
        "context": context_of(message, relation),
        "example": example_line(exc, tuple(params)),
        "timeout": isinstance(recorder.first_exception(exc), recorder.CaseTimeout),
    }


# "[CLAUSE] op on backend 'name' @ device" (conformance.checks.describe): the line names them already.
_PREFIX = re.compile(r"^\[[A-Z0-9-]+\]\s*(?:\S+ on backend '[^']*' @ \S+?)?(?:,\s*|:\s*|\s+|$)")
# assert_close's count of elements outside tolerance: the relation says more.
_COUNT = re.compile(
    r":?\s*\d+ of \d+ elements outside tolerance \(dtype torch\.(\w+), shape (\([^)]*\))[^)]*\)"
)


def context_of(message: str, relation: str | None = None) -> str:
    """A verdict's first line without what the streamed line says already (clause, op, backend,
    device, the relation) and with assert_close's element count shortened to dtype and shape."""
    text = _PREFIX.sub("", message, count=1)
    if relation:
        text = text.replace(f": {relation}", "").replace(relation, "")
    return _COUNT.sub(lambda m: f" ({m.group(1)} {m.group(2)})", text).strip(" :;,")


def line(facts: dict) -> str:
    """``opconform: FAIL CLAUSE op backend@device: relation; context; smallest example: ...``, the
    decisive values first, cut at ``LINE_LIMIT`` characters; ``opconform: TIMEOUT ...`` for a case
    stopped at its time limit (its cell is TIMEOUT, not FAIL)."""
    where = f"{facts['backend']}@{facts['device']}" if facts.get("device") else f"{facts['backend']}"
    clause, op = facts["clause"] or "(no clause)", facts.get("op") or "-"
    head = f"{TIMEOUT_PREFIX if facts.get('timeout') else PREFIX} {clause} {op} {where}: "
    parts = [p for p in (facts.get("relation"), facts.get("context")) if p]
    if facts.get("example"):
        parts.append(f"smallest example: {facts['example']}")
    text = head + "; ".join(parts)
    return text if len(text) <= LINE_LIMIT else text[: LINE_LIMIT - 3] + "..."


class FastVerdict:
    def __init__(self, config):
        self.config = config
        self.streamed: set[tuple] = set()
        self.controller = not hasattr(config, "workerinput")

    @pytest.hookimpl(trylast=True)  # after -k and --focus-declared-clauses deselected
    def pytest_collection_modifyitems(self, config, items):
        run = activation.state(config)
        if run is not None:
            ordering.order(items, run.clauses, lambda item: activation.is_suite_module(item.path))

    @pytest.hookimpl(trylast=True)  # the plugin's own skips (absent, unsupported, n/i) come first
    def pytest_runtest_setup(self, item):
        reason = failfast.clause_skip_reason(item) if activation.state(item.config) else None
        if reason:
            pytest.skip(reason)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "call" and report.failed and activation.is_suite_module(item.path):
            report.user_properties = [*report.user_properties, (VERDICT, verdict_facts(item, call))]
        return report

    @pytest.hookimpl(trylast=True)  # after pytest's progress letter: the line goes below it
    def pytest_runtest_logreport(self, report):
        if not self.controller or not report.failed:
            return
        facts = dict(report.user_properties).get(VERDICT)
        if facts is None:
            return
        key = (facts["backend"], facts["device"], facts["clause"])
        if key in self.streamed:
            return
        self.streamed.add(key)
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            # xdist's progress letters leave the line open without pytest knowing it.
            if getattr(getattr(terminal, "_tw", None), "width_of_current_line", 0):
                terminal.write("\n")
            terminal.write_line(line(facts), red=True, bold=True)

"""The results side of the plugin: each case's facts, the expectations applied to it, the document.

``case_info`` (at setup) and ``record_call`` (in ``pytest_runtest_makereport``) attach a case's
facts to its report's ``user_properties``, which travel from xdist workers; ``ResultsRecorder``
collects them on the controlling process into ``conformance.results`` records and writes the
document at the end of the session.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from datetime import datetime, timezone

import pytest

from conformance import errors, failure_record, product, rerun, results, spec_index, statistics
from conformance import expectations as manifests
from conformance.harness import failure_capture, levels, model_profile
from conformance.harness.activation import state
from conformance.results import Case, ExpectationVerdict, Failure, Outcome

INFO = "opconform"  # user_properties key: the case's backend, device, op, clauses, dtype
CASE = "opconform_case"  # user_properties key: failure and expectation verdict of the case
COLLECTED = "opconform_collected"  # xdist workeroutput key: what the worker collected (note_collection)
STATISTICS = pytest.StashKey[statistics.Collector]()  # the running case's comparisons (TOL-STATISTICS)


def dtype_name(dtype) -> str | None:
    torch = sys.modules.get("torch")  # a torch.dtype exists only once torch is imported
    if torch is not None and isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return dtype if isinstance(dtype, str) else None


def _torch_version() -> str:
    import torch

    return torch.__version__


def matching(config, nodeid: str, info: dict, *verdicts: str) -> list:
    return [
        entry
        for entry in state(config).expectations
        if entry.matches(
            nodeid=nodeid,
            backend=info["backend"],
            device=info["device"],
            clauses=info["clauses"],
            dtype=info["dtype"],
        )
        in verdicts
    ]


def case_info(item) -> dict:
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend, device = params.get("backend"), params.get("device")
    op_mark = item.get_closest_marker("op")
    info = {
        "backend": getattr(backend, "name", None),
        "device": state(item.config).card.get(getattr(device, "type", None), getattr(device, "type", None)),
        "op": op_mark.args[0] if op_mark else None,
        "clauses": [c for mark in item.iter_markers("clause") for c in mark.args],
        # Known when the test is parametrized by dtype; Hypothesis tests draw it per example.
        "dtype": dtype_name(params.get("dtype")),
    }
    info["level"] = spec_index.case_level(None, info["clauses"], state(item.config).clauses)
    # Every entry that may apply (also "maybe": same but for an unknown dtype), for staleness.
    info["expectations"] = [e.id for e in matching(item.config, item.nodeid, info, "yes", "maybe")]
    return info


def note_collection(config, items) -> None:
    """Record what the run collected before any deselection (``-k``, ``-m``,
    ``--focus-declared-clauses``): the manifest entries its items may match, their clauses and
    module files, and per test function (node id before its ``[`` parameters) its ops and clauses
    (``crash_facts``). A manifest entry is stale only against these (``expectation_status``);
    xdist workers send them to the controlling process in their ``workeroutput``."""
    entries, clauses, files, tests = set(), set(), set(), {}
    for item in items:
        info = case_info(item)
        entries.update(info["expectations"])
        clauses.update(info["clauses"])
        files.add(item.nodeid.partition("::")[0].replace("\\", "/").rsplit("/", 1)[-1])
        test = tests.setdefault(item.nodeid.partition("[")[0], {"ops": [], "clauses": []})
        test["ops"] += [op for op in [info["op"]] if op and op not in test["ops"]]
        test["clauses"] += [c for c in info["clauses"] if c not in test["clauses"]]
    collected = {"entries": sorted(entries), "clauses": sorted(clauses), "files": sorted(files)}
    collected["tests"] = tests
    state(config).collected = collected
    if hasattr(config, "workeroutput"):
        config.workeroutput[COLLECTED] = collected


def attach_case(item) -> None:
    """At setup: the case's info (``case_info``) on the item, and its failure shown as its record."""
    item.user_properties.append((INFO, case_info(item)))
    failure_capture.defer_traceback(item)


def unsupported_entry(item, info: dict):
    """The ``unsupported`` entry that applies to the case, recorded as its expectation verdict
    (the plugin skips the case at setup with the returned label); None when there is none."""
    for entry in matching(item.config, item.nodeid, info, "yes"):
        if entry.reason == "unsupported":
            verdict = {"id": entry.id, "reason": entry.reason, "verdict": "expected"}
            item.user_properties.append((CASE, {"expectation": verdict}))
            return f"unsupported ({entry.id})" + (f": {entry.note}" if entry.note else "")
    return None


class CaseTimeout(BaseException):
    """Raised in a case that ran past ``--opconform-timeout``; recorded as outcome ``timeout``."""


def first_exception(exc: BaseException | None) -> BaseException | None:
    """``exc``, or the first leaf exception of an exception group (Hypothesis's several failures)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return exc


@contextlib.contextmanager
def statistics_of(item):
    """While the case's call runs: the statistics of its comparisons against the oracle."""
    with statistics.collecting() as collector:
        item.stash[STATISTICS] = collector
        yield


def record_call(item, call, report) -> None:
    """Attach the failure facts and the verdict of the expectations (other than ``unsupported``,
    applied at setup) to the call report; a declared failure becomes an expected failure."""
    info = dict(dict(item.user_properties)[INFO])
    case: dict = {}
    error = None
    if report.failed:
        exc = call.excinfo.value if call.excinfo else None
        error = errors.conformance_error(exc)
        if error is not None and info["dtype"] is None:
            info["dtype"] = case["dtype"] = dtype_name(error.dtype)
        command = rerun.for_item(item.config, item.nodeid)
        raised = None if error is not None else first_exception(exc)
        case["failure"] = failure_capture.record(
            item, info, error=error, raised=raised, command=command, call_exc=exc
        )
        case["failure"]["dtype"] = dtype_name(getattr(error, "dtype", None)) or info["dtype"]
        if isinstance(raised, CaseTimeout):
            case["outcome"] = Outcome.TIMEOUT.value
            case["failure"]["error"] = str(raised)
        if not failure_capture.shorten(item.config, report, case["failure"], call.excinfo):
            report.sections.append(("opconform rerun", command))
    # A failure keeps its failing comparison's statistics only (none for a metamorphic one).
    record = statistics.case_record(None if report.failed else item.stash.get(STATISTICS, None), error)
    if record is not None:
        case["statistics"] = record
    entries = matching(item.config, item.nodeid, info, "yes")
    if entries:
        largest = case.get("failure", {}).get("largest_abs_error")
        verdict, entry = manifests.judge(entries, outcome=report.outcome, largest_error=largest)
        case["expectation"] = {"id": entry.id, "reason": entry.reason, "verdict": verdict}
        label = f"{entry.reason} ({entry.id})" + (f": {entry.note}" if entry.note else "")
        if verdict == "expected":
            report.outcome = "skipped"
            report.wasxfail = label
        elif verdict == "exceeds bound":
            message = f"{label}: largest error {largest:.3g} exceeds bound {entry.bound:g}"
            report.sections.append(("opconform expectations", message))
    levels.level_should(item.config, report, case, info)
    report.user_properties = [*report.user_properties, (CASE, case)]


def incomplete_warning(exitstatus: int) -> list[str]:
    """The warning of a run that did not complete: interrupted (Ctrl-C), or pytest's internal error."""
    if exitstatus not in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
        return []
    why = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "an internal error"
    return [f"incomplete run: pytest stopped ({why}, exit status {int(exitstatus)}); the cases that had "
            "not finished are not in this report"]  # fmt: skip


def merge_collected(mine: dict, sent: dict) -> dict:
    """What two workers collected (note_collection): the union of each list, and of each test
    function's ops and clauses (first seen first)."""
    merged = {key: sorted({*mine.get(key, ()), *sent[key]}) for key in sent if key != "tests"}
    tests = {name: {k: list(v) for k, v in test.items()} for name, test in mine.get("tests", {}).items()}
    for name, test in sent.get("tests", {}).items():
        into = tests.setdefault(name, {"ops": [], "clauses": []})
        for key in ("ops", "clauses"):
            into[key] += [value for value in test[key] if value not in into[key]]
    return {**merged, "tests": tests}


def crash_facts(case: Case, tests: dict) -> None:
    """Fill in the level (MUST: a crash or a timeout stalls or ends the run), and the op and clauses
    of a case whose worker died before its call (no side file: conformance.harness.crash_record) from what
    the other workers collected of its test function: its clauses, and its op (one of the
    function's ops, picked by the op id among its parameters)."""
    function, _, params = case.nodeid.partition("[")
    test, case.level = tests.get(function), spec_index.MUST
    if test is None or case.clauses:
        return
    case.clauses = list(test["clauses"])
    ids = params.rstrip("]").split("-")
    ops = test["ops"] if len(test["ops"]) == 1 else [op for op in test["ops"] if op in ids]
    case.op = case.op or (ops[0] if len(ops) == 1 else None)


class ResultsRecorder:
    """Collects each case's outcome on the controlling process (xdist workers forward reports)."""

    def __init__(self, config):
        self.config = config
        self.run = state(config)  # registered once the plugin is active, so never None
        self.results: list[Case] = []
        self.started = time.time()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """A pytest-xdist worker finished: merge what it collected (note_collection)."""
        sent = getattr(node, "workeroutput", {}).get(COLLECTED)
        if sent:
            self.run.collected = merge_collected(self.run.collected or {}, sent)

    def pytest_terminal_summary(self, terminalreporter):
        """Before pytest's short summary (printed after this hook): a case of a module named on
        the command line (the rerun's) has pytest's node id ``::test_...``; name its file."""
        for reports in terminalreporter.stats.values():
            for report in reports:
                if isinstance(report, pytest.TestReport):
                    report.nodeid = failure_capture.display_nodeid(report.nodeid, report.location[0])

    def pytest_runtest_logreport(self, report):
        properties = dict(report.user_properties)
        info = properties.get(INFO)
        if info is None:
            return
        if report.when not in ("call", "???") and not (
            report.failed or (report.when == "setup" and report.skipped)
        ):
            return
        facts = {**info, **properties.get(CASE, {})}
        failure, expectation = facts.pop("failure", None), facts.pop("expectation", None)
        outcome = facts.pop("outcome", None)
        case = Case(
            nodeid=failure_capture.display_nodeid(report.nodeid, report.location[0]),
            when=report.when,
            outcome=Outcome(outcome or report.outcome),
            duration=round(report.duration, 6),
            start=round(getattr(report, "start", 0.0), 6),
            failure=Failure(**failure) if failure else None,
            expectation=ExpectationVerdict(**expectation) if expectation else None,
            **facts,
        )
        if case.outcome is Outcome.SHOULD_FAILED:  # failed or, not --opconform-strict, counted apart
            case.message = case.failure.message if case.failure else report.longreprtext[-4000:]
        elif hasattr(report, "wasxfail") and report.skipped:
            case.outcome = Outcome.EXPECTED_FAILURE
            case.reason = report.wasxfail
            case.message = case.failure.message if case.failure else report.longreprtext[-4000:]
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            case.reason = reason.removeprefix("Skipped: ")
            if case.reason.startswith(Outcome.NOT_IMPLEMENTED.value):
                case.outcome = Outcome.NOT_IMPLEMENTED
        elif report.failed:
            # The verdict (results version 3); pytest's text only where no record was taken.
            # A dead worker's case has its record from conformance.harness.crash_record.
            case.message = case.failure.message if case.failure else report.longreprtext[-4000:]
            if case.failure is None:  # a setup or teardown error: its E lines, not the traceback
                case.message = failure_record.legacy_message(case.message)
                case.failure = Failure(rerun=rerun.for_item(self.config, report.nodeid), message=case.message)
        self.results.append(case)

    def expectation_status(self) -> list[dict]:
        """Each manifest entry with its status in this run: used, unexpected pass, stale, not applicable."""
        matched: dict[str, list[str]] = {}
        for case in self.results:
            for entry_id in case.expectations:
                matched.setdefault(entry_id, [])
            if case.expectation:
                matched.setdefault(case.expectation.id, []).append(case.expectation.verdict)
        backends = {b.name for b in self.run.backends}
        devices = set(self.run.devices)
        status = []
        for entry in self.run.expectations:
            data = entry.as_dict()
            verdicts = matched.get(entry.id)
            absent = entry.device in self.run.absent
            if entry.backend not in self.known_backends(backends):
                data["status"] = "unknown backend"
            elif entry.backend not in backends or (entry.device and (entry.device not in devices or absent)):
                data["status"] = "not applicable"
            elif verdicts is None:
                data["status"] = "not run" if self.deselected(entry) else "stale"
            elif "unexpected pass" in verdicts and not {"expected", "exceeds bound"} & set(verdicts):
                data["status"] = "unexpected pass"
            elif verdicts:
                data["status"] = "used"
            else:  # matched cases that passed with a dtype the entry may not cover
                data["status"] = "matched"
            status.append(data)
        for entry, why in self.run.inapplicable:  # DEV-WHEN: not these versions
            status.append({**entry.as_dict(), "status": "not applicable", "why": why})
        return status

    def deselected(self, entry) -> bool:
        """Whether ``entry``, matching no case that ran, may match a case this run did not select:
        it matches a collected case that ``-k`` (or another filter) deselected, or the run did not
        collect its clause's properties or its test's module. (Unknown collection: False.)"""
        collected = self.run.collected
        if collected is None:
            return False
        if entry.id in collected["entries"]:
            return True
        if entry.clause:
            return entry.clause not in collected["clauses"]
        return entry.test.partition("::")[0] not in collected["files"]

    @staticmethod
    def known_backends(selected: set[str]) -> set[str]:
        """Every backend name this run could select: built-in, selected, from entry points."""
        from importlib import metadata

        import backends as registry

        names = set(registry.BUILTIN) | selected
        return names | {ep.name for ep in metadata.entry_points(group=registry.ENTRY_POINT_GROUP)}

    def warnings(self, expectations: list[dict]) -> list[str]:
        """Lines the report shows under "Warnings": requested devices that are absent, manifest
        entries whose backend names no known backend (a typo would otherwise never apply)."""
        lines = [
            f"requested device {device} is absent ({why}): its cases were skipped"
            for device, why in self.run.absent.items()
        ] + list(self.run.untested)
        unknown = {
            (e["backend"], e["id"].rsplit(":", 1)[0])
            for e in expectations
            if e["status"] == "unknown backend"
        }
        lines += [
            f"expectations {source}: backend {backend!r} names no known backend; its entries apply to nothing"
            for backend, source in sorted(unknown)
        ]
        return lines

    def document(self, exitstatus: int) -> results.Document:
        from hypothesis import __version__ as hypothesis_version
        from hypothesis import settings

        clauses = self.run.clauses
        expectations = self.expectation_status()
        tests = (self.run.collected or {}).get("tests", {})
        for case in self.results:
            if case.outcome in (Outcome.CRASH, Outcome.TIMEOUT):
                crash_facts(case, tests)
        return model_profile.annotate(self.config, results.Document(
            meta={
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "host": platform.node(),
                "platform": platform.platform(),
                "python": sys.version.split()[0],
                "torch": _torch_version(),
                "hypothesis": hypothesis_version,
                "profile": self.run.loaded_profile or settings.get_current_profile_name(),
                "args": list(self.config.invocation_params.args),
                "strict": levels.strict(self.config),
                "absent_devices": dict(self.run.absent),
                "cards": dict(sorted(self.run.pins.items())),  # DEV-CARDS: card label -> physical id
                "product": product.collect(self.run.cards),  # DEV-PRODUCT
                "warnings": self.warnings(expectations) + incomplete_warning(exitstatus),
            },
            backends=[b.name for b in self.run.backends],
            devices=self.run.devices,
            duration=round(time.time() - self.started, 3),
            exitstatus=int(exitstatus),
            clauses={c.id: c.record() for c in clauses.values()},
            expectations=expectations,
            results=sorted(self.results, key=lambda c: (c.nodeid, c.when)),
        ))  # fmt: skip

    def pytest_sessionfinish(self, session, exitstatus):
        path = self.config.getoption("opconform_json")
        if path:
            results.dump(self.document(exitstatus), path)

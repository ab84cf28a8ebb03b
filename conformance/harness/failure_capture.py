"""How a failing case's record is taken from the run, and how pytest shows it.

``record`` fills the failure record (``conformance.results.Failure``) from what the failure
itself carries: the ConformanceError's text and largest violation, the case's parameters, the
notes Hypothesis attached to the exception (``conformance.failure_record.example``), the rerun
line; never from the suite's source. ``shorten`` replaces pytest's traceback of a suite case (the
source of the checks and the property, about 60 lines) by the record's lines, unless the run
asked for a traceback style (``--tb=long``, ``--tb=short``, ``--tb=native``...): pytest's
default ``--tb=auto`` shows the verdict, the example and the rerun.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from conformance import failure_record, spec_index

# Frames of these packages are the suite's or the harness's: a backend's own exception is shown
# with its frames outside them (the user's code), never the suite's lines.
SUITE_PACKAGES = ("conformance", "reference", "hypothesis", "_pytest", "pluggy", "pytest")
MAX_FRAMES = 6


def _notes(exc: BaseException | None) -> list[str]:
    return [str(n) for n in getattr(exc, "__notes__", None) or []]


def record(item, info: dict, *, error, raised, command: str, call_exc) -> dict:
    """The failure dict of a failing case: the ConformanceError ``error``, or ``raised`` (the
    backend's own exception, reported under the property's first clause)."""
    clause = getattr(error, "clause", None) or (info["clauses"][0] if raised and info["clauses"] else None)
    where = f"{info['op']} on backend {info['backend']!r} @ {info['device']}" if info.get("op") else None
    if error is not None:
        message = str(error)
    else:
        first = f"raised {type(raised).__name__}: {raised}".splitlines()[0] if raised else "failed"
        if type(raised).__name__ == "CaseTimeout":  # recorder.CaseTimeout: the time limit's line
            first = f"timeout: {raised}"
        said = ": ".join(part for part in (where, first) if part)
        message = f"[{clause}] {said}" if clause else said
    params = getattr(getattr(item, "callspec", None), "params", {})
    notes = _notes(error if error is not None else raised) or _notes(call_exc)
    seed = item.config.getoption("hypothesis_seed", None)
    return {
        "clause": clause,
        "error": f"{type(raised).__name__}: {raised}".splitlines()[0] if raised else None,
        "largest_abs_error": getattr(error, "max_abs_error", None),
        "largest_rel_error": getattr(error, "max_rel_error", None),
        "rerun": command,
        "message": message,
        "example": failure_record.example(params, notes, seed=seed),
        "largest_violation": getattr(error, "violation", None),
        "relation": getattr(error, "relation", None) or (first if error is None and raised else None),
        "kind": judged_as(item.config, clause, error),
        "frames": outside_frames(raised) if raised is not None and error is None else None,
    }


def judged_as(config, clause: str | None, error) -> str:
    """How the failing comparison judged (spec/README.md, Levels): the clause's kind, or
    ``metamorphic`` when a direct clause's failing comparison was the backend against itself."""
    from conformance.harness.activation import state

    known = (getattr(state(config), "clauses", None) or {}).get(clause or "")
    kind = known.kind if known is not None else spec_index.DIRECT
    if kind == spec_index.DIRECT and getattr(error, "metamorphic", False):
        return spec_index.METAMORPHIC
    return kind


def outside_frames(exc: BaseException | None) -> list[str]:
    """``at path:line in function`` of the innermost frames of ``exc``'s traceback outside the
    suite and the harness: where a backend's own exception came from, in the user's code."""
    frames = []
    for frame in traceback.extract_tb(getattr(exc, "__traceback__", None)):
        if not any(package in Path(frame.filename).parts for package in SUITE_PACKAGES):
            frames.append(f"at {frame.filename}:{frame.lineno} in {frame.name}")
    return frames[-MAX_FRAMES:]


def defer_traceback(item) -> None:
    """Under ``--tb=auto`` a suite case's failure is shown as its record (``shorten`` replaces
    pytest's traceback): give the case a ``repr_failure`` that builds only the crash location, not
    the traceback whose source lookups (the suite's long modules, parsed per frame) cost ~25 ms a
    failing case, i.e. seconds for a broken backend's run. Hypothesis's patch of ``@example``
    lines for the failing examples is dropped too: it would edit the suite's own source, and
    building it imported libcst (~1 s) and put its DeprecationWarnings in the user's summary.
    Under ``--tb=no`` (``opconform run``, which prints the record itself) the same holds."""
    if item.config.getoption("tbstyle", "auto") not in ("auto", "no"):
        return

    def repr_failure(excinfo, style=None):
        from _pytest._code.code import ExceptionChainRepr, ReprTraceback

        item.__dict__.pop("_hypothesis_failing_examples", None)  # the example is in the record
        return ExceptionChainRepr([(ReprTraceback([], None, "native"), excinfo._getreprcrash(), None)])

    item.repr_failure = repr_failure


def shorten(config, report, failure: dict, excinfo) -> bool:
    """Show ``failure``'s lines as the report's traceback (``--tb=auto`` and ``--tb=no``, where pytest
    shows none but a report may); True if done."""
    if config.getoption("tbstyle", "auto") not in ("auto", "no") or report.longrepr is None:
        return False
    from _pytest._code.code import ExceptionChainRepr, ReprEntryNative, ReprFileLocation, ReprTraceback

    shown = failure_record.lines(failure)
    crash = getattr(report.longrepr, "reprcrash", None)
    location = ReprFileLocation(
        str(getattr(crash, "path", report.location[0])), getattr(crash, "lineno", 0), shown[0]
    )
    body = ReprTraceback([ReprEntryNative([line + "\n" for line in shown])], None, "native")
    sections = list(getattr(report.longrepr, "sections", []))
    report.longrepr = ExceptionChainRepr([(body, location, None)])
    for section in sections:
        report.longrepr.addsection(*section)
    return True


def display_nodeid(nodeid: str, location_path: str | None) -> str:
    """A node id with its file: a module named on the command line (the rerun's ``--pyargs
    conformance.test_x::...``) gets the empty path ``::test_...`` from pytest."""
    if nodeid.startswith("::") and location_path:
        return Path(location_path).name + nodeid
    return nodeid


def readable_skip(item, report, backend) -> None:
    """A skipped case of ``backend`` is listed by pytest's ``-rs`` as ``SKIPPED [N] mine@cpu: reason``,
    not under the suite file and line that called ``pytest.skip`` (``.../conformance/harness/plugin.py:377``,
    the same for every reason); an expected failure (``wasxfail``) is left to pytest's ``-rx``."""
    longrepr = report.longrepr
    if backend is None or not report.skipped or hasattr(report, "wasxfail"):
        return
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        device = getattr(getattr(getattr(item, "callspec", None), "params", {}).get("device"), "type", None)
        where = f"{backend.name}@{device}" if isinstance(device, str) else backend.name
        report.longrepr = (where, None, longrepr[2])

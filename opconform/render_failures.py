"""The failures' part of every rendering: each failure once, the MUST ones by root cause (the
real bug first), then the SHOULD ones apart.

Terminal text and Markdown get ``notes`` (lines), the HTML page ``html_parts``; each failure is
shown as ``conformance.failure_record.lines`` (verdict, example, violation, rerun), the same in
all three, and no rendering shows a traceback.
"""

from __future__ import annotations

import html

from conformance import failure_record, statistics
from opconform import report as rep


def failure_facts(result: dict, *, rel: bool = False) -> list[str]:
    """What a broken case's failure line says: the clause it broke (the clauses it checks when
    that is unknown: a crash, a setup error), what happened for a crash or a timeout, the dtype,
    the largest errors, the exception raised."""
    failure = result.get("failure") or {}
    state, clauses = rep.case_state(result), ",".join(result.get("clauses") or [])
    facts = ["crash: the worker running it died"] if state == rep.CRASH else []
    if failure.get("clause"):
        facts.append(f"clause {failure['clause']}")
    elif clauses:
        facts.append(f"checks {clauses}")
    if failure.get("dtype") or result.get("dtype"):
        facts.append(f"dtype {failure.get('dtype') or result.get('dtype')}")
    for kind in ("abs", "rel") if rel else ("abs",):
        if failure.get(f"largest_{kind}_error") is not None:
            facts.append(f"largest {kind} error {failure[f'largest_{kind}_error']:.3g}")
    error = failure.get("error")  # for a crash xdist's line, for a timeout the time limit
    if state == rep.TIMEOUT:
        facts.append(f"timeout: {error}" if error else "timeout")
    elif error:
        facts.append(error if state == rep.CRASH else f"raised {error}")
    return facts


def cause_title(cause: rep.Cause) -> str:
    """``mine@cpu paged_attention: 10 failures of 9 clauses (SERVE-X, ...), one op``."""
    clauses = cause.clauses
    count = f"{len(cause.failures)} failure{'s' * (len(cause.failures) > 1)}"
    of = f" of {len(clauses)} clauses" if len(clauses) > 1 else ""
    return f"{cause.column} {cause.op or '(no op)'}: {count}{of} ({', '.join(clauses) or 'no clause'})"


def failure_lines(result: dict) -> list[str]:
    """The record's lines (conformance.failure_record.lines), the same in every rendering."""
    return failure_record.lines(result.get("failure") or {}, message=result.get("message"))


def _entry(result: dict, *, bullet: str, sub: str, code, fence: bool) -> list[str]:
    """One failure, once: its verdict line, the example and the violation's details (Markdown: in a
    ``text`` block), the case's id and facts, the rerun."""
    failure = result.get("failure") or {}
    verdict, *rest = failure_lines(result) or [result["nodeid"]]
    rest = [line.strip() for line in rest if not line.lstrip().startswith("rerun:")]
    lines = [f"{bullet}{code(verdict)}"]
    stats = statistics.line(result.get("statistics"))  # TOL-STATISTICS: beside the verdict
    lines += [f"{sub}{stats}"] if stats else []
    if fence and rest:
        lines += ["    ```text", *[f"    {line}" for line in rest], "    ```"]
    else:
        lines += [f"{sub}{line}" for line in rest]
    lines.append(f"{sub}case: {result['nodeid']} ({', '.join(failure_facts(result))})")
    if failure.get("rerun"):
        lines.append(f"{sub}rerun: {code(failure['rerun'])}")
    return lines


def notes(document: dict, *, bullet: str, code, fence: bool, heading: str = "") -> list[str]:
    """Every failure once, the real bug first: the MUST failures grouped per backend@device and op
    (``report.causes``), each group's root cause leading; then, apart, the SHOULD failures, one
    verdict line and rerun each. ``bullet`` starts an entry (``"  "``, ``"- "``), ``code`` marks code
    up, ``fence`` is Markdown, ``heading`` starts each section's title line (``"## "``)."""
    # A group's line, its failures under it, their details under them (Markdown: nested lists).
    entry, sub = ("  - ", "    - ") if fence else (bullet + "  ", bullet + "      ")
    lines = []
    causes = rep.causes(document)
    if causes:
        count = sum(len(c.failures) for c in causes)
        lines += ["", f"{heading}MUST failures ({count}), by root cause: per backend@device and op, the "
                  "real bug first (a direct clause that pins a mechanism, then the smallest "
                  "example):"]  # fmt: skip
        for cause in causes:
            lines.append(f"{bullet}{cause_title(cause)}")
            for result in cause.failures:
                lines += _entry(result, bullet=entry, sub=sub, code=code, fence=fence)
    should = rep.causes(document, level=rep.SHOULD)
    if should:
        count = sum(len(c.failures) for c in should)
        lines += ["", f"{heading}SHOULD failures ({count}): robustness the field does not promise (bad "
                  "input, forms no framework passes); they fail the run only with --strict:"]  # fmt: skip
        for cause in should:
            lines.append(f"{bullet}{cause_title(cause)}")
            for result in cause.failures:
                verdict, *_ = failure_lines(result) or [result["nodeid"]]
                rerun = (result.get("failure") or {}).get("rerun")
                stats = statistics.line(result.get("statistics"))
                lines.append(f"{entry}{code(verdict)}")
                lines += [f"{sub}{stats}"] if stats else []
                lines += [f"{sub}rerun: {code(rerun)}"] if rerun else []
    return lines


def html_parts(document: dict) -> list[str]:
    """The MUST failures by root cause, then the SHOULD failures: each failure's verdict line is
    what shows (the summary), the example, the violation's details and the rerun below it."""
    esc = html.escape
    parts = []
    for level, title, element in (
        (rep.MUST, "MUST failures, by root cause", "causes"),
        (rep.SHOULD, "SHOULD failures (robustness the field does not promise; fail the run only with "
         "--strict)", "should-failures"),
    ):  # fmt: skip
        causes = rep.causes(document, level=level)
        count = sum(len(c.failures) for c in causes)
        if level == rep.SHOULD and not causes:
            continue
        parts.append(f"<h2>{esc(title)} ({count})</h2><div id='{element}'>")
        for cause in causes:
            parts.append(f"<h3>{esc(cause_title(cause))}</h3>")
            for result in cause.failures:
                verdict, *rest = failure_lines(result) or [result["nodeid"]]
                stats = statistics.line(result.get("statistics"))
                parts.append(
                    f"<details class='failure'><summary>{esc(verdict)}</summary>"
                    + (f"<p class='statistics'>{esc(stats)}</p>" if stats else "")
                    + f"<p>{esc(result['nodeid'])}: {esc('; '.join(failure_facts(result, rel=True)))}</p>"
                    f"<pre>{esc(chr(10).join(line.strip() for line in rest))}</pre></details>"
                )
        parts.append("</div>")
    return parts

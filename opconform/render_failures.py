"""The failures' part of every rendering: root causes first, then each failure's record.

Terminal text and Markdown get ``notes`` (lines), the HTML page ``html_parts``; each failure is
shown as ``conformance.failure_record.lines`` (verdict, example, violation, rerun), the same in
all three, and no rendering shows a traceback.
"""

from __future__ import annotations

import html

from conformance import failure_record
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


def notes(document: dict, *, bullet: str, code, fence: bool) -> list[str]:
    """Root causes first, then every failure: its verdict line, the example and the violation's
    details (Markdown: in a ``text`` block), the case's id and facts, the rerun. ``bullet`` starts
    an entry (``"  "``, ``"- "``), ``code`` marks code up, ``fence`` is Markdown."""
    causes = rep.causes(document)
    if not causes:
        return []
    sub = "  - " if fence else bullet + "    "  # a nested line of an entry
    count = sum(len(c.failures) for c in causes)
    lines = ["", f"Root causes first ({count} failures; per backend@device and op, the smallest example):"]
    for cause in causes:
        verdict, *rest = failure_lines(cause.smallest) or ["-"]
        lines += [f"{bullet}{cause_title(cause)}", f"{sub}smallest: {code(verdict)}"]
        if rest and rest[0].lstrip().startswith("example:"):
            lines.append(f"{sub}{code(rest[0].strip())}")
    lines += ["", f"Failures ({count}; by root cause, conformance before bad input):"]
    for cause in causes:
        for result in cause.failures:
            failure = result.get("failure") or {}
            verdict, *rest = failure_lines(result) or [result["nodeid"]]
            rest = [line.strip() for line in rest if not line.lstrip().startswith("rerun:")]
            lines.append(f"{bullet}{code(verdict)}")
            if fence and rest:
                lines += ["  ```text", *[f"  {line}" for line in rest], "  ```"]
            else:
                lines += [f"{sub}{line}" for line in rest]
            lines.append(f"{sub}case: {result['nodeid']} ({', '.join(failure_facts(result))})")
            if failure.get("rerun"):
                lines.append(f"{sub}rerun: {code(failure['rerun'])}")
    return lines


def html_parts(document: dict) -> list[str]:
    """Root causes, then each failure: its verdict line is what shows (the summary), the example,
    the violation's details and the rerun below it; no traceback."""
    esc, causes = html.escape, rep.causes(document)
    count = sum(len(c.failures) for c in causes)
    parts = []
    if causes:
        parts.append("<h2>Root causes first</h2><ul id='causes'>")
        for cause in causes:
            verdict = failure_lines(cause.smallest)
            first = esc(verdict[0] if verdict else "-")
            parts.append(f"<li>{esc(cause_title(cause))}<br>smallest: <code>{first}</code>")
            if len(verdict) > 1 and verdict[1].lstrip().startswith("example:"):
                parts.append(f"<br><code>{esc(verdict[1].strip())}</code>")
            parts.append("</li>")
        parts.append("</ul>")
    parts.append(f"<h2>Failures ({count})</h2>")
    for result in (r for c in causes for r in c.failures):
        verdict, *rest = failure_lines(result) or [result["nodeid"]]
        parts.append(
            f"<details class='failure'><summary>{esc(verdict)}</summary>"
            f"<p>{esc(result['nodeid'])}: {esc('; '.join(failure_facts(result, rel=True)))}</p>"
            f"<pre>{esc(chr(10).join(line.strip() for line in rest))}</pre></details>"
        )
    return parts

"""Renderings of a results document: terminal text, Markdown and a self-contained HTML page."""

from __future__ import annotations

import html
import json

from conformance import product as products
from opconform import readiness
from opconform import render_failures as failures
from opconform import report as rep

SHORT = {
    rep.CRASH: "CRASH",
    rep.TIMEOUT: "TIMEOUT",
    rep.FAIL: "FAIL",
    rep.SHOULD_FAIL: "should-fail",
    rep.EXPECTED: "xfail",
    rep.XPASS: "XPASS",
    rep.PASS: "pass",
    rep.SKIP: "skip",
    rep.NOT_IMPLEMENTED: "n/i",
}
LEGEND = (
    "pass: conforms; FAIL: breaks a MUST clause; should-fail: breaks a SHOULD clause (robustness the "
    "field does not promise: counted apart, failing the run only with --strict); TIMEOUT: ran past the "
    "per-case time limit; CRASH: the process running it died; xfail: fails as a manifest declares; "
    "XPASS: passes although a manifest declares a failure (remove the entry); skip: skipped "
    "(reason in the report); n/i: the backend does not implement the op (or does not promise what an "
    "invariance clause needs); -: not run; n/m: n of the m "
    "cases that ran to a verdict, the n/i and skipped ones in parentheses"
)
RULE_LEGEND = (
    "rule: a clause that is a rule of the suite itself (e.g. the tolerance table), applied by every case"
)


def matrix_rows(matrix: rep.Matrix, *, checked_only: bool) -> tuple[list[str], int]:
    """The rows to show and how many were left out because every cell is n/i (the backends lack
    the op: nothing to read there). ``checked_only`` also leaves out rows no case checked."""
    rows, omitted = [], 0
    for row in matrix.rows:
        cells = [matrix.cell(row, c) for c in matrix.columns]
        present = [c for c in cells if c is not None]
        if present and all(c.state == rep.NOT_IMPLEMENTED for c in present):
            omitted += 1
        elif present or not checked_only:
            rows.append(row)
    return rows, omitted


def omitted_line(omitted: int) -> list[str]:
    return [f"({omitted} clause rows omitted: every cell n/i)"] if omitted else []


def cell_text(cell: rep.Cell | None) -> str:
    if cell is None:
        return "-"
    counts, state = cell.counts, cell.state
    if state not in (*rep.ANY_BROKEN, rep.EXPECTED):
        return SHORT[state]
    # n of the m cases that ran to a verdict; n/i and skipped ones apart (they were in m: 4/46 for 4/4)
    apart = ", ".join(f"{counts[s]} {SHORT[s]}" for s in rep.UNJUDGED if counts[s])
    return f"{SHORT[state]} {counts[state]}/{cell.judged}" + (f" ({apart})" if apart else "")


def summary_line(column: str, counts) -> str:
    """``mine@cpu: 2 FAIL (MUST), 9 should-fail (SHOULD); 48 pass, 9 skip``: the verdicts first."""
    must = sum(counts[s] for s in rep.BROKEN)
    should = sum(counts[s] for s in rep.SHOULD_BROKEN)
    verdict = "conforms" if not must else f"{must} MUST broken"
    verdict += f", {should} SHOULD failed" if should else ""
    parts = [f"{counts[s]} {s}" for s in rep.STATES if counts[s]]
    return f"{column}: {verdict} ({', '.join(parts)})"


def text(document: dict) -> str:
    """Per-backend summary, the matrix, failures with their rerun commands, expectation notes."""
    matrix = rep.build_matrix(document)
    lines = [f"opconform: {line}" for line in document.get("headline") or []]  # --fold-cards (DEV-FOLD)
    lines += ["opconform summary (cases per backend@device; MUST failures fail the run, SHOULD ones only "
              "with --strict):"]  # fmt: skip
    for column, counts in rep.backend_summary(document).items():
        lines.append("  " + summary_line(column, counts))
    lines += readiness.text_lines(document)  # a model profile run's (MODEL-READINESS)
    rows, omitted = matrix_rows(matrix, checked_only=True)
    width = max([len(r) for r in rows] + [6])
    widths = [max(len(c), 11) for c in matrix.columns]
    lines += [""] + [  # the matrix's product tuple(s): what hardware and software its verdicts are about
        f"product{' of ' + str(run.get('name')) if run.get('name') else ''}: {products.line(run['product'])}"
        for run in document.get("merged_from") or [document]
        if run.get("product")
    ]
    lines += [
        "clause".ljust(width)
        + "  level   "
        + "  ".join(c.ljust(w) for c, w in zip(matrix.columns, widths, strict=True)),
    ]
    for row in rows:
        cells = [cell_text(matrix.cell(row, c)).ljust(w) for c, w in zip(matrix.columns, widths, strict=True)]
        lines.append(row.ljust(width) + f"  {matrix.levels.get(row, '-'):<6}  " + "  ".join(cells).rstrip())
    lines += omitted_line(omitted)
    lines.append(f"({LEGEND})")
    lines += _notes(document, matrix, bullet="  ")
    return "\n".join(lines)


def _notes(document: dict, matrix: rep.Matrix, *, bullet: str, code=lambda s: s, fence=False) -> list[str]:
    return failures.notes(document, bullet=bullet, code=code, fence=fence) + _after_failures(
        document, matrix, bullet=bullet
    )


def not_judged_lines(not_judged: dict) -> list[str]:
    """An msprobe replay's calls it counted and did not judge (report.json: ``msprobe.not_judged``)."""
    unmapped = not_judged.get("unmapped") or {}
    lines = []
    if unmapped:
        listed = ", ".join(f"{api} x{n}" for api, n in unmapped.items())
        lines.append(f"{sum(unmapped.values())} calls of {len(unmapped)} APIs without a contract op, "
                     f"not judged: {listed}")  # fmt: skip
    for reason, n in (not_judged.get("outside") or {}).items():
        lines.append(f"{n} call(s) outside their contract op, not judged: {reason}")
    if not_judged.get("backward"):
        lines.append(f"{not_judged['backward']} backward record(s) of mapped APIs, not judged (forward only)")
    return lines


def _not_judged(document: dict) -> list[tuple[str, list[str]]]:
    """Each replayed msprobe dump's not-judged lines, with the dump they are about (merged runs
    keep theirs under ``merged_from``)."""
    found = []
    for run in document.get("merged_from") or [document]:
        lines = not_judged_lines((run.get("msprobe") or {}).get("not_judged") or {})
        if lines:
            name = f"{run['name']}: " if run.get("name") else ""
            found.append((f"{name}msprobe dump {run.get('capture')}", lines))
    return found


def _after_failures(document: dict, matrix: rep.Matrix, *, bullet: str) -> list[str]:
    """Expectations to update, warnings, what a replay did not judge and the clauses no case checked."""
    lines = []
    notes = [e for e in document.get("expectations") or [] if e.get("status") in ("stale", "unexpected pass")]
    if notes:
        lines += ["", "Expectations to update:"]
        for entry in notes:
            target = entry.get("clause") or entry.get("test")
            if entry["status"] == "stale":
                lines.append(
                    f"{bullet}{entry['id']}: stale, matches no case of {entry['backend']} ({target})"
                )
            else:
                lines.append(f"{bullet}{entry['id']}: unexpected pass of {target}: remove this entry")
    warnings = document.get("warnings") or []
    if warnings:
        lines += ["", f"Warnings ({len(warnings)}):"]
        lines += [f"{bullet}{warning}" for warning in warnings]
    for about, listed in _not_judged(document):
        lines += ["", f"Not judged ({about}):"] + [f"{bullet}{line}" for line in listed]
    uncovered = rep.coverage(document, matrix)["uncovered"]
    if uncovered:
        lines += ["", f"Clauses no case checked in this run: {', '.join(uncovered)}"]
    return lines


def _md_escape(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def markdown(document: dict) -> str:
    matrix = rep.build_matrix(document)
    lines = ["# opconform conformance report", ""]
    lines += [f"**{_md_escape(line)}**" for line in document.get("headline") or []] + [""] * bool(
        document.get("headline")
    )
    runs = document.get("merged_from") or [document]
    for run in runs:
        lines.append(
            f"- {run.get('name', 'run')}: host `{run.get('host')}`, devices {run.get('devices')}, "
            f"torch {run.get('torch')}, profile {run.get('profile')}, created {run.get('created')}"
        )
        lines += [f"  - product: {_md_escape(products.line(run.get('product')))}"] * bool(run.get("product"))
    # The failures first, root cause leading: what a reader of the file came for (the terminal
    # prints them last, where it leaves them in view).
    lines += failures.notes(document, bullet="- ", code=lambda s: f"`{s}`", fence=True, heading="## ")
    lines += readiness.markdown_lines(document)
    lines += ["", "## Summary", "", "| backend@device | verdict | " + " | ".join(rep.STATES) + " |"]
    lines.append("|---" * (len(rep.STATES) + 2) + "|")
    for column, counts in rep.backend_summary(document).items():
        verdict = summary_line(column, counts).partition(": ")[2].partition(" (")[0]
        lines.append(f"| {column} | {verdict} | " + " | ".join(str(counts[s]) for s in rep.STATES) + " |")
    lines += ["", "## Matrix", "", "| family | clause | level | " + " | ".join(matrix.columns) + " |"]
    lines.append("|---" * (len(matrix.columns) + 3) + "|")
    rows, omitted = matrix_rows(matrix, checked_only=False)
    for row in rows:
        cells = []
        for column in matrix.columns:
            cell = matrix.cell(row, column)
            label = cell_text(cell)
            if cell is not None and cell.state in (rep.SKIP, rep.EXPECTED) and cell.reasons:
                label += f" ({_md_escape('; '.join(cell.reasons))[:120]})"
            elif cell is None and row in matrix.rules:
                label = "rule"
            cells.append(label)
        level = matrix.levels.get(row, "-")
        lines.append(f"| {matrix.families.get(row, '-')} | {row} | {level} | " + " | ".join(cells) + " |")
    lines += ["", *omitted_line(omitted), f"_{LEGEND}; {RULE_LEGEND}_"]
    lines += _after_failures(document, matrix, bullet="- ")
    return "\n".join(lines) + "\n"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f4f4f4;position:sticky;top:0}td.st{text-align:center;white-space:nowrap}
.pass{background:#d9f2d9}.fail{background:#f8c9c9;font-weight:bold}.xfail{background:#fde9b8}
.shouldfail{background:#fbe3cf}
.xpass{background:#d5e3fb}.skip{background:#eee;color:#666}.ni{background:#fafafa;color:#999}
.none{color:#bbb}.hidden{display:none}#filters label{margin-right:1em}
details{margin:.4em 0}pre{background:#f7f7f7;padding:.5em;overflow:auto;max-height:20em}
code{background:#f2f2f2;padding:0 3px}
"""
STATE_CLASS = {
    rep.CRASH: "fail",
    rep.TIMEOUT: "fail",
    rep.FAIL: "fail",
    rep.SHOULD_FAIL: "shouldfail",
    rep.EXPECTED: "xfail",
    rep.XPASS: "xpass",
    rep.PASS: "pass",
    rep.SKIP: "skip",
    rep.NOT_IMPLEMENTED: "ni",
}
# Filters hide rows (family) and columns (backend, device); ?backend=X&device=Y&family=Z
# preset them. window.onerror records any error in the page, so a headless browser check can
# read it from the DOM.
_JS = """
(function(){
  var errors=document.getElementById('js-errors');
  window.addEventListener('error',function(e){errors.textContent+=String(e.message)+'\\n';});
  function apply(){
    var fam=document.getElementById('f-family').value,
        be=document.getElementById('f-backend').value,
        dev=document.getElementById('f-device').value;
    document.querySelectorAll('#matrix tr[data-family]').forEach(function(tr){
      tr.classList.toggle('hidden', fam!=='' && tr.dataset.family!==fam);
    });
    document.querySelectorAll('#matrix [data-column]').forEach(function(el){
      var hide=(be!=='' && el.dataset.backend!==be)||(dev!=='' && el.dataset.device!==dev);
      el.classList.toggle('hidden', hide);
    });
  }
  var query=new URLSearchParams(window.location.search);
  ['family','backend','device'].forEach(function(name){
    var select=document.getElementById('f-'+name);
    if(query.has(name)){select.value=query.get(name);}
    select.addEventListener('change',apply);
  });
  apply();
  document.documentElement.setAttribute('data-opconform-ready','1');
})();
"""


def _options(element_id: str, label: str, values) -> str:
    options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
    return f'<label>{label} <select id="{element_id}"><option value="">all</option>{options}</select></label>'


def html_page(document: dict) -> str:
    """A static page (no server, no network): summary, filterable matrix, failures, expectations."""
    esc = html.escape
    matrix = rep.build_matrix(document)
    backends = sorted({c.split("@")[0] for c in matrix.columns})
    devices = sorted({c.split("@")[1].split(" [")[0].split(" {")[0] for c in matrix.columns})
    families = sorted({matrix.families.get(r, "-") for r in matrix.rows})
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>opconform conformance report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>opconform conformance report</h1>",
        *[f"<p class='headline'><strong>{esc(line)}</strong></p>" for line in document.get("headline") or []],
    ]
    for run in document.get("merged_from") or [document]:
        parts.append(
            f"<p>{esc(str(run.get('name', 'run')))}: host <code>{esc(str(run.get('host')))}</code>, "
            f"devices {esc(str(run.get('devices')))}, torch {esc(str(run.get('torch')))}, "
            f"profile {esc(str(run.get('profile')))}, created {esc(str(run.get('created')))}</p>"
        )
        if run.get("product"):
            parts.append(f"<p class='product'>product: {esc(products.line(run['product']))}</p>")
    warnings = document.get("warnings") or []
    if warnings:
        parts.append("<h2>Warnings</h2><ul id='warnings'>")
        parts += [f"<li>{esc(warning)}</li>" for warning in warnings] + ["</ul>"]
    parts += failures.html_parts(document)  # first, root cause leading (as report.md)
    parts += readiness.html_parts(document)
    parts.append("<h2>Summary</h2><table id='summary'><tr><th>backend@device</th><th>verdict</th>")
    parts += [f"<th>{esc(s)}</th>" for s in rep.STATES] + ["</tr>"]
    for column, counts in rep.backend_summary(document).items():
        verdict = summary_line(column, counts).partition(": ")[2].partition(" (")[0]
        parts.append(f"<tr><td>{esc(column)}</td><td>{esc(verdict)}</td>")
        parts.append("".join(f"<td>{counts[s]}</td>" for s in rep.STATES) + "</tr>")
    parts += ["</table>", "<h2>Matrix</h2><div id='filters'>"]
    parts += [
        _options("f-family", "family", families),
        _options("f-backend", "backend", backends),
        _options("f-device", "device", devices),
        "</div><table id='matrix'><thead><tr><th>family</th><th>clause</th><th>level</th>",
    ]
    for column in matrix.columns:
        backend, device = column.split(" [")[0].split("@")
        parts.append(
            f"<th data-column data-backend='{esc(backend)}' data-device='{esc(device)}'>{esc(column)}</th>"
        )
    parts.append("</tr></thead><tbody>")
    rows, omitted = matrix_rows(matrix, checked_only=False)
    for row in rows:
        family = matrix.families.get(row, "-")
        parts.append(
            f"<tr data-family='{esc(family)}'><td>{esc(family)}</td>"
            f"<td title='{esc(matrix.titles.get(row, ''))}'>{esc(row)}</td>"
            f"<td>{esc(matrix.levels.get(row, '-'))}</td>"
        )
        for column in matrix.columns:
            backend, device = column.split(" [")[0].split("@")
            cell = matrix.cell(row, column)
            state_class = STATE_CLASS[cell.state] if cell else "none"
            title = "; ".join(cell.reasons) if cell else (matrix.rules.get(row) or "not run")
            label = cell_text(cell) if cell or row not in matrix.rules else "rule"
            parts.append(
                f"<td class='st {state_class}' data-column data-backend='{esc(backend)}' "
                f"data-device='{esc(device)}' title='{esc(title)}'>{esc(label)}</td>"
            )
        parts.append("</tr>")
    legend = " ".join([*omitted_line(omitted), f"{LEGEND}; {RULE_LEGEND}"])
    parts.append(f"</tbody></table><p><small>{esc(legend)}</small></p>")
    # Other backends' manifests (the built-in ones, in a run of a user's backend) are not listed.
    run_backends = set(document.get("backends") or [])
    entries = [
        e for e in document.get("expectations") or [] if not run_backends or e.get("backend") in run_backends
    ]
    others = len(document.get("expectations") or []) - len(entries)
    if entries or others:
        parts.append("<h2>Expectations</h2>")
    if others:
        parts.append(f"<p id='other-manifests'>{others} entries of backends not in this run omitted</p>")
    if entries:
        parts.append("<table id='expectations'><tr><th>entry</th><th>backend</th>")
        parts.append("<th>target</th><th>reason</th><th>status</th><th>note</th></tr>")
        for entry in entries:
            target = entry.get("clause") or entry.get("test")
            status = entry.get("status", "")
            hint = " (remove this entry)" if status == "unexpected pass" else ""
            parts.append(
                f"<tr><td>{esc(entry['id'])}</td><td>{esc(entry['backend'])}</td><td>{esc(str(target))}</td>"
                f"<td>{esc(entry['reason'])}</td><td>{esc(status + hint)}</td>"
                f"<td>{esc(entry.get('note', ''))}</td></tr>"
            )
        parts.append("</table>")
    for about, listed in _not_judged(document):
        parts.append(f"<h2>Not judged</h2><p>{esc(about)}</p><ul class='not-judged'>")
        parts += [f"<li>{esc(line)}</li>" for line in listed] + ["</ul>"]
    uncovered = rep.coverage(document, matrix)["uncovered"]
    uncovered_text = esc(", ".join(uncovered) or "none")
    parts.append(f"<h2>Coverage</h2><p id='uncovered'>Clauses no case checked: {uncovered_text}</p>")
    # The raw document, for scripts that scrape the page; "</" cannot end the script element.
    raw = json.dumps({k: v for k, v in document.items() if k != "results"}).replace("</", "<\\/")
    parts.append(f"<script type='application/json' id='opconform-meta'>{raw}</script>")
    parts.append(f"<pre id='js-errors'></pre><script>{_JS}</script></body></html>")
    return "".join(parts)


def write_outputs(document: dict, out) -> list:
    """Write report.json, report.md and report.html of ``document`` into directory ``out``."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in (
        ("report.json", json.dumps(document, indent=1)),
        ("report.md", markdown(document)),
        ("report.html", html_page(document)),
    ):
        (out / name).write_text(content, encoding="utf-8")
        written.append(out / name)
    return written

"""The readiness table of a model profile run (spec/models.md, MODEL-READINESS), per model and
backend@device: each op the model calls, whether the backend implements it, its verdict at the
model's parameters, the layer kinds and layers calling it. Read from the results document alone
(its ``models`` table and the cases tagged with the model), torch-free like the rest of the report.
"""

from __future__ import annotations

import html

from conformance import promises
from opconform import report as rep

# Verdicts at the MUST level, worst first (SHOULD failures are counted beside the verdict: spec/README.md,
# Levels); "not implemented" and "no case" say why there is no verdict.
NOT_IMPLEMENTED, NO_CASE, UNSUPPORTED = "n/i", "no case", "unsupported"
BROKEN_ORDER = (rep.CRASH, rep.TIMEOUT, rep.FAIL)


def layer_ranges(layers: list[int]) -> str:
    """0,1,2,5,6 -> '0-2,5-6'; an op called outside the layers (a scheduler step): '-'."""
    if not layers:
        return "-"
    spans, start, prev = [], layers[0], layers[0]
    for layer in [*layers[1:], None]:
        if layer is not None and layer == prev + 1:
            prev = layer
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if layer is not None:
            start = prev = layer
    return ",".join(spans)


def _params(params: dict) -> str:
    shown = {k: v for k, v in params.items() if v not in (None, False, [], {})}
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())


def _unsupported(cases: list[dict], entries: dict[str, dict]) -> str | None:
    """``unsupported: CLAUSE (note)`` for the cases a manifest declares unsupported (skipped, never
    run): the profile run kept only cases the model relies on, so the op is not ready; else None."""
    said = []
    for case in cases:
        expectation = case.get("expectation") or {}
        if expectation.get("reason") != UNSUPPORTED or rep.case_state(case) != rep.SKIP:
            continue
        entry = entries.get(expectation.get("id"), {})
        clause = entry.get("clause") or ",".join(case.get("clauses") or []) or "(no clause)"
        said.append(f"{clause} ({entry.get('note') or expectation.get('id')})")
    return f"{UNSUPPORTED}: " + "; ".join(dict.fromkeys(said)) if said else None


def _unpassed(cases: list[dict]) -> str | None:
    """``skip: CLAUSE (reason)`` (or ``n/i: ...``) for the first clause none of whose cases ran to a
    pass: a clause the model relies on that was not checked; else None."""
    for clause in dict.fromkeys(c for case in cases for c in case.get("clauses") or []):
        mine = [case for case in cases if clause in (case.get("clauses") or [])]
        if clause in promises.GATED and all(rep.case_state(c) == rep.NOT_IMPLEMENTED for c in mine):
            continue  # a promise the backend does not make: nothing the model relies on (MODEL-READINESS)
        if not any(rep.case_state(case) in (rep.PASS, rep.XPASS, rep.EXPECTED) for case in mine):
            state = rep.case_state(mine[0])
            state = NOT_IMPLEMENTED if state == rep.NOT_IMPLEMENTED else state
            return f"{state}: {clause} ({mine[0].get('reason') or 'no reason given'})"
    return None


def verdict(cases: list[dict], entries: dict[str, dict]) -> str:
    """The op's MUST verdict: its worst broken case; else what a MUST clause it relies on lacks
    (declared unsupported, a declared failure, no case run to a pass); else pass. A SHOULD clause's
    failure is counted beside the verdict, never as it (spec/README.md, Levels)."""
    must = [c for c in cases if c.get("level") != rep.SHOULD and rep.case_state(c) != rep.SHOULD_FAIL]
    states = {rep.case_state(c) for c in must}
    said = next((s for s in BROKEN_ORDER if s in states), None) or _unsupported(must, entries)
    if said is None and rep.EXPECTED in states:
        said = rep.EXPECTED
    said = said or _unpassed(must) or (rep.XPASS if rep.XPASS in states else rep.PASS)
    should = sum(rep.case_state(c) == rep.SHOULD_FAIL for c in cases)
    return said + (f" ({should} SHOULD failed)" if should else "")


def rows(document: dict, model: str, column: str) -> list[dict]:
    """One row per op of ``model``: op, implemented (yes / n/i / no case), verdict, kinds, layers."""
    entry = (document.get("models") or {}).get(model) or {}
    cases = [r for r in document["results"] if r.get("model") == model and rep.column_of(r) == column]
    entries = {e.get("id"): e for e in document.get("expectations") or []}
    out = []
    for op in dict.fromkeys(u["op"] for u in entry.get("ops", [])):
        uses = [u for u in entry["ops"] if u["op"] == op]
        mine = [r for r in cases if r.get("op") == op]
        if not mine:
            implemented = result = NO_CASE
        elif all(rep.case_state(r) == rep.NOT_IMPLEMENTED for r in mine):
            implemented = result = NOT_IMPLEMENTED
        else:
            implemented, result = "yes", verdict(mine, entries)
        layers = sorted({layer for u in uses for layer in u.get("layers") or []})
        kinds = "; ".join(f"{u['kind']}: {_params(u.get('params') or {})}".rstrip(": ") for u in uses)
        out.append({"op": op, "implemented": implemented, "verdict": result, "kinds": kinds,
                    "layers": layer_ranges(layers)})  # fmt: skip
    return out


def tables(document: dict) -> list[tuple[str, str, str, list[dict]]]:
    """(model, title, column, rows) for each model and each backend@device that ran it."""
    found = []
    for model, entry in (document.get("models") or {}).items():
        columns = list(dict.fromkeys(rep.column_of(r).split(" [")[0] for r in document["results"]
                                     if r.get("model") == model))  # fmt: skip
        for column in columns:
            found.append(
                (model, entry.get("title", model), column, rows(document, model, f"{column} [{model}]"))
            )
    return found


HEAD = ("op", "implemented", "verdict", "layers", "layer kinds and fixed parameters")


def text_lines(document: dict) -> list[str]:
    lines = []
    for model, title, column, table in tables(document):
        lines += ["", f"readiness of {column} for model {model} ({title}):"]
        width = max([len(r["op"]) for r in table] + [2])
        for r in table:
            lines.append(f"  {r['op'].ljust(width)}  {r['implemented']:<8} {r['verdict']:<24} "
                         f"layers {r['layers']:<14} {r['kinds']}")  # fmt: skip
    return lines


def markdown_lines(document: dict) -> list[str]:
    lines = []
    for model, title, column, table in tables(document):
        lines += ["", f"## Readiness: {model} ({title}) on {column}", "", "| " + " | ".join(HEAD) + " |"]
        lines.append("|---" * len(HEAD) + "|")
        for r in table:
            cells = (r["op"], r["implemented"], r["verdict"], r["layers"], r["kinds"].replace("|", "\\|"))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def html_parts(document: dict) -> list[str]:
    esc = html.escape
    parts = []
    for model, title, column, table in tables(document):
        parts.append(f"<h2>Readiness: {esc(model)} ({esc(title)}) on {esc(column)}</h2>")
        parts.append("<table class='readiness'><tr>" + "".join(f"<th>{esc(h)}</th>" for h in HEAD) + "</tr>")
        for r in table:
            cells = (r["op"], r["implemented"], r["verdict"], r["layers"], r["kinds"])
            parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
        parts.append("</table>")
    return parts

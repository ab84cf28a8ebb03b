"""The dashboard's model: many runs' reports read once each, keyed by product, kept compact.

A product is a column of the suite's reports (``backend@device``, `` [model]`` for a profile run)
on one hardware and software stack: the results document's ``product`` tuple without the fields
that change from run to run (commit, suite version, host, date), or, for a document without one,
its ``torch`` and ``python``. Each run of a product is a point of its history, in date order.

Every report is loaded through ``opconform.report.load`` (a bad file is one line naming it) and
reduced as it is read: each case's state as one letter and its reason as a number, against one
table of cases shared by all runs; the full cells and failure records are read (a second time)
only from each product's latest run. Diffs between runs are ``opconform.report.diff``'s
categories, read from a table of every state transition computed by ``report.diff`` itself
(``transitions``), so the site's diffs and ``opconform diff`` cannot disagree on runs of the same
columns (cases paired by node id). ``opconform diff`` of two runs of different columns (an NPU and
a GPU run) pairs their cases without backend and device (``ratios.keyed``); the site does not.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections import Counter
from dataclasses import dataclass, field

from conformance.results import ResultsError
from opconform import ratios, render
from opconform import report as rep

# The product tuple's fields that name one run, not the product (the suite's version, its commit,
# the host, the date): they label the runs of a product's history instead.
RUN_FIELDS = ("opconform", "commit", "host", "created")
# A document without a product tuple: what of its meta names the software stack.
FALLBACK_FIELDS = ("torch", "python")
ABSENT = "."
# One letter per case state (report.STATES), for the compact per-run tables and the site's data.
CODE = dict(zip(rep.STATES, "CTFSEXPKN", strict=True))
STATE = {code: state for state, code in CODE.items()}
# A document of one case in each state, for ``transitions``; checked against report.case_state.
_SAMPLE = {
    rep.CRASH: {"outcome": "crash"},
    rep.TIMEOUT: {"outcome": "timeout"},
    rep.FAIL: {"outcome": "failed"},
    rep.SHOULD_FAIL: {"outcome": "failed (SHOULD)"},
    rep.EXPECTED: {"outcome": "expected failure"},
    rep.XPASS: {"outcome": "passed", "expectation": {"verdict": "unexpected pass"}},
    rep.PASS: {"outcome": "passed"},
    rep.SKIP: {"outcome": "skipped"},
    rep.NOT_IMPLEMENTED: {"outcome": "not implemented"},
}


def transitions() -> dict[str, str]:
    """``OLD NEW R`` -> report.diff's category: OLD and NEW state letters (``.``: absent), R ``1``
    when both cases hold different reasons; a transition that is no change is left out."""
    table = {}
    for old in (None, *rep.STATES):
        for new in (None, *rep.STATES):
            for differ in (0, 1):

                def document(state, reason):
                    case = {"nodeid": "case", **_SAMPLE[state], "reason": reason} if state else None
                    assert case is None or rep.case_state(case) == state, (state, case)
                    return {"results": [case] if case else []}

                changes = rep.diff(document(old, "a"), document(new, "b" if differ else "a"))
                found = [category for category, items in changes.items() if items]
                if found:
                    key = f"{CODE.get(old, ABSENT)}{CODE.get(new, ABSENT)}{differ}"
                    table[key] = found[0]
    return table


@dataclass
class Product:
    """One column on one stack, and its runs in date order."""

    id: str
    column: str
    fields: dict[str, str]
    runs: list[int] = field(default_factory=list)  # Run.index, oldest first
    latest: dict = field(default_factory=dict)  # the latest run's cells and failures (latest_parts)

    @property
    def label(self) -> str:
        facts = " ".join(f"{k} {v}" for k, v in self.fields.items())
        return f"{self.column} ({facts})" if facts else self.column


@dataclass(frozen=True)
class Cases:
    """Cases of one run: indices into Site.cases (ascending), one state letter (CODE) and one reason
    (an index into Site.reasons, 0: none) each. Runs of a product that agree compare equal, fast."""

    indices: array
    states: str
    reasons: array

    def rows(self):
        return zip(self.indices, self.states, self.reasons, strict=True)

    def table(self) -> dict[int, tuple[str, int]]:
        return {c: (s, r) for c, s, r in self.rows()}


NO_CASES = Cases(array("I"), "", array("I"))


@dataclass
class Run:
    """One report, reduced: its labels, and per case (an index into Site.cases) a state and a reason."""

    index: int  # position in date order (set once every report is read)
    name: str  # the path as given
    order: tuple  # (created, position on the command line): the date order
    created: str | None
    commit: str | None
    host: str | None
    exitstatus: int
    products: dict[str, str]  # column -> Product.id
    counts: dict[str, Counter]  # column -> cases per state
    columns: dict[str, Cases]  # column -> its cases
    reruns: dict[int, str]  # a broken case's rerun line
    worst: dict[tuple[str, str], str]  # (column, clause) -> the cell's state letter

    @property
    def label(self) -> str:
        commit = f" {self.commit[:12]}" if self.commit else ""
        return f"{self.created or 'undated'}{commit}"

    def whole(self) -> Cases:
        """Every column's cases as one, indices ascending."""
        rows = sorted(row for cases in self.columns.values() for row in cases.rows())
        indices, reasons = array("I", (r[0] for r in rows)), array("I", (r[2] for r in rows))
        return Cases(indices, "".join(r[1] for r in rows), reasons)


@dataclass
class Site:
    """Everything the pages need: runs in date order, products, the shared case table, clauses."""

    runs: list[Run] = field(default_factory=list)
    products: dict[str, Product] = field(default_factory=dict)
    cases: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)  # key, column, clauses
    case_index: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=lambda: [""])
    reason_index: dict[str, int] = field(default_factory=lambda: {"": 0})
    clauses: dict[str, dict] = field(default_factory=dict)  # clause -> its record (family, level, title)

    def case(self, key: str, column: str, clauses: list[str]) -> int:
        index = self.case_index.get(key)
        if index is None:
            index = self.case_index[key] = len(self.cases)
            self.cases.append((key, column, tuple(clauses)))
        return index

    def reason(self, text: str | None) -> int:
        text = text or ""
        index = self.reason_index.get(text)
        if index is None:
            index = self.reason_index[text] = len(self.reasons)
            self.reasons.append(text)
        return index

    def families(self) -> dict[str, list[str]]:
        """family -> its clauses, in the reports' (spec) order."""
        found: dict[str, list[str]] = {}
        for clause, info in self.clauses.items():
            found.setdefault(info.get("family") or "-", []).append(clause)
        return found

    def previous(self, product: Product) -> tuple[Run, Run] | None:
        """(previous, latest) runs of ``product``; None with fewer than two."""
        if len(product.runs) < 2:
            return None
        return self.runs[product.runs[-2]], self.runs[product.runs[-1]]


def product_fields(meta: dict, source: str) -> dict[str, str]:
    """What names a run's stack: its ``product`` tuple less RUN_FIELDS, else FALLBACK_FIELDS of its meta."""
    product = meta.get("product")
    if product is None:
        return {k: str(meta[k]) for k in FALLBACK_FIELDS if meta.get(k) not in (None, "")}
    if not isinstance(product, dict):
        raise ResultsError(f"{source}: field 'product': expected an object, got {product!r}")
    # The tuple's own order (chip first) for labels; _product_id sorts the keys, so it is stable.
    return {str(k): str(v) for k, v in product.items() if k not in RUN_FIELDS and v not in (None, "")}


def _run_field(meta: dict, name: str) -> str | None:
    product = meta.get("product") if isinstance(meta.get("product"), dict) else {}
    value = product.get(name) or meta.get(name)
    return str(value) if value not in (None, "") else None


def _product_id(column: str, fields: dict[str, str]) -> str:
    """A stable short name for file names: the same product gets the same pages in every build."""
    text = json.dumps([column, fields], sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def build(paths: list[str]) -> Site:
    """Read every report once, in the order given, and order the runs by date; then read again only
    each product's latest run, for its cells and failure records (a few reports, not hundreds)."""
    site = Site()
    paths = list(dict.fromkeys(paths))  # a report named twice (overlapping globs) is one run
    for position, path in enumerate(paths):
        document = rep.load(path)
        site.runs.append(_reduce(site, document, rep.build_matrix(document), str(path), position))
    site.runs.sort(key=lambda r: r.order)
    for index, run in enumerate(site.runs):
        run.index = index
        for product_id in run.products.values():
            site.products[product_id].runs.append(index)
    latest: dict[int, list[str]] = {}  # run index -> the columns whose latest run it is
    for product in site.products.values():
        latest.setdefault(product.runs[-1], []).append(product.column)
    for index, columns in sorted(latest.items()):
        run = site.runs[index]
        document = rep.load(run.name)
        for column, part in latest_parts(document, rep.build_matrix(document), columns, run).items():
            site.products[run.products[column]].latest = part
    return site


def _reduce(site: Site, document: dict, matrix: rep.Matrix, name: str, position: int) -> Run:
    meta = {k: v for k, v in document.items() if k != "results"}
    fields = product_fields(meta, name)
    # A merged report (opconform merge) has no date of its own: its latest run's.
    merged = [
        str(m["created"]) for m in meta.get("merged_from") or [] if isinstance(m, dict) and m.get("created")
    ]
    created = _run_field(meta, "created") or max(merged, default=None)
    for clause, info in (document.get("clauses") or {}).items():
        site.clauses.setdefault(clause, info if isinstance(info, dict) else {})
    records: dict[str, dict[int, dict]] = {}
    products: dict[str, str] = {}
    counts: dict[str, Counter] = {}
    for result in document["results"]:
        column = rep.column_of(result)
        if column not in products:
            product_id = _product_id(column, fields)
            site.products.setdefault(product_id, Product(product_id, column, fields))
            products[column], counts[column], records[column] = product_id, Counter(), {}
        counts[column][rep.case_state(result)] += 1
        # report.diff keeps a case's last record (setup, call, teardown): so does the table.
        records[column][site.case(ratios.node_key(result), column, result.get("clauses") or [])] = result
    columns, reruns = {}, {}
    for column, held in records.items():
        indices = array("I", sorted(held))
        states = "".join(CODE[rep.case_state(held[c])] for c in indices)
        reasons = array("I", (site.reason(held[c].get("reason")) for c in indices))
        columns[column] = Cases(indices, states, reasons)
        for c in indices:
            line = (held[c].get("failure") or {}).get("rerun")
            if line and rep.case_state(held[c]) in rep.ANY_BROKEN:
                reruns[c] = line
    worst = {(column, row): CODE[cell.state] for (row, column), cell in matrix.cells.items()}
    return Run(
        index=position,
        name=name,
        order=(created or "", position),
        created=created,
        commit=_run_field(meta, "commit"),
        host=_run_field(meta, "host"),
        exitstatus=int(document.get("exitstatus") or 0),
        products=products,
        counts=counts,
        columns=columns,
        reruns=reruns,
        worst=worst,
    )


def latest_parts(document: dict, matrix: rep.Matrix, columns: list[str], run: Run) -> dict[str, dict]:
    """What the pages show of a product's latest run, per column: each clause's cell (state, text,
    reasons) and the column's failures of both levels (their full records, for the clause pages)."""
    parts = {column: {"run": run.name, "cells": {}, "failures": []} for column in columns}
    for (row, column), cell in matrix.cells.items():
        if column in parts:
            parts[column]["cells"][row] = {
                "state": cell.state,
                "text": render.cell_text(cell),
                "reasons": cell.reasons,
            }
    for result in document["results"]:
        column = rep.column_of(result)
        if column in parts and rep.case_state(result) in rep.ANY_BROKEN:
            parts[column]["failures"].append(result)
    return parts


def diff_runs(site: Site, old: Run, new: Run, table: dict[str, str], column: str | None = None) -> dict:
    """report.diff's categories between two runs (only ``column``'s cases when given): category ->
    [(case index, old letter, new letter)]. A column whose cases agree is skipped unread."""
    found: dict[str, list] = {}
    for name in [column] if column else sorted(old.columns.keys() | new.columns.keys()):
        was_cases, now_cases = old.columns.get(name, NO_CASES), new.columns.get(name, NO_CASES)
        if was_cases == now_cases:
            continue
        before, after = was_cases.table(), now_cases.table()
        for index in sorted(before.keys() | after.keys()):
            was, now = before.get(index, (ABSENT, 0)), after.get(index, (ABSENT, 0))
            differ = int(was[0] != ABSENT and now[0] != ABSENT and was[1] != now[1])
            category = table.get(f"{was[0]}{now[0]}{differ}")
            if category:
                found.setdefault(category, []).append((index, was[0], now[0]))
    return found

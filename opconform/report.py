"""The conformance report: load, merge and diff results documents, and build the matrix.

A results document is what the plugin writes with ``--opconform-json`` (schema
``opconform-results``); ``opconform run`` saves it as report.json. The matrix is derived from
it: rows are spec clauses, columns ``backend@device``, and each cell aggregates the cases that
check that clause there. Rendering lives in ``opconform.render``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from conformance import failure_record, product, results
from conformance.harness import ordering
from conformance.results import SCHEMA, Outcome
from conformance.spec_index import DIRECT, MUST, SHOULD, load_clauses
from opconform import ratios

# Cell and case states, most severe first: a cell shows the most severe state of its cases.
CRASH, TIMEOUT, FAIL, SHOULD_FAIL, EXPECTED, XPASS, PASS, SKIP, NOT_IMPLEMENTED = (
    Outcome.CRASH.value,
    Outcome.TIMEOUT.value,
    "fail",
    "SHOULD fail",  # a SHOULD clause's failure (spec/README.md, Levels): apart from the MUST ones
    Outcome.EXPECTED_FAILURE.value,
    "unexpected pass",
    "pass",
    "skip",
    Outcome.NOT_IMPLEMENTED.value,
)
STATES = (CRASH, TIMEOUT, FAIL, SHOULD_FAIL, EXPECTED, XPASS, PASS, SKIP, NOT_IMPLEMENTED)
BROKEN = (CRASH, TIMEOUT, FAIL)  # a MUST level's non-conforming states: failures, regressions in diff
SHOULD_BROKEN = (SHOULD_FAIL,)  # failing only under --strict
ANY_BROKEN = (*BROKEN, *SHOULD_BROKEN)
# Cases without a verdict (the op not implemented, skipped): a cell's n/m counts them apart.
UNJUDGED = (NOT_IMPLEMENTED, SKIP)
NO_CLAUSE = "(no clause)"
RUN_FIELDS = ("host", "created", "torch", "profile", "devices", "backends", "product", "cards")
REPLAY_FIELDS = ("capture", "capture_format", "msprobe")

ReportError = results.ResultsError


def load(path: str | Path) -> dict:
    """Read and check a results document (``conformance.results``); errors name the file and field."""
    return results.load(path).to_dict()


def case_state(result: dict) -> str:
    outcome = result["outcome"]
    if outcome == Outcome.PASSED:
        verdict = (result.get("expectation") or {}).get("verdict")
        return XPASS if verdict == "unexpected pass" else PASS
    if outcome == Outcome.FAILED:
        return FAIL
    if outcome == Outcome.SHOULD_FAILED:
        return SHOULD_FAIL
    if outcome == Outcome.EXPECTED_FAILURE:
        return EXPECTED
    if outcome == Outcome.NOT_IMPLEMENTED:
        return NOT_IMPLEMENTED
    if outcome in (Outcome.TIMEOUT, Outcome.CRASH):
        return str(outcome)
    return SKIP


def column_of(result: dict) -> str:
    """``backend@device`` (``native@npu:3`` on a card: spec/devices.md, DEV-CARDS), `` [model]`` for
    a case of a model profile run (MODEL-REPORT), `` {torch=2.6}`` for a merged run's product
    where the merged runs' tuples differ (DEV-PRODUCT)."""
    model = f" [{result['model']}]" if result.get("model") else ""
    made = f" {{{result['product']}}}" if result.get("product") else ""
    return f"{result.get('backend') or '-'}@{result.get('device') or '-'}{model}{made}"


@dataclass
class Cell:
    cases: list[dict] = field(default_factory=list)

    @property
    def counts(self) -> Counter:
        return Counter(case_state(c) for c in self.cases)

    @property
    def state(self) -> str:
        counts = self.counts
        return next(s for s in STATES if counts[s])

    @property
    def judged(self) -> int:
        """How many of the cell's cases ran to a verdict (the m of ``FAIL n/m``)."""
        counts = self.counts
        return sum(n for state, n in counts.items() if state not in UNJUDGED)

    @property
    def reasons(self) -> list[str]:
        return sorted({c["reason"] for c in self.cases if c.get("reason")})

    @property
    def failures(self) -> list[dict]:
        return [c for c in self.cases if case_state(c) in BROKEN]


@dataclass
class Matrix:
    rows: list[str]  # clause IDs, spec order, then clauses only the results name
    columns: list[str]  # backend@device
    cells: dict[tuple[str, str], Cell]
    families: dict[str, str]  # clause -> family
    titles: dict[str, str]
    rules: dict[str, str]  # rule clauses -> how they are applied
    levels: dict[str, str] = field(default_factory=dict)  # clause -> MUST or SHOULD

    def cell(self, row: str, column: str) -> Cell | None:
        return self.cells.get((row, column))


def build_matrix(document: dict) -> Matrix:
    clauses = document.get("clauses") or {}
    cells: dict[tuple[str, str], Cell] = defaultdict(Cell)
    extra_rows: list[str] = []
    columns: list[str] = []
    for result in document["results"]:
        column = column_of(result)
        if column not in columns:
            columns.append(column)
        for clause in result.get("clauses") or [NO_CLAUSE]:
            if clause not in clauses and clause not in extra_rows:
                extra_rows.append(clause)
            cells[clause, column].cases.append(result)
    order = {b: i for i, b in enumerate(document.get("backends") or [])}
    columns.sort(key=lambda c: (order.get(c.split("@")[0], len(order)), c))
    return Matrix(
        rows=[*clauses, *sorted(extra_rows)],
        columns=columns,
        cells=dict(cells),
        families={c: (info.get("family") or "-") for c, info in clauses.items()},
        titles={c: info.get("title", "") for c, info in clauses.items()},
        rules={c: info["rule"] for c, info in clauses.items() if info.get("rule")},
        levels={c: info.get("level") or MUST for c, info in clauses.items()},
    )


def backend_summary(document: dict) -> dict[str, Counter]:
    """backend@device -> case counts per state."""
    summary: dict[str, Counter] = defaultdict(Counter)
    for result in document["results"]:
        summary[column_of(result)][case_state(result)] += 1
    return {column: summary[column] for column in build_matrix(document).columns}


def coverage(document: dict, matrix: Matrix | None = None) -> dict:
    """Clauses no case checked at all, and per column the clauses checked elsewhere but not there.

    A column where the backend lacks the op shows *not implemented*, which is covered; a gap is
    a clause with no case at all in that column.
    """
    matrix = matrix or build_matrix(document)
    spec_rows = [r for r in matrix.rows if r in (document.get("clauses") or {})]
    checked = {row for row, _ in matrix.cells}
    uncovered = [r for r in spec_rows if r not in checked and r not in matrix.rules]
    gaps = {
        column: [r for r in spec_rows if r in checked and (r, column) not in matrix.cells]
        for column in matrix.columns
    }
    return {
        "uncovered": uncovered,
        "rules": sorted(matrix.rules),
        "gaps": {c: rows for c, rows in gaps.items() if rows},
    }


def failures(document: dict, *, level: str = MUST) -> list[dict]:
    """The failures of one level: MUST (crashes, timeouts, failures) or SHOULD."""
    states = BROKEN if level == MUST else SHOULD_BROKEN
    return [r for r in document["results"] if case_state(r) in states]


def failure_rank(result: dict, clauses: dict) -> int:
    """Where a failure stands in the real-bug-first order (conformance/harness/ordering.py's ranks, from
    its clause's level, kind and *Refines:* in the document's clause table): a MUST failure of a
    direct clause that pins a mechanism first, then the other direct ones, then metamorphic, tie
    and bad-input ones, SHOULD last. A failure whose comparison was metamorphic ranks so."""
    failure = result.get("failure") or {}
    info = clauses.get(failure.get("clause") or "") or _spec_record(failure.get("clause"))
    if case_state(result) in SHOULD_BROKEN or info.get("level") == SHOULD:
        return ordering.SHOULD_ONLY
    kind = failure.get("kind") or info.get("kind") or DIRECT
    if kind != DIRECT:
        return ordering.INDIRECT
    return ordering.PINNING if info.get("refines") else ordering.ORDINARY


def example_size(result: dict) -> tuple:
    """The size of a failure's falsifying example (``conformance.failure_record.size``)."""
    return failure_record.size((result.get("failure") or {}).get("example"))


@dataclass
class Cause:
    """The failures of one op on one backend@device: likely one bug, its smallest example first."""

    column: str
    op: str | None
    failures: list[dict]  # conformance failures by example size, then bad-input failures

    @property
    def smallest(self) -> dict:
        return self.failures[0]

    @property
    def clauses(self) -> list[str]:
        found = [
            (f.get("failure") or {}).get("clause") or ",".join(f.get("clauses") or []) for f in self.failures
        ]
        return list(dict.fromkeys(c for c in found if c))


def _spec_record(clause: str | None) -> dict:
    """A clause's record (level, kind, refines) from this opconform's spec, for a report whose clause
    table lacks it (an older report, a hand-made one); {} for an unknown clause or no spec."""
    try:
        known = load_clauses().get(clause or "")
    except (OSError, ValueError):
        return {}
    return known.record() if known is not None else {}


def causes(document: dict, *, level: str = MUST) -> list[Cause]:
    """Root cause first (the real bug first): each backend@device's failures of ``level`` grouped
    per op, each group opening with its best-ranked failure (``failure_rank``: a direct MUST clause
    that pins a mechanism, over the broad ones, over metamorphic, tie and bad-input ones), the
    smallest falsifying example (``example_size``) among those, and naming its failing clauses;
    groups ordered by their lead's rank, then its example's size. Columns in the matrix's order."""
    order = {c: i for i, c in enumerate(build_matrix(document).columns)}
    clauses = document.get("clauses") or {}
    groups: dict[tuple[str, str | None], list[dict]] = defaultdict(list)
    for result in failures(document, level=level):
        groups[column_of(result), result.get("op")].append(result)
    found = []
    for (column, op), members in groups.items():
        members.sort(key=lambda r: (failure_rank(r, clauses), example_size(r), r["nodeid"]))
        found.append(Cause(column, op, members))
    return sorted(
        found,
        key=lambda c: (
            order.get(c.column, len(order)),
            failure_rank(c.smallest, clauses),
            example_size(c.smallest),
            str(c.op),
        ),
    )


def conforms(document: dict, *, strict: bool = False) -> bool:
    """No unexpected MUST failure (declared deviations, skips, unexpected passes and SHOULD
    failures are fine; with ``strict`` a SHOULD failure is not) and a pytest run that completed
    (exit 0, or 1 for failures that the results then list)."""
    broken = failures(document) or (strict and failures(document, level=SHOULD))
    return not broken and document.get("exitstatus", 0) in (0, 1) and bool(document["results"])


def merge(documents: list[dict], *, names: list[str] | None = None) -> dict:
    """One document holding every run's results; each result and entry says which run it came from.

    A case (nodeid) present in several runs is one case: the later run (in ``documents`` order)
    wins, and when the runs disagree on its state the disagreement is listed under ``warnings``.
    """
    names = names or [f"run{i}" for i in range(len(documents))]
    merged: dict = {
        "schema": SCHEMA,
        "version": max(d["version"] for d in documents),
        "merged_from": [],
        "backends": [],
        "devices": [],
        "clauses": {},
        "expectations": [],
        "results": [],
        "exitstatus": 0,
        "duration": 0.0,
        "warnings": [],
        "absent_devices": {},
    }
    cases: dict[str, list[dict]] = {}
    tuples = [document.get("product") or {} for document in documents]
    differing = product.differing(tuples)  # DEV-PRODUCT: runs of different tuples, different columns
    if not differing and tuples[0]:
        merged["product"] = tuples[0]
    for name, document, made in zip(names, documents, tuples, strict=True):
        merged["merged_from"].append(
            {
                "name": name,
                **{k: document.get(k) for k in RUN_FIELDS},
                "exitstatus": document.get("exitstatus"),
                "absent_devices": document.get("absent_devices") or {},
                # a replay's: its capture folder and what it did not judge (the report lists it)
                **{k: document[k] for k in REPLAY_FIELDS if k in document},
            }
        )
        merged["absent_devices"].update(document.get("absent_devices") or {})
        for key in ("backends", "devices"):
            merged[key] += [v for v in document.get(key) or [] if v not in merged[key]]
        if document.get("models"):  # MODEL-REPORT: each profile run's model table
            merged.setdefault("models", {}).update(document["models"])
        for clause, info in (document.get("clauses") or {}).items():
            merged["clauses"].setdefault(clause, info)
        merged["expectations"] += [{**e, "run": name} for e in document.get("expectations") or []]
        merged["warnings"] += [f"{name}: {w}" for w in document.get("warnings") or []]
        records: dict[str, list[dict]] = defaultdict(list)  # a case may have call and teardown records
        for result in document["results"]:
            record = {**result, "run": name}
            if differing:
                record["product"] = product.label(made, differing)
            records[ratios.node_key(record)].append(record)
        for nodeid, now in records.items():
            was = cases.get(nodeid)
            states = (
                sorted({case_state(r) for r in was}) if was else None,
                sorted({case_state(r) for r in now}),
            )
            if was and states[0] != states[1]:
                merged["warnings"].append(
                    f"{nodeid}: {'/'.join(states[0])} in {was[0]['run']}, {'/'.join(states[1])} in "
                    f"{name}; the later run's result is kept"
                )
            cases[nodeid] = now
        merged["exitstatus"] = max(merged["exitstatus"], int(document.get("exitstatus") or 0))
        merged["duration"] += float(document.get("duration") or 0)
    merged["results"] = sorted(
        (r for rs in cases.values() for r in rs), key=lambda r: (r["nodeid"], r.get("when", "call"))
    )
    return merged


def product_changes(old: dict, new: dict) -> list[str]:
    """What changed between two runs' product tuples (DEV-PRODUCT), ``key: old -> new`` each."""
    return product.changed(old.get("product") or {}, new.get("product") or {})


def diff(old: dict, new: dict) -> dict:
    """Case by case: new failures (regressions), fixes, changed skips, and added/removed cases. Runs of
    different backend@device columns pair their cases without backend and device (ratios.keyed)."""
    before, after, _ = ratios.keyed(old["results"], new["results"])
    keys = ("new failures", "new SHOULD failures", "fixes", "changed", "added", "removed")
    changes: dict[str, list[dict]] = {k: [] for k in keys}
    for key in sorted(before.keys() | after.keys()):
        was, now = before.get(key), after.get(key)
        item = {
            "nodeid": key,
            "clauses": (now or was).get("clauses", []),
            "column": column_of(now or was),
            "old": case_state(was) if was else None,
            "new": case_state(now) if now else None,
        }
        if now and item["new"] in BROKEN and item["old"] != item["new"]:  # fail -> timeout is worse too
            item["rerun"] = (now.get("failure") or {}).get("rerun")
            changes["new failures"].append(item)
        elif now and item["new"] in SHOULD_BROKEN and item["old"] not in ANY_BROKEN:
            item["rerun"] = (now.get("failure") or {}).get("rerun")
            changes["new SHOULD failures"].append(item)
        elif was and item["old"] in ANY_BROKEN and now and item["new"] not in ANY_BROKEN:
            changes["fixes"].append(item)
        elif was is None:
            changes["added"].append(item)
        elif now is None:
            changes["removed"].append(item)
        elif item["old"] != item["new"] or (was.get("reason") or "") != (now.get("reason") or ""):
            item["old_reason"], item["new_reason"] = was.get("reason"), now.get("reason")
            changes["changed"].append(item)
    return changes

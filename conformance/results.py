"""The results document: its schema, outcomes and typed records, read and written in one place.

The plugin writes it with ``--opconform-json`` (``conformance.harness.recorder``); ``opconform run``
saves it as report.json and every reader (``opconform.report``, ``opconform.render``, the
mutation runner, the self-tests) loads it through ``load``/``Document.from_dict``, which check
it and name the file and field that is wrong. Torch-free: ``opconform merge`` and ``diff`` run
where torch is not installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from conformance.spec_index import LEVELS, MUST, SHOULD, case_level

SCHEMA = "opconform-results"
# 2: dtype, failure details (largest error, rerun), expectations, clause index, environment.
# 3: the failure record: failure.message (the verdict), example, largest_violation; a case's
#    ``message`` is the verdict too, no longer pytest's traceback (a version-2 report's is).
# 4: levels (spec/README.md, Levels): a case's ``level`` (MUST or SHOULD), outcome
#    "failed (SHOULD)", the clauses table's ``level`` and ``kind``, ``strict``. An older report is
#    read with the levels of this opconform's spec (``upgrade_levels``).
# 5: a case's ``statistics`` (spec/tolerances.md, TOL-STATISTICS): msprobe's accuracy statistics
#    per output dtype, of the failing comparison or the worst over the case's comparisons.
VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
# Any version may hold ``product`` (spec/devices.md, DEV-PRODUCT) and ``cards`` (DEV-CARDS):
#    optional fields, so a reader of any version reads them or goes without.


class Outcome(str, Enum):
    """A case's outcome, as the JSON spells it."""

    PASSED = "passed"
    FAILED = "failed"
    SHOULD_FAILED = "failed (SHOULD)"  # a failure of a SHOULD clause: apart, not failing the run
    SKIPPED = "skipped"
    EXPECTED_FAILURE = "expected failure"  # a failure an expectations entry declares
    NOT_IMPLEMENTED = "not implemented"  # the backend lacks the op
    TIMEOUT = "timeout"  # the case ran past the per-case time limit (--opconform-timeout)
    CRASH = "crash"  # the process running the case died (a pytest-xdist worker crash)

    def __str__(self) -> str:
        return self.value


class ResultsError(ValueError):
    """A file or object that is not a readable opconform results document."""


@dataclass
class Failure:
    """The failure record: what a failing case broke, on which example, and how to rerun it.

    ``message`` is the verdict, the ConformanceError's text (``[CLAUSE] ... got X, expected Y``);
    ``example`` the falsifying example (``conformance.failure_record.example``: ``arguments``, a
    name -> repr table of what the property drew and was parametrized with, without backend and
    device, ``test``, ``reproduce_failure``, ``seed``); ``largest_violation`` the worst element
    of a numeric comparison (``index``, ``got``, ``expected``, ``abs_error``, ``rel_error``,
    ``allowed``); ``rerun`` the one command line that reruns the case. None where unknown.
    """

    clause: str | None = None
    dtype: str | None = None
    largest_abs_error: float | None = None
    largest_rel_error: float | None = None
    rerun: str | None = None
    # "Type: message" of an exception that is not a ConformanceError (the backend's own, raised
    # inside the property), reported under the property's first clause.
    error: str | None = None
    message: str | None = None
    example: dict | None = None
    largest_violation: dict | None = None
    # The decisive relation, values first (ConformanceError.relation); how the failing comparison
    # judged: "direct" (the oracle), "metamorphic" (the backend's own other result), "ties", "bad
    # input" (spec/README.md, Levels). Version 4; None in older reports.
    relation: str | None = None
    kind: str | None = None
    # A backend's own exception: ``at path:line in function`` of its innermost frames in the
    # user's code (the suite's own frames are never shown).
    frames: list | None = None


@dataclass
class ExpectationVerdict:
    """The expectations entry applied to a case and its verdict (expected, unexpected pass, ...)."""

    id: str
    reason: str
    verdict: str


@dataclass
class Case:
    """One test case's record: where it ran, what it checks and how it ended."""

    nodeid: str
    outcome: Outcome
    when: str = "call"
    duration: float = 0.0
    start: float = 0.0  # orders cases in execution order
    backend: str | None = None
    device: str | None = None
    op: str | None = None
    clauses: list[str] = field(default_factory=list)
    dtype: str | None = None
    expectations: list[str] = field(default_factory=list)  # ids of the entries that may apply
    failure: Failure | None = None
    expectation: ExpectationVerdict | None = None
    reason: str | None = None  # the skip or expected-failure reason
    message: str | None = None
    run: str | None = None  # the run a merged case came from
    model: str | None = None  # the model profile the case ran at (spec/models.md, MODEL-REPORT)
    # MUST or SHOULD: a failure's, its clause's; any other case's, its best clause's (MUST when it
    # names one). None in a report older than version 4 until upgrade_levels.
    level: str | None = None
    # TOL-STATISTICS: {"basis", "dtypes": {dtype: {statistic: value, "comparisons", "elements"}}}
    # (conformance.statistics.case_record); None where no comparison against the oracle was made.
    statistics: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # fields this version does not know


@dataclass
class Document:
    """A whole results document: the run's environment, the clause index, expectations, cases."""

    results: list[Case]
    clauses: dict[str, dict] = field(default_factory=dict)
    expectations: list[dict] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    exitstatus: int = 0
    duration: float = 0.0
    version: int = VERSION
    meta: dict[str, Any] = field(default_factory=dict)  # host, created, torch, profile, args, ...
    # MODEL-REPORT: model name -> {"title", "ops": [{op, kind, params, layers}]} of a profile run.
    models: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "version": self.version,
            **self.meta,
            **({"models": self.models} if self.models else {}),
            "backends": self.backends,
            "devices": self.devices,
            "duration": self.duration,
            "exitstatus": self.exitstatus,
            "clauses": self.clauses,
            "expectations": self.expectations,
            "results": [case_to_dict(c) for c in self.results],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<results>") -> Document:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ResultsError(f'{source}: not an opconform report (expected "schema": "{SCHEMA}")')
        if data.get("version") not in READABLE_VERSIONS:
            raise ResultsError(
                f"{source}: report version {data.get('version')!r}; this opconform reads {READABLE_VERSIONS}"
            )
        if not isinstance(data.get("results"), list):
            raise ResultsError(f'{source}: report has no "results" list')
        known = {f.name for f in fields(cls)} | {"schema"}
        document = cls(
            results=[case_from_dict(r, f"{source}: results[{i}]") for i, r in enumerate(data["results"])],
            clauses=_typed(data, "clauses", dict, source) or {},
            expectations=_typed(data, "expectations", list, source) or [],
            backends=_typed(data, "backends", list, source) or [],
            devices=_typed(data, "devices", list, source) or [],
            exitstatus=int(_typed(data, "exitstatus", int, source) or 0),
            duration=float(_typed(data, "duration", (int, float), source) or 0.0),
            version=data["version"],
            meta={k: v for k, v in data.items() if k not in known},
            models=_models(data, source),
        )
        _product(data, source)
        if document.version < 4:
            upgrade_levels(document)
        return document


def _product(data: dict, source: str) -> None:
    """DEV-PRODUCT (spec/devices.md): ``product``, a flat object of strings, optional in any version
    (a report written before it has none: readers take ``{}``)."""
    product = _typed(data, "product", dict, source) or {}
    bad = [k for k, v in product.items() if not isinstance(v, str)]
    if bad:
        raise ResultsError(f"{source}: field 'product': {bad[0]!r}: expected a string")


def _models(data: dict, source: str) -> dict:
    """MODEL-REPORT: the ``models`` table (absent in a generic run's or an older document)."""
    models = _typed(data, "models", dict, source) or {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("ops"), list):
            raise ResultsError(f"{source}: field 'models': {name!r}: expected an object with an 'ops' list")
        for i, use in enumerate(entry["ops"]):
            if not isinstance(use, dict) or not isinstance(use.get("op"), str):
                raise ResultsError(
                    f"{source}: field 'models': {name!r}: ops[{i}]: expected an object with 'op'"
                )
    return models


def _typed(data: dict, key: str, kind, source: str):
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise ResultsError(
            f"{source}: field {key!r}: expected {getattr(kind, '__name__', kind)}, got {value!r}"
        )
    return value


def case_to_dict(case: Case) -> dict:
    data: dict[str, Any] = {
        "nodeid": case.nodeid,
        "when": case.when,
        "outcome": case.outcome.value,
        "duration": case.duration,
        "start": case.start,
        "backend": case.backend,
        "device": case.device,
        "op": case.op,
        "clauses": case.clauses,
        "dtype": case.dtype,
        "expectations": case.expectations,
    }
    for key in ("failure", "expectation"):
        value = getattr(case, key)
        if value is not None:
            data[key] = {f.name: getattr(value, f.name) for f in fields(value)}
    for key in ("reason", "message", "run", "model", "level", "statistics"):
        if getattr(case, key) is not None:
            data[key] = getattr(case, key)
    return {**data, **case.extra}


# Read once: a merge or dashboard reads hundreds of thousands of cases (fields() was ~30 % of it).
_CASE_FIELDS = frozenset(f.name for f in fields(Case)) - {"extra"}


def case_from_dict(data: Any, source: str) -> Case:
    if not isinstance(data, dict):
        raise ResultsError(f"{source}: expected an object, got {data!r}")
    if not isinstance(data.get("nodeid"), str):
        raise ResultsError(f"{source}: field 'nodeid': expected a string, got {data.get('nodeid')!r}")
    try:
        outcome = Outcome(data.get("outcome"))
    except ValueError:
        known = [o.value for o in Outcome]
        raise ResultsError(
            f"{source}: field 'outcome': {data.get('outcome')!r} is not one of {known}"
        ) from None
    names = _CASE_FIELDS
    failure, expectation = data.get("failure"), data.get("expectation")
    try:
        return Case(
            nodeid=data["nodeid"],
            outcome=outcome,
            when=data.get("when", "call"),
            duration=float(data.get("duration") or 0.0),
            start=float(data.get("start") or 0.0),
            backend=data.get("backend"),
            device=data.get("device"),
            op=data.get("op"),
            clauses=list(data.get("clauses") or []),
            dtype=data.get("dtype"),
            expectations=list(data.get("expectations") or []),
            failure=Failure(**failure) if failure is not None else None,
            expectation=ExpectationVerdict(**expectation) if expectation is not None else None,
            reason=data.get("reason"),
            message=data.get("message"),
            run=data.get("run"),
            model=_model_name(data.get("model"), source),
            level=_level(data.get("level"), source),
            statistics=_statistics(data.get("statistics"), source),
            extra={k: v for k, v in data.items() if k not in names},
        )
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{source}: {exc}") from None


def _statistics(value: Any, source: str) -> dict | None:
    if value is not None and not (isinstance(value, dict) and isinstance(value.get("dtypes"), dict)):
        raise ResultsError(f"{source}: field 'statistics': expected an object with 'dtypes', got {value!r}")
    return value


def _level(value: Any, source: str) -> str | None:
    if value is not None and value not in LEVELS:
        raise ResultsError(f"{source}: field 'level': expected one of {list(LEVELS)}, got {value!r}")
    return value


def level_of_case(outcome, failed_clause: str | None, clause_ids, clauses: dict) -> str:
    """A case's level (spec_index.case_level); a timeout or a crash is always MUST: it stalls or
    ends the run it happens in, whatever the clause (spec/README.md, Levels)."""
    if Outcome(outcome) in (Outcome.TIMEOUT, Outcome.CRASH):
        return MUST
    return case_level(failed_clause, clause_ids, clauses)


def assign_levels(cases: list[Case], clauses: dict) -> list[Case]:
    """Each case's level (``level_of_case``, clauses by ID); a failure of a SHOULD clause becomes
    "failed (SHOULD)". For documents built outside a pytest run (replay, judge) and old reports."""
    for case in cases:
        failed = case.failure.clause if case.failure else None
        case.level = level_of_case(case.outcome, failed, case.clauses, clauses)
        if case.outcome is Outcome.FAILED and case.level == SHOULD:
            case.outcome = Outcome.SHOULD_FAILED
    return cases


def upgrade_levels(document: Document) -> None:
    """A report older than version 4 knows no levels: give its clauses and cases this opconform's
    (spec/README.md, Levels), so it merges and diffs with a new one: a failure of a clause that is
    SHOULD now becomes "failed (SHOULD)". A clause this spec does not know stays MUST."""
    from conformance.spec_index import load_clauses

    try:
        known = load_clauses()
    except (OSError, ValueError):  # no spec where the report is read: every level MUST
        known = {}
    for clause_id, info in document.clauses.items():
        if isinstance(info, dict) and clause_id in known:
            info.setdefault("level", known[clause_id].level)
            info.setdefault("kind", known[clause_id].kind)
    assign_levels(document.results, known)
    document.version = VERSION
    document.meta.setdefault("warnings", []).append(
        "levels: this report was written without levels; its clauses have this opconform's"
    )


def _model_name(value: Any, source: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ResultsError(f"{source}: field 'model': expected a string, got {value!r}")
    return value


def read_json(path: str | Path, error: type[Exception], *, missing: str, kind: str) -> Any:
    """``path``'s JSON, or ``error`` with one line naming the file: ``PATH: MISSING`` when it does not
    exist, ``PATH: not a JSON KIND: why`` when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not a JSON {kind}: {exc}") from None


def load(path: str | Path) -> Document:
    """Read and check a results document; errors name the file and what was expected."""
    path = Path(path)
    data = read_json(path, ResultsError, missing="no such report file", kind="report")
    return Document.from_dict(data, str(path))


def dump(document: Document, path: str | Path) -> None:
    Path(path).write_text(json.dumps(document.to_dict(), indent=1), encoding="utf-8")

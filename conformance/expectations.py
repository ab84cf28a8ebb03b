"""Expectations manifests: declared, typed deviations of one backend, one TOML file per backend.

    # expectations/npu.toml
    backend = "npu"                    # optional; defaults to the file's stem

    [[expect]]
    clause = "ACT-GEGLU-MODES"         # a spec clause ID, or
    # test = "test_activations.py::test_geglu_*"   # a glob over FILE.py::TEST[PARAMS] ([ ] literal)
    device = "npu"                     # optional: cpu, cuda, npu
    dtype = "bfloat16"                 # optional: float64, float32, float16, bfloat16
    when = "cann < 8.5"                # optional: versions it applies to (conformance/versions.py)
    reason = "deviation"               # unsupported | deviation | bug | intermittent
    bound = 2e-3                       # deviation: the measured largest absolute error
    # issue = "https://..."            # bug: the issue URL
    note = "fused kernel rounds the product in bf16 twice"

A failure that an entry matches is an *expected failure* (``unsupported``: a skip; a
``deviation`` only while its largest error stays within ``bound``). A pass where an entry
(other than ``intermittent``) matches is an *unexpected pass*: remove the entry. An entry that
matches no case of its backend in a run is *stale*, unless the run did not select the cases it
may match (``-k``, a subset of modules): then it is *not run*. Bad content raises
``ManifestError`` naming the file and line.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from conformance import versions
from conformance.devices import KNOWN_DEVICE_TYPES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

REASONS = ("unsupported", "deviation", "bug", "intermittent")
DTYPES = ("float64", "float32", "float16", "bfloat16")
ENTRY_KEYS = {"clause", "test", "device", "dtype", "reason", "bound", "issue", "note", "when"}
TOP_KEYS = {"backend", "expect"}
_ENTRY_HEADER = re.compile(r"^\s*\[\[\s*expect\s*\]\]\s*(#.*)?$")
_TEST_PATTERN = re.compile(r"^[^\s:]+\.py::\S+$")


class ManifestError(ValueError):
    """Bad manifest content; the message starts with ``FILE:LINE:``."""


@dataclass(frozen=True)
class Expectation:
    file: str
    line: int
    backend: str
    reason: str
    clause: str | None = None
    test: str | None = None
    device: str | None = None
    dtype: str | None = None
    bound: float | None = None
    issue: str | None = None
    note: str = ""
    when: str | None = None  # DEV-WHEN: the versions it applies to, judged against the run's product

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    def matches(self, *, nodeid: str, backend: str | None, device: str | None, clauses, dtype) -> str:
        """``"yes"``, ``"no"``, or ``"maybe"`` (all but the dtype match and the case's dtype is unknown)."""
        # A case on a card records it ("npu:3", DEV-CARDS); an entry names the device type.
        if backend != self.backend or (self.device and (device or "").partition(":")[0] != self.device):
            return "no"
        if self.clause and self.clause not in clauses:
            return "no"
        found = self.test and pattern_regex(self.test)
        if found and not (found.match(short_nodeid(nodeid)) or found.match(nodeid)):
            return "no"
        if self.dtype is None or self.dtype == dtype:
            return "yes"
        return "maybe" if dtype is None else "no"

    def as_dict(self) -> dict:
        fields = ("clause", "test", "device", "dtype", "bound", "issue", "when")
        data = {"id": self.id, "backend": self.backend, "reason": self.reason, "note": self.note}
        data.update({key: getattr(self, key) for key in fields if getattr(self, key) is not None})
        return data


@functools.cache
def pattern_regex(pattern: str) -> re.Pattern:
    """A ``test`` pattern as a regex: ``*`` is any run of characters, ``?`` one; ``[`` and ``]`` are
    literal, the brackets of a case's parameters (``test_x.py::test_y[acme-cpu]``), not fnmatch's
    character classes (under which that pattern matched no case and ``[[]`` was refused)."""
    wild = {"*": ".*", "?": "."}
    return re.compile("".join(wild.get(c) or re.escape(c) for c in pattern) + r"\Z", re.S)


def short_nodeid(nodeid: str) -> str:
    """``dir/test_x.py::test_y[p]`` -> ``test_x.py::test_y[p]`` (independent of the install path)."""
    path, sep, rest = nodeid.partition("::")
    return path.replace("\\", "/").rsplit("/", 1)[-1] + sep + rest


def _key_lines(lines: list[str], start: int, end: int) -> dict[str, int]:
    found = {}
    for number in range(start, end):
        match = re.match(r"^\s*([A-Za-z_][\w-]*)\s*=", lines[number - 1])
        if match:
            found.setdefault(match.group(1), number)
    return found


def _validate_pattern(pattern: str) -> str | None:
    if not _TEST_PATTERN.match(pattern):
        return "expected a glob like 'test_activations.py::test_geglu_*' (FILE.py::TEST, no spaces)"
    return None


def load_manifest(path: str | Path, *, known_clauses) -> list[Expectation]:
    """The entries of one manifest; ``known_clauses`` is the set of spec clause IDs."""
    path = Path(path)
    if tomllib is None:
        raise ManifestError(f"{path}:1: reading TOML on Python 3.10 needs the 'tomli' package")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # TOML is UTF-8 (a Latin-1 editor's file)
        line = raw[: exc.start].count(b"\n") + 1
        raise ManifestError(
            f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); TOML files are UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    lines = text.splitlines()
    headers = [n for n, line in enumerate(lines, start=1) if _ENTRY_HEADER.match(line)]
    top = _key_lines(lines, 1, (headers[0] if headers else len(lines) + 1))
    for key in data:
        if key not in TOP_KEYS:
            raise ManifestError(
                f"{path}:{top.get(key, 1)}: unknown key {key!r}; expected 'backend' and [[expect]] tables"
            )
    backend = data.get("backend", path.stem)
    if not isinstance(backend, str) or not backend:
        raise ManifestError(f"{path}:{top.get('backend', 1)}: 'backend' must be a non-empty string")
    entries = data.get("expect", [])
    if not isinstance(entries, list) or len(entries) != len(headers):
        raise ManifestError(f"{path}:1: write each entry as an [[expect]] table on its own header line")
    result = []
    for index, entry in enumerate(entries):
        start = headers[index]
        end = headers[index + 1] if index + 1 < len(headers) else len(lines) + 1
        key_line = _key_lines(lines, start, end)

        def fail(key: str | None, message: str, _start=start, _key_line=key_line):
            raise ManifestError(f"{path}:{_key_line.get(key, _start)}: {message}")

        for key in entry:
            if key not in ENTRY_KEYS:
                fail(key, f"unknown key {key!r} in [[expect]]; expected one of {sorted(ENTRY_KEYS)}")
        for key in ENTRY_KEYS - {"bound"}:
            if key in entry and not isinstance(entry[key], str):
                fail(key, f"{key!r} must be a string, got {entry[key]!r}")
        reason = entry.get("reason")
        if reason not in REASONS:
            fail("reason", f"reason {reason!r} is not one of {list(REASONS)}")
        clause, test = entry.get("clause"), entry.get("test")
        if (clause is None) == (test is None):
            fail(None, "give exactly one of 'clause' (a spec clause ID) or 'test' (a test-id glob)")
        if clause is not None and clause not in known_clauses:
            fail("clause", f"unknown clause {clause!r}: no '### {clause}:' heading in spec/*.md")
        if test is not None and (problem := _validate_pattern(test)):
            fail("test", f"malformed test pattern {test!r}: {problem}")
        device, dtype = entry.get("device"), entry.get("dtype")
        if device is not None and device not in KNOWN_DEVICE_TYPES:
            fail("device", f"device {device!r} is not one of {list(KNOWN_DEVICE_TYPES)}")
        if dtype is not None and dtype not in DTYPES:
            fail("dtype", f"dtype {dtype!r} is not one of {list(DTYPES)}")
        if "when" in entry:
            try:
                versions.parse(entry["when"])
            except versions.ConditionError as exc:
                fail("when", f"when {entry['when']!r}: {exc}")
        bound = entry.get("bound")
        if reason == "deviation":
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
                fail("bound", f"a deviation needs 'bound', its measured largest error (> 0), got {bound!r}")
            if bound <= 0:
                fail("bound", f"'bound' must be > 0, got {bound!r}")
        elif bound is not None:
            fail("bound", f"'bound' belongs to reason 'deviation' only, not {reason!r}")
        issue = entry.get("issue")
        if reason == "bug" and not (isinstance(issue, str) and re.match(r"^https?://\S+$", issue)):
            fail("issue", f"a bug needs 'issue', an http(s) URL of the issue, got {issue!r}")
        result.append(
            Expectation(
                file=str(path),
                line=start,
                backend=backend,
                reason=reason,
                clause=clause,
                test=test,
                device=device,
                dtype=dtype,
                bound=None if bound is None else float(bound),
                issue=issue,
                note=entry.get("note", ""),
                when=entry.get("when"),
            )  # fmt: skip
        )
    return result


def builtin_manifest_dir() -> Path | None:
    """The manifests of the built-in backends: the checkout's expectations/, or the installed copy.

    They are always applied (a built-in backend's known deviation is part of the project), and
    ``--opconform-expectations`` adds a user's own.
    """
    package = Path(__file__).resolve().parent
    for candidate in (package.parent / "expectations", package / "manifests"):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate
    return None


def load_manifests(paths, *, known_clauses) -> list[Expectation]:
    """Entries from manifest files and directories (each ``*.toml`` in it)."""
    found: list[Expectation] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = sorted(path.glob("*.toml"))
        elif path.is_file():
            files = [path]
        else:
            raise ManifestError(f"{path}: no such expectations file or directory")
        for file in files:
            found.extend(load_manifest(file, known_clauses=known_clauses))
    return found


def applying(entries: list[Expectation], product) -> tuple[list[Expectation], list[tuple[Expectation, str]]]:
    """DEV-WHEN: the entries whose ``when`` holds for the run's versions (``product()``, read only
    when an entry has a condition), and the others with why they do not apply."""
    if not any(e.when for e in entries):
        return entries, []
    found = product()
    kept, dropped = [], []
    for entry in entries:
        holds, seen = versions.holds(entry.when, found) if entry.when else (True, "")
        if holds:
            kept.append(entry)
        else:
            dropped.append((entry, f"when {entry.when!r} is false here ({seen})"))
    return kept, dropped


def judge(
    entries: list[Expectation], *, outcome: str, largest_error: float | None
) -> tuple[str, Expectation]:
    """For a case's matching entries and its outcome ("passed"/"failed"): the verdict and the entry.

    Verdicts: "expected" (a failure the entry declares), "unexpected pass", "passed-intermittent",
    "exceeds bound" (a deviation larger than declared: still a failure).
    """
    if outcome == "failed":
        exceeded = None
        for entry in entries:
            if entry.reason != "deviation" or largest_error is None or largest_error <= entry.bound:
                return "expected", entry
            exceeded = entry
        return "exceeds bound", exceeded
    for entry in entries:
        if entry.reason != "intermittent":
            return "unexpected pass", entry
    return "passed-intermittent", entries[0]

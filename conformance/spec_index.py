"""The clause index: every ``### ID: title`` heading in spec/*.md.

The spec ships with the package (``conformance/spec`` in an installed wheel, mapped from the
repository's ``spec/`` by pyproject.toml), so the plugin can check clause names and the report
can list uncovered clauses wherever the suite runs.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

CLAUSE_HEADING = re.compile(r"^###\s+([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)\s*:\s*(.+?)\s*$")

# Every clause's first body line is its level (spec/README.md, "Levels"): "*Level:* MUST." or
# "*Level:* SHOULD: why the field does not promise it.", optionally with its kind of comparison
# after a comma ("*Level:* MUST, metamorphic."): how its failures are ranked
# (conformance/harness/ordering.py).
LEVEL_LINE = re.compile(r"^\*Level:\*\s+(MUST|SHOULD)\b(?:,\s*(metamorphic|ties))?\s*(?:[.:]\s*(.*?))?\s*$")
MUST, SHOULD = "MUST", "SHOULD"
LEVELS = (MUST, SHOULD)
# How a clause's property judges: against the oracle (direct), against the backend's own other
# result (metamorphic), on exact or near ties, or by rejecting bad input (IDs ending in -ERRORS).
DIRECT, METAMORPHIC, TIES, BAD_INPUT = "direct", "metamorphic", "ties", "bad input"
ERRORS_SUFFIX = "-ERRORS"

# A clause whose body starts with "*Rule:* how it is applied" states a rule applied inside other
# clauses' comparisons rather than a property of its own; coverage accepts it untested by name.
RULE_LINE = re.compile(r"^\*Rule:\*\s*(.+?)\s*$")

# A clause whose body starts with "*Refines:* ID, ID." pins one mechanism of those broader clauses:
# a backend that breaks it usually breaks them too, as echoes. The run order puts it first
# (conformance/harness/ordering.py; the rule is in spec/README.md).
REFINES_LINE = re.compile(r"^\*Refines:\*\s*(.+?)\.?\s*$")


@dataclass(frozen=True)
class Clause:
    id: str
    title: str
    family: str  # the spec file's stem, e.g. "activations"
    file: str
    line: int
    rule: str | None = None  # how a rule clause is applied (see RULE_LINE)
    refines: tuple[str, ...] = ()  # the broader clauses this one pins a mechanism of (REFINES_LINE)
    level: str = MUST  # MUST or SHOULD (LEVEL_LINE)
    kind: str = DIRECT  # DIRECT, METAMORPHIC, TIES or BAD_INPUT (LEVEL_LINE, the -ERRORS suffix)
    why: str | None = None  # a SHOULD clause's reason: what the field does instead

    def record(self) -> dict:
        """The clause as a results document's ``clauses`` table holds it (conformance.results)."""
        return {"title": self.title, "family": self.family, "rule": self.rule, "level": self.level,
                "kind": self.kind, "refines": list(self.refines)}  # fmt: skip


def spec_dir() -> Path:
    """The spec directory: $OPCONFORM_SPEC_DIR, the repository's spec/, or the installed copy."""
    override = os.environ.get("OPCONFORM_SPEC_DIR")
    if override:
        return Path(override)
    package = Path(__file__).resolve().parent
    for candidate in (package.parent / "spec", package / "spec"):
        if candidate.is_dir() and any(candidate.glob("*.md")):
            return candidate
    raise FileNotFoundError(
        f"no spec directory: looked for {package.parent / 'spec'} and {package / 'spec'} "
        "(set OPCONFORM_SPEC_DIR to point at spec/)"
    )


def parse_clauses(path: Path) -> list[Clause]:
    """The clauses of one spec file, in order; a repeated ID, or a clause whose first body line is
    not its ``*Level:*``, is an error naming the file and line."""
    found: list[Clause] = []
    seen: dict[str, int] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, text in enumerate(lines, start=1):
        match = CLAUSE_HEADING.match(text)
        if not match:
            continue
        clause_id, title = match.groups()
        body = [line for line in lines[number:] if line.strip()][:2]
        level = LEVEL_LINE.match(body[0]) if body else None
        if level is None:
            raise ValueError(
                f"{path}:{number}: clause {clause_id}: its first line must be '*Level:* MUST.' or "
                "'*Level:* SHOULD: why.' (spec/README.md, Levels)"
            )
        following = body[1] if len(body) > 1 else ""
        rule = RULE_LINE.match(following)
        refined = REFINES_LINE.match(following)
        refines = tuple(r.strip() for r in refined.group(1).split(",")) if refined else ()
        if clause_id in seen:
            raise ValueError(f"{path}:{number}: clause {clause_id} already defined at line {seen[clause_id]}")
        seen[clause_id] = number
        kind = BAD_INPUT if clause_id.endswith(ERRORS_SUFFIX) else level.group(2) or DIRECT
        found.append(
            Clause(
                clause_id,
                title,
                path.stem,
                str(path),
                number,
                rule.group(1) if rule else None,
                refines,
                level=level.group(1),
                kind=kind,
                why=level.group(3) or None,
            )  # fmt: skip
        )
    return found


@functools.cache
def load_clauses(directory: str | None = None) -> dict[str, Clause]:
    """Clause ID -> Clause for every spec file (README.md holds no clauses)."""
    root = Path(directory) if directory else spec_dir()
    clauses: dict[str, Clause] = {}
    for path in sorted(root.glob("*.md")):
        for clause in parse_clauses(path):
            previous = clauses.get(clause.id)
            if previous is not None:
                raise ValueError(
                    f"{clause.file}:{clause.line}: clause {clause.id} already defined at "
                    f"{previous.file}:{previous.line}"
                )
            clauses[clause.id] = clause
    for clause in clauses.values():
        unknown = [r for r in clause.refines if r not in clauses or r == clause.id]
        if unknown:
            where = f"{clause.file}:{clause.line}"
            raise ValueError(f"{where}: {clause.id} *Refines:* unknown clause(s) {unknown}")
    return clauses


def level_of(clause_id: str | None, clauses: dict | None = None) -> str:
    """A clause's level; MUST for an ID the spec does not know (a failure is never played down)."""
    clause = (load_clauses() if clauses is None else clauses).get(clause_id or "")
    return clause.level if clause is not None else MUST


def case_level(failed_clause: str | None, clause_ids, clauses: dict | None = None) -> str:
    """A case's level: a failure's is its clause's; otherwise (and for a failure under no known
    clause) MUST when any clause the case checks is MUST or it names none, else SHOULD."""
    clauses = load_clauses() if clauses is None else clauses
    if failed_clause in clauses:
        return clauses[failed_clause].level
    levels = {level_of(c, clauses) for c in clause_ids}
    return SHOULD if levels == {SHOULD} else MUST


def family_of(clause_id: str) -> str | None:
    clause = load_clauses().get(clause_id)
    return clause.family if clause else None

"""The repository stands alone: nothing cites a document outside it, and spec citations resolve.

Code comments and docstrings cite the spec as ``(spec/<file>.md, ID, ID; spec/<file>.md, ID)``;
every such ID must be a clause (``### ID: title``) or a reference section (``## ID: title``, as in
spec/ascend.md) of the file named. The background notes the suite was first written from live
outside the repository, so citing them is an error: the facts and their sources belong in spec/.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "spec"

# Spelled as a pattern so this file does not match itself.
OUTSIDE_NOTES = re.compile(r"field[ _-]notes", re.IGNORECASE)
ID = r"[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*\b"
CITATION = re.compile(rf"spec/([\w-]+)\.md((?:,\s*{ID})*)")
DEFINITION = re.compile(rf"^#{{2,3}}\s+({ID})\s*:", re.MULTILINE)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini"}


def _tracked_files() -> list[Path]:
    """Tracked text files (git ls-files), or every text file outside hidden folders without git."""
    try:
        names = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        paths = [REPO / name for name in names]
    except (OSError, subprocess.SubprocessError):
        paths = [p for p in REPO.rglob("*") if not any(s.startswith(".") for s in p.relative_to(REPO).parts)]
    return [p for p in paths if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name.startswith("README"))]


def _defined_ids(spec_file: Path) -> set[str]:
    return set(DEFINITION.findall(spec_file.read_text(encoding="utf-8")))


def test_no_file_cites_documents_outside_the_repository():
    """No tracked source, spec or README file cites the out-of-repo background notes."""
    offenders = []
    for path in _tracked_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE_NOTES.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    hint = "cite spec/ clauses instead (and put the fact with its source there)"
    assert not offenders, hint + ":\n" + "\n".join(offenders)


def test_spec_citations_in_code_resolve():
    """Every ``spec/<file>.md, ID`` in a .py file names an existing spec file that defines that ID."""
    known: dict[str, set[str]] = {p.stem: _defined_ids(p) for p in SPEC.glob("*.md")}
    broken = []
    for path in _tracked_files():
        if path.suffix != ".py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for stem, ids in CITATION.findall(line):
                where = f"{path.relative_to(REPO)}:{number}"
                if stem not in known:
                    broken.append(f"{where}: no spec/{stem}.md")
                    continue
                for clause in re.findall(ID, ids):
                    if clause not in known[stem]:
                        broken.append(f"{where}: {clause} is not defined in spec/{stem}.md")
    assert not broken, "\n".join(broken)


def test_citation_pattern_reads_multi_file_citations():
    """The pattern the check relies on: several IDs per file, several files per parenthesis."""
    line = "# (spec/masks.md, MASK-ENC, WINDOW-CONV; spec/ascend.md, CANN-FIA) and spec/masks.md, Sources"
    found = [(stem, re.findall(ID, ids)) for stem, ids in CITATION.findall(line)]
    assert found == [("masks", ["MASK-ENC", "WINDOW-CONV"]), ("ascend", ["CANN-FIA"]), ("masks", [])]
    assert {"MASK-ENC", "WINDOW-CONV"} <= _defined_ids(SPEC / "masks.md")
    assert {"CANN-FIA", "CANN-FIA-DECODE"} <= _defined_ids(SPEC / "ascend.md")

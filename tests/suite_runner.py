"""Run the conformance suite in a subprocess, exactly as a user would, and read its results.

Used by the self-tests that prove wrong implementations are caught: the backend goes in
through ``--backend-module`` and the outcome comes back through ``--opconform-json``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from conformance import results
from conformance.rerun import PLUGIN, plugin_by_entry_point

REPO = Path(__file__).resolve().parent.parent


class SelectionConfig:
    """A pytest config holding only the options conformance.harness.selection reads (--backend,
    --backend-module, --device), for calling its functions directly."""

    def __init__(self, **options):
        self.options = {"backend": [], "backend_module": [], "device": [], **options}

    def getoption(self, name):
        return self.options[name]


def run_suite(
    tmp_path: Path,
    *,
    paths: list[str],
    modules: list[str],
    extra: list[str] = (),
    pythonpath: list[Path] = (),
    profile: str = "ci",
) -> dict:
    """Run ``python -m pytest PATHS --backend-module M ...`` in ``profile``; return its JSON results."""
    report = tmp_path / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(map(str, [*pythonpath, REPO, env.get("PYTHONPATH", "")]))
    command = [
        sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
        f"--hypothesis-profile={profile}", f"--opconform-json={report}",
        *(f"--backend-module={m}" for m in modules), *extra,
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    if not report.exists():
        raise AssertionError(
            f"the suite wrote no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    document = json.loads(report.read_text())
    document["stdout"] = proc.stdout
    document["returncode"] = proc.returncode
    return document


def run_test_file(
    tmp_path: Path, name: str, source: str, *, paths: list[str] = ()
) -> subprocess.CompletedProcess:
    """Write ``source`` to ``tmp_path/name`` and run it (or ``paths`` in ``tmp_path``) with the plugin
    on the native backend, outside the repository (the plugin from the pytest11 entry point when
    installed)."""
    (tmp_path / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    installed = plugin_by_entry_point()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
               *([] if installed else ["-p", PLUGIN]),
               "--backend=native", *(str(tmp_path / p) for p in (paths or [name]))]  # fmt: skip
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def failed_clauses(document: dict, *, should: bool = False) -> dict[str, set[str]]:
    """backend name -> the clauses its MUST failures broke (``failure.clause`` in the results); with
    ``should``, its SHOULD failures' clauses too."""
    named: dict[str, set[str]] = defaultdict(set)
    counted = {results.Outcome.FAILED, *([results.Outcome.SHOULD_FAILED] if should else [])}
    for case in results.Document.from_dict(document).results:
        if case.outcome in counted and case.failure and case.failure.clause:
            named[case.backend].add(case.failure.clause)
    return named


def outcomes(document: dict, backend: str) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for entry in document["results"]:
        if entry["backend"] == backend:
            counts[entry["outcome"]] += 1
    return dict(counts)


def produced_once(tmp_path_factory, name: str, produce: Callable[[Path], dict]) -> dict:
    """``produce(folder)``'s JSON-able result, computed once per test session: under pytest-xdist
    the first worker that asks runs it (the others wait on a lock in the session's common temp
    directory and read its result), so an expensive subprocess run is not repeated per worker."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index = root / "result.json"
        if not index.exists():
            index.write_text(json.dumps(produce(root)))
        return json.loads(index.read_text())


# Test files whose marks are wrong, each a collection error of its own (tests/test_plugin.py,
# tests/test_spec_coverage.py): collected in one run outside the repository.
BAD_MARK_FILES = {
    "test_typo.py": "import pytest\n\n\n@pytest.mark.clause('ACT-GEGLU')\n@pytest.mark.op('gelu_and_mull')\n"
    "def test_typo(backend, device):\n    assert True\n",
    "test_bogus.py": "import pytest\n\n\n@pytest.mark.clause('ACT-NO-SUCH-CLAUSE')\n"
    "def test_bogus(backend, device):\n    assert True\n",
}


def bad_mark_collection(tmp_path_factory) -> dict:
    """One plugin run of BAD_MARK_FILES (``run_test_file``), once per session: its exit status and
    its output split per file (``file name -> the lines of its collection error``)."""

    def produce(folder: Path) -> dict:
        for name, source in list(BAD_MARK_FILES.items())[1:]:
            (folder / name).write_text(source)
        first, source = next(iter(BAD_MARK_FILES.items()))
        proc = run_test_file(folder, first, source, paths=list(BAD_MARK_FILES))
        output = proc.stdout + proc.stderr
        sections = re.split(r"_+ ERROR collecting (\S+) _+\n", output)
        errors = {Path(name).name: text for name, text in zip(sections[1::2], sections[2::2], strict=True)}
        return {"returncode": proc.returncode, "output": output, "errors": errors}

    return produced_once(tmp_path_factory, "opconform-bad-marks", produce)

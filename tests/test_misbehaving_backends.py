"""A catalogue of misbehaving backends (tests/misbehaving_backends.py) through `opconform run`, as a
user would run them: each costs only its own cells, with the exact outcome, cell and exit status.

No outcome depends on the machine's speed: only the backends that block (for ever, or 1000 s)
meet a short limit, in a run of their own; the others run under the suite's default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from suite_runner import produced_once

from opconform import render, report

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# diffusers is selected for its built-in manifest only: -k deselects its cases (no diffusers import).
SELECTION = (
    "(test_rms_norm_matches_oracle or (test_gated_input_not_modified and silu_and_mul)) and not diffusers"
)
BROKEN = ("crash", "timeout", "failed")  # outcomes, as report.json records them
NORM = "test_norms.py::test_rms_norm_matches_oracle"
PURE = "test_activations.py::test_gated_input_not_modified"
# backend -> (test, outcome, clause row of its cell, the cell, words of its one-line failure)
EXPECTED = {
    "abort": (NORM, "crash", "NORM-RMS", "crash 1/1", "worker 'gw"),
    "hang": (NORM, "timeout", "NORM-RMS", "timeout 1/1", "per-case time limit of 2 s"),
    "slow": (NORM, "timeout", "NORM-RMS", "timeout 1/1", "per-case time limit of 2 s"),
    "raises": (NORM, "failed", "NORM-RMS", "fail 1/1", "RuntimeError: kernel launch failed"),
    "returns-none": (NORM, "failed", "NORM-RMS", "fail 1/1", ": rms_norm returned None; NormOps.rms_norm"),
    "returns-list": (NORM, "failed", "NORM-RMS", "fail 1/1", ": returned a list of "),
    "returns-meta": (NORM, "failed", "NORM-RMS", "fail 1/1", ": returned a meta tensor (no data): "),
    "wrong-dtype": (NORM, "failed", "NORM-RMS", "fail 1/1", "dtype torch.float64 on cpu; expected a "),
    "aliasing": (PURE, "failed", "ACT-PURE", "fail 1/1", ": the input was modified in place"),
}
# A manifest for returns-none: an entry of a clause that -k deselected is not stale; a typo is.
MANIFEST = """\
backend = "returns-none"

[[expect]]
clause = "NORM-GEMMA"
reason = "bug"
issue = "https://example.org/opconform/issues/12"

[[expect]]
test = "test_norms.py::test_no_such_property*"
reason = "intermittent"
"""


def _start(cwd: Path, out: Path, *args: str) -> subprocess.Popen:
    """``opconform run --device cpu --out OUT ARGS`` started in ``cwd``; its output goes to
    OUT.stdout and OUT.stderr (files: two runs at once cannot block each other on a full pipe)."""
    path = os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "opconform.cli", "run", "--device", "cpu", "--out", str(out), *args]
    with open(f"{out}.stdout", "w") as stdout, open(f"{out}.stderr", "w") as stderr:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=True)


def _finish(proc: subprocess.Popen, out: Path) -> subprocess.CompletedProcess:
    proc.wait(timeout=300)
    stdout, stderr = (Path(f"{out}.{name}").read_text() for name in ("stdout", "stderr"))
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def one_line(case: dict) -> str:
    """The failure's one line: the raised error, or the ConformanceError line of the message."""
    error = (case.get("failure") or {}).get("error")
    if error:
        return error
    lines = [line for line in (case.get("message") or "").splitlines() if line.startswith("[")]
    return lines[0] if lines else ""  # the message is the verdict, "[CLAUSE] ..." (results version 3)


def _catalogue_run(cwd: Path) -> dict:
    """Two runs at once: hang and slow (each blocks far past 2 s) under --timeout 2, in pytest's
    process (-n 0: SIGALRM needs no worker); the rest under the default limit (300 s, which none
    comes near), without -n (one supervised xdist worker, so an abort costs only its case)."""
    (cwd / "returns-none.toml").write_text(MANIFEST)
    runs = {
        "main": _start(
            cwd, cwd / "main", "--backend-module", "misbehaving_backends:ALL", "--backend", "diffusers",
            "--expectations", str(cwd / "returns-none.toml"),
            "--", "-k", SELECTION, "--hypothesis-profile=opconform-ci-noshrink",
        ),
        "timing": _start(
            cwd, cwd / "timing", "--backend-module", "misbehaving_backends:TIMING", "--timeout", "2",
            "-n", "0", "--", "-k", "test_rms_norm_matches_oracle", "--hypothesis-profile=ci-noshrink",
        ),
    }  # fmt: skip
    ends = {name: _finish(proc, cwd / name) for name, proc in runs.items()}
    return {
        "returncodes": {name: end.returncode for name, end in ends.items()},
        "stdout": "".join(end.stdout for end in ends.values()),
        "stderr": "".join(end.stderr for end in ends.values()),
        "reports": {name: str(cwd / name / "report.json") for name in runs},
    }


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """The two `opconform run`s of every in-process misbehaving backend (and diffusers, whose
    built-in manifest entry's clause -k deselects), their reports merged as one; run once per
    session, whichever worker asks first."""
    run = produced_once(tmp_path_factory, "opconform-misbehaving", _catalogue_run)
    for path in run["reports"].values():
        assert Path(path).exists(), run["stdout"][-3000:] + run["stderr"][-3000:]
    names = list(run["reports"])
    document = report.merge([report.load(run["reports"][n]) for n in names], names=names)
    return SimpleNamespace(**run), document


def test_each_misbehaviour_is_its_outcome_in_its_own_cell(catalogue):
    """abort -> crash (CRASH in its property's NORM-RMS row, though no clause is named broken: the
    worker died), hang/slow -> timeout, a RuntimeError or None/list/meta/float64 for float32 ->
    NORM-RMS failures saying what came back, writing into x -> ACT-PURE; the run exits 1.
    (wrong-dtype passed: the property compared values only.)"""
    proc, document = catalogue
    matrix = report.build_matrix(document)
    seen, table = {}, []
    for backend, (test, *_) in EXPECTED.items():
        (case,) = [c for c in document["results"] if c["backend"] == backend and test in c["nodeid"]]
        row = (case["clauses"] or [report.NO_CLAUSE])[0]
        cell = matrix.cell(row, f"{backend}@cpu")
        counts = cell.counts
        shown = f"{cell.state} {counts[cell.state]}/{sum(counts.values())}"
        seen[backend] = (test, case["outcome"], row, shown)
        table.append(f"{backend:14} {case['outcome']:9} {row:12} {seen[backend][3]:12} {one_line(case)[:90]}")
    message = "\n".join(["exit statuses " + str(proc.returncodes), *table, proc.stderr[-2000:]])
    assert seen == {backend: expected[:4] for backend, expected in EXPECTED.items()}, message
    for backend, (*_, words) in EXPECTED.items():
        (case,) = [c for c in document["results"] if c["backend"] == backend and c["outcome"] in BROKEN]
        line = one_line(case)
        assert words in line and "\n" not in line, f"{backend}: {line!r}\n{message}"
        clause = None if case["outcome"] == "crash" else EXPECTED[backend][2]  # which one broke: unknown
        assert case["failure"]["clause"] == clause, f"{backend}: {case['failure']}"
    # Every other case of these backends is "not implemented", never a stray failure.
    others = {c["outcome"] for c in document["results"] if c["outcome"] not in BROKEN}
    assert others == {"not implemented"}, message
    assert proc.returncodes == {"main": 1, "timing": 1} and document["exitstatus"] == 1, message


def test_a_timeout_is_streamed_as_one_not_as_a_failure(catalogue):
    """A case SIGALRM stopped streams ``opconform: TIMEOUT`` with the limit, never ``opconform: FAIL
    ... raised CaseTimeout`` (its cell is TIMEOUT: no verdict on the kernel's result)."""
    proc, _ = catalogue
    lines = [line for line in proc.stdout.splitlines() if line.startswith("opconform: ")]
    for backend in ("hang", "slow"):
        mine = [line for line in lines if f" {backend}@cpu: " in line]
        assert mine and all(line.startswith("opconform: TIMEOUT NORM-RMS rms_norm ") for line in mine), lines
        assert all("per-case time limit of 2 s" in line and "CaseTimeout" not in line for line in mine), mine


def test_timeout_and_crash_are_cells_and_regressions(catalogue):
    """TIMEOUT and CRASH cells in the text matrix; neither conforms, and each is a new failure in
    diff against a passing run."""
    _, document = catalogue
    text = render.text(document)
    assert "TIMEOUT 1/1" in text and "CRASH 1/1" in text, text
    (row,) = [line for line in text.splitlines() if line.startswith("NORM-RMS ")]
    assert row.split()[1:4] == ["MUST", "CRASH", "1/1"] and report.NO_CLAUSE not in text, text
    assert "[abort-cpu] (crash: the worker running it died, checks NORM-RMS, worker 'gw" in text, text
    assert not report.conforms(document)
    before = {**document, "results": [{**r, "outcome": "passed"} for r in document["results"]]}
    regressions = {r["column"].split("@")[0] for r in report.diff(before, document)["new failures"]}
    assert regressions == set(EXPECTED), regressions


def test_deselected_manifest_entries_are_not_stale(catalogue):
    """With -k (here under -n 1: the worker collects) an entry whose clause's cases were all
    deselected is "not run": diffusers' built-in DPM-SDE3 entry (no scheduler case ran) and a
    user's NORM-GEMMA entry were "stale" (remove them). An entry matching no collected test is."""
    _, document = catalogue
    status = {(e["backend"], e.get("clause") or e["test"]): e["status"] for e in document["expectations"]
              if e["backend"] in ("returns-none", "diffusers") and e["run"] == "main"}  # fmt: skip
    assert status == {
        ("diffusers", "DPM-SDE3"): "not run",
        ("returns-none", "NORM-GEMMA"): "not run",
        ("returns-none", "test_norms.py::test_no_such_property*"): "stale",
    }, status

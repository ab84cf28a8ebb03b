"""Levels (spec/README.md, Levels): a SHOULD failure is its own outcome, counted apart, failing a
run only under --strict; older reports read with today's levels; the real bug first.

The runs use tests/lax_backend.py: a correct RMSNorm that validates nothing, as the field writes
it. Its MUST clauses pass; NORM-ERRORS, a SHOULD clause, fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from suite_runner import REPO, produced_once

from conformance import results
from conformance.results import Outcome
from opconform import mutation, render, report

TESTS = Path(__file__).resolve().parent
# rms_norm's oracle property and its bad inputs: a few seconds, both levels.
SELECTION = "test_rms_norm_matches_oracle or (test_should_reject_bad_input and rms_norm-)"


def _env() -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _runs(root: Path) -> dict:
    """``opconform run`` without (showing pytest's own failure output) and with --strict."""
    common = ["--backend-module", "lax_backend", "--device", "cpu", "-n", "0", "--profile", "ci"]
    manifest = root / "lax.toml"  # a declared SHOULD failure: expectations apply at both levels
    case = "test_norms.py::test_should_reject_bad_input?lax-cpu-rms_norm-eps-nan?"  # a glob: ? for [ ]
    manifest.write_text(
        f'backend = "lax"\n\n[[expect]]\ntest = "{case}"\nreason = "bug"\nissue = "https://example.org/lax/1"\n'
    )
    out = {}
    # --tb=auto after -- undoes run's --tb=no: pytest's own output then shows its SHOULD section too.
    for name, extra, tb in (
        ("run", [], ["--tb=auto"]),
        ("strict", ["--strict", "--expectations", str(manifest)], []),
    ):
        command = [sys.executable, "-m", "opconform.cli", "run", *common, *extra, "--out", str(root / name),
                   "--", "-k", SELECTION, *tb]  # fmt: skip
        proc = subprocess.run(command, cwd=root, env=_env(), capture_output=True, text=True, timeout=600)
        out[name] = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    out["pytest"] = out["run"]["stdout"].partition("\nopconform summary")[0]  # pytest's part of the run
    out["report"] = str(root / "run" / "report.json")
    return out


@pytest.fixture(scope="module")
def lax(tmp_path_factory):
    return produced_once(tmp_path_factory, "opconform-levels", _runs)


def test_a_correct_backend_that_validates_nothing_exits_0_with_its_should_summary(lax):
    """opconform run: exit 0, MUST clean, the SHOULD failures counted and listed apart."""
    run = lax["run"]
    assert run["returncode"] == 0, run["stdout"][-3000:] + run["stderr"][-2000:]
    assert "lax@cpu: conforms, " in run["stdout"] and "SHOULD failed (" in run["stdout"], run["stdout"][
        -3000:
    ]
    assert "SHOULD failures (" in run["stdout"] and "MUST failures (" not in run["stdout"]
    assert "opconform run: no MUST failure, " in run["stdout"]
    document = report.load(lax["report"])
    should = report.failures(document, level="SHOULD")
    assert should and all(r["failure"]["clause"] == "NORM-ERRORS" for r in should)
    assert all(r["outcome"] == Outcome.SHOULD_FAILED.value and r["level"] == "SHOULD" for r in should)
    assert document["clauses"]["NORM-ERRORS"]["level"] == "SHOULD" and document["strict"] is False


def test_strict_makes_should_failures_fail_the_run_and_manifests_declare_them(lax):
    """opconform run --strict: the same failures, exit 1; a SHOULD failure a manifest declares is
    an expected failure like any other."""
    strict = lax["strict"]
    assert strict["returncode"] == 1, strict["stdout"][-3000:]
    assert "SHOULD failures (" in strict["stdout"] and "opconform run: no MUST failure, " in strict["stdout"]
    document = report.load(Path(lax["report"]).parent.parent / "strict" / "report.json")
    (declared,) = [r for r in document["results"] if r["nodeid"].endswith("[lax-cpu-rms_norm-eps-nan]")]
    assert declared["outcome"] == "expected failure" and declared["expectation"]["verdict"] == "expected"
    assert document["strict"] is True and report.failures(document, level="SHOULD")


def test_pytest_counts_should_failures_apart_and_lists_them_after(lax):
    """pytest (run's, with its own failure output back on): "N SHOULD failed" in its last line and no
    "failed", their section after the failures, each SHOULD failure's verdict and rerun there once;
    none of them streamed as a broken MUST clause."""
    out = lax["pytest"]
    last = out.strip().splitlines()[-1]
    assert " SHOULD failed" in last and " failed" not in last.replace("SHOULD failed", ""), last
    section = out[out.index("SHOULD failures (") :]
    count = int(section.partition("SHOULD failures (")[2].partition(")")[0])
    assert section.count("[NORM-ERRORS]") == count and section.count("rerun: ") == count, section
    assert "opconform: FAIL" not in out


def _case(nodeid, outcome, clause, *, clauses=None, size=1, kind=None):
    failure = {"clause": clause, "example": {"arguments": {"n": str(size)}}, "kind": kind}
    return {"nodeid": nodeid, "outcome": outcome, "backend": "b", "device": "cpu", "op": "op",
            "clauses": clauses or [clause], "failure": failure}  # fmt: skip


def _document(cases, version=4):
    clauses = {
        "X-DIRECT": {"level": "MUST", "kind": "direct", "refines": []},
        "X-PIN": {"level": "MUST", "kind": "direct", "refines": ["X-DIRECT"]},
        "X-META": {"level": "MUST", "kind": "metamorphic", "refines": []},
        "X-ERRORS": {"level": "SHOULD", "kind": "bad input", "refines": []},
    }
    return {"schema": results.SCHEMA, "version": version, "clauses": clauses, "results": cases,
            "backends": ["b"], "exitstatus": 1}  # fmt: skip


def test_root_cause_leads_with_a_direct_must_failure_over_smaller_examples():
    """The lead of a group is a direct MUST clause that pins a mechanism, then a broad direct one,
    even when a metamorphic failure has a smaller example; SHOULD failures form their own list."""
    cases = [
        _case("t::meta", "failed", "X-META", size=0),
        _case("t::direct", "failed", "X-DIRECT", size=5),
        _case("t::pin", "failed", "X-PIN", size=9),
        _case("t::bad", "failed (SHOULD)", "X-ERRORS", size=0),
        _case("t::direct-compared-to-itself", "failed", "X-DIRECT", size=0, kind="metamorphic"),
    ]
    (cause,) = report.causes(_document(cases))
    order = [r["nodeid"] for r in cause.failures]
    assert order == ["t::pin", "t::direct", "t::direct-compared-to-itself", "t::meta"], order
    (should,) = report.causes(_document(cases), level="SHOULD")
    assert [r["nodeid"] for r in should.failures] == ["t::bad"]


def test_conforms_counts_should_failures_only_when_strict():
    """A document with only SHOULD failures conforms, not under strict; a MUST failure never does."""
    only_should = _document([_case("t::bad", "failed (SHOULD)", "X-ERRORS")])
    assert report.conforms(only_should) and not report.conforms(only_should, strict=True)
    assert not report.conforms(_document([_case("t::d", "failed", "X-DIRECT")]))


def test_an_older_report_takes_todays_levels(tmp_path):
    """A version-3 report's failure of a clause the spec now calls SHOULD reads as a SHOULD failure,
    its MUST failures stay, and the document says its levels were supplied."""
    old = {"schema": results.SCHEMA, "version": 3, "clauses": {"NORM-ERRORS": {"title": "bad input"}},
           "results": [_case("t::e", "failed", "NORM-ERRORS"), _case("t::r", "failed", "NORM-RMS"),
                       {"nodeid": "t::p", "outcome": "passed", "clauses": ["NORM-ERRORS"]}]}  # fmt: skip
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    document = report.load(path)
    assert document["version"] == results.VERSION
    states = {r["nodeid"]: (report.case_state(r), r["level"]) for r in document["results"]}
    assert states == {"t::e": (report.SHOULD_FAIL, "SHOULD"), "t::r": (report.FAIL, "MUST"),
                      "t::p": (report.PASS, "SHOULD")}  # fmt: skip
    assert document["clauses"]["NORM-ERRORS"]["level"] == "SHOULD"
    assert any(w.startswith("levels:") for w in document["warnings"])


def test_diff_and_render_keep_the_levels_apart():
    """diff lists a new SHOULD failure apart from new MUST failures; the text report says both."""
    old = _document([_case("t::bad", "passed", "X-ERRORS"), _case("t::d", "passed", "X-DIRECT")])
    new = _document([_case("t::bad", "failed (SHOULD)", "X-ERRORS"), _case("t::d", "failed", "X-DIRECT")])
    changes = report.diff(old, new)
    assert [c["nodeid"] for c in changes["new failures"]] == ["t::d"]
    assert [c["nodeid"] for c in changes["new SHOULD failures"]] == ["t::bad"]
    text = render.text(new)
    assert "b@cpu: 1 MUST broken, 1 SHOULD failed" in text
    assert text.index("MUST failures (1)") < text.index("SHOULD failures (1)")


def test_mutant_verdicts_name_a_should_only_catch_a_hazard(monkeypatch):
    """A MUST mutant caught only by a SHOULD clause is a hazard, not killed; a mutant declared SHOULD
    (a robustness mistake, with its reason) is killed by that clause."""

    def mutant(name, clauses, **level):
        return type(name, (), {"name": name, "clauses": set(clauses), "__doc__": "x", **level})()

    module = types.ModuleType("fake_mutants")
    module.BACKENDS = [mutant("must", ["X-DIRECT"]), mutant("should", ["X-ERRORS"], level="SHOULD", why="y")]
    monkeypatch.setitem(sys.modules, "fake_mutants", module)
    cases = [
        {**_case(f"t::{m.name}", "failed (SHOULD)", "X-ERRORS"), "backend": m.name} for m in module.BACKENDS
    ]
    must, should = mutation.verdicts("fake_mutants", results.Document.from_dict(_document(cases)))
    assert (must.killed, must.state) == (False, "HAZARD: only SHOULD clauses catch it"), must
    assert (should.killed, should.right_clause, should.state) == (True, True, "killed (SHOULD)"), should

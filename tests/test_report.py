"""The report, from real runs of the suite: results capture, expectations, matrix, merge, diff, HTML."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_runs import opconform, shared_reports

from conformance import results
from opconform import render, report


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return shared_reports(tmp_path_factory)


@pytest.fixture(scope="module")
def declared(runs):
    return report.load(Path(runs["declared"]["dir"]) / "report.json")


@pytest.fixture(scope="module")
def undeclared(runs):
    return report.load(Path(runs["undeclared"]["dir"]) / "report.json")


def _cases(document, backend, test):
    return [r for r in document["results"] if r["backend"] == backend and f"::{test}[" in r["nodeid"]]


def test_run_writes_three_files_and_prints_the_matrix(runs):
    """opconform run writes report.json/.md/.html and prints the summary and the matrix."""
    out = Path(runs["declared"]["dir"])
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    stdout = runs["declared"]["stdout"]
    assert "opconform summary" in stdout and "deviating@cpu" in stdout and "native@cpu" in stdout
    assert any(line.startswith("ACT-GEGLU ") and "xfail" in line for line in stdout.splitlines()), stdout


def test_declared_deviation_is_an_expected_failure_and_exits_0(runs, declared):
    """The manifest's deviation turns the float32 GEGLU failure into an expected failure; exit 0."""
    (case,) = _cases(declared, "deviating", "test_geglu_matches_oracle")
    assert case["outcome"] == "expected failure", case
    assert case["expectation"]["verdict"] == "expected" and case["expectation"]["reason"] == "deviation"
    assert case["failure"]["dtype"] == "float32" and 0 < case["failure"]["largest_abs_error"] <= 1.0
    assert runs["declared"]["returncode"] == 0, runs["declared"]["stdout"][-3000:]


def test_undeclared_deviation_fails_with_facts_and_exits_1(runs, undeclared):
    """Without the manifest the same case fails with clause, dtype, largest error and rerun; exit 1."""
    (case,) = _cases(undeclared, "deviating", "test_geglu_matches_oracle")
    assert case["outcome"] == "failed"
    failure = case["failure"]
    assert failure["clause"] == "ACT-GEGLU" and failure["dtype"] == "float32"
    assert failure["largest_abs_error"] > 0 and failure["largest_rel_error"] >= 9e-5
    assert "test_geglu_matches_oracle[deviating-cpu]" in failure["rerun"]
    assert "--backend-module=report_backends" in failure["rerun"]
    assert runs["undeclared"]["returncode"] == 1


def test_unexpected_pass_stale_and_unsupported_entries(declared):
    """A passing declared bug says remove it, the unmatched entry is stale, unsupported is a skip."""
    status = {e["clause"] if "clause" in e else e["test"]: e["status"]
              for e in declared["expectations"] if e["backend"] == "deviating"}  # fmt: skip
    assert status == {
        "ACT-GEGLU": "used",
        "ACT-SWIGLU": "unexpected pass",
        "test_activations.py::test_swiglu_step_matches_oracle*": "used",
        "test_activations.py::test_no_such_property*": "stale",
    }
    (swiglu,) = _cases(declared, "deviating", "test_silu_and_mul_matches_oracle")
    assert report.case_state(swiglu) == report.XPASS
    (step,) = _cases(declared, "deviating", "test_swiglu_step_matches_oracle")
    assert step["outcome"] == "skipped" and step["reason"].startswith("unsupported (")
    assert step["expectation"] == {
        "id": step["reason"][len("unsupported (") :].split(")")[0],
        "reason": "unsupported",
        "verdict": "expected",
    }
    text = render.text(declared)
    assert "unexpected pass of ACT-SWIGLU: remove this entry" in text and "stale" in text


def test_results_record_case_facts(declared):
    """Every case records clauses, op, backend, device, duration and its matching entries."""
    assert declared["version"] == results.VERSION and declared["devices"] == ["cpu"]
    assert declared["backends"] == ["native", "deviating"]
    for case in declared["results"]:
        assert case["clauses"] and case["op"] and case["device"] == "cpu" and case["duration"] >= 0
    assert len(declared["results"]) == 6


def test_matrix_cells_and_coverage(declared):
    """Cells aggregate per clause and backend@device; every run clause is covered in every column."""
    matrix = report.build_matrix(declared)
    assert matrix.columns == ["native@cpu", "deviating@cpu"]
    assert matrix.cell("ACT-GEGLU", "native@cpu").state == report.PASS
    assert matrix.cell("ACT-GEGLU", "deviating@cpu").state == report.EXPECTED
    assert matrix.cell("ACT-SWIGLU-STEP", "deviating@cpu").state == report.SKIP
    cover = report.coverage(declared, matrix)
    assert cover["gaps"] == {}
    assert "ACT-PURE" in cover["uncovered"] and "ACT-GEGLU" not in cover["uncovered"]
    assert "TOL-TABLE" in cover["rules"] and "TOL-TABLE" not in cover["uncovered"]


def test_markdown_has_matrix_and_rerun(undeclared):
    """The Markdown report carries the matrix rows and each failure's rerun command."""
    text = render.markdown(undeclared)
    assert "| activations | ACT-GEGLU | MUST | pass | FAIL 1/1 |" in text
    # The bad input the accepting and raising backends take: SHOULD failures, apart.
    assert "| activations | ACT-ERRORS | SHOULD | pass | pass | should-fail 1/7 | should-fail 1/7 |" in text
    assert text.index("MUST failures (") < text.index("SHOULD failures (2)")
    assert "rerun: `python -m pytest " in text


def test_diff_lists_regressions_and_fixes(runs):
    """diff declared->undeclared is a regression (exit 1); the reverse is a fix (exit 0)."""
    old, new = (str(Path(runs[n]["dir"]) / "report.json") for n in ("declared", "undeclared"))
    worse = opconform("diff", old, new, cwd=Path(runs["manifest"]).parent)
    assert worse.returncode == 1, worse.stdout + worse.stderr
    # deviating's GEGLU, and the 2 MUST cases of the BROKEN backends only the undeclared run has;
    # their 2 bad-input cases apart, as SHOULD failures.
    assert "new failures (3):" in worse.stdout and "test_geglu_matches_oracle[deviating-cpu]" in worse.stdout
    assert "new SHOULD failures (2):" in worse.stdout, worse.stdout
    better = opconform("diff", new, old, cwd=Path(runs["manifest"]).parent)
    assert better.returncode == 0 and "fixes (1):" in better.stdout
    changes = report.diff(report.load(new), report.load(old))
    assert [c["new"] for c in changes["fixes"]] == [report.EXPECTED]
    assert {c["nodeid"].split("::")[1] for c in changes["changed"]} == {
        "test_silu_and_mul_matches_oracle[deviating-cpu]",  # pass -> unexpected pass
        "test_swiglu_step_matches_oracle[deviating-cpu]",  # pass -> unsupported skip
    }


def test_merge_combines_runs(runs, tmp_path):
    """merge puts the runs' results in one matrix and writes the three files; a failure exits 1."""
    paths = [str(Path(runs[n]["dir"]) / "report.json") for n in ("declared", "undeclared")]
    proc = opconform("merge", *paths, "--out", str(tmp_path / "merged"), "--markdown", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    # Both runs cover the same columns: each case once, the later run's, disagreements warned.
    assert "| activations | ACT-GEGLU | MUST | pass | FAIL 1/1 |" in proc.stdout
    assert "test_geglu_matches_oracle[deviating-cpu]: expected failure in" in proc.stdout
    merged = report.load(tmp_path / "merged" / "report.json")
    assert [m["name"] for m in merged["merged_from"]] == paths
    later = report.load(paths[1])["results"]  # a superset of the declared run's cases
    assert len(merged["results"]) == len(later) and {r["run"] for r in merged["results"]} == {paths[1]}
    assert (tmp_path / "merged" / "report.html").stat().st_size > 1000


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _browser(*args: str) -> subprocess.CompletedProcess:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def html_report(runs):
    if _chromium() is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium); the HTML check needs it")
    return Path(runs["undeclared"]["dir"]) / "report.html"


def test_html_opens_without_errors_and_shows_the_matrix(html_report, tmp_path):
    """Headless chromium renders the page: matrix present, script ran, no JS errors; screenshot taken."""
    dom = _browser("--dump-dom", html_report.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-opconform-ready="1"' in dom.stdout, "the page script did not finish"
    assert '<pre id="js-errors"></pre>' in dom.stdout and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
    assert 'id="matrix"' in dom.stdout and ">ACT-GEGLU<" in dom.stdout and "FAIL 1/1" in dom.stdout
    shot = tmp_path / "report.png"
    _browser(f"--screenshot={shot}", "--window-size=1200,900", html_report.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_html_filters_hide_other_backends(html_report):
    """The backend filter (preset from the URL) hides the other backends' columns."""
    dom = _browser("--dump-dom", html_report.as_uri() + "?backend=native").stdout
    headers = dict(re.findall(r'<th data-column="" data-backend="(\w+)" data-device="cpu"([^>]*)>', dom))
    hidden = ' class="hidden"'
    assert headers == {"native": "", "deviating": hidden, "accepting": hidden, "raising": hidden}, headers


def test_json_report_is_versioned(declared):
    """The document names its schema and version; load() refuses other files clearly."""
    assert declared["schema"] == results.SCHEMA and declared["version"] == results.VERSION
    assert json.loads(json.dumps(declared)) == declared

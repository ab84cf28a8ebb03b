"""opconform dashboard, from three real runs: acme (tests/dashboard_backends.py) conforms twice,
then regresses (a MUST and two SHOULD failures); native runs beside it each time. The site is
checked as files (links, data, diff categories equal to report.diff's) and in headless chromium
(no console error, the planted regression on the first screen, screenshots under tmp_path)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from headless_chromium import Browser
from report_runs import _env, opconform
from suite_runner import produced_once

from opconform import cli, dashboard
from opconform import report as rep

SELECTION = "gemma_rms_norm_matches or rms_norm_matches or should_reject_bad_input and test_norms"
PLANTED = "test_norms.py::test_gemma_rms_norm_matches_oracle[acme-cpu]"


def _produce(root: Path) -> dict:
    """r1 and r2 (acme FIXED) side by side, then r3 (acme REGRESSED): r3's date is the latest."""

    def start(name: str, attr: str) -> subprocess.Popen:
        # ci's examples and verdicts without the shrink phase: the site shows r3's failing example
        # as found (shrinking it was about 3 of r3's 7 CPU-s, and no check reads a minimal example).
        command = [sys.executable, "-m", "opconform.cli", "run", "--backend", "native", "--backend-module",
                   f"dashboard_backends:{attr}", "--device", "cpu", "-n", "0", "--out", str(root / name),
                   "--", "-k", SELECTION, "--hypothesis-profile=opconform-ci-noshrink"]  # fmt: skip
        return subprocess.Popen(command, cwd=root, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    codes = {}
    for batch in ((("r1", "FIXED"), ("r2", "FIXED")), (("r3", "REGRESSED"),)):
        procs = {name: start(name, attr) for name, attr in batch}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=600)
            codes[name] = [proc.returncode, (out + err).decode()[-2000:]]
    reports = [str(root / name / "report.json") for name in ("r1", "r2", "r3")]
    site = root / "site"
    built = opconform("dashboard", *reports, "--out", str(site), cwd=root)
    return {"codes": codes, "reports": reports, "site": str(site), "stdout": built.stdout + built.stderr,
            "returncode": built.returncode}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    runs = produced_once(tmp_path_factory, "opconform-dashboard-runs", _produce)
    assert [c[0] for c in runs["codes"].values()] == [0, 0, 1], runs["codes"]  # r3 has a MUST failure
    assert runs["returncode"] == 0, runs["stdout"]
    return runs


@pytest.fixture(scope="module")
def site(built):
    return Path(built["site"])


def test_the_site_names_its_runs_and_products(built, site):
    """Three runs of two products (acme@cpu, native@cpu on this stack); one page per product,
    family and clause; the command says how many and how large."""
    summary = r"3 runs, 2 products, \d+ files, [\d.]+ MB in [\d.]+ s"
    assert re.search(summary, built["stdout"]), built["stdout"]
    assert len(list(site.glob("product-*.html"))) == 2
    assert (site / "family-norms.html").exists() and (site / "clause-NORM-GEMMA.html").exists()
    data = sorted(p.name for p in (site / "data").iterdir())
    assert data == ["run-0.js", "run-1.js", "run-2.js", "site.js"]


def test_the_planted_regression_leads_the_index(built, site):
    """The first section of the index is acme's new failures, r3 against r2, with the verdict line
    and the rerun line; native, unchanged, is not there."""
    index = (site / "index.html").read_text()
    section = index[index.index("<section id='regressions'>") : index.index("</section>")]
    assert index.index("<section id='regressions'>") < index.index("<table id='products'>")
    assert "acme@cpu" in section and "native@cpu" not in section
    assert "1 new MUST failure, 2 new SHOULD failures" in section
    assert "1 of 2 products have new failures in their latest run (1 of them MUST failures)" in section
    assert PLANTED in section and "[NORM-GEMMA] gemma_rms_norm on backend &#x27;acme&#x27;" in section
    assert "rerun: <code>python -m pytest --pyargs" in section and built["reports"][2] in section


def test_family_matrix_shows_both_levels(site):
    """norms' matrix: each product's latest run, the level beside each clause, acme's MUST failure and
    SHOULD failures in their own classes, native passing."""
    page = (site / "family-norms.html").read_text()
    gemma = re.search(r"<tr><td[^>]*><a href='clause-NORM-GEMMA.html'>.*?</tr>", page).group(0)
    assert "<td>MUST</td>" in gemma and "class='st fail'" in gemma and "FAIL 1/1" in gemma
    errors = re.search(r"<tr><td[^>]*><a href='clause-NORM-ERRORS.html'>.*?</tr>", page).group(0)
    assert "<td>SHOULD</td>" in errors and "class='st shouldfail'" in errors and "class='st pass'" in errors


def test_product_history_lists_runs_with_dates(built, site):
    """acme's page: its three runs newest first, each dated, the last against the one before it."""
    documents = [rep.load(p) for p in built["reports"]]
    (acme,) = [p for p in site.glob("product-*.html") if "acme@cpu" in p.read_text()]
    page = acme.read_text()
    rows = re.findall(r"<tr><td>([^<]+)</td><td><code>", page)
    # r1 and r2 ran side by side (either may be the older); r3 after both
    assert (
        rows == sorted((d["created"] for d in documents), reverse=True) and rows[0] == documents[2]["created"]
    )
    assert "1 new failures, 2 new SHOULD failures" in page and "diff.html?a=1&amp;b=2" in page
    history = re.search(r"<a href='clause-NORM-GEMMA.html'>NORM-GEMMA</a>.*?</tr>", page).group(0)
    assert re.findall(r"colspan='(\d)'[^>]*>([A-Z])</td>", history) == [("2", "P"), ("1", "F")]


def test_clause_page_shows_failing_examples_and_reruns(site):
    """NORM-GEMMA's page: acme's failure record (verdict, example, rerun), native's passing cell."""
    page = (site / "clause-NORM-GEMMA.html").read_text()
    assert "level MUST" in page and "acme@cpu: [NORM-GEMMA] gemma_rms_norm" in page
    assert "example: recipe=NormRecipe(" in page
    assert "rerun: python -m pytest --pyargs &#x27;conformance.test_norms::test_gemma_rms_norm" in page
    assert (site / "clause-NORM-RMS.html").read_text().count("None: no product") == 1


def test_compact_diff_is_report_diff(built):
    """The site's diffs (a table of report.diff's own transitions over the runs' compact cases) equal
    report.diff on the documents, every category, both directions."""
    site = dashboard.build(built["reports"])
    table = dashboard.transitions()
    documents = [rep.load(p) for p in built["reports"]]
    for old, new in ((0, 2), (2, 0), (0, 1)):
        expected = {
            k: sorted(i["nodeid"] for i in v)
            for k, v in rep.diff(documents[old], documents[new]).items()
            if v
        }
        runs = {run.name: run for run in site.runs}  # date order may put r2 before r1
        found = dashboard.diff_runs(site, runs[built["reports"][old]], runs[built["reports"][new]], table)
        got = {k: sorted(site.cases[i][0] for i, _, _ in v) for k, v in found.items()}
        assert got == expected, (old, new)
    assert expected == {}  # r1 -> r2: the same code twice
    assert got == {}


def test_transitions_follow_report_diff():
    """A few of report.diff's documented cases, read from the table: pass -> fail and fail -> timeout
    are new failures, fail -> pass a fix, a skip with another reason a change, a new case added."""
    table = dashboard.transitions()
    assert table["PF0"] == table["FT0"] == "new failures" and table["PS0"] == "new SHOULD failures"
    assert table["FP0"] == "fixes" and table["KK1"] == "changed" and table[".P0"] == "added"
    assert table["P.0"] == "removed" and "PP0" not in table and "FF0" not in table


def test_every_link_resolves_and_nothing_is_external(site):
    """Every href and src of every page is a file of the site (and its #anchor an id of the page);
    none leaves the site (no server, no network)."""
    pages = sorted(site.glob("*.html"))
    assert len(pages) > 10
    for page in pages:
        text = re.sub(r"<script>.*?</script>", "", page.read_text(), flags=re.S)  # scripts' links: below
        for link in re.findall(r"""(?:href|src)=['"]([^'"]+)['"]""", text):
            assert not re.match(r"[a-z]+:", link), (page.name, link)
            path, _, anchor = link.split("?")[0].partition("#")
            target = site / path if path else page
            assert target.is_file(), (page.name, link)
            if anchor:
                assert f"id='{anchor}'" in target.read_text() or f'id="{anchor}"' in target.read_text()
    shared = json.loads((site / "data" / "site.js").read_text().split("=", 1)[1].split(";OPC.runs=")[0])
    assert all((site / name).is_file() for name in shared["pages"].values())
    assert all((site / "data" / f"run-{i}.js").is_file() for i in range(len(shared["runList"])))


def test_product_tuple_keys_products(built, tmp_path):
    """With meta["product"], a product is its tuple less commit and host: two runs differing only
    there are one product's history (their commits shown); another CANN is another product."""
    data = json.loads(Path(built["reports"][0]).read_text())
    stack = {"chip": "Ascend910B3", "driver": "24.1", "cann": "8.3", "torch": "2.6.0", "torch_npu": "2.6.0"}
    paths = []
    for name, cann, commit, host in (("a", "8.3", "1111aaa", "n1"), ("b", "8.3", "2222bbb", "n2"),
                                     ("c", "8.5", "3333ccc", "n1")):  # fmt: skip
        data["product"] = {**stack, "cann": cann, "commit": commit, "host": host}
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    site = dashboard.build([str(p) for p in paths])
    histories = sorted(
        (p.column, p.fields["cann"], [site.runs[i].commit for i in p.runs]) for p in site.products.values()
    )
    assert histories == [
        ("acme@cpu", "8.3", ["1111aaa", "2222bbb"]),
        ("acme@cpu", "8.5", ["3333ccc"]),
        ("native@cpu", "8.3", ["1111aaa", "2222bbb"]),
        ("native@cpu", "8.5", ["3333ccc"]),
    ]
    real = dashboard.build(built["reports"][:1])  # a real run's tuple: its non-empty components
    assert all({"chip", "torch", "python"} <= set(p.fields) for p in real.products.values())
    data.pop("product")  # a report from before the tuple: backend@device with its torch and python
    (tmp_path / "old.json").write_text(json.dumps(data))
    fallback = dashboard.build([str(tmp_path / "old.json")])
    assert {tuple(p.fields) for p in fallback.products.values()} == {("torch", "python")}


def _error(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line(built, tmp_path, capsys):
    """A missing report, a file that is not one, a malformed product, an --out that holds other
    files: one line naming it, exit 2; --overwrite replaces an earlier site, and only that."""
    good = built["reports"][0]
    out = str(tmp_path / "site")
    assert "no such report file" in _error(["dashboard", str(tmp_path / "nope.json"), "--out", out], capsys)
    (tmp_path / "other.json").write_text('{"schema": "something else"}')
    assert "not an opconform report" in _error(
        ["dashboard", str(tmp_path / "other.json"), "--out", out], capsys
    )
    bad = json.loads(Path(good).read_text()) | {"product": "npu"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert "field 'product'" in _error(["dashboard", str(tmp_path / "bad.json"), "--out", out], capsys)
    assert cli.main(["dashboard", good, "--out", out]) == 0
    assert "pass --overwrite" in _error(["dashboard", good, "--out", out], capsys)
    stale = tmp_path / "site" / "clause-NO-SUCH.html"
    stale.write_text("from an earlier build")
    assert cli.main(["dashboard", good, "--out", out, "--overwrite"]) == 0 and not stale.exists()
    (tmp_path / "site" / "notes.txt").write_text("mine")
    assert "notes.txt is not part of one" in _error(["dashboard", good, "--out", out, "--overwrite"], capsys)
    assert "exists and is not a folder" in _error(
        ["dashboard", good, "--out", str(tmp_path / "bad.json")], capsys
    )


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def browser(site):
    """One headless chromium at 1280x800 for every page of these checks (tests/headless_chromium.py):
    one launch, not one per page."""
    if _chromium() is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium); the browser checks need it")
    chromium = Browser(_chromium())
    yield chromium
    chromium.close()


def _dom(browser: Browser, url: str) -> str:
    """The page's DOM at its load event, after checking that it loaded, its script finished and
    nothing went wrong: no uncaught exception, console error or failed load (the page's events and
    chromium's log so far)."""
    page = browser.open(url)
    assert 'data-opconform-ready="1"' in page.dom, f"{url}: the page script did not finish"
    assert '<pre id="js-errors"></pre>' in page.dom, f"{url}: {page.dom[:2000]}"
    assert not page.errors, (url, page.errors)
    log = browser.stderr()
    assert "Uncaught" not in log and "Failed to load" not in log, log[-2000:]
    return page.dom


def _screenshot(browser: Browser, path: Path) -> None:
    path.write_bytes(browser.screenshot())
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_pages_open_in_chromium_without_errors(browser, site, tmp_path):
    """The index, a family, a product, a clause and the diff of r2 and r3 open with no console
    error; the diff (computed in the page from the runs' data files) lists the planted regression
    with its rerun line; screenshots of the index and the diff."""
    product = next(p for p in site.glob("product-*.html") if "acme@cpu" in p.read_text())
    _dom(browser, (site / "index.html").as_uri())
    _screenshot(browser, tmp_path / "index.png")
    for page in ("family-norms.html", product.name, "clause-NORM-GEMMA.html"):
        _dom(browser, (site / page).as_uri())
    diff = _dom(browser, (site / "diff.html").as_uri() + "?a=1&b=2")
    _screenshot(browser, tmp_path / "diff.png")
    assert "new failures (1)" in diff and "new SHOULD failures (2)" in diff and "<h2>fixes" not in diff
    assert PLANTED in diff and "rerun: <code>python -m pytest" in diff
    assert "no changes" in _dom(browser, (site / "diff.html").as_uri() + "?a=0&b=1")
    assert "new failures (1)" in _dom(browser, (site / "diff.html").as_uri())  # default: r3 against r2
    assert "no run 7: choose two" in _dom(browser, (site / "diff.html").as_uri() + "?a=7&b=1")


def test_planted_regression_is_on_the_first_screen(browser, site, tmp_path):
    """At 1280x800 the planted MUST regression's line ends above the fold: a copy of the index (its
    base the site) with a probe script that records where that line is."""
    probe = (
        "<script>window.addEventListener('load',function(){var items=document.querySelectorAll("
        "'li.regression[data-level=MUST]'),found=null;items.forEach(function(li){"
        f"if(li.textContent.indexOf('{PLANTED}')>=0){{found=li.getBoundingClientRect();}}}});"
        "document.body.setAttribute('data-probe',JSON.stringify(found&&{bottom:found.bottom,"
        "height:window.innerHeight}));});</script>"
    )
    page = (site / "index.html").read_text()
    page = page.replace("<head>", f"<head><base href='{site.as_uri()}/'>").replace(
        "</body>", probe + "</body>"
    )
    copy = tmp_path / "index-probe.html"
    copy.write_text(page)
    dom = _dom(browser, copy.as_uri())
    found = json.loads(re.search(r'data-probe="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert found and 600 <= found["height"] <= 800 and 0 < found["bottom"] <= found["height"], found


def test_merged_and_repeated_reports(built, tmp_path):
    """A merged report is one run dated by its latest input; a report named twice is one run."""
    merged = tmp_path / "merged"
    assert cli.main(["merge", *built["reports"][:2], "--out", str(merged)]) == 0
    site = dashboard.build([built["reports"][2], built["reports"][2], str(merged / "report.json")])
    assert [run.name for run in site.runs] == [str(merged / "report.json"), built["reports"][2]]
    assert site.runs[0].created == max(rep.load(p)["created"] for p in built["reports"][:2])


def test_scale_benchmark_builds_a_fleet(tmp_path, monkeypatch, capsys):
    """benchmarks/dashboard_scale.py at a toy size: its synthetic reports pass the results loader
    and give a product per machine and backend, with history."""
    from benchmarks import dashboard_scale

    monkeypatch.setattr(sys, "argv", ["x", "--runs", "12", "--cases", "64", "--out", str(tmp_path)])
    dashboard_scale.main()
    out = capsys.readouterr().out
    assert "12 runs, 48 products" in out and "exit 0" in out, out
    assert (tmp_path / "site" / "index.html").exists()

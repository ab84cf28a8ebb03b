"""The failure record without a run: the example taken from Hypothesis's notes, its size, the root
causes' order, version-2 reports, the matrix's omitted rows and the HTML's manifests."""

from __future__ import annotations

import re

from conformance import failure_record, results
from conformance.harness import failure_capture
from opconform import render, report

NOTES = [
    "Falsifying example: test_paged(\n    backend=<acme.Mine object at 0x7f00>,\n"
    "    device=device(type='cpu'),\n    data=data(...),\n"
    "    recipe=ServingRecipe(seq_lens=(1,),\n     block_size=1, name='a, (b'),\n"
    "    poison=True,  # or any other generated value\n)",
    "Draw 1 (positions): [0,\n 1]",
    "Explanation:\n    These lines were always and only run by failing examples:\n"
    "        /x/conformance/checks.py:125",
    "You can reproduce this example by temporarily adding @reproduce_failure('6.1', b'AAE=') as a decorator",
]


def test_example_from_hypothesis_notes():
    """Hypothesis's call, draws and blob become the record; backend, device, data() and the
    comment are left out, a repr's comma inside quotes does not split an argument."""
    record = failure_record.example({"op": "rms_norm"}, NOTES, seed=7)
    assert record == {
        "test": "test_paged",
        "arguments": {
            "op": "'rms_norm'",
            "recipe": "ServingRecipe(seq_lens=(1,), block_size=1, name='a, (b')",
            "poison": "True",
            "Draw 1 (positions)": "[0, 1]",
        },
        "reproduce_failure": "@reproduce_failure('6.1', b'AAE=')",
        "seed": 7,
    }
    # Hypothesis 6.170 and later: "Failing test case:", a draw with its comment.
    newer = [
        NOTES[0].replace("Falsifying example:", "Failing test case:"),
        "Draw 1 (positions): [0, 1]  # or any",
        *NOTES[2:],
    ]
    assert failure_record.example({"op": "rms_norm"}, newer, seed=7) == record
    assert failure_record.example({}, []) is None
    assert failure_record.example({"case": object()}, [])["arguments"]["case"] == "<object object>"


def test_size_orders_by_integers_then_text():
    """The documented measure: the sum of integer literals (floats, dtype names excluded), then length."""
    small = {"arguments": {"recipe": "R(shape=(1,), dtype=torch.float32, eps=1e-06, scale=0.5)"}}
    large = {"arguments": {"recipe": "R(shape=(4, 8), dtype=torch.float32, eps=1e-06, scale=0.5)"}}
    assert failure_record.size(small) == (1, len("recipe=" + small["arguments"]["recipe"]))
    assert failure_record.size(large)[0] == 12
    assert failure_record.size(None) > failure_record.size(large) > failure_record.size(small)


def _failed(nodeid, clause, example, *, op="paged_attention", backend="mine"):
    arguments = {"recipe": example} if example else {}
    message = f"[{clause}] {op} on backend {backend!r} @ cpu: got 0.0, expected -1.5"
    failure = {"clause": clause, "message": message,
               "example": {"test": None, "arguments": arguments, "reproduce_failure": None, "seed": None},
               "rerun": f"python -m pytest {nodeid}"}  # fmt: skip
    return {"nodeid": nodeid, "outcome": "failed", "backend": backend, "device": "cpu", "op": op,
            "clauses": [clause], "failure": failure}  # fmt: skip


def _document(results_: list[dict], **extra) -> dict:
    document = {"schema": "opconform-results", "version": 3, "backends": ["mine"], "devices": ["cpu"],
                "clauses": {}, "expectations": [], "results": results_, "exitstatus": 1, **extra}  # fmt: skip
    return results.Document.from_dict(document).to_dict()


def test_root_cause_opens_with_the_smallest_example_and_errors_come_last():
    """One op's MUST failures are one cause: its smallest example first; bad input (ERRORS, SHOULD)
    apart and after, whatever its size; every failure keeps its rerun, shown once."""
    document = _document([
        _failed("t.py::test_a[mine-cpu]", "SERVE-PAGED", "S(seq_lens=(9, 4), block_size=16)"),
        _failed("t.py::test_b[mine-cpu]", "SERVE-ERRORS", "S(seq_lens=(1,), block_size=1)"),
        _failed("t.py::test_c[mine-cpu]", "SERVE-EXTEND", "S(seq_lens=(1,), block_size=1)"),
        _failed("t.py::test_d[mine-cpu]", "NORM-ERRORS", None, op="rms_norm"),
        _failed("t.py::test_e[mine-cpu]", "NORM-EPS", "N(shape=(1,))", op="rms_norm"),
    ])  # fmt: skip
    causes = report.causes(document)
    assert [(c.op, [f["failure"]["clause"] for f in c.failures]) for c in causes] == [
        ("rms_norm", ["NORM-EPS"]),  # the smallest example (size 1) opens the report
        ("paged_attention", ["SERVE-EXTEND", "SERVE-PAGED"]),
    ]
    should = report.causes(document, level="SHOULD")
    assert [(c.op, [f["failure"]["clause"] for f in c.failures]) for c in should] == [
        ("paged_attention", ["SERVE-ERRORS"]),
        ("rms_norm", ["NORM-ERRORS"]),
    ]
    text = render.text(document)
    opening = text.split("MUST failures (3)", 1)[1].splitlines()
    assert opening[1] == "  mine@cpu rms_norm: 1 failure (NORM-EPS)", opening
    assert opening[2].startswith("    [NORM-EPS] ") and "example: recipe=N(shape=(1,))" in opening[3]
    assert text.count("rerun: python -m pytest t.py::test_") == 5
    order = re.findall(r"^    \[([A-Z-]+)\]", text, re.M)
    assert order == ["NORM-EPS", "SERVE-EXTEND", "SERVE-PAGED", "SERVE-ERRORS", "NORM-ERRORS"], order
    assert text.index("MUST failures (3)") < text.index("SHOULD failures (2)")
    for rendered in (render.markdown(document), render.html_page(document)):
        assert rendered.count("python -m pytest t.py::test_") >= 5


def test_the_verdict_is_the_first_visible_line_everywhere():
    """Terminal, Markdown and HTML show a failure's verdict line first, then example, then rerun."""
    document = _document([_failed("t.py::test_a[mine-cpu]", "SERVE-PAGED", "S(seq_lens=(1,))")])
    verdict = "[SERVE-PAGED] paged_attention on backend 'mine' @ cpu: got 0.0, expected -1.5"
    text = render.text(document).split("\nMUST failures (1)", 1)[1].splitlines()
    assert text[2] == f"    {verdict}" and text[3].strip().startswith("example: recipe=S(seq_lens=(1,))")
    markdown = render.markdown(document).split("\n## MUST failures (1)", 1)[1].splitlines()
    assert markdown[2] == f"  - `{verdict}`" and markdown[4].strip().startswith("example:")
    assert "    - rerun: `python -m pytest t.py::test_a[mine-cpu]`" in markdown
    page = render.html_page(document)
    assert re.search(r"<details class='failure'><summary>\[SERVE-PAGED\] paged_attention", page)


def test_version_2_report_shows_its_verdict_not_its_traceback():
    """A version-2 report's message was pytest's traceback: its E lines are the verdict; it merges
    and diffs with a newer report."""
    old = _failed("t.py::test_a[mine-cpu]", "NORM-EPS", None, op="rms_norm")
    old["failure"] = {"clause": "NORM-EPS", "rerun": "python -m pytest t.py::test_a[mine-cpu]"}
    old["message"] = (
        "    def assert_close(\n>       raise ConformanceError(\n"
        "E       conformance.checks.ConformanceError: [NORM-EPS] rms_norm: 1 of 1 outside tolerance\n"
        "E         largest violation at index (0,)\n"
        "E       Falsifying example: test_a(\nE           backend=x,\nE       )\n"
    )
    v2 = _document([old], version=2)
    assert v2["version"] == results.VERSION  # read with today's levels
    text = render.text(v2)
    assert "    [NORM-EPS] rms_norm: 1 of 1 outside tolerance" in text
    assert "raise ConformanceError(" not in text and "def assert_close" not in render.html_page(v2)
    v3 = _document([_failed("t.py::test_a[mine-cpu]", "NORM-EPS", "N(shape=(1,))", op="rms_norm")])
    merged = report.merge([v2, v3], names=["old", "new"])
    assert merged["version"] == results.VERSION
    assert merged["results"][0]["failure"]["message"].startswith("[NORM-EPS]")
    assert report.diff(v2, v3)["new failures"] == []


def test_matrix_omits_rows_all_not_implemented_and_legend_names_rule():
    """A clause row whose every cell is n/i is left out and counted; report.md's legend has "rule"."""
    ni = {"nodeid": "t.py::test_n[mine-cpu]", "outcome": "not implemented", "backend": "mine",
          "device": "cpu", "op": "rms_norm", "clauses": ["NORM-RMS"]}  # fmt: skip
    passed = {**ni, "nodeid": "t.py::test_p[mine-cpu]", "outcome": "passed", "clauses": ["ACT-GEGLU"]}
    clauses = {"NORM-RMS": {"title": "", "family": "norms", "rule": None},
               "ACT-GEGLU": {"title": "", "family": "activations", "rule": None},
               "TOL-TABLE": {"title": "", "family": "tolerances", "rule": "every comparison"}}  # fmt: skip
    document = _document([ni, passed], clauses=clauses)
    page = render.html_page(document).split("<script type='application/json'")[0]  # the visible page
    for rendered in (render.text(document), render.markdown(document), page):
        assert "NORM-RMS" not in rendered and "ACT-GEGLU" in rendered
        assert "(1 clause rows omitted: every cell n/i)" in rendered
    markdown = render.markdown(document)
    assert (
        "| tolerances | TOL-TABLE | MUST | rule |" in markdown and "rule: a clause that is a rule" in markdown
    )


def test_html_leaves_out_other_backends_manifests():
    """The built-in backends' manifest entries are not listed as "not applicable" for a user's run."""
    entries = [{"id": "native.toml:1", "backend": "native", "clause": "ACT-GEGLU", "reason": "deviation",
                "status": "not applicable"},
               {"id": "mine.toml:1", "backend": "mine", "clause": "ACT-GEGLU", "reason": "bug",
                "status": "stale"}]  # fmt: skip
    page = render.html_page(_document([], expectations=entries)).split("<script type='application/json'")[0]
    assert "mine.toml:1" in page and "native.toml:1" not in page
    assert "1 entries of backends not in this run omitted" in page


def test_a_module_named_on_the_command_line_gets_its_file_in_the_node_id():
    """pytest names a case of a module given as ``--pyargs conformance.test_x::...`` ``::test_...``."""
    shown = failure_capture.display_nodeid("::test_a[x-cpu]", "../site-packages/conformance/test_norms.py")
    assert shown == "test_norms.py::test_a[x-cpu]"
    assert (
        failure_capture.display_nodeid("test_norms.py::test_a", "x/test_norms.py") == "test_norms.py::test_a"
    )

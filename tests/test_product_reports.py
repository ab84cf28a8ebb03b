"""The product tuple in reports (spec/devices.md, DEV-PRODUCT) and --fold-cards (DEV-FOLD), on
hand-built documents: merge keys columns by the tuple, diff names what changed, the renderings
show it, a card that disagrees heads the report."""

from __future__ import annotations

import json

import pytest

from conformance import product, results
from opconform import fold, render
from opconform import report as rep

A = {"chip": "Ascend910B3", "driver": "24.1.rc2", "cann": "8.0.RC3", "cuda": "", "torch": "2.5.1",
     "torch_npu": "2.5.1", "python": "3.11.7", "opconform": "0.1.0", "commit": "abc",
     "host": "n1"}  # fmt: skip


def _case(nodeid, outcome, device="npu:0", clause="NORM-RMS", **extra):
    return {"nodeid": nodeid, "outcome": outcome, "backend": "npu", "device": device, "clauses": [clause],
            **extra}  # fmt: skip


def _document(cases, made=None):
    return {"schema": results.SCHEMA, "version": results.VERSION, "results": cases, "backends": ["npu"],
            **({"product": made} if made is not None else {})}  # fmt: skip


def test_merge_of_two_tuples_gives_two_columns_and_two_cases():
    newer = {**A, "cann": "8.5.0", "torch_npu": "2.6.0"}
    cases = [_case("t.py::test_x[npu-npu]", "passed")]
    merged = rep.merge([_document(cases, A), _document(cases, newer)], names=["old", "new"])
    columns = rep.build_matrix(merged).columns
    assert columns == ["npu@npu:0 {cann=8.0.RC3 torch_npu=2.5.1}", "npu@npu:0 {cann=8.5.0 torch_npu=2.6.0}"]
    assert len(merged["results"]) == 2 and "product" not in merged
    assert [m["product"] for m in merged["merged_from"]] == [A, newer]
    same = rep.merge([_document(cases, A), _document(cases, A)])
    assert len(same["results"]) == 1 and same["product"] == A  # one tuple: one column, one case


def test_diff_names_what_changed_between_the_tuples():
    old, new = _document([], A), _document([], {**A, "cann": "8.5.0", "host": "n2"})
    assert rep.product_changes(old, new) == ["cann: 8.0.RC3 -> 8.5.0", "host: n1 -> n2"]
    assert rep.product_changes(old, old) == []
    assert rep.product_changes(_document([]), old)[0] == "chip: - -> Ascend910B3"


def test_reports_show_the_tuple():
    document = results.Document.from_dict(_document([_case("t.py::test_x[npu-npu]", "passed")], A)).to_dict()
    line = product.line(A)
    assert (
        line.startswith("chip Ascend910B3, driver 24.1.rc2, cann 8.0.RC3, torch 2.5.1") and "cuda" not in line
    )
    assert f"product: {line}" in render.text(document)
    assert f"product: {line}" in render.markdown(document) and line in render.html_page(document)


def test_a_product_that_is_not_flat_strings_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_document([], {"chip": 910})))
    with pytest.raises(results.ResultsError, match=r"r.json: field 'product': 'chip': expected a string"):
        results.load(path)
    path.write_text(json.dumps(_document([])))  # a report from before the tuple: read without one
    assert "product" not in results.load(path).meta


def test_fold_cards_folds_agreeing_cards_and_heads_with_the_odd_one():
    cases = [_case(f"t.py::test_{i}[npu-npu]", "passed", device=f"npu:{i % 4}") for i in range(8)]
    cases.append(_case("t.py::test_bad[npu-npu]", "failed", device="npu:2"))
    cases.append(_case("t.py::test_other[npu-npu]", "passed", device="npu:1", clause="NORM-EPS"))
    folded = fold.fold(_document(cases))
    assert folded["headline"] == [
        "card npu:2 disagrees with the other 3 npu card(s) of npu on NORM-RMS: a faulty card, or a "
        "failure only its cases drew"
    ]
    assert rep.build_matrix(folded).columns == ["npu@npu:0,1,3", "npu@npu:2"]
    assert render.text(folded).startswith("opconform: card npu:2 disagrees")
    agreeing = fold.fold(_document(cases[:8]))
    assert agreeing["headline"] == [] and rep.build_matrix(agreeing).columns == ["npu@npu:0,1,2,3"]
    two = fold.fold(_document([_case("a", "passed", "npu:0"), _case("b", "failed", "npu:1")]))
    assert len(two["headline"]) == 2  # no majority: both are called out, neither folded


def test_the_diff_and_merge_commands_name_the_tuples(tmp_path, capsys):
    from opconform import cli

    cases = [_case("t.py::test_x[npu-npu]", "passed")]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(_document(cases, A)))
    new.write_text(json.dumps(_document(cases, {**A, "cann": "8.5.0"})))
    assert cli.main(["diff", str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "product changed (1): cann: 8.0.RC3 -> 8.5.0"
    assert cli.main(["merge", str(old), str(new), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "npu@npu:0 {cann=8.0.RC3}" in out and "npu@npu:0 {cann=8.5.0}" in out
    assert "product: chip Ascend910B3, driver 24.1.rc2, cann 8.5.0" in out

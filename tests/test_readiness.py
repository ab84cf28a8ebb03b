"""The readiness verdict (spec/models.md, MODEL-READINESS) from a document alone: an op is "pass"
only when every MUST clause the model relies on passed."""

from __future__ import annotations

from conformance import results
from opconform import readiness, render

NOTE = "FIA's arguments cannot start a sequence's reads at L - n - W + 1"
MODELS = {"step3p5": {"title": "Step-3.5-Flash", "ops": [
    {"op": "paged_attention", "kind": "sliding", "params": {"sliding_window": 512}, "layers": [1, 2, 3]},
    {"op": "rms_norm", "kind": "all", "params": {"eps": 1e-5}, "layers": [0, 1]},
    {"op": "rotary_embedding", "kind": "full", "params": {"rotary_dim": 64}, "layers": [0]}]}}  # fmt: skip


def _case(test, outcome, op, clauses, **more):
    return {"nodeid": f"test_x.py::{test}[emu-cpu]", "outcome": outcome, "backend": "emu", "device": "cpu",
            "op": op, "clauses": list(clauses), "model": "step3p5", "level": "MUST", **more}  # fmt: skip


def _document(cases, expectations=()):
    data = {"schema": results.SCHEMA, "version": results.VERSION, "results": cases, "backends": ["emu"],
            "models": MODELS, "expectations": list(expectations)}  # fmt: skip
    return results.Document.from_dict(data).to_dict()


def _verdicts(document):
    ((_, _, _, table),) = readiness.tables(document)
    return {row["op"]: row["verdict"] for row in table}


def test_a_clause_declared_unsupported_is_not_a_pass():
    """Step-3.5 on the emulated Ascend backend read `paged_attention pass` while SERVE-EVICT, which
    its 512-token window relies on, is declared unsupported (its cases skipped): now the verdict
    names the clause and the manifest's note; a clause whose every case skipped is no pass either."""
    entry = {"id": "npu-emulated.toml:26", "backend": "emu", "clause": "SERVE-EVICT", "reason": "unsupported",
             "note": NOTE, "status": "used"}  # fmt: skip
    declared = {"id": entry["id"], "reason": "unsupported", "verdict": "expected"}
    cases = [
        _case("test_paged", "passed", "paged_attention", ["SERVE-PAGED"]),
        _case("test_evict", "skipped", "paged_attention", ["SERVE-EVICT"], expectation=declared,
              reason=f"unsupported ({entry['id']}): {NOTE}"),
        _case("test_rms", "passed", "rms_norm", ["NORM-RMS"]),
        _case("test_rms_errors", "failed (SHOULD)", "rms_norm", ["NORM-ERRORS"], level="SHOULD"),
        _case("test_rope", "passed", "rotary_embedding", ["ROPE-APPLY"]),
        _case("test_rope_partial", "skipped", "rotary_embedding", ["ROPE-PARTIAL"], reason="no float16 here"),
    ]  # fmt: skip
    document = _document(cases, [entry])
    assert _verdicts(document) == {
        "paged_attention": f"unsupported: SERVE-EVICT ({NOTE})",
        "rms_norm": "pass (1 SHOULD failed)",
        "rotary_embedding": "skip: ROPE-PARTIAL (no float16 here)",
    }
    assert f"unsupported: SERVE-EVICT ({NOTE})" in render.text(document)


def test_a_failure_outranks_an_unsupported_clause_and_partial_skips_still_pass():
    """A broken case is the verdict whatever else; a clause with a pass beside skipped cases passed."""
    cases = [
        _case("test_paged", "failed", "paged_attention", ["SERVE-PAGED"]),
        _case("test_evict", "skipped", "paged_attention", ["SERVE-EVICT"],
              expectation={"id": "m.toml:3", "reason": "unsupported", "verdict": "expected"}),
        _case("test_rms[a]", "passed", "rms_norm", ["NORM-RMS"]),
        _case("test_rms[b]", "skipped", "rms_norm", ["NORM-RMS"], reason="no float16 here"),
    ]  # fmt: skip
    verdicts = _verdicts(_document(cases))
    assert verdicts["paged_attention"] == "fail" and verdicts["rms_norm"] == "pass"
    assert verdicts["rotary_embedding"] == "no case"


def test_a_promise_the_backend_does_not_make_leaves_the_verdict_alone():
    """native's paged_attention read `n/i: INV-PREFIX` at every model profile: a clause gated on a
    promise (spec/invariance.md, Promises) whose every case is n/i is not one the model relies on.
    An ungated clause with only n/i cases, or a gated one that ran and failed, still decides."""
    why = "not implemented: backend 'emu' does not promise a fixed KV split size for paged_attention"
    cases = [
        _case("test_paged", "passed", "paged_attention", ["SERVE-PAGED"]),
        _case("test_prefix", "not implemented", "paged_attention", ["INV-PREFIX"], reason=why),
        _case("test_empty", "not implemented", "paged_attention", ["PAD-SERVE-EMPTY"], reason=why),
        _case("test_rms", "passed", "rms_norm", ["NORM-RMS"]),
        _case("test_rms_views", "not implemented", "rms_norm", ["NORM-VIEWS"], reason="not implemented: no"),
        _case("test_rope", "passed", "rotary_embedding", ["ROPE-APPLY"]),
        _case("test_rope_det", "failed", "rotary_embedding", ["DET-RUN"]),
    ]  # fmt: skip
    assert _verdicts(_document(cases)) == {
        "paged_attention": "pass",
        "rms_norm": "n/i: NORM-VIEWS (not implemented: no)",
        "rotary_embedding": "fail",
    }

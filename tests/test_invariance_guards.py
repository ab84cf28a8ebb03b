"""spec/invariance.md's machinery: the guards of INV-VACUITY can fail, the promises gate as the spec
says (ordinary built-in backends are n/i, never failed), and the invariant reference is close to
the oracles (its invariance is not bought with wrong values)."""

from __future__ import annotations

import types

import pytest
import torch
from suite_runner import outcomes, run_suite

import backends
from backends.invariant import BACKEND as INVARIANT
from backends.invariant import ordered_sum
from conformance import promises
from conformance.checks import assert_close
from conformance.errors import ConformanceError
from conformance.harness import selection
from conformance.invariance_checks import Side, check_bitwise, check_informative, check_repeat
from conformance.results import Outcome
from conformance.strategies.invariance import spread
from reference import moe, norms, serving
from reference.activations import silu_and_mul

A, B = Side("batch of 2 rows", (0, 1)), Side("batch of 300 rows", (7, 9))


def test_the_exponent_spread_makes_the_reduction_order_observable():
    """The positive control of INV-VACUITY's draws: a float32 sum left to right and right to left
    differ in their bits on most rows of the drawn widths (8 to 48), and far less often without it."""
    gen = torch.Generator().manual_seed(0)
    for width in (8, 20, 48):
        rows = spread(gen, 400, width)
        differ = (ordered_sum(rows) != ordered_sum(rows.flip(-1))).double().mean().item()
        plain = torch.rand(400, width, generator=gen) + 1  # one binade: order rarely shows
        same_binade = (ordered_sum(plain) != ordered_sum(plain.flip(-1))).double().mean().item()
        assert differ > 0.5, (width, differ)
        assert same_binade < differ, (width, same_binade, differ)


def test_a_comparison_of_two_sides_run_alike_is_refused():
    with pytest.raises(AssertionError, match="both sides"):
        check_bitwise(torch.ones(2), torch.ones(2), clause="INV-ROW", context="c", sides=(A, A))
    alone = Side("alone", (0,)), Side("batch", (0,))
    with pytest.raises(AssertionError, match="only row 0"):
        check_bitwise(torch.ones(1), torch.ones(1), clause="INV-ROW", context="c", sides=alone)


def test_the_bitwise_check_fails_on_one_bit_and_on_the_sign_of_zero():
    x = torch.tensor([1.0, 2.0, 0.0])
    check_bitwise(x.clone(), x, clause="INV-ROW", context="c", sides=(A, B))
    for other in (torch.tensor([1.0, float(torch.nextafter(torch.tensor(2.0), torch.tensor(3.0))), 0.0]),
                  torch.tensor([1.0, 2.0, -0.0])):  # fmt: skip
        with pytest.raises(ConformanceError, match=r"\[INV-ROW\].*1 of 3 elements differ.*batch of 300 rows"):
            check_bitwise(other, x, clause="INV-ROW", context="c", sides=(A, B))
    with pytest.raises(ConformanceError, match="dtype torch.float64"):
        check_bitwise(x.double(), x, clause="INV-ROW", context="c", sides=(A, B))


def test_uninformative_outputs_fail_inv_vacuity():
    check_informative(torch.arange(6.0).reshape(3, 2), context="c")
    for bad in (torch.zeros(4, 3), torch.full((4, 3), 2.5), torch.tensor([[1.0, float("nan")], [2.0, 3.0]])):
        with pytest.raises(ConformanceError, match=r"\[INV-VACUITY\]"):
            check_informative(bad, context="c")


def test_a_nondeterministic_call_fails_det_run():
    calls = iter(range(10))
    with pytest.raises(ConformanceError, match=r"\[DET-RUN\]"):
        check_repeat(lambda: torch.tensor([0.1, float(next(calls))]), context="c", side=B)
    assert check_repeat(lambda: torch.tensor([0.1, 0.2]), context="c", side=B)[0].tolist() == pytest.approx(
        [0.1, 0.2]
    )


def _backend(**promised):
    return types.SimpleNamespace(name="b", **promised)


def test_the_promises_gate_as_the_spec_says():
    """spec/invariance.md, Promises: per op or all ops; batch_invariant implies deterministic;
    kv_split_size concerns paged_attention and needs batch_invariant for it."""
    assert promises.not_promised(_backend(), "deterministic", "rms_norm").startswith(
        Outcome.NOT_IMPLEMENTED.value
    )
    assert promises.promises(_backend(deterministic=True), "deterministic", "fused_moe")
    per_op = _backend(batch_invariant=("rms_norm",))
    assert promises.promises(per_op, "deterministic", "rms_norm")
    assert not promises.promises(per_op, "batch_invariant", "fused_moe")
    assert not promises.promises(_backend(kv_split_size=8), "kv_split_size", "paged_attention")
    assert "needs batch_invariant" in promises.not_promised(
        _backend(kv_split_size=8), "kv_split_size", "paged_attention"
    )
    assert "does not cover fused_moe" in promises.not_promised(per_op, "batch_invariant", "fused_moe")
    assert promises.promises(
        _backend(kv_split_size=8, batch_invariant=True), "kv_split_size", "paged_attention"
    )
    malformed = [
        (dict(kv_split_size=0), "kv_split_size"),
        (dict(kv_split_size=True), "kv_split_size"),
        (dict(batch_invariant="yes"), "batch_invariant"),
        (dict(deterministic=("rms",)), "deterministic"),
    ]
    for bad, attr in malformed:
        with pytest.raises(promises.PromiseError, match=f"backend 'b': {attr}"):
            promises.promises(_backend(**bad), "kv_split_size" if "kv" in attr else attr, "paged_attention")


def test_ordinary_builtin_backends_are_not_promised():
    """Every built-in but the invariant reference promises no batch invariance and no split size
    (n/i, never failed); the Ascend adapter promises DET-RUN for paged_attention only (spec/ascend.md,
    CANN-DETERMINISM); native and flex accept vLLM's zero-length padded requests (PAD-SERVE-EMPTY)."""
    ops = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "select_experts", "fused_moe", "paged_attention")
    for name, target in backends.BUILTIN.items():
        backend = backends.import_attr(target)
        for promise in promises.PROMISES:
            for op in ops:
                reason = promises.not_promised(backend, promise, op)
                split_op = promise != "kv_split_size" or op == "paged_attention"
                ascend = name.startswith("npu") and (promise, op) == ("deterministic", "paged_attention")
                vllm_padding = promise == "empty_requests"
                kept = (
                    (name in ("native", "flex") and vllm_padding and op == "paged_attention")
                    or (name == "invariant" and split_op and not vllm_padding)
                    or ascend
                )
                assert (reason is None) == kept, (name, promise, op, reason)
                assert reason is None or reason.startswith(Outcome.NOT_IMPLEMENTED.value)


def test_the_invariant_backend_is_judged_only_on_the_invariance_clauses():
    native = backends.import_attr(backends.BUILTIN["native"])
    norm, inv = [pytest.mark.clause("NORM-RMS").mark], [pytest.mark.clause("INV-ROW", "DET-RUN").mark]
    assert selection.out_of_scope(INVARIANT, norm).startswith(Outcome.NOT_IMPLEMENTED.value)
    assert selection.out_of_scope(INVARIANT, inv) is None and selection.out_of_scope(native, norm) is None
    assert selection.scoped([native, INVARIANT], norm) == [native]
    assert selection.scoped([INVARIANT], norm) == [INVARIANT]  # none left: they skip at setup instead


def test_the_invariant_backend_is_close_to_the_oracles():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(9, 24, generator=gen), torch.randn(24, generator=gen)
    assert_close(INVARIANT.rms_norm(x, w, eps=1e-6), norms.rms_norm(x, w, eps=1e-6), clause="NORM-RMS",
                 context="invariant", family="norms", dtype=x.dtype)  # fmt: skip
    assert_close(INVARIANT.silu_and_mul(x), silu_and_mul(x), clause="ACT-SWIGLU", context="invariant",
                 family="activations", dtype=x.dtype)  # fmt: skip
    logits = torch.randn(9, 8, generator=gen)
    options = dict(top_k=2, scoring="softmax", renormalize=True, correction_bias=None, num_groups=1,
                   topk_group=1, group_score="max", routed_scaling_factor=1.0)  # fmt: skip
    weights, ids = INVARIANT.select_experts(logits, **options)
    want_w, want_ids = moe.select_experts(logits, **options)
    assert torch.equal(ids, want_ids)
    assert_close(weights, want_w, clause="MOE-SELECT", context="invariant", family="moe", dtype=torch.float32)
    w13, w2 = torch.randn(4, 16, 24, generator=gen) / 4, torch.randn(4, 24, 8, generator=gen) / 4
    args = (x, w13, w2, weights, ids % 4)
    kw = dict(activation="swiglu_oai", limit=7.0, apply_router_weight_on_input=False, output_scale=1.0)
    assert_close(INVARIANT.fused_moe(*args, **kw), moe.fused_moe(*args, **kw), clause="MOE-FUSED",
                 context="invariant", family="moe", dtype=x.dtype)  # fmt: skip
    k, v = torch.randn(2, 2, 21, 8, generator=gen), torch.randn(2, 2, 21, 8, generator=gen)
    k_cache, v_cache, table = serving.contiguous_to_paged(k, v, block_size=4)
    q = torch.randn(6, 4, 8, generator=gen)
    meta = dict(block_table=table, cu_seqlens_q=torch.tensor([0, 5, 6]), seq_lens=torch.tensor([21, 17]),
                sliding_window=6, softcap=30.0, sinks=torch.randn(4, generator=gen), scale=0.35)  # fmt: skip
    assert_close(INVARIANT.paged_attention(q, k_cache, v_cache, **meta),
                 serving.paged_attention(q, k_cache, v_cache, **meta), clause="SERVE", context="invariant",
                 family="attention", dtype=q.dtype)  # fmt: skip


def test_a_run_records_the_unpromised_cases_as_not_implemented(tmp_path):
    """End to end, as a user runs it: every invariance case of native is n/i in the results (never
    failed, never a plain skip), and npu-emulated passes DET-RUN on paged_attention, n/i elsewhere."""
    paths = ["conformance/test_invariance.py", "conformance/test_invariance_attention.py"]
    extra = ["--backend=native", "--backend=npu-emulated", "--device=cpu"]
    document = run_suite(tmp_path, paths=paths, modules=[], extra=extra)
    assert document["returncode"] == 0, document["stdout"][-3000:]
    assert outcomes(document, "native") == {Outcome.NOT_IMPLEMENTED.value: 17}
    emulated = {(r["nodeid"].split("::")[1].split("[")[0], r["outcome"]) for r in document["results"]
                if r["backend"] == "npu-emulated"}  # fmt: skip
    assert ("test_attention_gives_the_same_bits_each_run", Outcome.PASSED.value) in emulated
    assert {outcome for _, outcome in emulated} == {Outcome.PASSED.value, Outcome.NOT_IMPLEMENTED.value}

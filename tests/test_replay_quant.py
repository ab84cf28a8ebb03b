"""Replay rows of the quant ops (opconform.capture.ops_quant, spec/quant.md QUANT-TOL): a correct
kernel's recorded calls pass, and each planted wrong kernel's calls fail under the clause its
mutant declares; a capture records out_dtype by its name and a rerun passes the dtype back."""

from __future__ import annotations

import pytest
import torch

from backends.native import BACKEND as NATIVE
from conformance import spec_index
from conformance.errors import ConformanceError
from conformance.results import Outcome
from conformance.strategies.quant import Int8MmRecipe, Int8QuantRecipe, W4Recipe
from mutants import _quant_int4 as int4_mutants
from mutants import quant as mutants
from opconform.capture import Capture
from opconform.capture.judge import compare, replay
from opconform.capture.ops import REPLAY_OPS

QUANT_OPS = ("dynamic_int8_quant", "int8_scaled_mm", "w4a16_mm", "w8a8_fused_moe")


def _verdict(op: str, inputs: dict, options: dict, outputs) -> str | None:
    """None when the row passes the outputs, else the clause it fails them under."""
    try:
        compare(REPLAY_OPS[op], inputs, options, list(outputs), context=op)
    except ConformanceError as exc:
        return exc.clause
    return None


def _quant_call(backend, dtype=torch.bfloat16):
    x = Int8QuantRecipe((6, 300), dtype, seed=3, feature="zero-row").make()
    return {"x": x}, {}, backend.dynamic_int8_quant(x)


def test_the_rows_name_real_clauses_of_their_family():
    clauses = spec_index.load_clauses()
    for op in QUANT_OPS:
        row = REPLAY_OPS[op]
        assert all(c in clauses and clauses[c].family == "quant" for c in row.clauses), op


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_correct_quantizer_passes_and_the_wrong_ones_fail_under_their_clause(dtype):
    assert _verdict("dynamic_int8_quant", *_quant_call(NATIVE, dtype)) is None
    for mutant in (mutants.Int8ScaleOver128(), mutants.Int8PerTensorScale(), mutants.Int8Truncates()):
        (clause,) = mutant.clauses
        assert _verdict("dynamic_int8_quant", *_quant_call(mutant, dtype)) == clause, mutant.name


def test_a_zero_row_with_a_nan_scale_fails_zero_row_and_a_wrong_pair_fails_scale():
    inputs, options, (q, scale) = _quant_call(NATIVE)
    nan = scale.clone()
    nan[0] = float("nan")  # row 0 is the zero row: 0 / 0 reached its scale
    assert _verdict("dynamic_int8_quant", inputs, options, (q, nan)) == "QUANT-INT8-ZERO-ROW"
    flat = scale.squeeze(-1)  # npu_dynamic_quant's x.shape[:-1], returned without the adapter's dim
    assert _verdict("dynamic_int8_quant", inputs, options, (q, flat)) == "QUANT-INT8-SCALE"
    assert _verdict("dynamic_int8_quant", inputs, options, (q.float(), scale)) == "QUANT-INT8-SCALE"


def _mm_call(backend, out_dtype=torch.bfloat16, bias=True):
    recipe = Int8MmRecipe((5, 300, 7), out_dtype, seed=1, bias=bias, b_scale_layout="flat")
    a, b, scale_a, scale_b, bias_t = recipe.make()
    inputs = {"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b}
    if bias_t is not None:
        inputs["bias"] = bias_t
    out = backend.int8_scaled_mm(a, b, scale_a, scale_b, bias=bias_t, out_dtype=out_dtype)
    return inputs, {"out_dtype": str(out_dtype).removeprefix("torch.")}, [out]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_a_correct_int8_gemm_passes_and_the_wrong_ones_fail(out_dtype):
    assert _verdict("int8_scaled_mm", *_mm_call(NATIVE, out_dtype)) is None
    assert _verdict("int8_scaled_mm", *_mm_call(NATIVE, out_dtype, bias=False)) is None
    wrong = {
        mutants.ActivationScaleFirstOnly(): "QUANT-W8A8-MM",
        mutants.Int16Accumulator(): "QUANT-W8A8-MM",
        mutants.BiasBeforeScales(): "QUANT-W8A8-MM",
        mutants.OutputFloat32(): "QUANT-W8A8-DTYPE",
    }
    for mutant, clause in wrong.items():
        # a recorded call cannot tell -BIAS from the formula it refines: the bias bug fails MM here
        assert clause in mutant.clauses | {"QUANT-W8A8-MM"}, mutant.name
        assert _verdict("int8_scaled_mm", *_mm_call(mutant, out_dtype)) == clause, mutant.name


def test_out_dtype_picks_the_tolerance_row_and_a_bad_name_fails_the_call():
    inputs, options, (out,) = _mm_call(NATIVE, torch.float16, bias=False)
    row = REPLAY_OPS["int8_scaled_mm"]
    assert row.tolerance_dtype(inputs, options) == torch.float16
    assert _verdict("int8_scaled_mm", inputs, {"out_dtype": "bfloat16"}, [out]) == "QUANT-W8A8-DTYPE"
    with pytest.raises(ValueError, match="option out_dtype='half16'"):
        compare(row, inputs, {"out_dtype": "half16"}, [out], context="bad")


@pytest.mark.parametrize("packing", ["awq", "gptq"])
def test_w4a16_passes_native_and_fails_a_wrong_nibble_order_or_zero(packing):
    x, qweight, scales, qzeros = W4Recipe((4, 256, 16), 64, packing, torch.bfloat16, seed=2).make()
    inputs = {"x": x, "qweight": qweight, "scales": scales, "qzeros": qzeros}
    options = {"group_size": 64, "packing": packing}
    assert (
        _verdict("w4a16_mm", inputs, options, [NATIVE.w4a16_mm(x, qweight, scales, qzeros, **options)])
        is None
    )
    wrong = int4_mutants.AwqReadInOrder() if packing == "awq" else int4_mutants.GptqV1ZeroNotIncremented()
    out = wrong.w4a16_mm(x, qweight, scales, qzeros, **options)
    assert _verdict("w4a16_mm", inputs, options, [out]) == "QUANT-W4A16-MM"


def test_a_capture_of_the_quant_ops_replays_and_a_rerun_on_a_wrong_kernel_fails(tmp_path):
    """Recorded through Capture.wrap (out_dtype given as the dtype, recorded by its name): the
    recorded calls pass; rerun on a kernel that truncates or reads one activation scale, they fail."""
    with Capture(tmp_path / "cap", source="w8a8") as cap:
        quant = cap.wrap(NATIVE.dynamic_int8_quant, "dynamic_int8_quant", lambda x: {"x": x}, name="quant")
        gemm = cap.wrap(
            lambda a, b, sa, sb: NATIVE.int8_scaled_mm(a, b, sa, sb, bias=None, out_dtype=torch.bfloat16),
            "int8_scaled_mm",
            lambda a, b, sa, sb: dict(a=a, b=b, scale_a=sa, scale_b=sb, bias=None, out_dtype=torch.bfloat16),
            name="gemm",
        )  # fmt: skip
        x = Int8QuantRecipe((4, 64), torch.bfloat16, seed=0).make()
        q, scale = quant(x)
        w = torch.randint(-127, 128, (64, 8), dtype=torch.int8)
        gemm(q, w, scale, torch.rand(8) * 0.01 + 1e-3)
    document, problems = replay(tmp_path / "cap")
    assert problems == [] and [c.outcome for c in document.results] == [Outcome.PASSED] * 2
    assert [c.dtype for c in document.results] == ["bfloat16", "bfloat16"]
    for backend, op, clause in (
        (mutants.Int8Truncates(), "dynamic_int8_quant", "QUANT-INT8-ROUND"),
        (mutants.ActivationScaleFirstOnly(), "int8_scaled_mm", "QUANT-W8A8-MM"),
    ):
        rerun, _ = replay(tmp_path / "cap", backend=backend)
        outcomes = {c.op: (c.outcome, c.failure.clause if c.failure else None) for c in rerun.results}
        assert outcomes[op] == (Outcome.FAILED, clause), backend.name
        assert clause in rerun.clauses


def test_w8a8_experts_replay_native_and_fail_a_neighbours_scale(tmp_path):
    """The w8a8 experts' row (QUANT-MOE-W8A8 under the quant-moe row, atol times the recorded call's
    w8a8_moe_error_scale): native's call passes, recorded through Capture.wrap and replayed; rerun on
    a kernel that reads a neighbouring expert's scales, it fails under QUANT-MOE-W8A8."""
    from conformance.strategies.quant_moe import W8a8MoeRecipe
    from mutants import _quant_moe as moe_mutants

    x, w13, w2, weights, ids, c13, c2 = W8a8MoeRecipe((6, 64, 64, 8, 2), torch.bfloat16, seed=1).make()
    inputs = {"x": x, "w13": w13, "w2": w2, "topk_weights": weights, "topk_ids": ids, "w13_scale": c13,
              "w2_scale": c2}  # fmt: skip
    wrong = moe_mutants.MoeNeighbourExpertScale()
    out = wrong.w8a8_fused_moe(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
    assert _verdict("w8a8_fused_moe", inputs, {}, [out]) == "QUANT-MOE-W8A8"
    with Capture(tmp_path / "cap", source="w8a8-experts") as cap:
        experts = cap.wrap(
            lambda *a, **kw: NATIVE.w8a8_fused_moe(*a, **kw), "w8a8_fused_moe",
            lambda x, w13, w2, tw, ti, *, w13_scale, w2_scale: dict(x=x, w13=w13, w2=w2, topk_weights=tw,
                                                                     topk_ids=ti, w13_scale=w13_scale,
                                                                     w2_scale=w2_scale),
            name="experts",
        )  # fmt: skip
        experts(x, w13, w2, weights, ids, w13_scale=c13, w2_scale=c2)
    document, problems = replay(tmp_path / "cap")
    assert problems == [] and [c.outcome for c in document.results] == [Outcome.PASSED]
    rerun, _ = replay(tmp_path / "cap", backend=wrong)
    assert [(c.outcome, c.failure.clause) for c in rerun.results] == [(Outcome.FAILED, "QUANT-MOE-W8A8")]

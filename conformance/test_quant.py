"""Conformance properties for spec/quant.md (int8 / fp8 quantization and the quantized GEMMs).

Each test names its clauses with ``@pytest.mark.clause``; the backend/device pairs come from the
opconform plugin. Quantized values are judged on their grid against the backend's own scale, scales
and GEMM outputs against the oracle (QUANT-TOL: ``conformance.quant_checks``, the ``quant`` rows with
``gemm_scale``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.bad_input import check_backend_raises, params
from conformance.bad_input.quant import ERRORS
from conformance.checks import assert_close, check, describe
from conformance.harness import profiles
from conformance.quant_checks import check_on_grid, check_quantized, check_scales
from conformance.strategies import quant as draws
from conformance.tolerances import gemm_scale, tolerance
from reference import quant as oracle
from reference.quant_w4a16 import w4a16_weight

FAMILY = "quant"


def _int8(backend, device, recipe, clause):
    x = recipe.make(device)
    context = describe(backend, device, "dynamic_int8_quant") + f": x {recipe.dtype} {tuple(x.shape)}"
    out = backend.dynamic_int8_quant(x)
    q, scale = check_quantized(out, x, q_dtype=torch.int8, scale_shape=(*x.shape[:-1], 1), clause=clause,
                               context=context)  # fmt: skip
    return x, q, scale, context


@pytest.mark.clause("QUANT-INT8-SCALE")
@pytest.mark.op("dynamic_int8_quant")
@given(recipe=draws.int8_quant_inputs(features=("plain",)))
def test_int8_scale_is_row_amax_over_127(backend, device, recipe):
    """scale[..., 0] = amax(row) / 127 in float32, [..., 1]; q int8 of x's shape."""
    x, q, scale, context = _int8(backend, device, recipe, "QUANT-INT8-SCALE")
    check_scales(scale, oracle.dynamic_int8_quant(x.cpu())[1], clause="QUANT-INT8-SCALE", context=context)


@pytest.mark.clause("QUANT-INT8-ROUND")
@pytest.mark.op("dynamic_int8_quant")
@given(recipe=draws.int8_quant_inputs())
def test_int8_rounds_to_nearest(backend, device, recipe):
    """q is x / scale (the backend's own scale) rounded to the nearest integer, saturated to +-127."""
    x, q, scale, context = _int8(backend, device, recipe, "QUANT-INT8-ROUND")
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    check_on_grid(q, x, safe, grid=torch.int8, clause="QUANT-INT8-ROUND", context=context)


@pytest.mark.clause("QUANT-INT8-TIES")
@pytest.mark.op("dynamic_int8_quant")
@profiles.should_examples()
@given(recipe=draws.int8_quant_inputs(features=("ties",)))
def test_should_int8_round_ties_to_even(backend, device, recipe):
    """Rows with amax = 127 * 2^e (exact quotients, half-integers among them): ties go to even."""
    x, q, scale, context = _int8(backend, device, recipe, "QUANT-INT8-TIES")
    want = oracle.dynamic_int8_quant(x.cpu())[0]
    at = _first(q.cpu().double() != want)
    t = x.cpu().double() / scale.cpu().double()
    check(
        at is None,
        clause="QUANT-INT8-TIES",
        message=f"{context}: q {_item(q, at)} at {at}, expected {_item(want, at)} "
        f"(x / scale = {_item(t, at)}: a tie, to even)",
    )


def _first(bad: torch.Tensor) -> tuple | None:
    """The index of the first True, None when there is none."""
    return tuple(int(i) for i in bad.nonzero()[0]) if bool(bad.any()) else None


def _item(t: torch.Tensor, at: tuple | None):
    return "" if at is None else t.detach().cpu()[at].item()


@pytest.mark.clause("QUANT-INT8-ZERO-ROW")
@pytest.mark.op("dynamic_int8_quant")
@given(recipe=draws.int8_quant_inputs(features=("zero-row",)))
def test_int8_zero_row(backend, device, recipe):
    """Row 0 of zeros: q = 0 and a finite scale >= 0; the other rows' scales are the oracle's."""
    x, q, scale, context = _int8(backend, device, recipe, "QUANT-INT8-ZERO-ROW")
    s0 = scale.cpu()[0, 0].item()
    check(
        bool((q.cpu()[0] == 0).all()) and s0 >= 0 and s0 < float("inf"),
        clause="QUANT-INT8-ZERO-ROW",
        message=f"{context}: zero row gave q {q.cpu()[0, :4].tolist()}..., scale {s0}; "
        "expected q 0 and a finite scale",
    )
    if x.shape[0] > 1:
        want = oracle.dynamic_int8_quant(x.cpu())[1][1:]
        check_scales(scale[1:], want, clause="QUANT-INT8-ZERO-ROW", context=context)


def _mm(backend, device, recipe, clause):
    a, b, scale_a, scale_b, bias = recipe.make(device)
    context = describe(backend, device, "int8_scaled_mm", out_dtype=recipe.out_dtype) + (
        f": a {tuple(a.shape)}, b {tuple(b.shape)}, scale_a {tuple(scale_a.shape)}, scale_b "
        f"{tuple(scale_b.shape)}, bias {None if bias is None else tuple(bias.shape)}"
    )
    got = backend.int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=recipe.out_dtype)
    cpu = [None if t is None else t.cpu() for t in (a, b, scale_a, scale_b, bias)]
    want = oracle.int8_scaled_mm(*cpu[:4], bias=cpu[4], out_dtype=recipe.out_dtype)
    scale = gemm_scale(*oracle.dequantized_operands(*cpu[:4]))
    out_dtype = recipe.out_dtype
    assert_close(got, want, clause=clause, family=FAMILY, context=context, dtype=out_dtype, device=device,
                 atol_scale=scale)  # fmt: skip


@pytest.mark.clause("QUANT-W8A8-MM")
@pytest.mark.op("int8_scaled_mm")
@given(recipe=draws.int8_mm_inputs())
def test_w8a8_matches_oracle(backend, device, recipe):
    """(a @ b) * scale_a[m] * scale_b[n] (+ bias), per-tensor or per-token/channel scales."""
    _mm(backend, device, recipe, "QUANT-W8A8-MM")


@pytest.mark.clause("QUANT-W8A8-EXACT")
@pytest.mark.op("int8_scaled_mm")
@given(recipe=draws.int8_mm_inputs(per_tensor=st.just(False), bias=st.just(False), cancel=st.booleans()))
def test_w8a8_integer_sum_is_not_lost(backend, device, recipe):
    """Cancelling +-127 rows (partial sums past 2^24) and long K: no int16 / float16 / bfloat16 sum."""
    _mm(backend, device, recipe, "QUANT-W8A8-EXACT")


@pytest.mark.clause("QUANT-W8A8-SCALES")
@pytest.mark.op("int8_scaled_mm")
@given(recipe=draws.int8_mm_inputs(per_tensor=st.just(False), bias=st.just(False)))
def test_w8a8_scales_per_token_and_channel(backend, device, recipe):
    """Distinct per-token and per-channel scales in [M, 1] and [1, N] / [N, 1] / [N]: each in its place."""
    _mm(backend, device, recipe, "QUANT-W8A8-SCALES")


@pytest.mark.clause("QUANT-W8A8-BIAS")
@pytest.mark.op("int8_scaled_mm")
@given(recipe=draws.int8_mm_inputs(bias=st.just(True)))
def test_w8a8_bias_in_out_dtype(backend, device, recipe):
    """A bias [N] in out_dtype is added after the dequantization."""
    _mm(backend, device, recipe, "QUANT-W8A8-BIAS")


@pytest.mark.clause("QUANT-W8A8-DTYPE")
@pytest.mark.op("int8_scaled_mm")
@given(recipe=draws.int8_mm_inputs())
def test_w8a8_output_dtype(backend, device, recipe):
    """The output is out_dtype [M, N] on a's device."""
    a, b, scale_a, scale_b, bias = recipe.make(device)
    got = backend.int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=recipe.out_dtype)
    context = describe(backend, device, "int8_scaled_mm", out_dtype=recipe.out_dtype)
    check(
        isinstance(got, torch.Tensor) and got.dtype == recipe.out_dtype and got.device.type == a.device.type
        and tuple(got.shape) == (a.shape[0], b.shape[1]),
        clause="QUANT-W8A8-DTYPE",
        message=f"{context}: returned {getattr(got, 'dtype', type(got).__name__)} "
        f"{tuple(getattr(got, 'shape', ()))}; expected {recipe.out_dtype} {(a.shape[0], b.shape[1])}",
    )  # fmt: skip


def _fp8(backend, device, recipe, clause):
    x, scale = recipe.make(device)
    context = describe(backend, device, "fp8_quant", fp8_dtype=recipe.fp8_dtype) + f": x {tuple(x.shape)}"
    out = backend.fp8_quant(x, fp8_dtype=recipe.fp8_dtype, scale=scale)
    q, got_scale = check_quantized(
        out, x, q_dtype=recipe.fp8_dtype, scale_shape=(1,), clause=clause, context=context
    )
    check_on_grid(q, x, got_scale, grid=recipe.fp8_dtype, clause=clause, context=context)
    return x, got_scale, context


@pytest.mark.clause("QUANT-FP8-TENSOR")
@pytest.mark.op("fp8_quant")
@given(recipe=draws.fp8_quant_inputs())
def test_fp8_dynamic_per_tensor(backend, device, recipe):
    """scale = amax / F (F = 448 for e4m3fn, 240 or 224 for e4m3fnuz); q the nearest fp8 of x / scale."""
    x, got_scale, context = _fp8(backend, device, recipe, "QUANT-FP8-TENSOR")
    amax = x.cpu().double().abs().amax()
    tol = 2.4e-7  # the quant-scale row
    tops = oracle.fp8_max_values(recipe.fp8_dtype)
    candidates = [amax / top for top in tops]
    s = got_scale.cpu().double().item()
    check(
        any(abs(s - c.item()) <= tol * c.item() for c in candidates),
        clause="QUANT-FP8-TENSOR",
        message=f"{context}: scale {s:.6g} = amax / {amax.item() / s:.4g}; expected amax / F, F in {tops}",
        relation=f"scale = amax / {amax.item() / s:.4g}, expected amax / {tops[0]:g}",
    )


@pytest.mark.clause("QUANT-FP8-SATURATE")
@pytest.mark.op("fp8_quant")
@given(recipe=draws.fp8_quant_inputs(static=st.sampled_from((0.25, 0.5, 1.0))))
def test_fp8_static_scale_saturates(backend, device, recipe):
    """A given scale below amax / F: the values beyond F * scale quantize to +-F, never NaN; the scale
    returned is the one given."""
    x, got_scale, context = _fp8(backend, device, recipe, "QUANT-FP8-SATURATE")
    given_scale = recipe.make("cpu")[1]
    check(
        torch.equal(got_scale.cpu(), given_scale),
        clause="QUANT-FP8-SATURATE",
        message=f"{context}: returned scale {got_scale.cpu().tolist()}, expected the given one, "
        f"{given_scale.tolist()}",
    )


def _group(backend, device, recipe, clause):
    x = recipe.make(device)
    kw = {"group_size": recipe.group_size, "fp8_dtype": recipe.fp8_dtype, "use_ue8m0": recipe.use_ue8m0}
    context = describe(backend, device, "fp8_group_quant", **kw) + f": x {tuple(x.shape)}"
    out = backend.fp8_group_quant(x, **kw)
    q, scale = check_quantized(out, x, q_dtype=recipe.fp8_dtype, scale_shape=(x.shape[0], recipe.groups),
                               clause=clause, context=context)  # fmt: skip
    want = oracle.fp8_group_quant(x.cpu(), **kw)[1]
    zero = x.cpu().unflatten(-1, (-1, recipe.group_size)).abs().amax(-1) == 0
    s = scale.cpu()
    check(
        bool(((s > 0) & torch.isfinite(s))[zero].all()),
        clause=clause,
        message=f"{context}: a zero group's scale is {s[zero].tolist()[:3]}; expected positive and finite",
    )
    check_scales(torch.where(zero, want.float(), s), want, clause=clause, context=context)
    expanded = s.repeat_interleave(recipe.group_size, dim=-1)
    check_on_grid(q, x, expanded, grid=recipe.fp8_dtype, clause=clause, context=context)


@pytest.mark.clause("QUANT-FP8-GROUP")
@pytest.mark.op("fp8_group_quant")
@given(recipe=draws.group_inputs(use_ue8m0=st.just(False)))
def test_fp8_group_scales(backend, device, recipe):
    """Each group of group_size has scale amax(group) / F and its own q; a zero group is q 0."""
    _group(backend, device, recipe, "QUANT-FP8-GROUP")


@pytest.mark.clause("QUANT-FP8-UE8M0")
@pytest.mark.op("fp8_group_quant")
@given(recipe=draws.group_inputs(use_ue8m0=st.just(True), zero_group=st.just(False)))
def test_fp8_ue8m0_scales_round_before_quantizing(backend, device, recipe):
    """use_ue8m0: scales are 2^ceil(log2(amax / F)) and q is quantized with them."""
    _group(backend, device, recipe, "QUANT-FP8-UE8M0")


def _block(backend, device, recipe, clause):
    a, b, a_s, b_s = recipe.make(device)
    kw = {"block_size": recipe.block_size, "out_dtype": recipe.out_dtype}
    context = describe(backend, device, "fp8_block_scaled_mm", **kw) + (
        f": a {tuple(a.shape)} {recipe.fp8_dtype}, b {tuple(b.shape)}, a_scales {tuple(a_s.shape)}, "
        f"b_scales {tuple(b_s.shape)}"
    )
    got = backend.fp8_block_scaled_mm(a, b, a_s, b_s, **kw)
    cpu = [t.cpu() for t in (a, b, a_s, b_s)]
    want = oracle.fp8_block_scaled_mm(*cpu, **kw)
    scale = gemm_scale(*oracle.dequantized_operands(*cpu, block_size=recipe.block_size))
    out_dtype = recipe.out_dtype
    assert_close(got, want, clause=clause, family=FAMILY, context=context, dtype=out_dtype, device=device,
                 atol_scale=scale)  # fmt: skip


@pytest.mark.clause("QUANT-FP8-BLOCK-MM")
@pytest.mark.op("fp8_block_scaled_mm")
@given(recipe=draws.block_mm_inputs(sides=(128, 256)))
def test_fp8_block_scaled_mm(backend, device, recipe):
    """Whole 128 x 128 blocks: a * a_scales[m, k // 128] times b * b_scales[n // 128, k // 128]."""
    _block(backend, device, recipe, "QUANT-FP8-BLOCK-MM")


@pytest.mark.clause("QUANT-FP8-BLOCK-PARTIAL")
@pytest.mark.op("fp8_block_scaled_mm")
@given(recipe=draws.block_mm_inputs())
def test_fp8_block_partial_trailing_blocks(backend, device, recipe):
    """N and K at 128 t - 1, 128 t, 128 t + 1: the partial last block takes the last scale."""
    _block(backend, device, recipe, "QUANT-FP8-BLOCK-PARTIAL")


@pytest.mark.clause("QUANT-FNUZ-CONVERT")
@pytest.mark.op("fp8_fn_to_fnuz")
@given(recipe=draws.fnuz_inputs())
def test_fnuz_conversion_keeps_dequantized_values(backend, device, recipe):
    """q_new * weight_scale_new == q_old * weight_scale_old exactly; input_scale doubled; no NaN."""
    weight, scale, input_scale = recipe.make(device)
    old = weight.cpu().double() * scale.cpu().double()
    context = describe(backend, device, "fp8_fn_to_fnuz") + f": weight {tuple(weight.shape)}"
    given_input = None if input_scale is None else input_scale.cpu().clone()
    out = backend.fp8_fn_to_fnuz(weight.clone(), scale, input_scale)
    check(
        isinstance(out, tuple | list) and len(out) == 3,
        clause="QUANT-FNUZ-CONVERT",
        message=f"{context}: returned {type(out).__name__}, expected (weight, weight_scale, input_scale)",
    )
    w_new, s_new, i_new = out
    check(
        isinstance(w_new, torch.Tensor) and w_new.dtype == torch.float8_e4m3fnuz,
        clause="QUANT-FNUZ-CONVERT",
        message=f"{context}: weight returned as {getattr(w_new, 'dtype', type(w_new).__name__)}, "
        "expected float8_e4m3fnuz",
    )
    new = w_new.cpu().double() * s_new.cpu().double()
    at = _first(~((new == old) | (torch.isnan(new) & torch.isnan(old))))
    check(
        at is None,
        clause="QUANT-FNUZ-CONVERT",
        message=f"{context}: dequantized weight {_item(new, at)} at {at}, expected {_item(old, at)} "
        f"(e4m3fn {_item(weight, at)} times its scale)",
        relation=f"dequantized {_item(new, at)}, expected {_item(old, at)}",
    )
    want_input = None if given_input is None else given_input.double() * 2
    check(
        (i_new is None and want_input is None)
        or (i_new is not None and want_input is not None and torch.equal(i_new.cpu().double(), want_input)),
        clause="QUANT-FNUZ-CONVERT",
        message=f"{context}: input_scale {i_new}, expected {want_input} (doubled)",
    )


@pytest.mark.clause("QUANT-ERRORS")
@pytest.mark.parametrize("case", params(ERRORS))
def test_should_reject_bad_input(backend, device, case):
    """Bad input raises the documented exception type, with a message naming the argument."""
    check_backend_raises(case, backend, device)


def _w4(backend, device, recipe, clause):
    x, qweight, scales, qzeros = recipe.make(device)
    kw = {"group_size": recipe.group_size, "packing": recipe.packing}
    context = describe(backend, device, "w4a16_mm", **kw) + f": x {tuple(x.shape)} {recipe.dtype}"
    got = backend.w4a16_mm(x, qweight, scales, qzeros, **kw)
    cpu = [t.cpu() for t in (x, qweight, scales, qzeros)]
    want = oracle.w4a16_mm(*cpu, **kw)
    weight = w4a16_weight(*cpu[1:], **kw)
    tol = tolerance("quant-weight-only", recipe.dtype)
    assert_close(got, want, clause=clause, context=context, tol=tol, dtype=recipe.dtype, device=device,
                 atol_scale=gemm_scale(cpu[0], weight, float32_sum=False))  # fmt: skip


@pytest.mark.clause("QUANT-W4A16-MM")
@pytest.mark.op("w4a16_mm")
@given(recipe=draws.w4a16_inputs())
def test_w4a16_matches_oracle(backend, device, recipe):
    """x @ ((q - zero) * scale) per group of K, AWQ and GPTQ (v1, v2) checkpoints."""
    _w4(backend, device, recipe, "QUANT-W4A16-MM")


@pytest.mark.clause("QUANT-W4A16-PACKING")
@pytest.mark.op("w4a16_mm")
@given(recipe=draws.w4a16_inputs(packings=("awq", "gptq_v2")))
def test_w4a16_nibble_order(backend, device, recipe):
    """AWQ's interleaved nibbles along N and GPTQ's sequential nibbles along K."""
    _w4(backend, device, recipe, "QUANT-W4A16-PACKING")


@pytest.mark.clause("QUANT-W4A16-ZEROS")
@pytest.mark.op("w4a16_mm")
@given(recipe=draws.w4a16_inputs(packings=("gptq", "gptq_v2")))
def test_w4a16_zero_conventions(backend, device, recipe):
    """A GPTQ v1 checkpoint's stored zeros are the zeros minus one; gptq_v2's are the zeros."""
    _w4(backend, device, recipe, "QUANT-W4A16-ZEROS")


@pytest.mark.clause("QUANT-W4A16-GROUPS")
@pytest.mark.op("w4a16_mm")
@given(recipe=draws.w4a16_inputs())
def test_w4a16_groups(backend, device, recipe):
    """Group sizes 32, 64, 128: row k takes group k // group_size's scale and zero."""
    _w4(backend, device, recipe, "QUANT-W4A16-GROUPS")

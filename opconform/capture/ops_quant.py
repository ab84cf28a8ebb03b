"""Replay rows of the quant ops (``ops.REPLAY_OPS``, docs/capture.md), judged as
conformance/test_quant.py judges them (spec/quant.md, QUANT-TOL):

- ``dynamic_int8_quant``: the pair's dtypes and shapes (``quant_checks.check_quantized``), then a
  zero row's q 0 and finite scale (QUANT-INT8-ZERO-ROW), the other rows' scales against the oracle's
  under the ``quant-scale`` row (QUANT-INT8-SCALE), and q on the int8 grid of x over the call's OWN
  scale (QUANT-INT8-ROUND, ``quant_checks.check_on_grid``). An exact tie passes either way: ties to
  even (QUANT-INT8-TIES) is a SHOULD, left to the property.
- ``int8_scaled_mm``: the output's dtype and shape (QUANT-W8A8-DTYPE), then the ``quant`` row of
  ``out_dtype`` (recorded by its name, ``ReplayOp.dtype_options``) with atol scaled by ``gemm_scale``
  of the dequantized operands (QUANT-W8A8-MM; -EXACT, -SCALES and -BIAS refine it and a recorded
  call cannot tell them apart).
- ``w4a16_mm``: the ``quant-weight-only`` row of x's dtype, atol scaled by ``gemm_scale`` of x and
  the dequantized int4 weight (QUANT-W4A16-MM).
- ``w8a8_fused_moe``: the ``quant-moe`` row of x's dtype, atol scaled by ``w8a8_moe_error_scale`` of
  the recorded call (QUANT-MOE-W8A8, QUANT-TOL), as conformance/test_quant_moe.py judges it; its
  refinements (-INPUT, -SCALES, -REQUANT) are the property's, a recorded call cannot tell them apart.
"""

from __future__ import annotations

import torch

from conformance.checks import assert_close, check
from conformance.quant_checks import check_on_grid, check_quantized, check_scales
from conformance.tolerances import gemm_scale

MM_TENSORS = ("a", "b", "scale_a", "scale_b", "bias")
MOE_TENSORS = ("x", "w13", "w2", "topk_weights", "topk_ids", "w13_scale", "w2_scale")
MOE_SCALES = frozenset({"w13_scale", "w2_scale"})  # the oracle takes them by keyword


def _host(outputs: list) -> list:
    return [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in outputs]


def judge_int8_quant(inputs, options, outputs, *, clause, context):
    """QUANT-INT8-SCALE, -ZERO-ROW and -ROUND on a recorded (q, scale) of x (see the module doc)."""
    from reference.quant import dynamic_int8_quant

    x = inputs["x"]
    q, scale = check_quantized(_host(outputs), x, q_dtype=torch.int8, scale_shape=(*x.shape[:-1], 1),
                               clause=clause, context=context)  # fmt: skip
    zero = x.abs().amax(-1, keepdim=True) == 0  # [..., 1]
    s = scale.double()
    kept = (q == 0).all(-1, keepdim=True) & torch.isfinite(s) & (s >= 0)
    bad = (zero & ~kept).flatten()  # one per row, the rows flattened
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        q_row, s_row = q.reshape(-1, q.shape[-1])[row], s.flatten()[row].item()
        message = f"{context}: the all-zero row {row} (rows flattened) gave q {q_row[:4].tolist()}..., "
        message += f"scale {s_row}; expected q 0 and a finite scale >= 0"
        check(False, clause="QUANT-INT8-ZERO-ROW", message=message)
    _, want = dynamic_int8_quant(x)
    if bool((~zero).any()):
        check_scales(scale[~zero], want[~zero], clause=clause, context=f"{context} (rows not all zero)")
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    check_on_grid(q, x, safe, grid=torch.int8, clause="QUANT-INT8-ROUND", context=context)


def judge_int8_mm(inputs, options, outputs, *, clause, context):
    """QUANT-W8A8-DTYPE, then QUANT-W8A8-MM under the quant row of out_dtype with gemm_scale."""
    from reference.quant import dequantized_operands, int8_scaled_mm

    out_dtype = options["out_dtype"]
    a, b, scale_a, scale_b, bias = (inputs.get(n) for n in MM_TENSORS)
    want = int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    got = _host(outputs)
    check(
        len(got) == 1 and isinstance(got[0], torch.Tensor) and got[0].dtype == out_dtype
        and tuple(got[0].shape) == tuple(want.shape),
        clause="QUANT-W8A8-DTYPE",
        message=f"{context}: returned {[getattr(o, 'dtype', type(o).__name__) for o in got]} "
        f"{[tuple(getattr(o, 'shape', ())) for o in got]}; expected {out_dtype} {tuple(want.shape)}",
    )  # fmt: skip
    assert_close(got[0], want, clause=clause, family="quant", dtype=out_dtype, context=f"{context}: out",
                 atol_scale=gemm_scale(*dequantized_operands(a, b, scale_a, scale_b)))  # fmt: skip


def _w4a16_scale(inputs, options):
    from reference.quant_w4a16 import w4a16_weight

    weight = w4a16_weight(*(inputs[n] for n in ("qweight", "scales", "qzeros")), **options)
    return gemm_scale(inputs["x"], weight, float32_sum=False)


def _moe_scale(inputs, options):
    from reference.quant_moe import w8a8_moe_error_scale

    args = [inputs[n] for n in MOE_TENSORS if n not in MOE_SCALES]
    return w8a8_moe_error_scale(*args, **{n: inputs[n] for n in MOE_SCALES})


def ROWS(row):  # noqa: N802 (the row type, passed in: ops imports this module)
    """The rows, built with ``row`` (``ops.ReplayOp``)."""
    return (
        row(
            "dynamic_int8_quant", "reference.quant:dynamic_int8_quant", "QUANT-INT8-SCALE", "quant-scale",
            ("x",), (), ("q", "scale"), judge=judge_int8_quant,
            judged_under=("QUANT-INT8-ZERO-ROW", "QUANT-INT8-ROUND"),
        ),
        row(
            "int8_scaled_mm", "reference.quant:int8_scaled_mm", "QUANT-W8A8-MM", "quant", MM_TENSORS,
            ("out_dtype",), ("out",), keywords=frozenset({"bias"}), judge=judge_int8_mm,
            dtype_from="out_dtype", dtype_options=("out_dtype",), judged_under=("QUANT-W8A8-DTYPE",),
        ),
        row(
            "w4a16_mm", "reference.quant_w4a16:w4a16_mm", "QUANT-W4A16-MM", "quant-weight-only",
            ("x", "qweight", "scales", "qzeros"), ("group_size", "packing"), ("out",),
            atol_scale=_w4a16_scale,
        ),
        row(
            "w8a8_fused_moe", "reference.quant_moe:w8a8_fused_moe", "QUANT-MOE-W8A8", "quant-moe",
            MOE_TENSORS, (), ("out",), keywords=MOE_SCALES, atol_scale=_moe_scale,
        ),
    )  # fmt: skip

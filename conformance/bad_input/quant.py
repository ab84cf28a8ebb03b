"""QUANT-ERRORS' bad inputs (spec/quant.md) as records."""

from __future__ import annotations

import torch

from conformance.bad_input import ErrorCase, names

E4M3 = torch.float8_e4m3fn


def _case(op: str, name: str, exception: type[Exception], argument: str, build) -> ErrorCase:
    return ErrorCase("QUANT-ERRORS", op, name, build, exception, names(argument))


def _int8_quant(*, shape=(2, 8), dtype=torch.bfloat16):
    return lambda d: ((torch.ones(shape, dtype=dtype, device=d),), {})


def _int8_mm(*, a=(2, 8), b=(8, 3), a_dtype=torch.int8, sa=(2, 1), sb=(1, 3), sa_dtype=torch.float32,
             bias=None, bias_dtype=torch.bfloat16, out_dtype=torch.bfloat16):  # fmt: skip
    def build(d):
        args = (
            torch.ones(a, dtype=a_dtype, device=d),
            torch.ones(b, dtype=torch.int8, device=d),
            torch.ones(sa, dtype=sa_dtype, device=d),
            torch.ones(sb, dtype=torch.float32, device=d),
        )
        bias_t = None if bias is None else torch.ones(bias, dtype=bias_dtype, device=d)
        return args, {"bias": bias_t, "out_dtype": out_dtype}

    return build


def _fp8_quant(*, shape=(2, 8), fp8_dtype=E4M3, scale=(1,), scale_dtype=torch.float32):
    def build(d):
        s = None if scale is None else torch.ones(scale, dtype=scale_dtype, device=d)
        return (torch.ones(shape, dtype=torch.bfloat16, device=d),), {"fp8_dtype": fp8_dtype, "scale": s}

    return build


def _group(*, shape=(2, 64), group_size=32, fp8_dtype=E4M3, use_ue8m0=False):
    def build(d):
        x = torch.ones(shape, dtype=torch.bfloat16, device=d)
        return (x,), {"group_size": group_size, "fp8_dtype": fp8_dtype, "use_ue8m0": use_ue8m0}

    return build


def _block(*, a=(2, 130), b=(129, 130), a_s=(2, 2), b_s=(2, 2), s_dtype=torch.float32, block_size=(128, 128),
           out_dtype=torch.bfloat16):  # fmt: skip
    def build(d):
        args = (
            torch.ones(a, device=d).to(E4M3),
            torch.ones(b, device=d).to(E4M3),
            torch.ones(a_s, dtype=s_dtype, device=d),
            torch.ones(b_s, dtype=torch.float32, device=d),
        )
        return args, {"block_size": block_size, "out_dtype": out_dtype}

    return build


def _fnuz(*, weight_dtype=E4M3, scale_dtype=torch.float32):
    def build(d):
        w = torch.ones(4, 4, device=d).to(weight_dtype)
        return (w, torch.ones(1, dtype=scale_dtype, device=d), None), {}

    return build


def _w4(
    *, packing="awq", qweight=(128, 2), qzeros=(4, 2), scales=(4, 16), group_size=32, q_dtype=torch.int32
):
    def build(d):
        args = (
            torch.ones(2, 128, dtype=torch.float16, device=d),
            torch.zeros(qweight, dtype=q_dtype, device=d),
            torch.ones(scales, dtype=torch.float16, device=d),
            torch.zeros(qzeros, dtype=torch.int32, device=d),
        )
        return args, {"group_size": group_size, "packing": packing}

    return build


ERRORS = [
    _case("dynamic_int8_quant", "integer-x", TypeError, "x", _int8_quant(dtype=torch.int32)),
    _case("dynamic_int8_quant", "one-dim-x", ValueError, "x", _int8_quant(shape=(8,))),
    _case("int8_scaled_mm", "float-a", ValueError, "a", _int8_mm(a_dtype=torch.float32)),
    _case("int8_scaled_mm", "k-mismatch", ValueError, "b", _int8_mm(b=(7, 3))),
    _case("int8_scaled_mm", "scale-a-numel", ValueError, "scale_a", _int8_mm(sa=(3, 1))),
    _case("int8_scaled_mm", "scale-b-numel", ValueError, "scale_b", _int8_mm(sb=(1, 2))),
    _case("int8_scaled_mm", "scale-a-bf16", TypeError, "scale_a", _int8_mm(sa_dtype=torch.bfloat16)),
    _case("int8_scaled_mm", "bias-shape", ValueError, "bias", _int8_mm(bias=(2,))),
    _case("int8_scaled_mm", "bias-dtype", TypeError, "bias", _int8_mm(bias=(3,), bias_dtype=torch.float16)),
    _case("int8_scaled_mm", "out-int32", ValueError, "out_dtype", _int8_mm(out_dtype=torch.int32)),
    _case("fp8_quant", "fp8-e5m2", ValueError, "fp8_dtype", _fp8_quant(fp8_dtype=torch.float8_e5m2)),
    _case("fp8_quant", "scale-numel", ValueError, "scale", _fp8_quant(scale=(2,))),
    _case("fp8_quant", "scale-bf16", TypeError, "scale", _fp8_quant(scale_dtype=torch.bfloat16)),
    _case("fp8_group_quant", "k-not-multiple", ValueError, "group_size", _group(shape=(2, 48))),
    _case("fp8_group_quant", "group-zero", ValueError, "group_size", _group(group_size=0)),
    _case("fp8_group_quant", "ue8m0-not-bool", ValueError, "use_ue8m0", _group(use_ue8m0=1)),
    _case("fp8_block_scaled_mm", "k-mismatch", ValueError, "b", _block(b=(129, 128))),
    _case("fp8_block_scaled_mm", "a-scales-floor", ValueError, "a_scales", _block(a_s=(2, 1))),
    _case("fp8_block_scaled_mm", "b-scales-floor", ValueError, "b_scales", _block(b_s=(1, 2))),
    _case("fp8_block_scaled_mm", "scales-bf16", TypeError, "a_scales", _block(s_dtype=torch.bfloat16)),
    _case("fp8_block_scaled_mm", "block-one-int", ValueError, "block_size", _block(block_size=(128,))),
    _case("fp8_block_scaled_mm", "out-float8", ValueError, "out_dtype", _block(out_dtype=E4M3)),
    _case("fp8_fn_to_fnuz", "weight-fnuz", ValueError, "weight", _fnuz(weight_dtype=torch.float8_e4m3fnuz)),
    _case("fp8_fn_to_fnuz", "scale-bf16", TypeError, "weight_scale", _fnuz(scale_dtype=torch.bfloat16)),
    _case("w4a16_mm", "packing-unknown", ValueError, "packing", _w4(packing="marlin")),
    _case("w4a16_mm", "qweight-int8", ValueError, "qweight", _w4(q_dtype=torch.int8)),
    _case("w4a16_mm", "qweight-gptq-shape", ValueError, "qweight", _w4(packing="gptq")),
    _case("w4a16_mm", "qzeros-shape", ValueError, "qzeros", _w4(qzeros=(2, 2))),
    _case("w4a16_mm", "group-not-dividing", ValueError, "group_size", _w4(group_size=48)),
]

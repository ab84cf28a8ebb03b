"""Quant mutants: the field's quantized-GEMM mistakes (spec/quant.md, Sources) and their neighbours.

Each class is one realistic bug in an otherwise correct native backend; its docstring says what
the bug is and where such bugs come from, and ``clauses`` lists the clauses of which at least one
must fail.
"""

from __future__ import annotations

import torch

from backends import native_quant as nq
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from mutants._quant_fp8 import (  # noqa: E402 - the fp8 half of the catalogue
    BlockActivationScaleFirstGroup,
    BlockFromScaleShape,
    BlockScaleTransposed,
    E4m3fnMax240,
    FnuzMax448,
    FnuzNegativeZeroKept,
    FnuzScalesNotDoubled,
    FnuzValueCast,
    Fp8NoSaturation,
    Fp8ScaleInverted,
    GroupScaleNoFloor,
    GroupScalePerToken,
    Ue8m0AfterQuantizing,
)
from mutants._quant_int4 import INT4_MUTANTS  # noqa: E402 - the int4 part
from reference import quant as rq

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_quant"]


def _int8_from(x32: torch.Tensor, scale: torch.Tensor, rounding=torch.round) -> torch.Tensor:
    return (
        rounding(x32 / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-128, 127).to(torch.int8)
    )


class Int8ScaleOver128(NativeBackend):
    """Dynamic int8 scale amax / 128 (the asymmetric range's width taken for the symmetric one).

    Origin: -128..127 read as "128 levels each side"; the row's amax then maps to 128, clamped to 127.
    Caught by: QUANT-INT8-SCALE.
    """

    name = "int8-scale-over-128"
    clauses = {"QUANT-INT8-SCALE"}

    def dynamic_int8_quant(self, x):
        rq.validate_activation(x)
        scale = x.float().abs().amax(-1, keepdim=True) / 128.0
        return _int8_from(x.float(), scale), scale


class Int8PerTensorScale(NativeBackend):
    """One amax over the whole activation instead of one per token.

    Origin: a static / per-tensor quant path used for a dynamic per-token checkpoint (W8A8 dynamic).
    Caught by: QUANT-INT8-SCALE.
    """

    name = "int8-per-tensor-scale"
    clauses = {"QUANT-INT8-SCALE"}

    def dynamic_int8_quant(self, x):
        rq.validate_activation(x)
        scale = (x.float().abs().amax() / 127.0).expand(*x.shape[:-1], 1).contiguous()
        return _int8_from(x.float(), scale), scale


class Int8Truncates(NativeBackend):
    """The quotient cast to int8 without rounding (toward zero).

    Origin: ``(x / scale).to(torch.int8)``, the one-liner of many reference snippets.
    Caught by: QUANT-INT8-ROUND.
    """

    name = "int8-truncates"
    clauses = {"QUANT-INT8-ROUND"}

    def dynamic_int8_quant(self, x):
        rq.validate_activation(x)
        scale = x.float().abs().amax(-1, keepdim=True) / 127.0
        return _int8_from(x.float(), scale, torch.trunc), scale


class Int8RoundHalfAway(NativeBackend):
    """Ties rounded away from zero (C ``round``, libdevice ``round``) instead of to even.

    Origin: sglang's Triton per_token_quant_int8 and an older vLLM kernel (spec/quant.md, Sources).
    Caught by: QUANT-INT8-TIES.
    """

    name = "int8-round-half-away"
    clauses = {"QUANT-INT8-TIES"}
    level = "SHOULD"
    why = "sglang's Triton int8 quant rounds half away; ties are one unit apart, once in a while"

    def dynamic_int8_quant(self, x):
        rq.validate_activation(x)
        scale = x.float().abs().amax(-1, keepdim=True) / 127.0
        return _int8_from(x.float(), scale, lambda t: torch.sign(t) * torch.floor(t.abs() + 0.5)), scale


class Int16Accumulator(NativeBackend):
    """The int8 products summed in an int16 accumulator, which wraps past 32767.

    Origin: an int8 dot-product instruction whose 16-bit partial sums are kept (a port's SIMD path).
    Caught by: QUANT-W8A8-EXACT, QUANT-W8A8-MM.
    """

    name = "int16-accumulator"
    clauses = {"QUANT-W8A8-EXACT", "QUANT-W8A8-MM"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        acc = nq.integer_sum(a, b)
        wrapped = torch.remainder(acc + 32768, 65536) - 32768
        return nq.dequantize(wrapped, scale_a, scale_b, bias, out_dtype)


class Bf16Accumulator(NativeBackend):
    """The int8 GEMM computed as a bfloat16 matmul of the dequantized operands, summed in bfloat16.

    Origin: a fallback path that dequantizes to the activation dtype and sums in it.
    Caught by: QUANT-W8A8-EXACT, QUANT-W8A8-MM.
    """

    name = "bf16-accumulator"
    clauses = {"QUANT-W8A8-EXACT", "QUANT-W8A8-MM"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        products = a.to(torch.bfloat16)[:, :, None] * b.to(torch.bfloat16)[None, :, :]
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)
        for k in range(0, a.shape[1], 64):  # a blocked bfloat16 sum: every partial sum rounded
            acc = acc + products[:, k : k + 64].float().sum(1).to(torch.bfloat16)
        return nq.dequantize(acc.double(), scale_a, scale_b, bias, out_dtype)


class ActivationScaleFirstOnly(NativeBackend):
    """Per-token activation scales read as one per-tensor scale (scale_a[0] for every row).

    Origin: a per-tensor kernel handed the per-token scales of a dynamic W8A8 checkpoint.
    Caught by: QUANT-W8A8-SCALES, QUANT-W8A8-MM.
    """

    name = "activation-scale-first-only"
    clauses = {"QUANT-W8A8-SCALES", "QUANT-W8A8-MM"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        return nq.dequantize(nq.integer_sum(a, b), scale_a.reshape(-1)[:1], scale_b, bias, out_dtype)


class WeightScaleFirstOnly(NativeBackend):
    """Per-channel weight scales read as per-tensor (scale_b[0] for every column).

    Origin: a channelwise checkpoint loaded by a per-tensor scheme (the per-tensor / per-channel mix-up).
    Caught by: QUANT-W8A8-SCALES, QUANT-W8A8-MM.
    """

    name = "weight-scale-first-only"
    clauses = {"QUANT-W8A8-SCALES", "QUANT-W8A8-MM"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        return nq.dequantize(nq.integer_sum(a, b), scale_a, scale_b.reshape(-1)[:1], bias, out_dtype)


class BiasBeforeScales(NativeBackend):
    """The bias added to the int32 sum, then scaled with it.

    Origin: a bias folded into the accumulator's epilogue before dequantization.
    Caught by: QUANT-W8A8-BIAS.
    """

    name = "bias-before-scales"
    clauses = {"QUANT-W8A8-BIAS"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        acc = nq.integer_sum(a, b)
        acc = acc if bias is None else acc + bias.double()
        return nq.dequantize(acc, scale_a, scale_b, None, out_dtype)


class Float32BiasRequired(NativeBackend):
    """A bias in the activation dtype refused: the kernel demands a float32 bias.

    Origin: aclnnWeightQuantBatchMatmulV2 needing a float32 bias for bfloat16 x (vllm-ascend#7039).
    Caught by: QUANT-W8A8-BIAS.
    """

    name = "float32-bias-required"
    clauses = {"QUANT-W8A8-BIAS"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        if bias is not None and bias.dtype != torch.float32:
            raise TypeError(f"bias must be float32 for {out_dtype} output, got {bias.dtype}")
        return nq.int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)


class OutputFloat32(NativeBackend):
    """The int32 sum times the scales returned in float32, never cast to out_dtype.

    Origin: a dequant epilogue whose output cast was left to the caller.
    Caught by: QUANT-W8A8-DTYPE, QUANT-W8A8-MM.
    """

    name = "w8a8-output-float32"
    clauses = {"QUANT-W8A8-DTYPE", "QUANT-W8A8-MM"}

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        return nq.int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype).float()


class NpuPertokenScaleDropped(AscendBackend):
    """The Ascend adapter calls npu_quant_matmul with the weight scale only, no pertoken_scale: every
    token keeps its int8 magnitude (the table allows bfloat16 output without it).

    Origin: a static-activation (per-tensor) W8A8 path reused for dynamic per-token checkpoints; the
    W8A8 accuracy drops of Ascend ports (Ascend/sglang#116) are of this kind of silent mis-scaling.
    Caught by: QUANT-W8A8-SCALES, QUANT-W8A8-MM.
    """

    name = "npu-pertoken-scale-dropped"
    clauses = {"QUANT-W8A8-SCALES", "QUANT-W8A8-MM"}

    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)

    def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
        rq.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
        if out_dtype != torch.bfloat16:  # float16 needs the pertoken_scale for its bias: the real path
            return super().int8_scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
        scale = scale_b.reshape(-1).contiguous()
        return self.ops.npu_quant_matmul(
            a.contiguous(), b.contiguous(), scale, bias=bias, output_dtype=out_dtype
        )


BACKENDS = [
    Int8ScaleOver128(),
    Int8PerTensorScale(),
    Int8Truncates(),
    Int8RoundHalfAway(),
    Int16Accumulator(),
    Bf16Accumulator(),
    ActivationScaleFirstOnly(),
    WeightScaleFirstOnly(),
    BiasBeforeScales(),
    Float32BiasRequired(),
    OutputFloat32(),
    NpuPertokenScaleDropped(),
    FnuzMax448(),
    E4m3fnMax240(),
    Fp8NoSaturation(),
    Fp8ScaleInverted(),
    Ue8m0AfterQuantizing(),
    GroupScaleNoFloor(),
    GroupScalePerToken(),
    BlockFromScaleShape(),
    BlockScaleTransposed(),
    BlockActivationScaleFirstGroup(),
    FnuzScalesNotDoubled(),
    FnuzValueCast(),
    FnuzNegativeZeroKept(),
    *INT4_MUTANTS,
]

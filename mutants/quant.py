"""Quant mutants: the field's quantized-GEMM mistakes (spec/quant.md, Sources) and their neighbours.

Each class is one realistic bug in an otherwise correct native backend; its docstring says what
the bug is and where such bugs come from, and ``clauses`` lists the clauses of which at least one
must fail.
"""

from __future__ import annotations

import math

import torch

from backends import native_quant as nq
from backends.native import NativeBackend
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


def _fp8_quant_with_max(x, fp8_dtype, scale, top):
    rq.validate_activation(x)
    rq.validate_fp8_scale(fp8_dtype, scale)
    if scale is None:
        scale = (x.float().abs().amax() / top).reshape(1)
    return nq.saturate(x.float() / scale.float().reshape(()), fp8_dtype), scale.float().reshape(1)


class FnuzMax448(NativeBackend):
    """e4m3fnuz quantized with e4m3fn's maximum, 448 instead of 240: values above 240 scale saturate.

    Origin: ROCm/TransformerEngine#485 (scales off by 1.87x).
    Caught by: QUANT-FP8-TENSOR, QUANT-FP8-GROUP.
    """

    name = "fnuz-max-448"
    clauses = {"QUANT-FP8-TENSOR", "QUANT-FP8-GROUP"}

    def fp8_quant(self, x, *, fp8_dtype, scale):
        return _fp8_quant_with_max(x, fp8_dtype, scale, 448.0)

    def fp8_group_quant(self, x, *, group_size, fp8_dtype, use_ue8m0):
        group_size = rq.validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
        groups = x.float().unflatten(-1, (-1, group_size))
        scale = groups.abs().amax(-1).clamp_min(nq.GROUP_EPS) / 448.0
        return nq.saturate(groups / scale[..., None], fp8_dtype).flatten(-2), scale


class E4m3fnMax240(NativeBackend):
    """e4m3fn quantized with e4m3fnuz's maximum 240: scales 1.87x too large, range unused.

    Origin: the same mix-up the other way (one FP8_MAX constant for both formats).
    Caught by: QUANT-FP8-TENSOR.
    """

    name = "e4m3fn-max-240"
    clauses = {"QUANT-FP8-TENSOR"}

    def fp8_quant(self, x, *, fp8_dtype, scale):
        return _fp8_quant_with_max(x, fp8_dtype, scale, 240.0)


class Fp8NoSaturation(NativeBackend):
    """x / scale cast to fp8 without the clamp: an overflow becomes NaN in e4m3fnuz.

    Origin: relying on the cast to saturate (PyTorch's e4m3fnuz cast does not; spec/quant.md, Sources).
    Caught by: QUANT-FP8-SATURATE.
    """

    name = "fp8-no-saturation"
    clauses = {"QUANT-FP8-SATURATE"}

    def fp8_quant(self, x, *, fp8_dtype, scale):
        if scale is None:
            return nq.fp8_quant(x, fp8_dtype=fp8_dtype, scale=scale)
        rq.validate_fp8_scale(fp8_dtype, scale)
        return (x.float() / scale.float()).to(fp8_dtype), scale.float().reshape(1)


class Fp8ScaleInverted(NativeBackend):
    """The quantization multiplier F / amax returned where the dequantization scale amax / F belongs.

    Origin: the ``scale`` / ``scale_inv`` naming (DeepSeek-V3's ``weight_scale_inv`` is a dequant scale).
    Caught by: QUANT-FP8-TENSOR.
    """

    name = "fp8-scale-inverted"
    clauses = {"QUANT-FP8-TENSOR"}

    def fp8_quant(self, x, *, fp8_dtype, scale):
        q, s = nq.fp8_quant(x, fp8_dtype=fp8_dtype, scale=scale)
        return q, (s if scale is not None else 1.0 / s)


class Ue8m0AfterQuantizing(NativeBackend):
    """q computed with the float scale, the scale rounded to a power of two afterwards.

    Origin: sglang#28418 (quantize and dequantize used different scales, up to 1.99x).
    Caught by: QUANT-FP8-UE8M0.
    """

    name = "ue8m0-after-quantizing"
    clauses = {"QUANT-FP8-UE8M0"}

    def fp8_group_quant(self, x, *, group_size, fp8_dtype, use_ue8m0):
        group_size = rq.validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
        groups = x.float().unflatten(-1, (-1, group_size))
        scale = nq.group_scales(groups, fp8_dtype, False)
        q = nq.saturate(groups / scale[..., None], fp8_dtype).flatten(-2)
        return q, (torch.exp2(torch.ceil(torch.log2(scale))) if use_ue8m0 else scale)


class GroupScaleNoFloor(NativeBackend):
    """No eps floor on a group's amax: a zero group's scale is 0 and 0 / 0 quantizes to NaN.

    Origin: padding tokens (all-zero rows) through a kernel that divides by the raw scale.
    Caught by: QUANT-FP8-GROUP.
    """

    name = "group-scale-no-floor"
    clauses = {"QUANT-FP8-GROUP"}

    def fp8_group_quant(self, x, *, group_size, fp8_dtype, use_ue8m0):
        group_size = rq.validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
        groups = x.float().unflatten(-1, (-1, group_size))
        scale = groups.abs().amax(-1) / torch.finfo(fp8_dtype).max
        return (groups / scale[..., None]).to(fp8_dtype).flatten(-2), scale


class GroupScalePerToken(NativeBackend):
    """One scale per token broadcast to its groups (group_size ignored).

    Origin: a per-token quant kernel used where DeepSeek-V3's 1 x 128 groups are expected.
    Caught by: QUANT-FP8-GROUP, QUANT-FP8-UE8M0.
    """

    name = "group-scale-per-token"
    clauses = {"QUANT-FP8-GROUP", "QUANT-FP8-UE8M0"}

    def fp8_group_quant(self, x, *, group_size, fp8_dtype, use_ue8m0):
        group_size = rq.validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
        groups = x.float().unflatten(-1, (-1, group_size))
        row = groups.abs().amax((-2, -1), keepdim=True).expand(*groups.shape[:-1], 1)
        scale = nq.group_scales(row, fp8_dtype, use_ue8m0)
        return nq.saturate(groups / scale[..., None], fp8_dtype).flatten(-2), scale


def _block_mm(a, b, a_scales, b_scales, block_size, out_dtype, *, a_blocks=None, b_blocks=None):
    """The native block GEMM with the blocks used to expand the scales given (default: block_size)."""
    (m, k), n = a.shape, b.shape[0]
    a_deq = a.float() * nq.expand_blocks(a_scales, m, k, a_blocks or (1, block_size[1]))
    b_deq = b.float() * nq.expand_blocks(b_scales, n, k, b_blocks or tuple(block_size))
    return (a_deq @ b_deq.T).to(out_dtype)


class BlockFromScaleShape(NativeBackend):
    """The block size derived from the shapes, ceil(N / scales rows): wrong when the last block is partial.

    Origin: NVIDIA/TensorRT-Model-Connect#1115 (1000 rows, 128 blocks: every scale misplaced).
    Caught by: QUANT-FP8-BLOCK-PARTIAL.
    """

    name = "block-from-scale-shape"
    clauses = {"QUANT-FP8-BLOCK-PARTIAL"}

    def fp8_block_scaled_mm(self, a, b, a_scales, b_scales, *, block_size, out_dtype):
        rq.validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype)
        bn = math.ceil(b.shape[0] / b_scales.shape[0])
        bk = math.ceil(a.shape[1] / a_scales.shape[1])
        return _block_mm(a, b, a_scales, b_scales, block_size, out_dtype, a_blocks=(1, bk), b_blocks=(bn, bk))


class BlockScaleTransposed(NativeBackend):
    """weight_scale_inv transposed in place: the [N/bn, K/bk] values read back as if transposed.

    Origin: vllm#44630 (a block-FP8 GEMM transposed weight_scale_inv in place).
    Caught by: QUANT-FP8-BLOCK-MM, QUANT-FP8-BLOCK-PARTIAL.
    """

    name = "block-scale-transposed"
    clauses = {"QUANT-FP8-BLOCK-MM", "QUANT-FP8-BLOCK-PARTIAL"}

    def fp8_block_scaled_mm(self, a, b, a_scales, b_scales, *, block_size, out_dtype):
        rq.validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype)
        scrambled = b_scales.t().contiguous().view(b_scales.shape)
        return _block_mm(a, b, a_scales, scrambled, block_size, out_dtype)


class BlockActivationScaleFirstGroup(NativeBackend):
    """The activation's first group scale applied to every K block (per-token instead of per group).

    Origin: a per-token activation path fed DeepSeek-V3's 1 x 128 group scales.
    Caught by: QUANT-FP8-BLOCK-MM, QUANT-FP8-BLOCK-PARTIAL.
    """

    name = "block-activation-scale-first-group"
    clauses = {"QUANT-FP8-BLOCK-MM", "QUANT-FP8-BLOCK-PARTIAL"}

    def fp8_block_scaled_mm(self, a, b, a_scales, b_scales, *, block_size, out_dtype):
        rq.validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype)
        first = a_scales[:, :1].expand_as(a_scales)
        return _block_mm(a, b, first, b_scales, block_size, out_dtype)


class FnuzScalesNotDoubled(NativeBackend):
    """The e4m3fn bits reinterpreted as e4m3fnuz but the scales kept: every weight halved.

    Origin: vllm#7210, sglang#35111 (fp8 checkpoints on ROCm need the doubled scales).
    Caught by: QUANT-FNUZ-CONVERT.
    """

    name = "fnuz-scales-not-doubled"
    clauses = {"QUANT-FNUZ-CONVERT"}

    def fp8_fn_to_fnuz(self, weight, weight_scale, input_scale):
        w, _, _ = nq.fp8_fn_to_fnuz(weight, weight_scale, input_scale)
        return w, weight_scale, input_scale


class FnuzValueCast(NativeBackend):
    """The weight's values cast to e4m3fnuz (``.to()``), scales kept: values above 240 saturate.

    Origin: converting by value instead of by bits (the formats' ranges differ: 448 against 240).
    Caught by: QUANT-FNUZ-CONVERT.
    """

    name = "fnuz-value-cast"
    clauses = {"QUANT-FNUZ-CONVERT"}

    def fp8_fn_to_fnuz(self, weight, weight_scale, input_scale):
        rq.validate_fnuz_args(weight, weight_scale, input_scale)
        return nq.saturate(weight.float(), torch.float8_e4m3fnuz), weight_scale, input_scale


class FnuzNegativeZeroKept(NativeBackend):
    """The 0x80 pattern (e4m3fn's -0) left in place: e4m3fnuz reads it as NaN.

    Origin: the reinterpretation without vLLM's ``weight_as_int8[weight_as_int8 == -128] = 0``.
    Caught by: QUANT-FNUZ-CONVERT.
    """

    name = "fnuz-negative-zero-kept"
    clauses = {"QUANT-FNUZ-CONVERT"}

    def fp8_fn_to_fnuz(self, weight, weight_scale, input_scale):
        rq.validate_fnuz_args(weight, weight_scale, input_scale)
        doubled = None if input_scale is None else input_scale * 2.0
        return weight.view(torch.float8_e4m3fnuz), weight_scale * 2.0, doubled


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
]

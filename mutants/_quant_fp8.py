"""Quant mutants of the fp8 ops (spec/quant.md): listed by ``mutants/quant.py``'s BACKENDS."""

from __future__ import annotations

import math

import torch

from backends import native_quant as nq
from backends.native import NativeBackend
from reference import quant as rq


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

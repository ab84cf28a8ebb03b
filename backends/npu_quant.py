"""The Ascend adapter's int8 quant ops (spec/quant.md through spec/ascend.md, CANN-DYNAMIC-QUANT,
CANN-QUANT-MATMUL): W8A8 with dynamic per-token activations, as vllm-ascend serves it.

``dynamic_int8_quant`` calls ``npu_dynamic_quant`` (float16 / bfloat16 x; another dtype goes through
the native op, which the Ascend op cannot take) and adds the scale's trailing dim.
``int8_scaled_mm`` calls ``npu_quant_matmul`` with the weight scale as ``scale`` (1 or n) and the
activation scale as ``pertoken_scale`` (a per-tensor one expanded to m), the bias in the output dtype
(the op's table allows it with a pertoken_scale). Operands are made contiguous (inferred: the op
takes ND tensors; a transposed int8 weight is copied). ``w8a8_fused_moe`` is vllm-ascend's
W8A8-dynamic expert path (CANN-GROUPED-MATMUL-W8A8, CANN-DEQUANT-SWIGLU-QUANT). ``w4a16_mm`` is
vllm-ascend's AWQ / GPTQ path over ``npu_weight_quant_batchmatmul`` (CANN-WEIGHT-QUANT-BMM). The fp8 ops
have no Ascend mapping here.
"""

from __future__ import annotations

import torch

from backends import NotImplementedOp, native_quant
from reference import quant as _quant
from reference.quant_moe import validate_w8a8_moe_args
from reference.quant_w4a16 import validate_w4a16_args

__all__ = ["install"]

_NO_FP8 = "the Ascend adapter maps the int8 and int4 ops only (spec/ascend.md, CANN-QUANT-MATMUL)"


def dynamic_int8_quant(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _quant.validate_activation(x)
    if x.dtype not in (torch.float16, torch.bfloat16):
        return native_quant.dynamic_int8_quant(x)
    y, scale = self.ops.npu_dynamic_quant(x.contiguous())
    return y, scale.unsqueeze(-1)


def int8_scaled_mm(self, a, b, scale_a, scale_b, *, bias, out_dtype):
    m, _, n = _quant.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
    pertoken = scale_a.reshape(-1).expand(m).contiguous()
    return self.ops.npu_quant_matmul(
        a.contiguous(),
        b.contiguous(),
        scale_b.reshape(-1).contiguous(),
        pertoken_scale=pertoken,
        bias=bias,
        output_dtype=out_dtype,
    )


def w8a8_fused_moe(self, x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
    """vllm-ascend's W8A8-dynamic experts: npu_dynamic_quant of x, the (token, slot) rows sorted by
    expert, npu_grouped_matmul to int32, npu_dequant_swiglu_quant (activate_left, dynamic), the
    down npu_grouped_matmul dequantized to x's dtype, then the slots weighted and summed in float32.
    An intermediate size the fused op rejects (not a multiple of 64) goes through the native op."""
    experts, _, inter = validate_w8a8_moe_args(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    if inter % 64:
        return native_quant.w8a8_fused_moe(x, w13, w2, topk_weights, topk_ids, w13_scale=w13_scale,
                                           w2_scale=w2_scale)  # fmt: skip
    x_q, x_scale = self.ops.npu_dynamic_quant(x.contiguous())
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)  # expanded rows grouped by expert
    token = order // topk_ids.shape[1]
    counts = torch.bincount(flat, minlength=experts)
    grouped = {"split_item": 2, "group_type": 0, "group_list_type": 1, "group_list": counts}
    w13_kn, w2_kn = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()  # [E, K, N]
    h = self.ops.npu_grouped_matmul([x_q[token]], [w13_kn], output_dtype=torch.int32, **grouped)[0]
    a_q, a_scale = self.ops.npu_dequant_swiglu_quant(
        h, weight_scale=w13_scale.reshape(experts, -1), activation_scale=x_scale[token].contiguous(),
        group_index=counts, **self.dequant_swiglu_args(),
    )  # fmt: skip
    scales = {"scale": [w2_scale.reshape(experts, -1)], "per_token_scale": [a_scale]}
    y = self.ops.npu_grouped_matmul([a_q], [w2_kn], output_dtype=x.dtype, **scales, **grouped)[0]
    slots = torch.zeros(flat.numel(), x.shape[1], dtype=torch.float32, device=x.device)
    slots[order] = y.float()
    weighted = slots.reshape(*topk_ids.shape, -1) * topk_weights.float()[..., None]
    return weighted.sum(1).to(x.dtype)


def dequant_swiglu_args(self) -> dict:
    """CANN-DEQUANT-SWIGLU-QUANT: the SiLU on the left (gate) half, dynamic per-row quantization."""
    return {"activate_left": True, "quant_mode": 1}


def w4a16_mm(self, x, qweight, scales, qzeros, *, group_size, packing):
    """CANN-WEIGHT-QUANT-BMM: the checkpoint's unsigned nibbles q (AWQ's interleave undone, GPTQ's
    rows unpacked along K) repacked as signed int4 q - 8 by npu_convert_weight_to_int4pack, the zeros
    z (v1: stored + 1) as the added offset 8 - z, so (q - 8 + 8 - z) * scale; a float32 x, which the
    op does not take, goes through the native op."""
    _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
    if x.dtype not in (torch.float16, torch.bfloat16):
        return native_quant.w4a16_mm(x, qweight, scales, qzeros, group_size=g, packing=packing)
    if packing == "awq":
        q, zeros = native_quant.awq_columns(qweight), native_quant.awq_columns(qzeros)
    else:  # QUANT-W4A16-ZEROS: a v1 checkpoint stores the zero minus one
        q = native_quant.nibbles(qweight).transpose(-1, -2).reshape(-1, n)
        zeros = native_quant.nibbles(qzeros).flatten(-2) + (1 if packing == "gptq" else 0)
    weight = self.ops.npu_convert_weight_to_int4pack((q - 8).to(torch.int32).contiguous())
    offset = self.int4_antiquant_offset(zeros, packing).to(x.dtype)
    return self.ops.npu_weight_quant_batchmatmul(
        x.contiguous(), weight, scales.contiguous(), offset.contiguous(), antiquant_group_size=g
    )


def int4_antiquant_offset(self, zeros: torch.Tensor, packing: str) -> torch.Tensor:
    """The op adds its offset to the signed weight q - 8: 8 - zero gives q - zero (as vllm-ascend's AWQ
    method's ``-(qzeros - 8)``)."""
    return 8 - zeros


def install(cls) -> None:
    """The quant ops as methods of the adapter class ``cls``; the fp8 ones not implemented, with why."""
    for op in (dynamic_int8_quant, int8_scaled_mm, w8a8_fused_moe, dequant_swiglu_args, w4a16_mm,
               int4_antiquant_offset):  # fmt: skip
        setattr(cls, op.__name__, op)
    for op in ("fp8_quant", "fp8_group_quant", "fp8_block_scaled_mm", "fp8_fn_to_fnuz"):
        setattr(cls, op, NotImplementedOp(_NO_FP8))
    cls.quant_scheme = NotImplementedOp("config parsing is the serving framework's, not the kernel's")

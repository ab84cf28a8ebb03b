"""The ``native`` quant ops (spec/quant.md): eager PyTorch in float32, as the field's reference
implementations compute them.

Validation goes through the oracles' checks (same exceptions). ``backends.native`` binds these
functions as its quant op methods; the mutants reuse the pieces.
"""

from __future__ import annotations

import torch

from reference import quant as _quant
from reference.quant_moe import validate_w8a8_moe_args
from reference.quant_w4a16 import validate_w4a16_args

__all__ = [
    "dynamic_int8_quant",
    "fp8_block_scaled_mm",
    "fp8_fn_to_fnuz",
    "fp8_group_quant",
    "fp8_quant",
    "int8_scaled_mm",
    "w4a16_mm",
    "w8a8_fused_moe",
]

# QUANT-FP8-GROUP: vLLM's amax floor, so a zero group gets a positive scale.
GROUP_EPS = 1e-10


def int8_quotient(x32: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """QUANT-INT8-ROUND, -ZERO-ROW: x * (127 / amax), 0 on a zero row (vLLM's inv_s)."""
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return x32 * inv


def dynamic_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-INT8-SCALE: scale = amax / 127 in float32; q rounded half to even and saturated."""
    _quant.validate_activation(x)
    x32 = x.float()
    amax = x32.abs().amax(-1, keepdim=True)
    q = torch.round(int8_quotient(x32, amax)).clamp(-128, 127).to(torch.int8)
    return q, amax / 127.0


def integer_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """QUANT-W8A8-EXACT: a @ b exactly (float64 holds every int8 sum below 2^53; any device)."""
    return a.double() @ b.double()


def dequantize(acc, scale_a, scale_b, bias, out_dtype) -> torch.Tensor:
    """QUANT-W8A8-SCALES, -BIAS: acc * scale_a[m] * scale_b[n] + bias[n] in float32, cast once."""
    m, n = acc.shape
    sa = scale_a.reshape(-1, 1).expand(m, 1) if scale_a.numel() == 1 else scale_a.reshape(m, 1)
    sb = scale_b.reshape(1, -1).expand(1, n) if scale_b.numel() == 1 else scale_b.reshape(1, n)
    out = acc.float() * sa.float() * sb.float()
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


def int8_scaled_mm(a, b, scale_a, scale_b, *, bias, out_dtype):
    """QUANT-W8A8-MM: the exact integer sum, dequantized per token and per channel."""
    _quant.validate_int8_mm(a, b, scale_a, scale_b, bias, out_dtype)
    return dequantize(integer_sum(a, b), scale_a, scale_b, bias, out_dtype)


def saturate(t: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """QUANT-FP8-SATURATE: clamp to the format's finite range, then cast."""
    top = torch.finfo(fp8_dtype).max
    return t.clamp(-top, top).to(fp8_dtype)


def fp8_quant(x, *, fp8_dtype, scale):
    """QUANT-FP8-TENSOR: dynamic scale amax / F (F the format's max) or the given scale."""
    _quant.validate_activation(x)
    _quant.validate_fp8_scale(fp8_dtype, scale)
    x32 = x.float()
    if scale is None:
        scale = (x32.abs().amax() / torch.finfo(fp8_dtype).max).reshape(1)
    return saturate(x32 / scale.float().reshape(()), fp8_dtype), scale.float().reshape(1)


def group_scales(groups: torch.Tensor, fp8_dtype, use_ue8m0: bool) -> torch.Tensor:
    """QUANT-FP8-GROUP, -UE8M0: max(amax, eps) / F, rounded up to a power of two BEFORE quantizing."""
    scale = groups.abs().amax(-1).clamp_min(GROUP_EPS) / torch.finfo(fp8_dtype).max
    return torch.exp2(torch.ceil(torch.log2(scale))) if use_ue8m0 else scale


def fp8_group_quant(x, *, group_size, fp8_dtype, use_ue8m0):
    group_size = _quant.validate_group_args(x, group_size, fp8_dtype, use_ue8m0)
    groups = x.float().unflatten(-1, (-1, group_size))
    scale = group_scales(groups, fp8_dtype, use_ue8m0)
    return saturate(groups / scale[..., None], fp8_dtype).flatten(-2), scale


def expand_blocks(scales: torch.Tensor, rows: int, cols: int, block_size) -> torch.Tensor:
    """QUANT-FP8-BLOCK-PARTIAL: element (r, c) takes the scale of block (r // br, c // bc)."""
    br, bc = block_size
    return scales.repeat_interleave(br, dim=0)[:rows].repeat_interleave(bc, dim=1)[:, :cols]


def fp8_block_scaled_mm(a, b, a_scales, b_scales, *, block_size, out_dtype):
    """QUANT-FP8-BLOCK-MM: dequantize both operands in float32, one float32 matmul, one cast."""
    bn, bk = _quant.validate_block_mm(a, b, a_scales, b_scales, block_size, out_dtype)
    (m, k), n = a.shape, b.shape[0]
    a_deq = a.float() * expand_blocks(a_scales, m, k, (1, bk))
    b_deq = b.float() * expand_blocks(b_scales, n, k, (bn, bk))
    return (a_deq @ b_deq.T).to(out_dtype)


def fp8_fn_to_fnuz(weight, weight_scale, input_scale):
    """QUANT-FNUZ-CONVERT: reinterpret the bits (0x80 -> 0) and double the scales; on a copy."""
    _quant.validate_fnuz_args(weight, weight_scale, input_scale)
    bits = weight.view(torch.int8).clone()
    bits[bits == -128] = 0
    doubled = None if input_scale is None else input_scale * 2.0
    return bits.view(torch.float8_e4m3fnuz), weight_scale * 2.0, doubled


# QUANT-W4A16-PACKING: the column of an AWQ word's nibble i (AutoAWQ packs columns 0, 2, 4, 6, 1, 3, 5, 7).
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def nibbles(words: torch.Tensor) -> torch.Tensor:
    """int32 [..., W] -> [..., W, 8]: nibble i of each word is (word >> 4 i) & 15."""
    return torch.stack([(words >> (4 * i)) & 0xF for i in range(8)], dim=-1)


def awq_columns(words: torch.Tensor) -> torch.Tensor:
    """AWQ words [R, N / 8] -> values [R, N]: nibble i goes to column 8 c + AWQ_PACK_ORDER[i]."""
    out = torch.empty(*words.shape[:-1], words.shape[-1], 8, dtype=torch.int32, device=words.device)
    for i, column in enumerate(AWQ_PACK_ORDER):
        out[..., column] = (words >> (4 * i)) & 0xF
    return out.flatten(-2)


def w4a16_mm(x, qweight, scales, qzeros, *, group_size, packing):
    """QUANT-W4A16-MM: dequantize in the scales' dtype ((q - zero) * scale, as vLLM's torch AWQ
    dequantization does), then x @ w in x's dtype."""
    _, n, g = validate_w4a16_args(x, qweight, scales, qzeros, group_size, packing)
    if packing == "awq":
        q, zeros = awq_columns(qweight), awq_columns(qzeros)
    else:  # GPTQ: rows packed along K, zeros along N in order; v1 stores zero - 1
        q = nibbles(qweight).transpose(-1, -2).reshape(-1, n)
        zeros = nibbles(qzeros).flatten(-2) + (1 if packing == "gptq" else 0)
    w = (q - zeros.repeat_interleave(g, dim=0)).to(scales.dtype) * scales.repeat_interleave(g, dim=0)
    return x @ w.to(x.dtype)


def w8a8_expert(x_q, x_scale, w13, w2, c13, c2):
    """QUANT-MOE-W8A8 for one expert's rows: the exact int8 sums dequantized in float32, SwiGLU in
    float32, the activation requantized per row (dequant -> activation -> quant, as
    npu_dequant_swiglu_quant fuses it), the down GEMM likewise. float32 [rows, H]."""
    h = integer_sum(x_q, w13.T).float() * x_scale * c13
    gate, up = h.chunk(2, dim=-1)
    a_q, a_scale = dynamic_int8_quant(torch.nn.functional.silu(gate) * up)
    return integer_sum(a_q, w2.T).float() * a_scale * c2


def w8a8_fused_moe(x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
    """QUANT-MOE-W8A8: x quantized once per token, each expert over its tokens (w8a8_expert), the
    slots weighted and summed in float32, rounded once to x's dtype (a [T, k, H] buffer: CPU
    index_add_ took 50-230 ms a call with two OpenMP threads on busy cores, measured)."""
    experts, _, _ = validate_w8a8_moe_args(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    x_q, x_scale = dynamic_int8_quant(x)
    c13, c2 = w13_scale.reshape(experts, -1), w2_scale.reshape(experts, -1)
    ids = topk_ids.to(x.device, torch.int64)
    slots = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        token, slot = torch.nonzero(ids == e, as_tuple=True)
        y = w8a8_expert(x_q[token], x_scale[token], w13[e], w2[e], c13[e], c2[e])
        slots[token, slot] = y * topk_weights[token, slot].float()[:, None]
    return slots.sum(1).to(x.dtype)

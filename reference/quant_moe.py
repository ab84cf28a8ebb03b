"""Oracle for the w8a8 quantized expert path (spec/quant.md, QUANT-MOE-W8A8 and its refinements).

``w8a8_fused_moe`` is MOE-FUSED's SwiGLU expert computation with int8 weights: the hidden states
quantized per token (QUANT-INT8-SCALE's oracle), each expert's gate/up GEMM summed exactly and
dequantized by the token's scale and the expert's per-channel scales, the SiLU-gated activation in
float64, that activation quantized again per (token, expert) row, the down GEMM likewise, the slots
weighted and summed. Every step is exact in float64 but the activation itself (one float64
rounding per element) and the float64 products of the dequantization.

``w8a8_moe_error_scale`` is QUANT-TOL's per-element absolute scale for this op: a conforming kernel
may requantize a slightly different activation (its intermediate rounding), so each requantized
element may land a grid step or two away from the oracle's.
"""

from __future__ import annotations

import math

import torch

from reference.activations import silu_clamped_and_mul
from reference.quant_int8 import dynamic_int8_quant, validate_activation
from reference.validation import require_tensor

__all__ = [
    "requant_steps",
    "validate_w8a8_moe_args",
    "w8a8_fused_moe",
    "w8a8_moe_error_scale",
    "w8a8_moe_reference",
]


def _require_int8_experts(t, name: str) -> torch.Tensor:
    require_tensor(t, name)
    if t.dtype != torch.int8 or t.dim() != 3 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 3-D int8 tensor [E, rows, cols], got {t.dtype} "
                         f"{tuple(t.shape)}")  # fmt: skip
    return t


def _require_channel_scale(scale, name: str, experts: int, channels: int) -> None:
    """QUANT-MOE-W8A8-SCALES: float32 [E, C] or compressed-tensors' [E, C, 1]."""
    require_tensor(scale, name)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {scale.dtype}")
    if tuple(scale.shape) not in ((experts, channels), (experts, channels, 1)):
        raise ValueError(f"{name} must have shape ({experts}, {channels}) or ({experts}, {channels}, 1), got "
                         f"{tuple(scale.shape)}")  # fmt: skip


def validate_w8a8_moe_args(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale) -> tuple[int, int, int]:
    """QUANT-ERRORS: x [T, H] float16/bfloat16; w13 [E, 2I, H] and w2 [E, H, I] int8; their scales
    float32 per expert and output channel; topk_weights floating [T, k], topk_ids integer [T, k] in
    [0, E). Returns (E, H, I)."""
    validate_activation(x)
    if x.dim() != 2 or x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"x must be a 2-D float16 or bfloat16 tensor [T, H], got {x.dtype} {tuple(x.shape)}")
    _require_int8_experts(w13, "w13")
    _require_int8_experts(w2, "w2")
    tokens, hidden = x.shape
    experts, two_inter, w13_hidden = w13.shape
    if w13_hidden != hidden or two_inter % 2:
        raise ValueError(f"w13 must have shape [E, 2I, {hidden}], got {tuple(w13.shape)}")
    inter = two_inter // 2
    if tuple(w2.shape) != (experts, hidden, inter):
        raise ValueError(f"w2 must have shape [{experts}, {hidden}, {inter}], got {tuple(w2.shape)}")
    _require_channel_scale(w13_scale, "w13_scale", experts, two_inter)
    _require_channel_scale(w2_scale, "w2_scale", experts, hidden)
    require_tensor(topk_weights, "topk_weights")
    if not topk_weights.is_floating_point() or topk_weights.dim() != 2 or topk_weights.shape[0] != tokens:
        raise ValueError(f"topk_weights must be a floating tensor [{tokens}, k], got {topk_weights.dtype} "
                         f"{tuple(topk_weights.shape)}")  # fmt: skip
    require_tensor(topk_ids, "topk_ids")
    if topk_ids.is_floating_point() or topk_ids.shape != topk_weights.shape:
        raise ValueError(f"topk_ids must be an integer tensor of topk_weights' shape, got {topk_ids.dtype} "
                         f"{tuple(topk_ids.shape)}")  # fmt: skip
    if int(topk_ids.min()) < 0 or int(topk_ids.max()) >= experts:
        low, high = int(topk_ids.min()), int(topk_ids.max())
        raise ValueError(f"topk_ids must be in [0, {experts}), got {low}..{high}")
    return experts, hidden, inter


def _slots(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale):
    """Per (token, slot): the float64 expert output y [T, k, H], the requantized activation's
    scale s2 [T, k] and the down projection's dequantized magnitude sum_i |w2_deq[e][n, i]| [T, k, H]."""
    experts, hidden, inter = validate_w8a8_moe_args(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    q1, s1 = dynamic_int8_quant(x)  # QUANT-MOE-W8A8-INPUT: per token
    tokens, k = topk_ids.shape
    y = torch.zeros(tokens, k, hidden, dtype=torch.float64)
    s2 = torch.zeros(tokens, k, dtype=torch.float64)
    down_mag = torch.zeros(tokens, k, hidden, dtype=torch.float64)
    ids = topk_ids.detach().cpu().long()
    c13 = w13_scale.detach().cpu().double().reshape(experts, -1)
    c2 = w2_scale.detach().cpu().double().reshape(experts, -1)
    q1, s1 = q1.cpu(), s1.cpu()
    for e in torch.unique(ids).tolist():
        t, j = torch.nonzero(ids == e, as_tuple=True)
        h = (q1[t] @ w13[e].detach().cpu().double().T) * s1[t] * c13[e]  # QUANT-MOE-W8A8-GATE-UP
        act = silu_clamped_and_mul(h, limit=None)  # MOE-FUSED's "silu"
        q2, scale2 = dynamic_int8_quant(act)  # QUANT-MOE-W8A8-REQUANT: per (token, expert) row
        w2_deq = w2[e].detach().cpu().double() * c2[e][:, None]
        y[t, j] = (q2 @ w2[e].detach().cpu().double().T) * scale2 * c2[e]
        s2[t, j] = scale2[:, 0]
        down_mag[t, j] = w2_deq.abs().sum(-1).expand(t.numel(), hidden)
    return y, s2, down_mag


def w8a8_fused_moe(x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale) -> torch.Tensor:
    """QUANT-MOE-W8A8: out[t] = sum_j w[t, j] * E_{id[t, j]}(x[t]) in float64 [T, H] (on the CPU),
    E_e(v) = deq(quant(silu(g) * u)) @ deq(w2[e]).T with [g | u] = deq(quant(v)) @ deq(w13[e]).T,
    every quant QUANT-INT8-SCALE's per-row int8 and every deq the per-channel weight scale of e."""
    y, _, _ = _slots(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    return (y * topk_weights.detach().cpu().double()[..., None]).sum(1)


def requant_steps(dtype: torch.dtype) -> int:
    """QUANT-TOL: the grid steps a conforming kernel's requantized activation element may be from the
    oracle's: half a step each side of the rounding, plus the activation's own error relative to its
    row's amax, 4 u (gate and up rounded to x's dtype, the product once; vLLM's bfloat16 caches)
    times 127 steps: ceil(1 + 508 u): 2 for float16, 3 for bfloat16."""
    return math.ceil(1 + 508 * torch.finfo(dtype).eps / 2)


def w8a8_moe_error_scale(x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale) -> torch.Tensor:
    """QUANT-TOL's atol scale for QUANT-MOE-W8A8, [T, H] (the `quant-moe` row's atol is 1):
    sum_j |w_j| (steps s2_j sum_i |w2_deq[n, i]| + (k + 1) u |y_j|), ``steps`` = requant_steps:
    the requantized elements' grid steps through the down projection, then the rounding of k slot
    outputs and their sum in x's dtype (u its unit roundoff)."""
    return w8a8_moe_reference(x, w13, w2, topk_weights, topk_ids, w13_scale=w13_scale, w2_scale=w2_scale)[1]


def w8a8_moe_reference(x, w13, w2, topk_weights, topk_ids, *, w13_scale, w2_scale):
    """(w8a8_fused_moe, w8a8_moe_error_scale) from one evaluation of the experts."""
    y, s2, down_mag = _slots(x, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale)
    u = torch.finfo(x.dtype).eps / 2
    k = topk_ids.shape[1]
    w = topk_weights.detach().cpu().double()[..., None]
    out = (y * w).sum(1)
    return out, (w.abs() * (requant_steps(x.dtype) * s2[..., None] * down_mag + (k + 1) * u * y.abs())).sum(1)

"""Emulated ``torch_npu.npu_moe_gating_top_k`` and ``npu_moe_gating_top_k_softmax`` (spec/ascend.md,
CANN-MOE-GATING-TOPK, CANN-MOE-GATING-TOPK-SOFTMAX).

- ``npu_moe_gating_top_k(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0,
  renorm=0, norm_type=1, out_flag=False, routed_scaling_factor=1.0, eps=1e-20) -> (y, expert_idx,
  out)``: norm_type 0 softmax, 1 sigmoid (the DEFAULT); selection on scores + bias (bias of x's
  dtype, as documented); groups by max (mode 0) or top-2 sum (mode 1, inferred); y the unbiased
  scores, normalised as ``y / (sum(y) + eps)`` when norm_type is 1 or renorm is 1 (inferred),
  times routed_scaling_factor INSIDE the kernel.
- ``npu_moe_gating_top_k_softmax(x, finished=None, k=1) -> (y, expert_idx, row_idx)``: the top-k
  softmax probabilities, not renormalised; finished rows get expert id E; row_idx k-major.

Scores in float32, y in x's dtype, ids and row_idx int32 (emulator choices). Violations raise
RuntimeError, as the real ops do.
"""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_EXPERTS = 2048
MAX_K = 32
MAX_K_SOFTMAX = 1024


def _check_x(op: str, x) -> tuple[int, int]:
    if not isinstance(x, torch.Tensor) or x.dtype not in SUPPORTED_DTYPES or x.dim() != 2:
        raise RuntimeError(
            f"{op}: x must be a 2-D float32/float16/bfloat16 tensor, got {getattr(x, 'dtype', x)}"
        )
    return x.shape


def npu_moe_gating_top_k(
    x,
    k,
    *,
    bias=None,
    k_group=1,
    group_count=1,
    group_select_mode=0,
    renorm=0,
    norm_type=1,
    out_flag=False,
    routed_scaling_factor=1.0,
    eps=1e-20,
):
    op = "npu_moe_gating_top_k"
    tokens, experts = _check_x(op, x)
    if experts > MAX_EXPERTS or not 1 <= k <= MAX_K:
        raise RuntimeError(f"{op}: E <= {MAX_EXPERTS} and 1 <= k <= {MAX_K} required, got E={experts}, k={k}")
    if group_count < 1 or experts % group_count or not 1 <= k_group <= group_count:
        raise RuntimeError(f"{op}: E % group_count == 0 and 1 <= k_group <= group_count required")
    if k > k_group * (experts // group_count):
        raise RuntimeError(f"{op}: k={k} exceeds the experts of the k_group kept groups")
    if norm_type not in (0, 1) or renorm not in (0, 1) or group_select_mode not in (0, 1):
        raise RuntimeError(f"{op}: norm_type, renorm and group_select_mode must be 0 or 1")
    if bias is not None and (bias.dtype != x.dtype or tuple(bias.shape) != (experts,)):
        raise RuntimeError(
            f"{op}: bias must have x's dtype {x.dtype} and shape ({experts},), got {bias.dtype}"
        )
    logits = x.float()
    scores = torch.softmax(logits, dim=-1) if norm_type == 0 else torch.sigmoid(logits)
    selection = scores if bias is None else scores + bias.float()
    if group_count > 1:
        grouped = selection.view(tokens, group_count, experts // group_count)
        score = grouped.amax(-1) if group_select_mode == 0 else grouped.topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(score, dtype=torch.bool).scatter_(
            1, score.topk(k_group, dim=-1).indices, True
        )
        allowed = keep[:, :, None].expand_as(grouped).reshape(tokens, experts)
        selection = selection.masked_fill(~allowed, float("-inf"))
    idx = selection.topk(k, dim=-1).indices
    y = scores.gather(1, idx)
    if norm_type == 1 or renorm == 1:
        y = y / (y.sum(dim=-1, keepdim=True) + eps)
    y = y * routed_scaling_factor
    out = scores.to(x.dtype) if out_flag else x.new_empty(0)
    return y.to(x.dtype), idx.to(torch.int32), out


def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    op = "npu_moe_gating_top_k_softmax"
    tokens, experts = _check_x(op, x)
    if not 1 <= k <= min(MAX_K_SOFTMAX, experts):
        raise RuntimeError(f"{op}: 1 <= k <= min({MAX_K_SOFTMAX}, E) required, got k={k}")
    y, idx = torch.softmax(x.float(), dim=-1).topk(k, dim=-1)
    if finished is not None:
        if finished.dtype != torch.bool or tuple(finished.shape) != (tokens,):
            raise RuntimeError(f"{op}: finished must be a bool tensor of shape ({tokens},)")
        idx = torch.where(finished[:, None], torch.full_like(idx, experts), idx)
    row_idx = torch.arange(tokens * k, dtype=torch.int32, device=x.device).reshape(k, tokens).t()
    return y.to(x.dtype), idx.to(torch.int32), row_idx

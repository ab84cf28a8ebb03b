"""The ``native`` MoE ops (spec/moe.md): eager PyTorch, float32 routing, the expert MLP in x's dtype.

Validation goes through the oracles' checks (same exceptions). ``backends.native`` binds these
functions as its MoE op methods; the Ascend adapter and the mutants reuse the pieces.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference import moe as _moe
from reference.moe_config import moe_router_config

__all__ = ["append_shared_experts", "fused_moe", "moe_router_config", "select_experts"]


def scores32(router_logits: torch.Tensor, scoring: str) -> torch.Tensor:
    """MOE-SELECT step 1 in float32 (MOE-PADDED: a padded row is read as zeros, so it stays finite)."""
    logits = router_logits.float()
    padded = ~torch.isfinite(logits).all(dim=-1, keepdim=True)
    logits = torch.where(padded, torch.zeros_like(logits), logits)
    if scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    if scoring == "sigmoid":
        return torch.sigmoid(logits)
    return logits


def group_mask(selection: torch.Tensor, num_groups: int, topk_group: int, group_score: str) -> torch.Tensor:
    """MOE-GROUPS: True for the experts of the topk_group best groups."""
    tokens, experts = selection.shape
    grouped = selection.view(tokens, num_groups, experts // num_groups)
    score = grouped.amax(-1) if group_score == "max" else grouped.topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(score, dtype=torch.bool).scatter_(1, score.topk(topk_group, dim=-1).indices, True)
    return keep[:, :, None].expand_as(grouped).reshape(tokens, experts)


def weights_of(scores, ids, scoring, renormalize, routed_scaling_factor):
    """MOE-SELECT steps 5-7: the unbiased scores of ids, renormalised when asked, times the factor once."""
    picked = scores.gather(1, ids)
    if scoring == "topk_softmax":
        picked = torch.softmax(picked, dim=-1)
    elif renormalize:
        picked = picked / picked.sum(dim=-1, keepdim=True)
    return picked * routed_scaling_factor


def select_experts(
    router_logits,
    *,
    top_k,
    scoring,
    renormalize,
    correction_bias,
    num_groups,
    topk_group,
    group_score,
    routed_scaling_factor,
):
    _moe.validate_routing_args(
        router_logits,
        top_k,
        scoring,
        renormalize,
        correction_bias,
        num_groups,
        topk_group,
        group_score,
        routed_scaling_factor,
    )
    scores = scores32(router_logits, scoring)
    selection = scores
    if correction_bias is not None:  # MOE-BIAS: in its own precision (float32 or wider)
        selection = scores + correction_bias.to(torch.promote_types(correction_bias.dtype, torch.float32))
    if num_groups > 1:
        allowed = group_mask(selection, num_groups, topk_group, group_score)
        selection = selection.masked_fill(~allowed, float("-inf"))
    ids = selection.topk(top_k, dim=-1).indices
    return weights_of(scores, ids, scoring, renormalize, routed_scaling_factor).float(), ids


def append_shared_experts(topk_weights, topk_ids, *, shared_ids, rsf_on_output, routed_scaling_factor):
    ids = _moe.validate_shared_args(topk_weights, topk_ids, shared_ids, rsf_on_output, routed_scaling_factor)
    tokens = topk_weights.shape[0]
    weight = 1.0 / routed_scaling_factor if rsf_on_output else 1.0  # MOE-SHARED
    shared_w = torch.full((tokens, len(ids)), weight, dtype=topk_weights.dtype, device=topk_weights.device)
    shared_i = torch.tensor(ids, dtype=topk_ids.dtype, device=topk_ids.device).expand(tokens, -1)
    return torch.cat([topk_weights, shared_w], dim=1), torch.cat([topk_ids, shared_i], dim=1)


def activation32(h: torch.Tensor, activation: str, limit: float | None) -> torch.Tensor:
    """MOE-FUSED, MOE-CLAMP: the gated activation in float32 (ACT-SILU-CLAMPED for "silu",
    ACT-SWIGLU-STEP for "swiglustep", ACT-SWIGLU-OAI)."""
    h = h.float()
    if activation in ("silu", "swiglustep"):
        gate, up = h.chunk(2, dim=-1)
        if limit is None:
            return F.silu(gate) * up
        if activation == "silu":  # vLLM's "silu" with a limit: the gate clamped before the SiLU
            return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)
        return F.silu(gate).clamp(max=limit) * up.clamp(-limit, limit)
    gate, up = h[..., ::2], h[..., 1::2]
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(_moe.OAI_ALPHA * gate) * (up + 1)


def fused_moe(
    x, w13, w2, topk_weights, topk_ids, *, activation, limit, apply_router_weight_on_input, output_scale
):
    """MOE-FUSED: per expert, its tokens through w13, the activation and w2 in x's dtype (float32
    activation), weighted and summed in float32, rounded once to x's dtype."""
    limit = _moe.validate_fused_args(
        x, w13, w2, topk_weights, topk_ids, activation, limit, apply_router_weight_on_input, output_scale
    )
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    ids = topk_ids.to(x.device, torch.int64)
    weights = topk_weights.to(x.device, torch.float32)
    for expert in torch.unique(ids).tolist():
        token, slot = torch.nonzero(ids == expert, as_tuple=True)
        w = weights[token, slot][:, None]
        v = (x[token].float() * w).to(x.dtype) if apply_router_weight_on_input else x[token]
        h = v @ w13[expert].T
        y = (activation32(h, activation, limit).to(x.dtype) @ w2[expert].T).float()
        # accumulate: a token twice in `token` adds twice (index_add_ of float32 took 50-200 ms a call on CPU
        # with two OpenMP threads on busy cores, index_put_ microseconds, measured).
        out.index_put_((token,), y if apply_router_weight_on_input else y * w, accumulate=True)
    return (out * output_scale).to(x.dtype)

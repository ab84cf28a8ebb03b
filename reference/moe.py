"""Oracles for the MoE contracts (clauses MOE-*): routing and the expert computation.

``select_experts`` computes every score in float64 from the logits the backend received and
returns float64 weights with int64 ids; ``routing_weights`` gives the weights of ANY selection
(a backend's, in its own slot order), ``selection_scores`` and ``allowed_experts`` what the
comparison needs to judge a selection (MOE-TIES). ``fused_moe`` is the routed MLP in float64,
one expert at a time over blocks of its tokens, with the activations family's gated oracles
inside (MOE-FUSED, MOE-CLAMP). The config reader is ``reference.moe_config``.
"""

from __future__ import annotations

import torch

from reference.activations import (
    require_bool,
    silu_clamped_and_mul,
    swiglu_oai_and_mul,
    swiglu_step_and_mul,
)
from reference.moe_config import moe_router_config
from reference.validation import (
    require_choice,
    require_float_tensor,
    require_int,
    require_positive_finite,
    require_positive_finite_or_none,
    require_tensor,
)

__all__ = [
    "ACTIVATIONS",
    "GROUP_SCORES",
    "OAI_ALPHA",
    "SCORINGS",
    "allowed_experts",
    "append_shared_experts",
    "fused_moe",
    "moe_router_config",
    "padded_rows",
    "routing_weights",
    "select_experts",
    "selection_scores",
    "validate_fused_args",
    "validate_routing_args",
    "validate_shared_args",
]

# MOE-SCORING: softmax or sigmoid, then top-k (DeepSeek, Qwen-MoE); "topk_softmax": top-k on the
# logits, then softmax over the k chosen (gpt-oss; Mixtral's softmax-topk-renormalise equals it).
SCORINGS = ("softmax", "sigmoid", "topk_softmax")
# MOE-GROUPS: a group's score is its best expert's ("max", DeepSeek-V2) or the sum of its two best
# ("top2_sum", DeepSeek-V3).
GROUP_SCORES = ("max", "top2_sum")
# MOE-FUSED, MOE-CLAMP: vLLM's fused-MoE names. "silu": gate | up halves, with a limit the gate
# clamped BEFORE the SiLU (ACT-SILU-CLAMPED); "swiglustep": the SiLU then its clamp (Step-3.5,
# ACT-SWIGLU-STEP); "swiglu_oai": gpt-oss's (interleaved gate/up, alpha 1.702).
ACTIVATIONS = ("silu", "swiglustep", "swiglu_oai")
OAI_ALPHA = 1.702
# Tokens per block in fused_moe: bounds the float64 intermediates at real shapes.
BLOCK_TOKENS = 2048


def validate_routing_args(
    router_logits, top_k, scoring, renormalize, correction_bias, num_groups, topk_group, group_score,
    routed_scaling_factor,
) -> tuple[int, int]:  # fmt: skip
    """MOE-ERRORS: check select_experts' arguments; returns (tokens, experts)."""
    require_float_tensor(router_logits, "router_logits", 2)
    tokens, experts = router_logits.shape
    top_k = require_int(top_k, "top_k", minimum=1)
    if top_k > experts:
        raise ValueError(f"top_k must be <= the number of experts {experts}, got {top_k}")
    require_choice(scoring, "scoring", SCORINGS)
    require_bool(renormalize, "renormalize")
    if correction_bias is not None:
        require_tensor(correction_bias, "correction_bias")
        if not correction_bias.is_floating_point() or tuple(correction_bias.shape) != (experts,):
            raise ValueError(
                f"correction_bias must be a floating tensor of shape ({experts},), got "
                f"{correction_bias.dtype} {tuple(correction_bias.shape)}"
            )
    groups = require_int(num_groups, "num_groups", minimum=1)
    if experts % groups:
        raise ValueError(f"num_groups must divide the number of experts {experts}, got {groups}")
    kept = require_int(topk_group, "topk_group", minimum=1)
    if kept > groups:
        raise ValueError(f"topk_group must be <= num_groups {groups}, got {kept}")
    if top_k > kept * (experts // groups):
        raise ValueError(f"top_k must be <= topk_group * experts per group, got {top_k}")
    require_choice(group_score, "group_score", GROUP_SCORES)
    if group_score == "top2_sum" and groups > 1 and experts // groups < 2:
        raise ValueError("group_score 'top2_sum' needs at least 2 experts per group")
    require_positive_finite(routed_scaling_factor, "routed_scaling_factor")
    if scoring == "topk_softmax" and (correction_bias is not None or groups > 1):
        raise ValueError("scoring 'topk_softmax' takes no correction_bias and num_groups 1")
    return tokens, experts


def padded_rows(router_logits: torch.Tensor) -> torch.Tensor:
    """MOE-PADDED: the rows with a NaN or infinite logit (padding); bool [tokens]."""
    return ~torch.isfinite(router_logits.detach()).all(dim=-1)


def _finite64(router_logits: torch.Tensor) -> torch.Tensor:
    """The logits in float64 with the padded rows' non-finite entries read as 0 (MOE-PADDED)."""
    logits = router_logits.detach().to(torch.float64)
    return torch.where(torch.isfinite(logits), logits, torch.zeros_like(logits))


def selection_scores(router_logits, *, scoring, correction_bias):
    """MOE-SELECT, MOE-BIAS: (scores, selection) in float64: the scores the weights come from,
    and the scores the experts are chosen by (scores + correction_bias, the bias in its own
    precision; the logits themselves for topk_softmax)."""
    logits = _finite64(router_logits)
    if scoring == "softmax":
        scores = torch.softmax(logits, dim=-1)
    elif scoring == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        scores = logits
    if correction_bias is None:
        return scores, scores
    return scores, scores + correction_bias.detach().to(logits.device, torch.float64)


def allowed_experts(selection: torch.Tensor, *, num_groups, topk_group, group_score) -> torch.Tensor:
    """MOE-GROUPS: bool [tokens, experts], True for the experts of the topk_group best groups."""
    tokens, experts = selection.shape
    if num_groups == 1:
        return torch.ones_like(selection, dtype=torch.bool)
    grouped = selection.view(tokens, num_groups, experts // num_groups)
    if group_score == "max":
        score = grouped.amax(dim=-1)
    else:
        score = grouped.topk(2, dim=-1).values.sum(dim=-1)
    chosen = score.topk(topk_group, dim=-1).indices
    keep = torch.zeros_like(score, dtype=torch.bool).scatter_(1, chosen, True)
    return keep[:, :, None].expand_as(grouped).reshape(tokens, experts)


def routing_weights(router_logits, ids, *, scoring, renormalize, routed_scaling_factor) -> torch.Tensor:
    """MOE-SELECT, MOE-RENORM, MOE-RSF-ONCE: float64 [tokens, k], the weight of each chosen id in the
    slot order of ``ids``: the UNBIASED score, renormalised over the k when asked, times the
    scaling factor once (topk_softmax: the softmax over the chosen logits)."""
    scores, _ = selection_scores(router_logits, scoring=scoring, correction_bias=None)
    picked = scores.gather(1, ids.detach().to(scores.device, torch.int64))
    if scoring == "topk_softmax":
        weights = torch.softmax(picked, dim=-1)
    elif renormalize:
        weights = picked / picked.sum(dim=-1, keepdim=True)
    else:
        weights = picked
    return weights * float(routed_scaling_factor)


def select_experts(
    router_logits: torch.Tensor,
    *,
    top_k: int,
    scoring: str,
    renormalize: bool,
    correction_bias: torch.Tensor | None,
    num_groups: int,
    topk_group: int,
    group_score: str,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MOE-SELECT: (weights float64 [tokens, top_k], ids int64 [tokens, top_k]).

    Scores from the logits (softmax or sigmoid); selection = scores + correction_bias; the
    topk_group best groups kept (the others excluded as -inf); the top_k ids on the selection
    among them; the weights from the unbiased scores, renormalised if asked, times
    routed_scaling_factor. Ids are in descending selection order (any order conforms, MOE-TIES).
    """
    validate_routing_args(router_logits, top_k, scoring, renormalize, correction_bias, num_groups,
                          topk_group, group_score, routed_scaling_factor)  # fmt: skip
    _, selection = selection_scores(router_logits, scoring=scoring, correction_bias=correction_bias)
    allowed = allowed_experts(
        selection, num_groups=num_groups, topk_group=topk_group, group_score=group_score
    )
    masked = selection.masked_fill(~allowed, float("-inf"))
    ids = masked.topk(top_k, dim=-1).indices
    weights = routing_weights(router_logits, ids, scoring=scoring, renormalize=renormalize,
                              routed_scaling_factor=routed_scaling_factor)  # fmt: skip
    return weights, ids


def validate_shared_args(topk_weights, topk_ids, shared_ids, rsf_on_output, routed_scaling_factor):
    """MOE-ERRORS: check append_shared_experts' arguments; returns the shared ids as a tuple."""
    require_float_tensor(topk_weights, "topk_weights", 2)
    require_tensor(topk_ids, "topk_ids")
    if topk_ids.is_floating_point() or topk_ids.shape != topk_weights.shape:
        raise ValueError(
            f"topk_ids must be an integer tensor of topk_weights' shape {tuple(topk_weights.shape)}, "
            f"got {topk_ids.dtype} {tuple(topk_ids.shape)}"
        )
    if not isinstance(shared_ids, tuple | list) or not shared_ids:
        raise ValueError(f"shared_ids must be a non-empty tuple of expert ids, got {shared_ids!r}")
    ids = tuple(require_int(i, "shared_ids", minimum=0) for i in shared_ids)
    require_bool(rsf_on_output, "rsf_on_output")
    require_positive_finite(routed_scaling_factor, "routed_scaling_factor")
    return ids


def append_shared_experts(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    shared_ids: tuple[int, ...],
    rsf_on_output: bool,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MOE-SHARED: the routed slots kept as they are and one always-on slot per shared expert
    appended after them, weight 1, or 1 / routed_scaling_factor when the factor multiplies the
    MoE output (fused_moe's output_scale) rather than the routed weights."""
    ids = validate_shared_args(topk_weights, topk_ids, shared_ids, rsf_on_output, routed_scaling_factor)
    tokens = topk_weights.shape[0]
    weight = 1.0 / routed_scaling_factor if rsf_on_output else 1.0
    shared_w = torch.full((tokens, len(ids)), weight, dtype=torch.float64, device=topk_weights.device)
    shared_i = torch.tensor(ids, dtype=torch.int64, device=topk_ids.device).expand(tokens, -1)
    return (
        torch.cat([topk_weights.detach().to(torch.float64), shared_w], dim=1),
        torch.cat([topk_ids.to(torch.int64), shared_i], dim=1),
    )


def validate_fused_args(x, w13, w2, topk_weights, topk_ids, activation, limit, apply_router_weight_on_input,
                        output_scale):  # fmt: skip
    """MOE-ERRORS: check fused_moe's arguments; returns the limit (None or a float)."""
    require_float_tensor(x, "x", 2)
    require_float_tensor(w13, "w13", 3)
    require_float_tensor(w2, "w2", 3)
    tokens, hidden = x.shape
    experts, two_inter, w13_hidden = w13.shape
    if w13_hidden != hidden or two_inter % 2:
        raise ValueError(f"w13 must have shape [E, 2I, {hidden}], got {tuple(w13.shape)}")
    if tuple(w2.shape) != (experts, hidden, two_inter // 2):
        raise ValueError(f"w2 must have shape [{experts}, {hidden}, {two_inter // 2}], got {tuple(w2.shape)}")
    require_float_tensor(topk_weights, "topk_weights", 2)
    if topk_weights.shape[0] != tokens:
        raise ValueError(f"topk_weights must have {tokens} rows (x's tokens), got {topk_weights.shape[0]}")
    require_tensor(topk_ids, "topk_ids")
    if topk_ids.is_floating_point() or topk_ids.shape != topk_weights.shape:
        raise ValueError(f"topk_ids must be an integer tensor of topk_weights' shape, got {topk_ids.dtype} "
                         f"{tuple(topk_ids.shape)}")  # fmt: skip
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= experts):
        raise ValueError(
            f"topk_ids must be in [0, {experts}), got values {int(topk_ids.min())}..{int(topk_ids.max())}"
        )
    require_choice(activation, "activation", ACTIVATIONS)
    limit = require_positive_finite_or_none(limit, "limit")
    require_bool(apply_router_weight_on_input, "apply_router_weight_on_input")
    require_positive_finite(output_scale, "output_scale")
    return limit


def expert_activation(h: torch.Tensor, activation: str, limit: float | None) -> torch.Tensor:
    """MOE-FUSED, MOE-CLAMP: the gated activation of ``h = x @ w13[e].T`` (float64 oracles of
    ACT-SILU-CLAMPED and ACT-SWIGLU-STEP with the layer's limit, ACT-SWIGLU-OAI interleaved)."""
    if activation == "silu":
        return silu_clamped_and_mul(h, limit=limit)
    if activation == "swiglustep":
        return swiglu_step_and_mul(h, limit=limit)
    return swiglu_oai_and_mul(h, alpha=OAI_ALPHA, limit=limit, interleaved=True)


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    activation: str,
    limit: float | None,
    apply_router_weight_on_input: bool,
    output_scale: float,
) -> torch.Tensor:
    """MOE-FUSED: output_scale * sum_j w_j * E_{id_j}(x) per token, float64 [tokens, hidden], with
    E_e(v) = act(v @ w13[e].T) @ w2[e].T; apply_router_weight_on_input: E_{id_j}(w_j * x) instead."""
    limit = validate_fused_args(x, w13, w2, topk_weights, topk_ids, activation, limit,
                                apply_router_weight_on_input, output_scale)  # fmt: skip
    x64 = x.detach().to(torch.float64)
    weights = topk_weights.detach().to(x.device, torch.float64)
    ids = topk_ids.detach().to(x.device, torch.int64)
    out = torch.zeros_like(x64)
    for expert in torch.unique(ids).tolist():
        token, slot = torch.nonzero(ids == expert, as_tuple=True)
        up = w13[expert].detach().to(torch.float64)
        down = w2[expert].detach().to(torch.float64)
        for start in range(0, token.numel(), BLOCK_TOKENS):
            t, j = token[start : start + BLOCK_TOKENS], slot[start : start + BLOCK_TOKENS]
            w = weights[t, j][:, None]
            v = x64[t] * w if apply_router_weight_on_input else x64[t]
            y = expert_activation(v @ up.T, activation, limit) @ down.T
            # out[t] += rows (a token twice in t adds twice); index_add_ of float64 took 50-200 ms a call
            # on CPU with two OpenMP threads on busy cores, index_put_ microseconds (measured).
            out.index_put_((t,), y if apply_router_weight_on_input else y * w, accumulate=True)
    return out * float(output_scale)

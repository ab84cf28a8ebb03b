"""MoE backends written from the field's code, loaded by tests/test_moe_conventions.py through
``--backend-module`` as a user's backend would be: routers and expert activations transcribed from
vLLM 0.33.0 and transformers 5.24.0 (each function cites its source; the glue that maps the suite's
arguments onto them says so), and small wrong variants of them, the field's known bugs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# The properties tests/test_moe_conventions.py judges these backends on, and their clauses: every one of
# these files but test_should_reject_bad_input (MOE-ERRORS, bad input these transcriptions do not check).
# The shared run (tests/convention_runs.py, --focus-declared-clauses) gives them those properties only.
PROPERTIES = ["conformance/test_moe.py", "conformance/test_moe_forms.py"]
CLAUSES = frozenset({
    "MOE-BIAS", "MOE-CLAMP", "MOE-COMBOS", "MOE-CONFIG", "MOE-FUSED", "MOE-GROUPS", "MOE-PADDED",
    "MOE-PADDED-FINITE", "MOE-PERMUTE", "MOE-RENORM", "MOE-RSF-ONCE", "MOE-SCORING", "MOE-SELECT",
    "MOE-SHARED", "MOE-TIES", "MOE-VIEWS",
})  # fmt: skip


def vllm_cpu_grouped_topk(
    gating_output,
    topk,
    renormalize,
    num_expert_group,
    topk_group,
    scoring_func,
    routed_scaling_factor,
    e_score_correction_bias,
    *,
    fill=float("-inf"),
    bias_dtype=None,
):
    """vLLM 0.33.0 vllm/model_executor/layers/fused_moe/router/cpu_router.py, _grouped_topk: float32
    scores, the group score tied to the bias (top-2 sum with one, max without), excluded groups -inf.
    ``fill`` and ``bias_dtype`` are the wrong variants' knobs (the field's bugs), not vLLM's."""
    dtype = gating_output.dtype
    gating_output = gating_output.float()
    scores = torch.softmax(gating_output, dim=-1) if scoring_func == "softmax" else gating_output.sigmoid()
    num_token = scores.shape[0]
    if e_score_correction_bias is not None:
        if bias_dtype is not None:  # WRONG variant: the bias rounded first (sglang#37133's class)
            e_score_correction_bias = e_score_correction_bias.to(dtype)
        original_scores = scores
        scores = scores + e_score_correction_bias.unsqueeze(0)
        group_scores = scores.view(num_token, num_expert_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
    else:
        group_scores = scores.view(num_token, num_expert_group, -1).max(dim=-1).values
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = (
        group_mask.unsqueeze(-1)
        .expand(num_token, num_expert_group, scores.shape[-1] // num_expert_group)
        .reshape(num_token, -1)
    )
    tmp_scores = scores.masked_fill(~score_mask.bool(), fill)
    if e_score_correction_bias is not None:
        topk_ids = torch.topk(tmp_scores, k=topk, dim=-1, sorted=False)[1]
        topk_weights = original_scores.gather(1, topk_ids)
    else:
        topk_weights, topk_ids = torch.topk(tmp_scores, k=topk, dim=-1, sorted=False)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        topk_weights = topk_weights * routed_scaling_factor
    return topk_weights, topk_ids.to(torch.int32)


def vllm_grouped_topk(
    gating_output, topk, renormalize, num_expert_group, topk_group, scoring_func, routed_scaling_factor,
    e_score_correction_bias, *, score_dtype=None,
):  # fmt: skip
    """vLLM 0.33.0 vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py, grouped_topk, its
    torch path (taken where the fused CUDA kernel is not: off CUDA/XPU, without a bias, more than 32
    groups or top-k), run eagerly: the scores in the logits' dtype, the float32 bias added to them (the
    selection promoted to float32), the group score tied to the bias, the weights the unbiased scores
    of the logits' dtype, renormalised and scaled there, returned float32. ``score_dtype`` is the wrong
    variant's knob, not vLLM's."""
    if scoring_func == "softmax":
        scores = torch.softmax(gating_output, dim=-1)
    else:
        scores = gating_output.sigmoid()
    if score_dtype is not None:  # WRONG variant: the scores rounded to bfloat16 whatever the logits' dtype
        scores = scores.to(score_dtype)
    num_token = scores.size(0)
    if e_score_correction_bias is not None:
        original_scores = scores
        scores = scores + e_score_correction_bias.unsqueeze(0)
        group_scores = scores.view(num_token, num_expert_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
    else:
        group_scores = scores.view(num_token, num_expert_group, -1).max(dim=-1).values
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = (
        group_mask.unsqueeze(-1)
        .expand(num_token, num_expert_group, scores.size(-1) // num_expert_group)
        .reshape(num_token, -1)
    )
    tmp_scores = scores.masked_fill(~score_mask.bool(), float("-inf"))
    if e_score_correction_bias is not None:
        topk_ids = torch.topk(tmp_scores, k=topk, dim=-1, sorted=False)[1]
        topk_weights = original_scores.gather(1, topk_ids)
    else:
        topk_weights, topk_ids = torch.topk(tmp_scores, k=topk, dim=-1, sorted=False)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        topk_weights = topk_weights * routed_scaling_factor
    return topk_weights.to(torch.float32), topk_ids.to(torch.int32)


def vllm_cpu_softmax_topk(router_logits, top_k, renormalize):
    """vLLM 0.33.0 router/cpu_router.py, _softmax_topk: in the logits' dtype, returned as float32;
    without renormalisation exp(topk logits - logsumexp), op by op."""
    topk_logit_vals, topk_idx = torch.topk(router_logits, k=top_k, dim=-1, sorted=False)
    if renormalize:
        topk_vals = torch.softmax(topk_logit_vals, dim=-1)
    else:
        log_z = torch.logsumexp(router_logits, dim=-1, keepdim=True)
        topk_vals = (topk_logit_vals - log_z).exp()
    return topk_vals.to(torch.float32), topk_idx.to(torch.int32)


def vllm_moe_activation(h, activation, limit, *, drop_clamp=False):
    """vLLM 0.33.0 vllm/model_executor/layers/fused_moe/activation.py, apply_moe_activation, computed in
    float32 as its CUDA kernels do, rounded to h's dtype: SILU with clamp_limit is
    silu_and_mul_with_clamp (gate clamped to max=limit, up to [-limit, limit], then
    gate * sigmoid(gate) * up), SWIGLUSTEP is _swiglustep_and_mul_kernel (layers/activation.py:
    min(sigmoid(gate) * gate, limit) * clamp(up)), SWIGLUOAI is SwigluOAIAndMul.forward_native
    (interleaved, alpha 1.702). Glue: "swiglustep" without a limit is SILU, as step3p5.py picks
    "silu" for a layer without one; ``drop_clamp`` is the wrong variant's knob."""
    x = h.float()
    if drop_clamp:  # WRONG variant: the layer's limit never reaches the MoE runner
        limit = None if activation != "swiglu_oai" else 1e9
    if activation == "swiglu_oai":
        gate, up = x[..., ::2], x[..., 1::2]
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        return ((up + 1) * (gate * torch.sigmoid(gate * 1.702))).to(h.dtype)
    d = x.shape[-1] // 2
    gate, up = x[..., :d], x[..., d:]
    if limit is None:
        return (F.silu(gate) * up).to(h.dtype)
    if activation == "silu":
        gate = torch.clamp(gate, max=limit)
        up = torch.clamp(up, min=-limit, max=limit)
        return (gate * torch.sigmoid(gate) * up).to(h.dtype)
    gate_silu = torch.sigmoid(gate) * gate
    return (gate_silu.clamp(max=limit) * up.clamp(-limit, limit)).to(h.dtype)


class VllmCpuMoe:
    """select_experts through vLLM's CPU router (CPURouter._compute_routing): _softmax_topk for softmax
    without a bias or groups, _grouped_topk otherwise (glue: one group when the model has none; the
    factor times _softmax_topk's weights; topk_softmax as _softmax_topk renormalised, the softmax over
    the k), fused_moe as a per-expert loop (glue) around vLLM's MoE activation."""

    name = "vllm-cpu-moe"
    clauses = CLAUSES
    fill = float("-inf")
    bias_dtype = None
    drop_clamp = False
    extra_factor = False

    def unavailable(self, device):
        return None

    def select_experts(
        self,
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
        if scoring == "topk_softmax" or (
            scoring == "softmax" and correction_bias is None and num_groups == 1
        ):
            weights, ids = vllm_cpu_softmax_topk(
                router_logits, top_k, renormalize or scoring == "topk_softmax"
            )
            weights = weights * routed_scaling_factor
        else:  # group_score is not an argument of vLLM's router: the bias decides it
            weights, ids = vllm_cpu_grouped_topk(
                router_logits,
                top_k,
                renormalize,
                num_groups,
                topk_group,
                scoring,
                routed_scaling_factor,
                correction_bias,
                fill=self.fill,
                bias_dtype=self.bias_dtype,
            )
        if self.extra_factor:  # WRONG variant: the factor again in the wrapper (vllm#24119)
            weights = weights * routed_scaling_factor
        return weights, ids

    def fused_moe(
        self,
        x,
        w13,
        w2,
        topk_weights,
        topk_ids,
        *,
        activation,
        limit,
        apply_router_weight_on_input,
        output_scale,
    ):
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for expert in torch.unique(topk_ids).tolist():
            token, slot = torch.nonzero(topk_ids == expert, as_tuple=True)
            weight = topk_weights[token, slot].float()[:, None]
            v = (x[token].float() * weight).to(x.dtype) if apply_router_weight_on_input else x[token]
            h = vllm_moe_activation(v @ w13[expert].T, activation, limit, drop_clamp=self.drop_clamp)
            y = (h @ w2[expert].T).float()
            out.index_add_(0, token, y if apply_router_weight_on_input else y * weight)
        return (out * output_scale).to(x.dtype)


def qwen3_moe_router(router_logits, top_k, norm_topk_prob):
    """transformers 5.24.0 models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeTopKRouter.forward after the
    linear layer: float32 softmax, top-k, renormalised as asked, weights cast to the logits' dtype."""
    router_probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, top_k, dim=-1)
    if norm_topk_prob:
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    return router_top_value.to(router_logits.dtype), router_indices


def gpt_oss_router(router_logits, top_k):
    """transformers 5.24.0 models/gpt_oss/modeling_gpt_oss.py, GptOssTopKRouter.forward after the linear
    layer: top-k on the logits, softmax over the k in the logits' dtype."""
    router_top_value, router_indices = torch.topk(router_logits, top_k, dim=-1)
    router_scores = torch.nn.functional.softmax(router_top_value, dim=1, dtype=router_top_value.dtype)
    return router_scores, router_indices


class TransformersQwen3GptOss(VllmCpuMoe):
    """select_experts returning the logits' dtype: softmax without a bias or groups through Qwen3-MoE's
    router, topk_softmax through gpt-oss's (glue: the factor times the weights, in their dtype); the
    other forms as VllmCpuMoe."""

    name = "transformers-qwen3-gpt-oss"

    def select_experts(
        self,
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
        if scoring == "topk_softmax":
            weights, ids = gpt_oss_router(router_logits, top_k)
        elif scoring == "softmax" and correction_bias is None and num_groups == 1:
            weights, ids = qwen3_moe_router(router_logits, top_k, renormalize)
        else:
            return super().select_experts(
                router_logits,
                top_k=top_k,
                scoring=scoring,
                renormalize=renormalize,
                correction_bias=correction_bias,
                num_groups=num_groups,
                topk_group=topk_group,
                group_score=group_score,
                routed_scaling_factor=routed_scaling_factor,
            )
        return weights * routed_scaling_factor, ids


class VllmTorchGroupedTopk(VllmCpuMoe):
    """select_experts through vLLM's torch grouped_topk (scores in the logits' dtype) for softmax and
    sigmoid scoring, one group when the model has none (glue: GroupedTopKRouter runs it for any
    num_expert_group dividing E); topk_softmax and fused_moe as VllmCpuMoe."""

    name = "vllm-torch-grouped-topk"
    score_dtype = None

    def select_experts(
        self,
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
        if scoring == "topk_softmax":
            return super().select_experts(
                router_logits,
                top_k=top_k,
                scoring=scoring,
                renormalize=renormalize,
                correction_bias=correction_bias,
                num_groups=num_groups,
                topk_group=topk_group,
                group_score=group_score,
                routed_scaling_factor=routed_scaling_factor,
            )
        return vllm_grouped_topk(router_logits, top_k, renormalize, num_groups, topk_group, scoring,
                                 routed_scaling_factor, correction_bias,
                                 score_dtype=self.score_dtype)  # fmt: skip


class FactorTwice(VllmCpuMoe):
    """WRONG: routed_scaling_factor applied in the router and again after it (vllm#24119, #45037)."""

    name = "wrong-factor-twice"
    extra_factor = True


class GroupsMaskedZero(VllmCpuMoe):
    """WRONG: excluded groups filled with 0, not -inf (vllm#13474, sglang#3705)."""

    name = "wrong-groups-masked-zero"
    fill = 0.0


class BiasInLogitsDtype(VllmCpuMoe):
    """WRONG: the float32 correction bias cast to the logits' dtype before the choice (sglang#37133)."""

    name = "wrong-bias-in-logits-dtype"
    bias_dtype = "logits"


class ClampDropped(VllmCpuMoe):
    """WRONG: the fused expert computation drops the layer's activation clamp (Step-3.5's MoE runner)."""

    name = "wrong-clamp-dropped"
    drop_clamp = True


class ScoresInBfloat16(VllmTorchGroupedTopk):
    """WRONG: the scores rounded to bfloat16 also from float32 logits (a score buffer in the model dtype):
    it rounds what the field computes exactly."""

    name = "wrong-scores-in-bfloat16"
    score_dtype = torch.bfloat16


CORRECT = [VllmCpuMoe(), TransformersQwen3GptOss(), VllmTorchGroupedTopk()]
WRONG = [FactorTwice(), GroupsMaskedZero(), BiasInLogitsDtype(), ClampDropped(), ScoresInBfloat16()]
BACKENDS = CORRECT + WRONG

"""MoE routing and experts (spec/moe.md) computed by transformers' own modules.

``select_experts`` runs the router of the released model whose routing the keywords describe,
built from a config of those keywords: DeepSeek-V3's ``DeepseekV3TopkRouter`` (sigmoid, the bias
for the choice, groups by their two best, ``norm_topk_prob``, ``routed_scaling_factor``),
Mixtral's ``MixtralTopKRouter`` (softmax, renormalised), Qwen3-MoE's ``Qwen3MoeTopKRouter``
(softmax, ``norm_topk_prob`` False), DeepSeek-V2's
``DeepseekV2TopkRouter`` (softmax, ``greedy`` or groups by their best, the factor, never
renormalised), Mistral 4's ``Mistral4TopkRouter`` (softmax, groups by their two best,
``norm_topk_prob``, the factor), ERNIE 4.5's ``Ernie4_5_MoeTopKRouter`` (softmax, the bias for the
choice, renormalised), LongCat-Flash's ``LongcatFlashTopkRouter`` (softmax, the bias for the
choice, the factor) and gpt-oss's ``GptOssTopKRouter`` (top-k, then the softmax of the k). The
bias goes into the router's own float32 tensor, as a checkpoint loads it. A router computes its
logits as ``F.linear(hidden_states, weight)``: the logits go in as the hidden states and the
weight is ``IdentityWeight``, whose ``F.linear`` returns its input as is (an identity matrix would
turn an infinite logit into NaN across its row: inf * 0). A combination no released model's
router computes (sigmoid groups by their best, a renormalised softmax grouped by the best, a
softmax with a bias and groups or with renormalisation and a factor, a factor on top-k-then-
softmax) raises NotImplementedError: transformers has no code for it.

``fused_moe`` runs the expert modules on the given routing: ``DeepseekV3Experts`` (SwiGLU),
Step-3.5's ``Step3p7SparseMoeBlock`` for ``"swiglustep"`` or an output scale (its
``Step3p7Experts`` clamp after the SiLU, its output times ``moe_router_scaling_factor``),
DeepSeek-V4's ``DeepseekV4Experts`` for ``"silu"`` with a limit (the clamp before the SiLU),
``GptOssExperts`` (zero biases, the limit of the call), and Llama-4's ``Llama4TextMoe`` for the
router weight on the input (its router's dense scores, in x's dtype as its router gives them).
In the blocks the router is replaced by the given routing and the shared expert by none
(fused_moe has no shared expert: append_shared_experts is another op). Ids go in as int64, as
transformers' routers give them. ``append_shared_experts`` and ``moe_router_config`` have no
transformers counterpart.
"""

from __future__ import annotations

import math

import torch

from backends import NotImplementedOp
from backends.transformers_peer._hf import hf_attr

TINY = dict(num_attention_heads=1, num_key_value_heads=1, num_hidden_layers=1)


def _config(model: str, config_class: str, **fields):
    config = hf_attr(f"models.{model}.configuration_{model}", config_class)(**TINY, **fields)
    # The experts modules' own forward (what a model loaded with experts_implementation="eager" runs;
    # unset, @use_experts_implementation warns and runs the same forward).
    config._experts_implementation = "eager"
    return config


def _module(model: str, name: str, *args):
    return hf_attr(f"models.{model}.modeling_{model}", name)(*args)


class IdentityWeight(torch.Tensor):
    """A router's weight that projects by the identity exactly: ``F.linear(h, weight)`` is ``h``, also
    where h is infinite or NaN (MOE-PADDED's rows); every other op sees an [E, E] identity matrix."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.linear:
            bias = args[2] if len(args) > 2 else (kwargs or {}).get("bias")
            if bias is None:
                return args[0]
        return super().__torch_function__(func, types, args, kwargs or {})


def _identity(module, name: str, experts: int, device) -> None:
    """``module.<name>`` (a registered parameter) replaced by an IdentityWeight, a plain attribute."""
    delattr(module, name)
    setattr(module, name, torch.eye(experts, device=device).as_subclass(IdentityWeight))


def _router(logits, top_k, scoring, renormalize, bias, num_groups, topk_group, group_score, rsf):
    """The transformers router of a released model that computes this routing, or NotImplementedError."""
    experts, one_group = logits.shape[-1], num_groups == 1
    sizes = dict(hidden_size=experts, num_experts_per_tok=top_k)
    grouped = dict(n_group=num_groups, topk_group=topk_group, routed_scaling_factor=rsf, **sizes)
    top2, best = one_group or group_score == "top2_sum", one_group or group_score == "max"
    plain, biased = scoring == "softmax" and bias is None, scoring == "softmax" and bias is not None
    bias_name = "e_score_correction_bias"
    if scoring == "sigmoid" and top2:
        # DeepSeek-V3: sigmoid, the bias for the choice, groups by their two best
        config = _config("deepseek_v3", "DeepseekV3Config", n_routed_experts=experts,
                         norm_topk_prob=renormalize, **grouped)  # fmt: skip
        router = _module("deepseek_v3", "DeepseekV3TopkRouter", config)
    elif plain and one_group and rsf == 1 and renormalize:
        # Mixtral: softmax, top-k, always renormalised
        config = _config("mixtral", "MixtralConfig", num_local_experts=experts, **sizes)
        router = _module("mixtral", "MixtralTopKRouter", config)
    elif plain and one_group and rsf == 1:
        # Qwen3-MoE: softmax, top-k, norm_topk_prob (False here: Mixtral's router is its True)
        config = _config("qwen3_moe", "Qwen3MoeConfig", num_experts=experts, norm_topk_prob=False, **sizes)
        router = _module("qwen3_moe", "Qwen3MoeTopKRouter", config)
    elif plain and best and not renormalize:
        # DeepSeek-V2: softmax, greedy or groups by their best, the factor, never renormalised
        method = "greedy" if one_group else "group_limited_greedy"
        config = _config("deepseek_v2", "DeepseekV2Config", n_routed_experts=experts, topk_method=method,
                         **grouped)  # fmt: skip
        router = _module("deepseek_v2", "DeepseekV2TopkRouter", config)
    elif plain and top2:
        # Mistral 4: softmax, groups by their two best, norm_topk_prob, the factor
        config = _config("mistral4", "Mistral4Config", n_routed_experts=experts, norm_topk_prob=renormalize,
                         **grouped)  # fmt: skip
        router = _module("mistral4", "Mistral4TopkRouter", config)
    elif biased and one_group and renormalize and rsf == 1:
        # ERNIE 4.5: softmax, the bias for the choice (moe_statics), renormalised
        config = _config("ernie4_5_moe", "Ernie4_5_MoeConfig", moe_num_experts=experts, **sizes)
        router = _module("ernie4_5_moe", "Ernie4_5_MoeTopKRouter", config)
        bias_name = "moe_statics.e_score_correction_bias"
    elif biased and one_group and not renormalize:
        # LongCat-Flash: softmax, the bias for the choice, the factor (no zero experts)
        config = _config("longcat_flash", "LongcatFlashConfig", n_routed_experts=experts, zero_expert_num=0,
                         routed_scaling_factor=rsf, **sizes)  # fmt: skip
        router = _module("longcat_flash", "LongcatFlashTopkRouter", config)
    elif scoring == "topk_softmax" and rsf == 1:
        # gpt-oss: top-k on the logits, then the softmax of the k; its router bias (zero here) None
        config = _config("gpt_oss", "GptOssConfig", num_local_experts=experts, **sizes)
        router = _module("gpt_oss", "GptOssTopKRouter", config)
        router.bias = None
    else:
        raise NotImplementedError(
            f"no transformers router computes scoring={scoring!r} with renormalize={renormalize}, "
            f"correction_bias={'given' if bias is not None else None}, num_groups={num_groups}, "
            f"group_score={group_score!r}, routed_scaling_factor={rsf}"
        )
    if bias is not None:  # into the router's own float32 tensor (_keep_in_fp32_modules_strict)
        tensors = {**dict(router.named_buffers()), **dict(router.named_parameters())}
        with torch.no_grad():
            tensors[bias_name].view(-1).copy_(bias)
    _identity(getattr(router, "classifier", router), "weight", experts, logits.device)
    return router.to(logits.device)


class _GivenRouting(torch.nn.Module):
    """A block's router replaced by the routing fused_moe is given: (logits, weights, ids)."""

    def __init__(self, weights, ids):
        super().__init__()
        self.routing = (None, weights, ids)

    def forward(self, hidden_states):
        return self.routing


class _DenseScores(torch.nn.Module):
    """Llama-4's router replaced by the given routing: dense [T, E] scores in x's dtype, 0 elsewhere."""

    def __init__(self, weights, ids, experts, dtype):
        super().__init__()
        self.scores = torch.zeros(ids.shape[0], experts, dtype=dtype, device=ids.device)
        self.scores.scatter_(1, ids, weights.to(dtype))

    def forward(self, hidden_states):
        return self.scores, None


class _NoSharedExpert(torch.nn.Module):
    def forward(self, hidden_states):
        return torch.zeros_like(hidden_states)


def _parameters(module, **tensors):
    for name, tensor in tensors.items():
        setattr(module, name, torch.nn.Parameter(tensor, requires_grad=False))


def _fused(x, w13, w2, weights, ids, activation, limit, on_input, output_scale):
    experts, hidden, inter = w13.shape[0], x.shape[1], w2.shape[2]
    sizes = dict(hidden_size=hidden, num_experts_per_tok=ids.shape[1])
    # Without a limit "silu" and "swiglustep" are both SwiGLU (Step3p7Experts clamps at inf).
    swiglu = activation in ("silu", "swiglustep") and limit is None
    if on_input and swiglu and output_scale == 1:  # Llama-4: the router weight on the expert input
        config = _config("llama4", "Llama4TextConfig", num_local_experts=experts, intermediate_size=inter,
                         **sizes)  # fmt: skip
        block = _module("llama4", "Llama4TextMoe", config)
        block.router, block.shared_expert = _DenseScores(weights, ids, experts, x.dtype), _NoSharedExpert()
        _parameters(block.experts, gate_up_proj=w13.transpose(1, 2), down_proj=w2.transpose(1, 2))
        return block.to(x.device)(x)[0]
    if not on_input and swiglu and output_scale == 1:  # DeepSeek-V3's experts
        config = _config("deepseek_v3", "DeepseekV3Config", n_routed_experts=experts,
                         moe_intermediate_size=inter, **sizes)  # fmt: skip
        module = _module("deepseek_v3", "DeepseekV3Experts", config)
        _parameters(module, gate_up_proj=w13, down_proj=w2)
        return module(x, ids, weights)
    if not on_input and (swiglu or activation == "swiglustep"):  # Step-3.5: clamp after SiLU, output scale
        config = _config("step3p7", "Step3p7TextConfig", n_routed_experts=experts,
                         moe_intermediate_size=inter, share_expert_dim=1,
                         moe_router_scaling_factor=output_scale, swiglu_limits=[limit], **sizes)  # fmt: skip
        block = _module("step3p7", "Step3p7SparseMoeBlock", config, 0)
        block.gate, block.shared_experts = _GivenRouting(weights, ids), _NoSharedExpert()
        _parameters(block.experts, gate_up_proj=w13, down_proj=w2)
        return block(x[None])[0]
    if not on_input and activation == "silu" and output_scale == 1:  # DeepSeek-V4: clamp before SiLU
        config = _config("deepseek_v4", "DeepseekV4Config", n_routed_experts=experts,
                         moe_intermediate_size=inter, swiglu_limit=limit, **sizes)  # fmt: skip
        module = _module("deepseek_v4", "DeepseekV4Experts", config)
        _parameters(module, gate_up_proj=w13, down_proj=w2)
        return module(x, ids, weights)
    if not on_input and activation == "swiglu_oai" and output_scale == 1:  # gpt-oss, zero biases
        config = _config("gpt_oss", "GptOssConfig", num_local_experts=experts, intermediate_size=inter,
                         swiglu_limit=math.inf if limit is None else limit, **sizes)  # fmt: skip
        module = _module("gpt_oss", "GptOssExperts", config)
        zeros = dict(gate_up_proj_bias=w13.new_zeros(experts, 2 * inter),
                     down_proj_bias=w2.new_zeros(experts, hidden))  # fmt: skip
        _parameters(module, gate_up_proj=w13.transpose(1, 2), down_proj=w2.transpose(1, 2), **zeros)
        return module(x, ids, weights)
    raise NotImplementedError(
        f"no transformers MoE block computes activation={activation!r} with limit={limit}, "
        f"apply_router_weight_on_input={on_input}, output_scale={output_scale}"
    )


class TransformersMoe:
    """The MoE ops of the ``transformers`` backend."""

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
        router = _router(router_logits, top_k, scoring, renormalize, correction_bias, num_groups, topk_group,
                         group_score, routed_scaling_factor)  # fmt: skip
        with torch.no_grad():
            _, weights, ids = router(router_logits)
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
        with torch.no_grad():
            return _fused(x, w13, w2, topk_weights, topk_ids.long(), activation, limit,
                          apply_router_weight_on_input, output_scale)  # fmt: skip

    append_shared_experts = NotImplementedOp(
        "transformers adds a shared expert's output in the MoE block, with no routing slot for it"
    )
    moe_router_config = NotImplementedOp(
        "transformers' routers read their config themselves: it has no config-to-keywords function"
    )

"""MoE routing and experts (spec/moe.md) computed by transformers' own modules.

``select_experts`` runs the router of the model whose routing the keywords describe, built from a
config of those keywords: DeepSeek-V3's ``DeepseekV3TopkRouter`` (sigmoid, the correction bias as
its float32 ``e_score_correction_bias``, zeros without one, groups by the sum of the two best,
``norm_topk_prob``, ``routed_scaling_factor``), Qwen3-MoE's ``Qwen3MoeTopKRouter`` (softmax,
``norm_topk_prob``), DeepSeek-V2's ``DeepseekV2TopkRouter`` (softmax, ``greedy`` or
``group_limited_greedy`` by the best score, ``routed_scaling_factor``, no renormalisation) and
gpt-oss's ``GptOssTopKRouter`` (top-k, then the softmax of the k; its bias None). A router
computes its logits as ``F.linear(hidden_states, weight)``: the logits go in as the hidden states
and the weight is ``IdentityWeight``, whose ``F.linear`` returns its input as is (an identity
matrix would turn an infinite logit into NaN across its row: inf * 0). A combination no such
router computes (a softmax with a correction bias, sigmoid groups by their best score, a
renormalised softmax with a factor, a factor on top-k-then-softmax) raises NotImplementedError:
transformers has no code for it.

``fused_moe`` runs the expert modules on the given routing: ``DeepseekV3Experts`` (SwiGLU),
Step-3.5's ``Step3p7SparseMoeBlock`` for a limit or an output scale (its ``Step3p7Experts`` clamp
after the SiLU, its output times ``moe_router_scaling_factor``), ``GptOssExperts`` (zero biases,
alpha and the limit of the call), and Llama-4's ``Llama4TextMoe`` for the router weight on the
input (its router's dense scores, in x's dtype as its router gives them). In the blocks the router
is replaced by the given routing and the shared expert by none (fused_moe has no shared expert:
append_shared_experts is another op). Ids go in as int64, as transformers' routers give them.
``append_shared_experts`` and ``moe_router_config`` have no transformers counterpart.
"""

from __future__ import annotations

import math

import torch

from backends import NotImplementedOp
from backends.transformers_peer import _hf

TINY = dict(num_attention_heads=1, num_key_value_heads=1, num_hidden_layers=1)


def _config(model: str, config_class: str, **fields):
    return _hf.attr(f"models.{model}.configuration_{model}", config_class)(**TINY, **fields)


def _module(model: str, name: str, *args):
    return _hf.attr(f"models.{model}.modeling_{model}", name)(*args)


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


def _router(logits, top_k, scoring, renormalize, bias, num_groups, topk_group, group_score, rsf):
    """The transformers router computing this routing, its weight the identity in its own dtype."""
    experts = logits.shape[-1]
    common = dict(hidden_size=experts, num_experts_per_tok=top_k)
    weight_dtype = logits.dtype  # a router's weight is in the model's dtype, the logits'...
    one_group, plain_softmax = num_groups == 1, scoring == "softmax" and bias is None
    if scoring == "sigmoid" and (one_group or group_score == "top2_sum"):
        config = _config("deepseek_v3", "DeepseekV3Config", n_routed_experts=experts, n_group=num_groups,
                         topk_group=topk_group, norm_topk_prob=renormalize, routed_scaling_factor=rsf,
                         **common)  # fmt: skip
        router = _module("deepseek_v3", "DeepseekV3TopkRouter", config)
        weight_dtype = torch.float32  # ... but the DeepSeek routers' is float32 (the input cast to it)
        if bias is not None:  # loaded as float32 (_keep_in_fp32_modules_strict)
            router.e_score_correction_bias.copy_(bias)
    elif plain_softmax and one_group and rsf == 1:
        config = _config("qwen3_moe", "Qwen3MoeConfig", num_experts=experts, norm_topk_prob=renormalize,
                         **common)  # fmt: skip
        router = _module("qwen3_moe", "Qwen3MoeTopKRouter", config)
    elif plain_softmax and not renormalize and (one_group or group_score == "max"):
        method = "greedy" if one_group else "group_limited_greedy"
        config = _config("deepseek_v2", "DeepseekV2Config", n_routed_experts=experts, n_group=num_groups,
                         topk_group=topk_group, topk_method=method, routed_scaling_factor=rsf,
                         **common)  # fmt: skip
        router = _module("deepseek_v2", "DeepseekV2TopkRouter", config)
        weight_dtype = torch.float32
    elif scoring == "topk_softmax" and rsf == 1:
        config = _config("gpt_oss", "GptOssConfig", num_local_experts=experts, **common)
        router = _module("gpt_oss", "GptOssTopKRouter", config)
        router.bias = None  # a zero bias: F.linear(h, weight, None)
    else:
        raise NotImplementedError(
            f"no transformers router computes scoring={scoring!r} with renormalize={renormalize}, "
            f"correction_bias={'given' if bias is not None else None}, num_groups={num_groups}, "
            f"group_score={group_score!r}, routed_scaling_factor={rsf}"
        )
    del router.weight  # a registered parameter; the identity goes in as a plain attribute
    router.weight = torch.eye(experts, dtype=weight_dtype, device=logits.device).as_subclass(IdentityWeight)
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
    if on_input and activation == "silu" and limit is None and output_scale == 1:
        config = _config("llama4", "Llama4TextConfig", num_local_experts=experts, intermediate_size=inter,
                         **sizes)  # fmt: skip
        block = _module("llama4", "Llama4TextMoe", config)
        block.router, block.shared_expert = _DenseScores(weights, ids, experts, x.dtype), _NoSharedExpert()
        _parameters(block.experts, gate_up_proj=w13.transpose(1, 2), down_proj=w2.transpose(1, 2))
        return block.to(x.device)(x)[0]
    if on_input:
        raise NotImplementedError(
            "transformers applies the router weight to the expert input only in Llama4TextMoe: "
            f"SiLU, no limit, no output scale (got activation={activation!r}, limit={limit}, "
            f"output_scale={output_scale})"
        )
    if activation == "swiglu_oai":
        if output_scale != 1:
            raise NotImplementedError("gpt-oss's MoE has no output scale")
        config = _config("gpt_oss", "GptOssConfig", num_local_experts=experts, intermediate_size=inter,
                         swiglu_limit=math.inf if limit is None else limit, **sizes)  # fmt: skip
        module = _module("gpt_oss", "GptOssExperts", config)
        zeros = dict(gate_up_proj_bias=w13.new_zeros(experts, 2 * inter),
                     down_proj_bias=w2.new_zeros(experts, hidden))  # fmt: skip
        _parameters(module, gate_up_proj=w13.transpose(1, 2), down_proj=w2.transpose(1, 2), **zeros)
        return module(x, ids, weights)
    if limit is None and output_scale == 1:
        config = _config("deepseek_v3", "DeepseekV3Config", n_routed_experts=experts,
                         moe_intermediate_size=inter, **sizes)  # fmt: skip
        module = _module("deepseek_v3", "DeepseekV3Experts", config)
        _parameters(module, gate_up_proj=w13, down_proj=w2)
        return module(x, ids, weights)
    config = _config("step3p7", "Step3p7TextConfig", n_routed_experts=experts, moe_intermediate_size=inter,
                     share_expert_dim=1, moe_router_scaling_factor=output_scale,
                     swiglu_limits=[limit], **sizes)  # fmt: skip
    block = _module("step3p7", "Step3p7SparseMoeBlock", config, 0)
    block.gate, block.shared_experts = _GivenRouting(weights, ids), _NoSharedExpert()
    _parameters(block.experts, gate_up_proj=w13, down_proj=w2)
    return block(x[None])[0]


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

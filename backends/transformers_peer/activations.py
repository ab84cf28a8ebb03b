"""Activations (spec/activations.md) computed by transformers' own code.

- the GELU variants are ``transformers.activations.ACT2FN``'s modules: ``gelu_new`` (NewGELU),
  ``gelu_fast`` (FastGELU), ``quick_gelu`` (QuickGELU);
- the gated ops are computed as transformers' MLPs write them, ``act_fn(gate) * up`` (LlamaMLP,
  GemmaMLP), with ``act_fn`` = ``ACT2FN["silu"]``, ``ACT2FN["gelu"]`` (erf) or
  ``ACT2FN["gelu_pytorch_tanh"]`` (tanh) and gate = the left half;
- the clamped ops are the ``_apply_gate`` of the expert modules that carry them: Step-3.5's
  ``Step3p7Experts`` (SiLU, then the clamp: ACT-SWIGLU-STEP), DeepSeek-V4's ``DeepseekV4Experts``
  (the clamp, then SiLU: ACT-SILU-CLAMPED) and gpt-oss's ``GptOssExperts`` (ACT-SWIGLU-OAI), each
  built once from a one-expert config; a call sets the limit (and alpha) the module reads.

A limit of None is ``inf`` (``Step3p7Experts`` maps its own None to ``inf``: clamp(max=inf) is no
clamp). Nothing here validates input (transformers' modules do not): ACT-ERRORS is expected to fail.
"""

from __future__ import annotations

import functools
import inspect
import math

import torch

from backends import NotImplementedOp
from backends.transformers_peer._hf import hf_attr

# gelu_and_mul's approximate -> the ACT2FN name of transformers' GELU of that mode.
GELU_BY_MODE = {"none": "gelu", "tanh": "gelu_pytorch_tanh"}
# The GELU look-alikes (ACT-GELU-VARIANTS) -> their ACT2FN names.
VARIANTS = {"new_gelu": "gelu_new", "fast_gelu": "gelu_fast", "quick_gelu": "quick_gelu"}
TINY = dict(hidden_size=2, num_attention_heads=1, num_key_value_heads=1, num_hidden_layers=1)


@functools.cache
def act_fn(name: str) -> torch.nn.Module:
    """``ACT2FN[name]``, instantiated once (ACT2FN builds a new module on each lookup)."""
    return hf_attr("activations", "ACT2FN")[name]


@functools.cache
def _experts(kind: str) -> torch.nn.Module:
    """One expert module of ``kind`` ("step3p7", "deepseek_v4", "gpt_oss"), from a one-expert config."""
    if kind == "step3p7":
        config = hf_attr("models.step3p7.configuration_step3p7", "Step3p7TextConfig")(
            n_routed_experts=1, moe_intermediate_size=1, **TINY
        )
        experts = hf_attr("models.step3p7.modeling_step3p7", "Step3p7Experts")
        if "layer_idx" in inspect.signature(experts.__init__).parameters:
            # transformers >= 5.25: (config, layer_idx), the limit from config.swiglu_limits (None:
            # no clamp, which the call then replaces); 5.24: (config, swiglu_limit=None), inf: no clamp.
            return experts(config, 0)
        return experts(config)
    if kind == "deepseek_v4":
        config = hf_attr("models.deepseek_v4.configuration_deepseek_v4", "DeepseekV4Config")(
            n_routed_experts=1, moe_intermediate_size=1, **TINY
        )
        return hf_attr("models.deepseek_v4.modeling_deepseek_v4", "DeepseekV4Experts")(config)
    config = hf_attr("models.gpt_oss.configuration_gpt_oss", "GptOssConfig")(
        num_local_experts=1, intermediate_size=1, head_dim=2, **TINY
    )
    return hf_attr("models.gpt_oss.modeling_gpt_oss", "GptOssExperts")(config)


def _limit(limit) -> float:
    return math.inf if limit is None else limit


# The config fields Step-3.5's layers read their limits from (ACT-LIMIT-CONFIG), and the sizes that
# keep the layers built to read them tiny.
LIMIT_FIELDS = ("swiglu_limits", "swiglu_limits_shared", "num_nextn_predict_layers", "num_hidden_layers")
TINY_STEP = dict(
    hidden_size=2, intermediate_size=1, moe_intermediate_size=1, share_expert_dim=1, n_routed_experts=1
)


def _step_config(config, layer_idx: int):
    """A Step3p7TextConfig with ``config``'s limit lists (a mapping: a config.json) and tiny layers."""
    config_class = hf_attr("models.step3p7.configuration_step3p7", "Step3p7TextConfig")
    if isinstance(config, config_class):
        fields = {name: getattr(config, name) for name in LIMIT_FIELDS}
    else:
        fields = {name: config[name] for name in LIMIT_FIELDS if name in config}
        fields.setdefault("num_hidden_layers", layer_idx + 1)
    return config_class(**fields, **TINY_STEP, num_attention_heads=1, num_key_value_heads=1)


def _mlp(name: str, x: torch.Tensor) -> torch.Tensor:
    """``act_fn(gate) * up`` as transformers' MLPs compute it, gate the left half of x."""
    d = x.shape[-1] // 2
    return act_fn(name)(x[..., :d]) * x[..., d:]


class TransformersActivations:
    """The activation ops of the ``transformers`` backend."""

    def gelu_and_mul(self, x, *, approximate):
        return _mlp(GELU_BY_MODE[approximate], x)

    def silu_and_mul(self, x):
        return _mlp("silu", x)

    def swiglu_step_and_mul(self, x, *, limit):
        experts = _experts("step3p7")
        experts.limit = _limit(limit)
        return experts._apply_gate(x)

    def silu_clamped_and_mul(self, x, *, limit):
        experts = _experts("deepseek_v4")
        experts.limit = _limit(limit)
        return experts._apply_gate(x)

    def swiglu_oai_and_mul(self, x, *, alpha, limit, interleaved):
        experts = _experts("gpt_oss")
        experts.alpha, experts.limit = alpha, _limit(limit)
        if not interleaved:  # GptOssExperts reads gate and up interleaved: interleave the halves
            x = torch.stack(x.tensor_split(2, dim=-1), dim=-1).flatten(-2)
        return experts._apply_gate(x)

    def new_gelu(self, x):
        return act_fn(VARIANTS["new_gelu"])(x)

    def fast_gelu(self, x):
        return act_fn(VARIANTS["fast_gelu"])(x)

    def quick_gelu(self, x):
        return act_fn(VARIANTS["quick_gelu"])(x)

    def swiglu_limit(self, config, layer_idx, *, shared):
        # The limit the layer built from the config clamps with: Step3p7MLP's (the shared expert) or
        # Step3p7SparseMoeBlock's experts' (routed); inf, their "no clamp", is None.
        step = _step_config(config, layer_idx)
        if shared:
            layer = hf_attr("models.step3p7.modeling_step3p7", "Step3p7MLP")(
                step, layer_idx, is_shared_expert=True
            )
        else:
            layer = hf_attr("models.step3p7.modeling_step3p7", "Step3p7SparseMoeBlock")(
                step, layer_idx
            ).experts
        return None if layer.limit in (None, math.inf) else layer.limit  # 5.25's "no clamp" is None

    situ_and_mul = NotImplementedOp("transformers has no SiTU activation")
    npu_geglu_args = NotImplementedOp("torch_npu kernel arguments: an Ascend adapter's op")
    npu_gelu_variant_args = NotImplementedOp("torch_npu kernel arguments: an Ascend adapter's op")

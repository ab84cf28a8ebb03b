"""Correct field code the suite failed through the transformers peer (issue 36's follow-up), as backends a
user would load with ``--backend-module peer_conventions``; tests/test_peer_conventions.py runs them.

Each class re-states the arithmetic of the upstream code its docstring cites; the ``Wrong*`` twins
change one thing, to prove that the relaxed clause still fails a bug.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

# The properties tests/test_peer_conventions.py judges these backends on, and their clauses: the shared run
# (tests/convention_runs.py, --focus-declared-clauses) gives them only the properties checking one of them.
PROPERTIES = [
    "conformance/test_activations_clamped.py::test_limit_selected_from_config",
    "conformance/test_activations_clamped.py::test_limit_disabled_by_config",
    "conformance/test_activations_clamped.py::test_should_turn_the_clamp_off_for_a_negative_limit_or_a_short_list",
    "conformance/test_activations_clamped.py::test_limit_from_transformers_config",
    "conformance/test_activations_clamped.py::test_layer_from_config_clamps_with_its_limit",
    "conformance/test_attention.py::test_attention_matches_oracle",
    "conformance/test_attention.py::test_additive_mask_in_query_dtype_equals_bool",
    "conformance/test_attention.py::test_should_reject_a_float32_mask_with_half_queries",
    "conformance/test_rope.py::test_cos_sin_rows",
    "conformance/test_rope.py::test_long_positions_keep_float32_angles",
]
CLAUSES = frozenset({
    "ACT-LIMIT-CONFIG", "ACT-LIMIT-CONFIG-LAYER", "ACT-LIMIT-CONFIG-OFF", "ACT-LIMIT-CONFIG-ROBUST", "ATTN",
    "ATTN-FLOAT-MASK", "ATTN-FLOAT-MASK-REJECT", "ROPE-COS-SIN", "ROPE-LONG",
})  # fmt: skip


class _Backend:
    clauses = CLAUSES

    def unavailable(self, device):
        return None if device.type == "cpu" else "these transcriptions run on cpu"


def _limits(config, key: str):
    """A config.json mapping's list, or a config object's attribute (transformers' Step3p7TextConfig)."""
    return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)


class TransformersStep3p7Limits(_Backend):
    """transformers 5.24 models/step3p7/modeling_step3p7.py: the limit Step3p7SparseMoeBlock.__init__
    gives its experts (``(config.swiglu_limits[layer_idx] or None) if config.swiglu_limits else None``)
    and Step3p7MLP.__init__ its shared expert (``(config.swiglu_limits_shared[layer_idx] if
    config.swiglu_limits_shared else 0) or float("inf")``); Step3p7Experts._apply_gate's clamp
    (``act_fn(gate).clamp(max=limit) * up.clamp(min=-limit, max=limit)``, inf when no limit).
    spec/activations.md, ACT-LIMIT-CONFIG-OFF."""

    name = "transformers-step3p7-limits"

    def swiglu_limit(self, config, layer_idx, *, shared):
        if shared:
            limits = _limits(config, "swiglu_limits_shared")
            limit = (limits[layer_idx] if limits else 0) or float("inf")
        else:
            limits = _limits(config, "swiglu_limits")
            limit = (limits[layer_idx] or None) if limits else None
        return None if limit is None or limit == float("inf") else limit  # the op's "no clamp" is None

    def swiglu_step_and_mul(self, x, *, limit):
        limit = float("inf") if limit is None else limit
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate).clamp(max=limit) * up.clamp(min=-limit, max=limit)


class VllmStep3p5Limits(TransformersStep3p7Limits):
    """vLLM 0.33.0 vllm/model_executor/models/step3p5.py: Step3p5MLP.__init__ (shared: the entry when
    ``layer_idx < len(limits) and limits[layer_idx]``, ``limits = config.swiglu_limits_shared or []``)
    and FusedMoEBlock.__init__ (routed: None past the list, then ``float`` of it when ``not in (None,
    0)``; its ``assert swiglu_limit == 7.0``, what the fused kernel supports, is left out)."""

    name = "vllm-step3p5-limits"

    def swiglu_limit(self, config, layer_idx, *, shared):
        limits = _limits(config, "swiglu_limits_shared" if shared else "swiglu_limits") or []
        value = limits[layer_idx] if layer_idx < len(limits) else None
        if shared:
            return value if value else None
        return float(value) if value not in (None, 0) else None


class WrongLimitPastListReadsLast(VllmStep3p5Limits):
    """WRONG: past a short list the last entry is the limit (an MTP layer clamped by layer 44's)."""

    name = "wrong-limit-past-list-reads-last"

    def swiglu_limit(self, config, layer_idx, *, shared):
        limits = _limits(config, "swiglu_limits_shared" if shared else "swiglu_limits") or []
        return super().swiglu_limit(config, min(layer_idx, max(len(limits) - 1, 0)), shared=shared)


class TransformersSdpaAttention(_Backend):
    """transformers 5.24 integrations/sdpa_attention.py, sdpa_attention_forward with a mask (so
    ``is_causal`` is False and ``use_gqa_in_sdpa`` is False on CPU): ``pack_gqa`` of the query and mask
    for one query token, ``repeat_kv`` of k and v otherwise, SDPA with the mask as given, unchecked.
    spec/attention.md, ATTN-FLOAT-MASK-REJECT."""

    name = "transformers-sdpa-attention"

    def attention(self, q, k, v, *, allowed, scale):
        mask = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
        batch, heads, q_length, dim = q.shape
        groups = heads // k.shape[1]
        if groups > 1 and q_length == 1:  # pack_gqa: (B, Hq, 1, D) -> (B, Hkv, groups, D)
            q = q.reshape(batch, heads // groups, groups, dim)
            if mask.shape[1] != 1:
                mask = mask.reshape(mask.shape[0], heads // groups, groups, mask.shape[-1])
        elif groups > 1:  # repeat_kv
            k, v = (t[:, :, None].expand(-1, -1, groups, -1, -1).flatten(1, 2) for t in (k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale)
        return out.reshape(out.shape[0], -1, q_length, v.shape[-1])


class WrongFloatMaskAsBool(TransformersSdpaAttention):
    """WRONG: a float mask turned into a bool one by ``.bool()`` alone (transformers' Ascend branch
    without its ``logical_not``): 0 (allowed) becomes False, -inf True."""

    name = "wrong-float-mask-as-bool"

    def attention(self, q, k, v, *, allowed, scale):
        mask = allowed if allowed.dtype == torch.bool else allowed.bool()
        return super().attention(q, k, v, allowed=mask, scale=scale)


class TransformersLlamaRotary(_Backend):
    """transformers 5.24 models/llama/modeling_llama.py, LlamaRotaryEmbedding.forward: ``freqs =
    position_ids[..., None].float() * inv_freq.to(dtype=torch.float)``, ``emb = cat(freqs, freqs)``,
    ``emb.cos() * attention_scaling`` and ``emb.sin() * attention_scaling`` cast to x's dtype (here
    inv_freq's, a float64 model's buffer included). spec/rope.md, ROPE-COS-SIN."""

    name = "transformers-llama-rotary"

    def rope_cos_sin(self, positions, inv_freq, *, attention_factor):
        freqs = positions[..., None].float() * inv_freq.to(dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
        h = inv_freq.shape[-1]
        return torch.cat([cos[..., :h], sin[..., :h]], dim=-1).to(inv_freq.dtype)


class WrongAnglesInBfloat16(TransformersLlamaRotary):
    """WRONG: the angles formed in bfloat16 (a rotary module under autocast, inv_freq cast to the
    model's dtype)."""

    name = "wrong-angles-in-bfloat16"

    def rope_cos_sin(self, positions, inv_freq, *, attention_factor):
        freqs = (positions[..., None].to(torch.bfloat16) * inv_freq.to(torch.bfloat16)).float()
        out = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * attention_factor
        return out.to(inv_freq.dtype)


BACKEND = [
    TransformersStep3p7Limits(),
    VllmStep3p5Limits(),
    WrongLimitPastListReadsLast(),
    TransformersSdpaAttention(),
    WrongFloatMaskAsBool(),
    TransformersLlamaRotary(),
    WrongAnglesInBfloat16(),
]

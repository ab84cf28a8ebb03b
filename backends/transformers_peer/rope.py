"""Rotary embeddings (spec/rope.md) computed by transformers' own code.

- ``rope_inv_freq``: the config's fields go into a transformers config class, whose own reader
  standardizes them (``RotaryEmbeddingConfigMixin``: ``rope_scaling`` -> ``rope_parameters``, the
  defaults): the class of its ``model_type`` (``CONFIG_MAPPING``, as ``AutoConfig`` picks it), else
  ``Gemma3TextConfig`` for Gemma3's config.json form (``rope_local_base_freq``), else
  ``Qwen2Config`` (the mixin's reader as is, ``layer_types`` a field of its own: per-layer dicts
  are recognised; LlamaConfig treats them as one flat dict). Then
  ``ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=..., layer_type=...)``, and for
  ``default`` a model's ``compute_default_rope_parameters`` that honours ``partial_rotary_factor``:
  StableLM's (flat) or Step-3.5's (per layer type).
- ``rope_softmax_scale``: DeepSeek-V3's ``yarn_apply_mscale(config.rope_parameters, scale)``, the
  function ``DeepseekV3Attention`` sets its ``scaling`` with.
- ``rope_cos_sin``: ``LlamaRotaryEmbedding.forward`` (float32 angles, times ``attention_scaling``)
  with the given ``inv_freq`` and factor as its buffer and attribute; x is a dummy of inv_freq's dtype.
- ``rotary_embedding`` / ``mrope``: the cache rows become the cos/sin a rotary module hands its
  attention, cast to the query's dtype as those modules cast them (``cos.to(dtype=x.dtype)``): NeoX
  through GPT-NeoX's ``apply_rotary_pos_emb`` (Llama's ``rotate_half``, partial rotation built in),
  GPT-J through GLM's (interleaved, partial). mrope first recomposes the three position rows'
  cos/sin with the rotary module that owns that layout: Qwen2-VL's sections or Qwen3-VL's
  interleave (``recomposition_frequencies``).
Nothing is validated (ROPE-ERRORS is expected to fail).
"""

from __future__ import annotations

import copy
import functools

import torch

from backends import NotImplementedOp
from backends.transformers_peer._hf import hf_attr

# The config fields a rope reader may read (spec/rope.md, ROPE-PARAMS), passed to the config class.
ROPE_FIELDS = (
    "head_dim", "hidden_size", "num_attention_heads", "max_position_embeddings", "rope_parameters",
    "rope_scaling", "rope_theta", "partial_rotary_factor", "layer_types", "original_max_position_embeddings",
    "rope_local_base_freq",
)  # fmt: skip


def transformers_config(config):
    """A transformers config object carrying ``config``'s rope fields (a copy: the readers mutate it)."""
    if isinstance(config, hf_attr("configuration_utils", "PreTrainedConfig")):
        return copy.deepcopy(config)
    fields = dict(config) if isinstance(config, dict) else dict(vars(config))
    kwargs = {k: copy.deepcopy(fields[k]) for k in ROPE_FIELDS if k in fields}
    if kwargs.get("layer_types"):
        kwargs["num_hidden_layers"] = len(kwargs["layer_types"])
    if "model_type" in fields:  # a config.json of that model: its class, as AutoConfig picks it
        return hf_attr("models.auto.configuration_auto", "CONFIG_MAPPING")[fields["model_type"]](**kwargs)
    if "rope_local_base_freq" in kwargs:  # Gemma3's config.json form, read by its own class
        return hf_attr("models.gemma3.configuration_gemma3", "Gemma3TextConfig")(**kwargs)
    return hf_attr("models.qwen2.configuration_qwen2", "Qwen2Config")(**kwargs)


def _default_init(layer_type):
    if layer_type is None:
        return hf_attr("models.stablelm.modeling_stablelm", "StableLmRotaryEmbedding")
    return hf_attr("models.step3p7.modeling_step3p7", "Step3p7RotaryEmbedding")


@functools.cache
def _rotary_module(path: str, name: str, config_path: str, config_name: str) -> torch.nn.Module:
    """One rotary module of a model, from its config class's defaults (its methods are what is used)."""
    return hf_attr(path, name)(hf_attr(config_path, config_name)())


def _llama_rotary():
    return _rotary_module(
        "models.llama.modeling_llama",
        "LlamaRotaryEmbedding",
        "models.llama.configuration_llama",
        "LlamaConfig",
    )


def _halves(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = rows.shape[-1] // 2
    return rows[..., :h], rows[..., h:]


def _apply(query, key, cos, sin, is_neox_style):
    """q [T, H, d], k [T, Hk, dk], cos/sin [T, r] in the modules' layout: the model's apply function."""
    if is_neox_style:
        apply = hf_attr("models.gpt_neox.modeling_gpt_neox", "apply_rotary_pos_emb")
    else:
        apply = hf_attr("models.glm.modeling_glm", "apply_rotary_pos_emb")
    cos, sin = cos[None].to(query.dtype), sin[None].to(query.dtype)
    q, k = apply(query[None], key[None], cos, sin, unsqueeze_dim=2)
    return q[0], k[0]


# mrope_interleaved -> the rotary module whose recomposition_frequencies lays the three rows out that
# way: Qwen2-VL's sections, Qwen3-VL's interleave. GLM-4V (GPT-J) recomposes as Qwen2-VL, then repeats
# each entry twice, which GLM's apply_rotary_pos_emb does itself.
MROPE_MODULES = {
    False: ("models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLRotaryEmbedding",
            "models.qwen2_vl.configuration_qwen2_vl", "Qwen2VLTextConfig"),
    True: ("models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLTextRotaryEmbedding",
           "models.qwen3_vl.configuration_qwen3_vl", "Qwen3VLTextConfig"),
}  # fmt: skip


class TransformersRope:
    """The rope ops of the ``transformers`` backend."""

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        hf = transformers_config(config)
        params = hf.rope_parameters[layer_type] if layer_type is not None else hf.rope_parameters
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        if params["rope_type"] == "default":
            return _default_init(layer_type).compute_default_rope_parameters(hf, **kwargs)
        init = hf_attr("modeling_rope_utils", "ROPE_INIT_FUNCTIONS")[params["rope_type"]]
        return init(hf, None, seq_len=seq_len, **kwargs)

    def rope_softmax_scale(self, config, *, scale):
        apply_mscale = hf_attr("models.deepseek_v3.modeling_deepseek_v3", "yarn_apply_mscale")
        return apply_mscale(transformers_config(config).rope_parameters, scale)

    def rope_cos_sin(self, positions, inv_freq, *, attention_factor):
        module = _llama_rotary()
        module.inv_freq, module.attention_scaling = inv_freq, attention_factor
        x = torch.empty(0, dtype=inv_freq.dtype, device=inv_freq.device)
        cos, sin = module(x, positions)  # [*positions.shape, r]: cat(angles, angles) of each
        h = inv_freq.shape[-1]
        return torch.cat([cos[..., :h], sin[..., :h]], dim=-1)

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        c, s = _halves(cos_sin_cache[positions])  # the rotary modules' layout: cat(freqs, freqs)
        return _apply(query, key, torch.cat([c, c], -1), torch.cat([s, s], -1), is_neox_style)

    def mrope(self, positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
        module = _rotary_module(*MROPE_MODULES[mrope_interleaved])
        module.mrope_section = list(mrope_section)
        c, s = _halves(cos_sin_cache[positions][:, None])  # [3, batch 1, T, h]: the three rows' cos/sin
        cos, sin = module.recomposition_frequencies(c), module.recomposition_frequencies(s)
        return _apply(query, key, cos[0], sin[0], is_neox_style)

    rope_kernel_args = NotImplementedOp("transformers calls no rope kernel: it has no kernel style flags")

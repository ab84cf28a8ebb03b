"""Rope mutants of the config readers (spec/rope.md: ROPE-PARAMS, ROPE-FREQ and its refinements,
ROPE-LAYER, ROPE-SOFTMAX-SCALE), listed by ``mutants/rope.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from backends import rope as native_rope
from backends.native import NativeBackend
from reference import rope_config


def _default_type(config):
    """The config with its rope type replaced by default (what a reader that ignores scaling sees)."""
    fields = dict(vars(config))
    if isinstance(fields.get("rope_parameters"), dict) and "rope_type" in fields["rope_parameters"]:
        fields["rope_parameters"] = {**fields["rope_parameters"], "rope_type": "default"}
    if isinstance(fields.get("rope_scaling"), dict):
        fields["rope_scaling"] = None
    return SimpleNamespace(**fields)


class Llama3ScalingIgnored(NativeBackend):
    """rope_type llama3 read as default: right on short prompts, gibberish past about 29k tokens.

    Origin: unslothai/unsloth#6197, lablup/mlxcel#1355 (Llama 3.1's rope_scaling ignored).
    Caught by: ROPE-FREQ-LLAMA3, ROPE-FREQ.
    """

    name = "rope-llama3-ignored"
    clauses = {"ROPE-FREQ-LLAMA3", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_config.rope_parameters(config, layer_type)
        if d["rope_type"] == "llama3":
            config = _default_type(config)
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


class YarnMscaleOmitted(NativeBackend):
    """YaRN's attention factor (mscale) left at 1: cos and sin 1/m too small.

    Origin: huggingface/transformers#47435, onnxruntime/mobius#548.
    Caught by: ROPE-FREQ-YARN, ROPE-FREQ.
    """

    name = "rope-yarn-mscale-omitted"
    clauses = {"ROPE-FREQ-YARN", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        inv, factor = native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
        return inv, 1.0 if rope_config.rope_parameters(config, layer_type)["rope_type"] == "yarn" else factor


class DynamicNtkUnclampedLength(NativeBackend):
    """Dynamic NTK with seq_len used as is, below max_position_embeddings too: the base shrinks.

    Origin: a port dropping transformers' max(seq_len, max_position_embeddings).
    Caught by: ROPE-FREQ-DYNAMIC, ROPE-FREQ.
    """

    name = "rope-dynamic-wrong-length"
    clauses = {"ROPE-FREQ-DYNAMIC", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_config.rope_parameters(config, layer_type)
        if d["rope_type"] != "dynamic" or seq_len is None:
            return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
        factor, longest, dim = d["factor"], d["max_position_embeddings"], d["rotary_dim"]
        base = d["rope_theta"] * ((factor * seq_len / longest) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)), 1.0


class LocalBaseOnGlobalLayers(NativeBackend):
    """Every layer type reads the sliding layers' rope (Gemma3's local base on its full layers).

    Origin: one rope module shared by all layers of a hybrid model.
    Caught by: ROPE-LAYER, ROPE-FREQ.
    """

    name = "rope-local-base-on-global-layers"
    clauses = {"ROPE-LAYER", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        if layer_type == "full_attention":
            layer_type = "sliding_attention"
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


class SoftmaxScaleWithoutMscale(NativeBackend):
    """The softmax scale left at the base scale for DeepSeek's YaRN (mscale^2 dropped).

    Origin: huggingface/transformers#47435 (the attention-side mscale of DeepSeek omitted).
    Caught by: ROPE-SOFTMAX-SCALE.
    """

    name = "rope-softmax-scale-without-mscale"
    clauses = {"ROPE-SOFTMAX-SCALE"}

    def rope_softmax_scale(self, config, *, scale):
        return float(scale)


class RopeThetaOnlyFromDict(NativeBackend):
    """rope_theta read only from the rope dict: a config.json's rope_theta beside rope_scaling (Llama
    3.1's 500000, Qwen's 1e6) silently becomes the 10000 default.

    Origin: a reader written for transformers' standardized rope_parameters, fed raw config.json fields.
    Caught by: ROPE-PARAMS, ROPE-FREQ.
    """

    name = "rope-theta-only-from-dict"
    clauses = {"ROPE-PARAMS", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        if getattr(config, "rope_parameters", None) is None and hasattr(config, "rope_theta"):
            config = SimpleNamespace(**{k: v for k, v in vars(config).items() if k != "rope_theta"})
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


def _with_truncate(config, layer_type, truncate: bool):
    """The config with the YaRN dict the layer reads given ``truncate`` (flat, per-layer or rope_scaling)."""
    fields = dict(vars(config))
    params, scaling = fields.get("rope_parameters"), fields.get("rope_scaling")
    if isinstance(params, dict) and layer_type in params:
        fields["rope_parameters"] = {**params, layer_type: {**params[layer_type], "truncate": truncate}}
    elif isinstance(params, dict):
        fields["rope_parameters"] = {**params, "truncate": truncate}
    elif isinstance(scaling, dict):
        fields["rope_scaling"] = {**scaling, "truncate": truncate}
    return SimpleNamespace(**fields)


class YarnTruncateIgnored(NativeBackend):
    """YaRN's correction range always rounded (floor/ceil): gpt-oss's truncate=False ignored.

    Origin: YaRN readers written before gpt-oss's ``truncate`` key (the original YaRN code always rounds).
    Caught by: ROPE-FREQ-YARN, ROPE-FREQ.
    """

    name = "rope-yarn-truncate-ignored"
    clauses = {"ROPE-FREQ-YARN", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        if rope_config.rope_parameters(config, layer_type)["rope_type"] == "yarn":
            config = _with_truncate(config, layer_type, True)
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


class YarnTruncateFromTopLevel(NativeBackend):
    """A per-layer YaRN dict's truncate read from the top-level dict (keyed by layer types: True).

    Origin: transformers 5.24 ``_compute_yarn_parameters`` (spec/rope.md, ROPE-LAYER-TRUNCATE's sources).
    Caught by: ROPE-LAYER-TRUNCATE (SHOULD: no released model has a per-layer truncate=False).
    """

    name = "rope-yarn-truncate-from-top-level"
    clauses = {"ROPE-LAYER-TRUNCATE"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "transformers 5.24's own reader; gpt-oss, the model with truncate=False, has a flat rope dict"

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        params = getattr(config, "rope_parameters", None)
        nested = isinstance(params, dict) and layer_type in params
        if nested and rope_config.rope_parameters(config, layer_type)["rope_type"] == "yarn":
            config = _with_truncate(config, layer_type, params.get("truncate", True))
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


def _without(config, layer_type, key: str):
    """The config with ``key`` left out of the rope dict the layer reads (flat, per-layer or rope_scaling)."""
    fields = dict(config) if isinstance(config, dict) else dict(vars(config))
    params, scaling = fields.get("rope_parameters"), fields.get("rope_scaling")
    if isinstance(params, dict) and layer_type in params:
        layer = {k: v for k, v in params[layer_type].items() if k != key}
        fields["rope_parameters"] = {**params, layer_type: layer}
    elif isinstance(params, dict):
        fields["rope_parameters"] = {k: v for k, v in params.items() if k != key}
    if isinstance(scaling, dict):
        fields["rope_scaling"] = {k: v for k, v in scaling.items() if k != key}
    fields.pop(key, None)
    return fields if isinstance(config, dict) else SimpleNamespace(**fields)


class YarnAttentionFactorIgnored(NativeBackend):
    """A YaRN config's explicit ``attention_factor`` ignored: the factor always computed from the
    scaling factor (0.1 ln s + 1), so cos and sin carry the wrong magnitude.

    Origin: a YaRN reader that knows only ``mscale``/``mscale_all_dim``; found in a field port's
    rope (issue 36: "YaRN ignoring a config's attention_factor").
    Caught by: ROPE-FREQ-YARN, ROPE-FREQ.
    """

    name = "rope-yarn-attention-factor-ignored"
    clauses = {"ROPE-FREQ-YARN", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        if rope_config.rope_parameters(config, layer_type)["rope_type"] == "yarn":
            config = _without(config, layer_type, "attention_factor")
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


BACKENDS = [
    Llama3ScalingIgnored(),
    YarnAttentionFactorIgnored(),
    YarnMscaleOmitted(),
    DynamicNtkUnclampedLength(),
    LocalBaseOnGlobalLayers(),
    SoftmaxScaleWithoutMscale(),
    RopeThetaOnlyFromDict(),
    YarnTruncateIgnored(),
    YarnTruncateFromTopLevel(),
]

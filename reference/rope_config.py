"""The rope oracles that read a model config (ROPE-PARAMS, ROPE-FREQ and its refinements,
ROPE-LAYER, ROPE-SOFTMAX-SCALE): ``rope_parameters`` (the standardized parameter dict, missing keys
taking transformers' defaults), ``rope_inv_freq`` (the inverse frequencies and attention factor per
rope type, float64) and ``rope_softmax_scale``. Config parsing and float64 arithmetic only;
``reference.rope`` re-exports the ops.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from types import SimpleNamespace

import torch

__all__ = ["ROPE_TYPES", "rope_inv_freq", "rope_parameters", "rope_softmax_scale", "yarn_get_mscale"]

# ROPE-FREQ: the rope types of transformers' ROPE_INIT_FUNCTIONS, plus "default".
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
# ROPE-PARAMS: the keys each type cannot do without (transformers' _validate_*_rope_parameters).
_REQUIRED = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
}
# ROPE-PARAMS: the types whose pretraining length defaults to max_position_embeddings.
_WITH_ORIGINAL = ("llama3", "yarn", "longrope")
DEFAULT_THETA = 10_000.0  # transformers' RotaryEmbeddingConfigMixin.default_theta
# ROPE-PARAMS, ROPE-LAYER: model types whose transformers config class holds a default_theta per layer
# type ({"global": 1e6, "local": 1e4}: Gemma3TextConfig, Gemma3nTextConfig), by layer type.
_LAYER_DEFAULT_THETA = {
    model_type: {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
    for model_type in ("gemma3_text", "gemma3", "gemma3n_text", "gemma3n")
}


def _number(value, name: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def _int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _default_theta(config, layer_type: str | None) -> float:
    """ROPE-PARAMS: the base a layer type's parameters take when they name none: the config's
    ``rope_theta`` else 10000; for Gemma3's model types the sliding layers' ``rope_local_base_freq``
    else 1e4, the others' ``rope_theta`` else 1e6 (its config class's per-layer default_theta)."""
    defaults = _LAYER_DEFAULT_THETA.get(getattr(config, "model_type", None))
    if defaults is None:
        return getattr(config, "rope_theta", None) or DEFAULT_THETA
    if layer_type == "sliding_attention":
        return getattr(config, "rope_local_base_freq", None) or defaults["sliding_attention"]
    return getattr(config, "rope_theta", None) or defaults["full_attention"]


def _raw_parameters(config, layer_type: str | None) -> dict:
    """ROPE-PARAMS, ROPE-LAYER: the layer type's rope dict as the config stores it (a copy)."""
    nested_labels = tuple(getattr(config, "layer_types", None) or ())
    params = getattr(config, "rope_parameters", None)
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"config.rope_parameters must be a dict, got {type(params).__name__}")
    if params:
        nested = [key for key in params if key in nested_labels]
        if not nested:
            return dict(params)
        if layer_type is None:
            raise ValueError(
                f"layer_type must be one of {sorted(nested)} for a per-layer rope config, got None"
            )
        if layer_type not in params or not isinstance(params[layer_type], dict):
            raise ValueError(f"layer_type must be one of {sorted(nested)}, got {layer_type!r}")
        return dict(params[layer_type])
    # The config.json form: rope_scaling (or none) beside rope_theta; Gemma3's sliding layers use
    # rope_local_base_freq (else its default 1e4) with the default type, never the global scaling
    # (Gemma3TextConfig's conversion).
    scaling = getattr(config, "rope_scaling", None)
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"config.rope_scaling must be a dict or None, got {type(scaling).__name__}")
    local = getattr(config, "rope_local_base_freq", None)
    gemma = getattr(config, "model_type", None) in _LAYER_DEFAULT_THETA
    if layer_type == "sliding_attention" and (local is not None or gemma):
        return {
            "rope_type": "default",
            "rope_theta": local if local is not None else _default_theta(config, layer_type),
        }
    return dict(scaling or {})


def rope_parameters(config, layer_type: str | None = None) -> dict:
    """ROPE-PARAMS: the layer type's rope parameters with transformers' defaults filled in, plus
    ``head_dim`` and ``rotary_dim`` (the rotated width) and ``max_position_embeddings``. ``config`` is a
    config object or a mapping (a config.json's dict), read alike."""
    if isinstance(config, Mapping):
        config = SimpleNamespace(**config)
    d = _raw_parameters(config, layer_type)
    d["rope_type"] = d.get("rope_type", d.pop("type", "default"))
    d.pop("type", None)
    if d["rope_type"] not in ROPE_TYPES:
        raise ValueError(f"config rope_type must be one of {ROPE_TYPES}, got {d['rope_type']!r}")
    d.setdefault("rope_theta", _default_theta(config, layer_type))
    d["rope_theta"] = _number(d["rope_theta"], "config rope_theta")
    prf = d.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    d["partial_rotary_factor"] = 1.0 if prf is None else _number(prf, "config partial_rotary_factor")
    head_dim = getattr(config, "head_dim", None)
    if head_dim is None:
        hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
        head_dim = _int(hidden, "config.hidden_size") // _int(heads, "config.num_attention_heads")
    d["head_dim"] = _int(head_dim, "config.head_dim", 2)
    rotary_dim = int(d["head_dim"] * d["partial_rotary_factor"])
    if rotary_dim < 2 or rotary_dim % 2 or rotary_dim > d["head_dim"]:
        raise ValueError(
            f"rotary_dim = int(head_dim * partial_rotary_factor) must be even and in [2, head_dim], got "
            f"{rotary_dim} (head_dim {d['head_dim']}, partial_rotary_factor {d['partial_rotary_factor']})"
        )
    d["rotary_dim"] = rotary_dim
    d["max_position_embeddings"] = _int(
        getattr(config, "max_position_embeddings", None), "config.max_position_embeddings"
    )
    for key in _REQUIRED.get(d["rope_type"], ()):
        if key not in d:
            raise ValueError(f"config rope_parameters must have {key!r} for rope_type {d['rope_type']!r}")
    if d["rope_type"] in _WITH_ORIGINAL:
        # Phi-3 keeps the pretraining length beside rope_parameters; transformers prefers it there.
        outer = getattr(config, "original_max_position_embeddings", None)
        if outer is not None:
            d["original_max_position_embeddings"] = outer
        d.setdefault("original_max_position_embeddings", d["max_position_embeddings"])
        d["original_max_position_embeddings"] = _int(
            d["original_max_position_embeddings"], "config original_max_position_embeddings"
        )
    return d


def _default_inv_freq(base: float, dim: int, denominator: int | None = None) -> torch.Tensor:
    """ROPE-FREQ: theta_i = base^(-2i/dim), i = 0 .. dim/2 - 1, in float64."""
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / (denominator or dim)
    return 1.0 / (base**exponents)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """ROPE-FREQ-YARN: 0.1 * mscale * ln(scale) + 1, and 1 for scale <= 1."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(d: dict, base: float, dim: int) -> tuple[torch.Tensor, float]:
    """ROPE-FREQ-YARN: the ramp between interpolated and extrapolated frequencies, and the factor."""
    original = d["original_max_position_embeddings"]
    factor = d["factor"]
    if factor is None:
        factor = d["max_position_embeddings"] / original
    factor = _number(factor, "config factor")
    attention = d.get("attention_factor")
    mscale, mscale_all_dim = d.get("mscale"), d.get("mscale_all_dim")
    if attention is None:
        if mscale and mscale_all_dim:
            attention = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        else:
            attention = yarn_get_mscale(factor)
    beta_fast, beta_slow = d.get("beta_fast") or 32, d.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if d.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation = _default_inv_freq(base, dim)
    keep = 1 - ramp  # the extrapolation share: 1 at high frequencies, 0 at low ones
    return extrapolation / factor * (1 - keep) + extrapolation * keep, float(attention)


def _llama3(d: dict, base: float, dim: int) -> torch.Tensor:
    """ROPE-FREQ-LLAMA3: unchanged above L/high_freq_factor wavelengths' frequencies, divided by factor
    below L/low_freq_factor, blended linearly in 1/wavelength between."""
    inv = _default_inv_freq(base, dim)
    factor = _number(d["factor"], "config factor")
    low, high = (
        _number(d["low_freq_factor"], "config low_freq_factor"),
        _number(d["high_freq_factor"], "config high_freq_factor"),
    )
    if high <= low:
        raise ValueError(f"config high_freq_factor must be > low_freq_factor, got {high} <= {low}")
    context = d["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    out = torch.where(wavelen > context / low, inv / factor, inv)
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, out)


def _longrope(d: dict, base: float, dim: int, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """ROPE-FREQ-LONGROPE: long_factor past the pretraining length, short_factor otherwise."""
    original = d["original_max_position_embeddings"]
    factor = d.get("factor")
    if factor is None:
        factor = d["max_position_embeddings"] / original
    attention = d.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    name = "long_factor" if seq_len and seq_len > original else "short_factor"
    factors = torch.tensor(d[name], dtype=torch.float64)
    if factors.shape != (dim // 2,):
        raise ValueError(
            f"config {name} must have rotary_dim / 2 = {dim // 2} entries, got {tuple(factors.shape)}"
        )
    return 1.0 / (factors * base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)), float(attention)


def rope_inv_freq(config, *, seq_len: int | None, layer_type: str | None) -> tuple[torch.Tensor, float]:
    """ROPE-FREQ: ``(inv_freq, attention_factor)`` of the config's rope for layer type ``layer_type``
    at sequence length ``seq_len`` (the largest position + 1; None: the config's own length), as
    transformers' ROPE_INIT_FUNCTIONS give them: inv_freq float64 [rotary_dim / 2] (proportional:
    [head_dim / 2]), attention_factor the factor multiplying cos and sin."""
    if seq_len is not None:
        seq_len = _int(seq_len, "seq_len")
    if layer_type is not None and not isinstance(layer_type, str):
        raise ValueError(f"layer_type must be a str or None, got {layer_type!r}")
    d = rope_parameters(config, layer_type)
    base, dim, kind = d["rope_theta"], d["rotary_dim"], d["rope_type"]
    if kind == "default":
        return _default_inv_freq(base, dim), 1.0
    if kind == "linear":
        return _default_inv_freq(base, dim) / _number(d["factor"], "config factor"), 1.0
    if kind == "dynamic":
        factor, longest = _number(d["factor"], "config factor"), d["max_position_embeddings"]
        length = max(seq_len or longest, longest)
        scaled = base * ((factor * length / longest) - (factor - 1)) ** (dim / (dim - 2))
        return _default_inv_freq(scaled, dim), 1.0
    if kind == "yarn":
        return _yarn(d, base, dim)
    if kind == "llama3":
        return _llama3(d, base, dim), 1.0
    if kind == "longrope":
        return _longrope(d, base, dim, seq_len)
    # proportional: the rotated angles' exponents over head_dim, zero frequencies for the rest.
    head_dim = d["head_dim"]
    angles = int(d["partial_rotary_factor"] * head_dim // 2)
    rotated = _default_inv_freq(base, 2 * angles, head_dim)
    inv = torch.cat([rotated, torch.zeros(head_dim // 2 - angles, dtype=torch.float64)])
    return inv / _number(d.get("factor", 1.0), "config factor"), 1.0


def fixed_length_dynamic_inv_freq(config, *, layer_type: str | None) -> torch.Tensor | None:
    """ROPE-FREQ-DYNAMIC's second convention: dynamic NTK's frequencies at the one fixed length
    ``max_position_embeddings * factor`` whatever the sequence (sglang's precomputed cache), float64;
    None when the layer's rope is not dynamic."""
    d = rope_parameters(config, layer_type)
    if d["rope_type"] != "dynamic":
        return None
    base, dim, factor = d["rope_theta"], d["rotary_dim"], _number(d["factor"], "config factor")
    return _default_inv_freq(base * (factor * factor - (factor - 1)) ** (dim / (dim - 2)), dim)


def rope_softmax_scale(config, *, scale: float) -> float:
    """ROPE-SOFTMAX-SCALE: the softmax scale attention must use for a model whose base scale is
    ``scale``: times yarn_get_mscale(factor, mscale_all_dim)^2 when the rope is scaled and
    ``mscale_all_dim`` is set (DeepSeek), else ``scale`` unchanged."""
    scale = _number(scale, "scale")
    d = rope_parameters(config)
    mscale_all_dim = d.get("mscale_all_dim")
    if d["rope_type"] == "default" or not mscale_all_dim:
        return scale
    factor = d.get("factor")
    if factor is None:
        factor = d["max_position_embeddings"] / d["original_max_position_embeddings"]
    m = yarn_get_mscale(_number(factor, "config factor"), _number(mscale_all_dim, "config mscale_all_dim"))
    return scale * m * m

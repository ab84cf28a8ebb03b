"""``native``'s rope ops (spec/rope.md): eager PyTorch in float32 (or the input's dtype when wider),
the field's reference formulas (vLLM's ``forward_native``, transformers' rotary modules).

The config readers use the oracle's standardized parameters (``reference.rope_config``) and return
float32 frequencies as transformers does; the tensor ops validate like the oracles, gather the
cache rows at the given positions and cast the result back to each input's dtype.
"""

from __future__ import annotations

import torch

from reference import rope as _oracle
from reference.rope import require_bool, require_positions, validate_rope_args

__all__ = [
    "mrope",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_kernel_args",
    "rope_softmax_scale",
    "rotary_embedding",
]


def _wide(dtype: torch.dtype) -> torch.dtype:
    """ROPE-DTYPE: float32, or the input's dtype when wider."""
    return torch.promote_types(dtype, torch.float32)


def rope_inv_freq(config, *, seq_len, layer_type):
    """ROPE-FREQ: the standardized parameters' frequencies, float32 like transformers'."""
    inv_freq, attention_factor = _oracle.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)
    return inv_freq.to(torch.float32), attention_factor


def rope_softmax_scale(config, *, scale):
    """ROPE-SOFTMAX-SCALE."""
    return _oracle.rope_softmax_scale(config, scale=scale)


def rope_cos_sin(positions, inv_freq, *, attention_factor):
    """ROPE-COS-SIN, ROPE-LONG: the angle formed in inv_freq's dtype (float32 or wider)."""
    require_positions(positions)
    _oracle.rope_cos_sin(positions[..., :0], inv_freq, attention_factor=attention_factor)  # ROPE-ERRORS
    compute = _wide(inv_freq.dtype)
    angles = positions.to(compute)[..., None] * inv_freq.to(positions.device, compute)
    return torch.cat([angles.cos(), angles.sin()], dim=-1) * attention_factor


def rotate(x, cos, sin, is_neox_style: bool):
    """ROPE-APPLY on x [T, H, d] with per-token cos/sin [T, r / 2] in the compute dtype: each pair
    (a, b) becomes (a cos - b sin, b cos + a sin); dims past r pass through; x's dtype returned."""
    r = 2 * cos.shape[-1]
    rot = x[..., :r].to(cos.dtype)
    c, s = cos[:, None, :], sin[:, None, :]
    if is_neox_style:
        a, b = rot[..., : r // 2], rot[..., r // 2 :]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    return torch.cat([out.to(x.dtype), x[..., r:]], dim=-1)


def cache_rows(cos_sin_cache, rows, dtype):
    """The cache rows at ``rows`` split into (cos, sin), in ``dtype``'s compute dtype."""
    gathered = cos_sin_cache[rows.to(cos_sin_cache.device).long()].to(_wide(dtype))
    half = cos_sin_cache.shape[-1] // 2
    return gathered[..., :half], gathered[..., half:]


def rotary_embedding(positions, query, key, cos_sin_cache, *, is_neox_style):
    """ROPE-APPLY: vLLM's forward_native order, in float32."""
    validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
    cos, sin = cache_rows(cos_sin_cache, positions, torch.promote_types(query.dtype, key.dtype))
    cos, sin = cos.to(query.device), sin.to(query.device)
    return rotate(query, cos, sin, is_neox_style), rotate(key, cos, sin, is_neox_style)


def mrope(positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
    """ROPE-MROPE: each frequency's cos/sin from its row of the 3-row positions."""
    r = validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style, rows=3)
    rows = _oracle.mrope_rows(mrope_section, r // 2, mrope_interleaved).to(positions.device)
    cos, sin = cache_rows(cos_sin_cache, positions, torch.promote_types(query.dtype, key.dtype))  # [3, T, h]
    pick = rows[None, None, :].expand(1, cos.shape[1], -1)
    cos, sin = cos.gather(0, pick)[0].to(query.device), sin.gather(0, pick)[0].to(query.device)
    return rotate(query, cos, sin, is_neox_style), rotate(key, cos, sin, is_neox_style)


def rope_kernel_args(is_neox_style):
    """ROPE-KERNEL-ARGS: native is vLLM's forward_native."""
    return {"vllm": {"is_neox_style": require_bool(is_neox_style, "is_neox_style")}}

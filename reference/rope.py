"""Oracles for the rotary position embedding contracts (the ROPE-* clauses).

All tensor oracles compute in float64 from the exact values given and return float64 on the input's
device: ``rope_cos_sin`` (the cos/sin rows of positions), ``rotary_embedding`` (NeoX or GPT-J
pairing over the first ``rotary_dim`` dims of q and k, positions an arbitrary integer tensor),
``mrope`` (Qwen2-VL sections over 3-row positions, and the interleaved Qwen3-VL layout). The config
readers (``rope_parameters``, ``rope_inv_freq``, ``rope_softmax_scale``) live in
``reference.rope_config`` and are re-exported; ``rope_kernel_args`` and ``kernel_style`` give the
flag mapping of ROPE-KERNEL-ARGS.
"""

from __future__ import annotations

import numbers

import torch

from reference.rope_config import (
    ROPE_TYPES,
    rope_inv_freq,
    rope_parameters,
    rope_softmax_scale,
    yarn_get_mscale,
)
from reference.validation import require_floating, require_tensor

__all__ = [
    "KERNEL_FLAGS",
    "known_kernel_api",
    "ROPE_TYPES",
    "kernel_style",
    "mrope",
    "mrope_rows",
    "pair_partner",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_kernel_args",
    "rope_parameters",
    "rope_softmax_scale",
    "rotary_embedding",
    "validate_rope_args",
    "yarn_get_mscale",
]

# ROPE-KERNEL-ARGS: api -> its documented spellings, each (flag, value meaning NeoX, value meaning
# GPT-J). An API name may carry the op after a dot ("torch_npu.npu_mrope"): the part before the dot
# picks the row. flashinfer spells it two ways: ``interleave`` (apply_rope, apply_llama31_rope, ...)
# and ``is_neox`` (apply_rope_with_cos_sin_cache(_inplace), the rope_quantize ops).
KERNEL_FLAGS = {
    "vllm": (("is_neox_style", True, False),),
    "flashinfer": (("interleave", False, True), ("is_neox", True, False)),
    "sglang": (("is_neox", True, False),),
    "flash_attn": (("interleaved", False, True),),
    "torch_npu": (("rotary_mode", "half", "interleave"),),
    "mindspore": (("mode", 0, 1),),
    "aclnn": (("isNeoxStyle", True, False),),
}


def known_kernel_api(api) -> bool:
    """ROPE-KERNEL-ARGS: whether the table knows ``api`` (the part before a dot); an API it does not
    know is not judged."""
    return isinstance(api, str) and api.split(".", 1)[0] in KERNEL_FLAGS


def require_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def require_positions(positions, name: str = "positions") -> torch.Tensor:
    """ROPE-ERRORS: an integer tensor of positions >= 0 (never a float tensor)."""
    require_tensor(positions, name)
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {positions.dtype}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got a minimum of {int(positions.min())}")
    return positions


def validate_cache(cos_sin_cache, positions: torch.Tensor) -> int:
    """ROPE-ERRORS: a float [max_position, rotary_dim] cache, rotary_dim even, covering every position;
    returns rotary_dim."""
    require_floating(cos_sin_cache, "cos_sin_cache")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[0] == 0:
        raise ValueError(
            f"cos_sin_cache must be [max_position, rotary_dim], got {tuple(cos_sin_cache.shape)}"
        )
    rotary_dim = cos_sin_cache.shape[-1]
    if rotary_dim == 0 or rotary_dim % 2:
        raise ValueError(f"cos_sin_cache.shape[-1] (rotary_dim) must be even and > 0, got {rotary_dim}")
    if positions.numel() and int(positions.max()) >= cos_sin_cache.shape[0]:
        raise ValueError(
            f"positions must be < cos_sin_cache.shape[0] = {cos_sin_cache.shape[0]}, "
            f"got {int(positions.max())}"
        )
    return rotary_dim


def validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style, *, rows: int = 1) -> int:
    """ROPE-ERRORS: query [T, Hq, D], key [T, Hk, Dk] (D, Dk >= rotary_dim), positions [T] ([rows, T]
    for mrope), a cache wide enough; returns rotary_dim."""
    require_bool(is_neox_style, "is_neox_style")
    require_positions(positions)
    for name, t in (("query", query), ("key", key)):
        require_floating(t, name)
        if t.dim() != 3:
            raise ValueError(f"{name} must be [num_tokens, num_heads, head_dim], got shape {tuple(t.shape)}")
    tokens = query.shape[0]
    if key.shape[0] != tokens:
        raise ValueError(f"key must have query's {tokens} tokens, got {key.shape[0]}")
    shape = (tokens,) if rows == 1 else (rows, tokens)
    if tuple(positions.shape) != shape:
        raise ValueError(f"positions must have shape {shape}, got {tuple(positions.shape)}")
    rotary_dim = validate_cache(cos_sin_cache, positions)
    for name, t in (("query", query), ("key", key)):
        if t.shape[-1] < rotary_dim:
            raise ValueError(
                f"rotary_dim {rotary_dim} (cos_sin_cache.shape[-1]) must be <= {name}'s "
                f"head_dim {t.shape[-1]}"
            )
    return rotary_dim


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_factor: float) -> torch.Tensor:
    """ROPE-COS-SIN: [*positions.shape, 2 * len(inv_freq)] = cat(cos(p f), sin(p f)) * attention_factor,
    the row the cos/sin cache holds for position p (vLLM's ``cos_sin_cache[p]``)."""
    require_positions(positions)
    require_floating(inv_freq, "inv_freq")
    if inv_freq.dim() != 1 or inv_freq.numel() == 0:
        raise ValueError(f"inv_freq must be a non-empty 1-D tensor, got shape {tuple(inv_freq.shape)}")
    if isinstance(attention_factor, bool) or not isinstance(attention_factor, numbers.Real):
        raise ValueError(f"attention_factor must be a number, got {attention_factor!r}")
    angles = positions.to(torch.float64)[..., None] * inv_freq.detach().to(positions.device, torch.float64)
    return torch.cat([angles.cos(), angles.sin()], dim=-1) * float(attention_factor)


def pair_partner(rotary_dim: int, is_neox_style: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """ROPE-STYLE: for each rotated dim j, its frequency index and its partner dim: NeoX pairs
    (i, i + rotary_dim/2), GPT-J (2i, 2i + 1)."""
    half = rotary_dim // 2
    j = torch.arange(rotary_dim)
    if is_neox_style:
        return j % half, (j + half) % rotary_dim
    return j // 2, j ^ 1


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox_style: bool) -> torch.Tensor:
    """ROPE-APPLY on [T, H, D] with per-token cos/sin [T, rotary_dim / 2]: each pair (a, b) becomes
    (a cos - b sin, b cos + a sin); dims past rotary_dim pass through."""
    x = x.detach().to(torch.float64)
    rotary_dim = 2 * cos.shape[-1]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    c, s = cos[:, None, :], sin[:, None, :]
    if is_neox_style:
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2 :]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    return torch.cat([out, rest], dim=-1)


def _halves(cos_sin_cache: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ROPE-APPLY's cache layout: row p is cat(cos, sin), each rotary_dim / 2 wide."""
    gathered = cos_sin_cache.detach().to(torch.float64)[rows.to(cos_sin_cache.device).long()]
    half = cos_sin_cache.shape[-1] // 2
    return gathered[..., :half], gathered[..., half:]


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    is_neox_style: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ROPE-APPLY: (query, key) rotated at ``positions`` by the cache rows, float64."""
    validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
    cos, sin = _halves(cos_sin_cache, positions)
    cos, sin = cos.to(query.device), sin.to(query.device)
    return _rotate(query, cos, sin, is_neox_style), _rotate(key, cos, sin, is_neox_style)


def mrope_rows(mrope_section, half: int, mrope_interleaved: bool) -> torch.Tensor:
    """ROPE-MROPE: for each frequency index j < rotary_dim/2, the positions row (0 t, 1 h, 2 w) it uses.
    Sections: contiguous bands t, h, w of the given sizes (Qwen2-VL); interleaved: j % 3 == 1 is h
    for j < 3 * sections[1], j % 3 == 2 is w for j < 3 * sections[2], the rest t (Qwen3-VL)."""
    sections = list(mrope_section) if isinstance(mrope_section, (list, tuple)) else None
    if (
        sections is None
        or len(sections) != 3
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sections)
        or sum(sections) != half
    ):
        raise ValueError(
            f"mrope_section must be 3 ints >= 0 summing to rotary_dim / 2 = {half}, got {mrope_section!r}"
        )
    require_bool(mrope_interleaved, "mrope_interleaved")
    j = torch.arange(half)
    if not mrope_interleaved:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(sections))
    rows = torch.zeros(half, dtype=torch.long)
    rows[(j % 3 == 1) & (j < 3 * sections[1])] = 1
    rows[(j % 3 == 2) & (j < 3 * sections[2])] = 2
    return rows


def mrope(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    *,
    mrope_section,
    is_neox_style: bool,
    mrope_interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ROPE-MROPE: rotary_embedding where frequency j takes its angle from positions[row(j)]."""
    rotary_dim = validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style, rows=3)
    rows = mrope_rows(mrope_section, rotary_dim // 2, mrope_interleaved)
    cos, sin = _halves(cos_sin_cache, positions)  # [3, T, half]
    pick = rows.to(cos.device)[None, None, :].expand(1, cos.shape[1], -1)
    cos, sin = cos.gather(0, pick)[0].to(query.device), sin.gather(0, pick)[0].to(query.device)
    return _rotate(query, cos, sin, is_neox_style), _rotate(key, cos, sin, is_neox_style)


def kernel_style(api: str, args: dict) -> bool:
    """ROPE-KERNEL-ARGS: the pairing (True = NeoX) an API's style arguments select, under any of its
    documented spellings (all those given must agree); ValueError for an unknown API, no known flag or
    a value the API does not document (``"interleaved"`` for torch_npu)."""
    if not known_kernel_api(api):
        raise ValueError(f"api must be one of {sorted(KERNEL_FLAGS)} (optionally '.op'), got {api!r}")
    spellings = KERNEL_FLAGS[api.split(".", 1)[0]]
    given = [spelling for spelling in spellings if isinstance(args, dict) and spelling[0] in args]
    if not given:
        flags = " or ".join(repr(flag) for flag, _, _ in spellings)
        raise ValueError(f"{api} arguments must hold {flags}, got {args!r}")
    styles = {_flag_style(api, args[flag], flag, neox, gptj) for flag, neox, gptj in given}
    if len(styles) > 1:
        raise ValueError(f"{api} arguments select both pairings: {args!r}")
    return styles.pop()


def _flag_style(api: str, value, flag: str, neox, gptj) -> bool:
    if type(value) is type(neox) and value == neox:
        return True
    if type(value) is type(gptj) and value == gptj:
        return False
    raise ValueError(f"{api} {flag} must be {neox!r} (NeoX) or {gptj!r} (GPT-J), got {value!r}")


def rope_kernel_args(is_neox_style: bool) -> dict:
    """ROPE-KERNEL-ARGS in the contract's terms: every API of KERNEL_FLAGS with its value for the
    pairing. A backend returns the arguments of the kernels it calls; the property reads each back
    with ``kernel_style``."""
    require_bool(is_neox_style, "is_neox_style")
    return {
        api: {flag: neox if is_neox_style else gptj for flag, neox, gptj in spellings}
        for api, spellings in KERNEL_FLAGS.items()
    }

"""Emulated ``torch_npu.npu_rotary_mul`` and ``torch_npu.npu_mrope`` (spec/ascend.md, CANN-ROTARY-MUL,
CANN-MROPE): the documented semantics, restrictions and mode spellings, computed in float32 and
returned in the input's dtype. What the documentation leaves open is marked in spec/ascend.md.
"""

from __future__ import annotations

import torch

ROTARY_MODES = ("half", "interleave")  # the op-plugin's accepted spellings (CANN-MROPE)
CACHE_MODES = ("default",)  # emulator choice: "interleave" caches are not emulated


def _mode(rotary_mode) -> str:
    if rotary_mode not in ROTARY_MODES:
        raise ValueError(f"rotary_mode must be one of {ROTARY_MODES}, got {rotary_mode!r}")
    return rotary_mode


def _same_dtype(op: str, dtype: torch.dtype, **tensors) -> None:
    """The rope ops take cos/sin (and key) in the input's dtype (inferred: spec/ascend.md,
    CANN-ROTARY-MUL)."""
    for name, t in tensors.items():
        if t.dtype != dtype:
            raise ValueError(f"{op}: {name} must have the input's dtype {dtype}, got {t.dtype}")


def _rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "half":
        a, b = x.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def npu_rotary_mul(input, r1, r2, rotary_mode="half"):
    """CANN-ROTARY-MUL: ``input * r1 + rotate(input) * r2`` over the whole last dim D (r1, r2 full-width
    cos and sin, broadcast); 4-D input, D even and < 896, B and N < 1000."""
    mode = _mode(rotary_mode)
    if input.dim() != 4:
        raise ValueError(f"npu_rotary_mul: input must be 4-D (BNSD, BSND or SBND), got {tuple(input.shape)}")
    d = input.shape[-1]
    if d % 2 or d >= 896:
        raise ValueError(f"npu_rotary_mul: the last dim must be even and < 896, got {d}")
    if r1.shape[-1] != d or r2.shape[-1] != d:
        raise ValueError(
            f"npu_rotary_mul: r1 and r2 must have the last dim {d}, got {r1.shape[-1]}, {r2.shape[-1]}"
        )
    _same_dtype("npu_rotary_mul", input.dtype, r1=r1, r2=r2)
    x = input.float()
    out = x * r1.float() + _rotate(x, mode) * r2.float()
    return out.to(input.dtype)


def _full_width(cos: torch.Tensor, sin: torch.Tensor, mode: str):
    """Half-width cos/sin [.., r/2] as the full-width r1/r2 each mode pairs with (inferred:
    spec/ascend.md, CANN-ROTARY-MUL)."""
    if mode == "half":
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)


def npu_mrope(
    positions,
    query,
    key,
    cos_sin_cache,
    head_size,
    *,
    mrope_section=None,
    rotary_mode="half",
    cache_mode="default",
):
    """CANN-MROPE: query [T, Hq * head_size], key [T, Hk * head_size]; rotary_dim = cos_sin_cache.shape[-1]
    (rows cat(cos, sin)); mrope_section None or [0, 0, 0] is plain rope over positions [T], else
    positions [3, T] and contiguous t/h/w sections of the frequencies. Returns (query, key)."""
    mode = _mode(rotary_mode)
    if cache_mode not in CACHE_MODES:
        raise ValueError(f"cache_mode must be one of {CACHE_MODES} in the emulator, got {cache_mode!r}")
    _same_dtype("npu_mrope", query.dtype, key=key, cos_sin_cache=cos_sin_cache)
    r = cos_sin_cache.shape[-1]
    half = r // 2
    plain = mrope_section is None or list(mrope_section) == [0, 0, 0]
    rows = cos_sin_cache[positions.long()].float()  # [T, r] or [3, T, r]
    if plain:
        cos, sin = rows[..., :half], rows[..., half:]
    else:
        if sum(mrope_section) != half or positions.dim() != 2 or positions.shape[0] != 3:
            raise ValueError(f"mrope_section must sum to {half} with positions [3, T], got {mrope_section!r}")
        band = torch.repeat_interleave(torch.arange(3), torch.tensor(list(mrope_section))).to(rows.device)
        pick = band[None, None, :].expand(1, rows.shape[1], -1)
        cos, sin = rows[..., :half].gather(0, pick)[0], rows[..., half:].gather(0, pick)[0]
    r1, r2 = _full_width(cos, sin, mode)
    outputs = []
    for x in (query, key):
        heads = x.reshape(x.shape[0], -1, head_size)
        rot = heads[..., :r].float() * r1[:, None] + _rotate(heads[..., :r].float(), mode) * r2[:, None]
        outputs.append(torch.cat([rot.to(x.dtype), heads[..., r:]], -1).reshape(x.shape))
    return outputs[0], outputs[1]


# CANN-APPLY-ROPE: the layout codes of npu_apply_rotary_pos_emb (op-plugin ApplyRotaryPosEmbNpuOpApi.cpp).
LAYOUTS = {1: "BSND", 2: "SBND", 3: "BNSD", 4: "TND"}


def npu_apply_rotary_pos_emb(query, key, cos, sin, layout=1, rotary_mode="half"):
    """CANN-APPLY-ROPE: rotates query and key IN PLACE with full-width cos/sin (broadcast over the
    heads, D equal to the heads' D) and returns them; ``layout`` one of LAYOUTS (the emulator reads
    the last dim as D whatever the code: inferred)."""
    mode = _mode(rotary_mode)
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout must be one of {sorted(LAYOUTS)} ({list(LAYOUTS.values())}), got {layout!r}"
        )
    _same_dtype("npu_apply_rotary_pos_emb", query.dtype, key=key, cos=cos, sin=sin)
    for name, t in (("query", query), ("key", key)):
        if t.dim() != (3 if LAYOUTS[layout] == "TND" else 4) or t.shape[-1] != cos.shape[-1]:
            raise ValueError(
                f"npu_apply_rotary_pos_emb: {name} {tuple(t.shape)} does not fit {LAYOUTS[layout]} "
                f"with cos's D {cos.shape[-1]}"
            )
        x = t.float()
        t.copy_((x * cos.float() + _rotate(x, mode) * sin.float()).to(t.dtype))
    return query, key

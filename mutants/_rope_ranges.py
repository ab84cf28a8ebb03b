"""Rope mutants wrong only in a region the draws once never reached (spec/rope.md, Ranges; listed by
``mutants/rope.py``): a second token tile, a rotary width that is not a power of two, unequal
interleaved mrope sections, LongRoPE's switch at its threshold. Each conformed while the draws
stayed out of its region (1 to 12 tokens, rotary widths 2 to 32, equal mrope thirds, seq_len never at
the original length); each docstring says the bug, its origin and the clauses that catch it.
"""

from __future__ import annotations

import torch

from backends import rope as native_rope
from backends.native import NativeBackend
from reference import rope as oracle
from reference import rope_config
from reference.rope import validate_rope_args

TILE = 16  # the token tile of RopeSecondTileRows


def _rotated(query, key, cos, sin, is_neox_style):
    """native's rotation of both tensors by per-token cos/sin rows."""
    cos, sin = cos.to(query.device), sin.to(query.device)
    return tuple(native_rope.rotate(x, cos, sin, is_neox_style) for x in (query, key))


class RopeSecondTileRows(NativeBackend):
    """Tokens past the first 16-token tile read the cos/sin rows of the first tile's positions (the
    tile's row offset never added to the positions pointer): right for up to 16 tokens.

    Origin: tiled rope kernels (16 to 256 tokens a program) whose per-tile offset is wrong; the
    issue's held-out kernel wrong from its 17th token.
    Caught by: ROPE-APPLY, ROPE-POSITIONS.
    """

    name = "rope-second-tile-rows"
    clauses = {"ROPE-APPLY", "ROPE-POSITIONS"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        rows = positions[torch.arange(positions.shape[0], device=positions.device) % TILE]
        cos, sin = native_rope.cache_rows(cos_sin_cache, rows, torch.promote_types(query.dtype, key.dtype))
        return _rotated(query, key, cos, sin, is_neox_style)


class RopeNeoxPartnerByXor(NativeBackend):
    """NeoX pairs found as ``i ^ h`` (h = rotary_dim / 2): the partner ``i + h`` only when h is a
    power of two, so Phi-3-mini's rotary width 96 (h = 48) pairs the wrong dims; GPT-J's ``i ^ 1`` is
    right.

    Origin: kernels written for power-of-two head sizes (vLLM's and flash-attn's rope kernels tile the
    rotary width to 32, 64, 128, 256; Phi-3's 96 is the field's non-power-of-two rope width).
    Caught by: ROPE-APPLY, ROPE-STYLE.
    """

    name = "rope-neox-partner-xor"
    clauses = {"ROPE-APPLY", "ROPE-STYLE"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        h = cos_sin_cache.shape[-1] // 2
        if not is_neox_style or h & (h - 1) == 0:
            style = {"is_neox_style": is_neox_style}
            return native_rope.rotary_embedding(positions, query, key, cos_sin_cache, **style)
        cos, sin = native_rope.cache_rows(cos_sin_cache, positions, torch.float32)
        j = torch.arange(2 * h)
        partner = (j ^ h).clamp_max(2 * h - 1).to(query.device)  # j + h, or j - h, for a power of two
        c = torch.cat([cos, cos], -1)[:, None].to(query.device)
        s = torch.cat([-sin, sin], -1)[:, None].to(query.device)

        def rotate(x):
            rot = x[..., : 2 * h].float()
            out = (rot * c + rot[..., partner] * s).to(x.dtype)
            return torch.cat([out, x[..., 2 * h :]], dim=-1)

        return rotate(query), rotate(key)


class MropeInterleavedUnbounded(NativeBackend):
    """Interleaved mrope (Qwen3-VL) as frequency ``i`` from row ``i % 3`` for every ``i``, the
    section bounds ``i < 3 * sh`` and ``i < 3 * sw`` ignored: right only when the three sections are
    equal thirds.

    Origin: Qwen3-VL's layout written from its description ("t, h, w interleaved"); its real sections
    [24, 20, 20] leave the last 4 frequencies temporal.
    Caught by: ROPE-MROPE.
    """

    name = "rope-mrope-interleaved-unbounded"
    clauses = {"ROPE-MROPE"}

    def mrope(self, positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
        if mrope_interleaved:
            rows = torch.arange(sum(mrope_section)) % 3
        else:
            rows = oracle.mrope_rows(mrope_section, cos_sin_cache.shape[-1] // 2, False)
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style, rows=3)
        dtype = torch.promote_types(query.dtype, key.dtype)
        cos, sin = native_rope.cache_rows(cos_sin_cache, positions, dtype)
        pick = rows.to(positions.device)[None, None, :].expand(1, cos.shape[1], -1)
        return _rotated(query, key, cos.gather(0, pick)[0], sin.gather(0, pick)[0], is_neox_style)


class LongropeSwitchAtOriginal(NativeBackend):
    """LongRoPE's long_factor taken from seq_len == original_max_position_embeddings on (``>=`` where
    transformers has ``>``): one sequence length, the first past the short range, rotated with the
    wrong factors.

    Origin: an off-by-one at the switch (transformers' ``seq_len > original_max_position_embeddings``,
    spec/rope.md ROPE-FREQ-LONGROPE); the draws never put seq_len at the original length.
    Caught by: ROPE-FREQ-LONGROPE, ROPE-FREQ.
    """

    name = "rope-longrope-switch-at-original"
    clauses = {"ROPE-FREQ-LONGROPE", "ROPE-FREQ"}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        d = rope_config.rope_parameters(config, layer_type)
        if d["rope_type"] == "longrope" and seq_len == d["original_max_position_embeddings"]:
            seq_len += 1
        return native_rope.rope_inv_freq(config, seq_len=seq_len, layer_type=layer_type)


BACKENDS = [
    RopeSecondTileRows(),
    RopeNeoxPartnerByXor(),
    MropeInterleavedUnbounded(),
    LongropeSwitchAtOriginal(),
]

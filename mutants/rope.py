"""Rope mutants: the field's rotary-embedding mistakes (spec/rope.md, Sources) in an otherwise correct
native backend. Each docstring says the bug and its origin; ``clauses`` lists the clauses of which
at least one must fail.
"""

from __future__ import annotations

import torch

from backends import rope as native_rope
from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from mutants import _models as model_profiles
from mutants import _rope_config as config_readers
from mutants import _rope_ranges as ranges
from reference.rope import validate_rope_args

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_rope", "conformance.test_rope_config"]


def _apply(positions, query, key, cache, is_neox_style, *, rows=None, rotate_key=True, cache_dtype=None):
    """native's rotary_embedding with the mutants' knobs."""
    validate_rope_args(positions, query, key, cache, is_neox_style)
    if cache_dtype is not None:
        cache = cache.to(cache_dtype)
    cos, sin = native_rope.cache_rows(cache, positions if rows is None else rows, query.dtype)
    q = native_rope.rotate(query, cos, sin, is_neox_style)
    k = native_rope.rotate(key, cos, sin, is_neox_style) if rotate_key else key.clone()
    return q, k


class StyleSwapped(NativeBackend):
    """The pairing inverted: is_neox_style=True rotates GPT-J pairs and False NeoX pairs.

    Origin: a flag whose polarity differs between APIs (flashinfer ``interleave`` vs vLLM
    ``is_neox_style``) passed through unconverted.
    Caught by: ROPE-STYLE, ROPE-APPLY.
    """

    name = "rope-style-swapped"
    clauses = {"ROPE-STYLE", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        return _apply(positions, query, key, cos_sin_cache, not is_neox_style)


class StyleHardCodedNeox(NativeBackend):
    """mrope always rotates NeoX pairs, whatever is_neox_style says.

    Origin: vllm-ascend#12765 (npu_mrope called with rotary_mode="half"), vllm#42016 and #49290
    (Triton mrope hard-coded NeoX): GLM-4V's GPT-J pairing lost, only on image inputs.
    Caught by: ROPE-MROPE.
    """

    name = "rope-mrope-style-hard-coded"
    clauses = {"ROPE-MROPE"}

    def mrope(self, positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
        return native_rope.mrope(
            positions,
            query,
            key,
            cos_sin_cache,
            mrope_section=mrope_section,
            is_neox_style=True,
            mrope_interleaved=mrope_interleaved,
        )


class RotaryDimIgnored(NativeBackend):
    """Partial rotation ignored: the cos/sin rows are stretched over the whole head, every dim rotated.

    Origin: kernels written for rotary_dim == head_dim (vllm-ascend#2847, #6581: rotary_dim != 128).
    Caught by: ROPE-PARTIAL, ROPE-APPLY.
    """

    name = "rope-rotary-dim-ignored"
    clauses = {"ROPE-PARTIAL", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        d = query.shape[-1] // 2 * 2
        cos, sin = native_rope.cache_rows(cos_sin_cache, positions, query.dtype)
        reps = -(-d // (2 * cos.shape[-1]))
        cos, sin = cos.repeat(1, reps)[:, : d // 2], sin.repeat(1, reps)[:, : d // 2]
        return native_rope.rotate(query, cos, sin, is_neox_style), native_rope.rotate(
            key, cos, sin, is_neox_style
        )


class LastDimsRotated(NativeBackend):
    """Under partial rotation the LAST rotary_dim dims rotate and the first pass through.

    Origin: a port that slices ``x[..., -rotary_dim:]`` (the MLA layout puts rope dims last).
    Caught by: ROPE-PARTIAL, ROPE-APPLY.
    """

    name = "rope-last-dims-rotated"
    clauses = {"ROPE-PARTIAL", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        r = cos_sin_cache.shape[-1]
        flip = lambda t: torch.cat([t[..., -r:], t[..., :-r]], dim=-1) if t.shape[-1] > r else t  # noqa: E731
        unflip = lambda t: torch.cat([t[..., r:], t[..., :r]], dim=-1) if t.shape[-1] > r else t  # noqa: E731
        q, k = _apply(positions, flip(query), flip(key), cos_sin_cache, is_neox_style)
        return unflip(q), unflip(k)


class PositionsAsArange(NativeBackend):
    """Positions taken as arange(T): the extend offset and packed restarts lost.

    Origin: vllm#10388 (M-RoPE positions not sliced for chunked prefill), tenstorrent/tt-metal#21513
    (the chunk's start position ignored).
    Caught by: ROPE-POSITIONS, ROPE-APPLY.
    """

    name = "rope-positions-arange"
    clauses = {"ROPE-POSITIONS", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        rows = torch.arange(positions.shape[0], device=positions.device).clamp(max=cos_sin_cache.shape[0] - 1)
        return _apply(positions, query, key, cos_sin_cache, is_neox_style, rows=rows)


class KeyNotRotated(NativeBackend):
    """Only the query is rotated; the key comes back as it was.

    Origin: a fused kernel called with the key slot left None, or a wrapper returning its input key.
    Caught by: ROPE-QK, ROPE-APPLY.
    """

    name = "rope-key-not-rotated"
    clauses = {"ROPE-QK", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        return _apply(positions, query, key, cos_sin_cache, is_neox_style, rotate_key=False)


class CacheInBfloat16(NativeBackend):
    """The cos/sin cache rounded to bfloat16 before the rotation, whatever the input dtype.

    Origin: a cache allocated in the model dtype (sglang#17470: StableLM on NPU accurate only once
    q/k were upcast around rope).
    Caught by: ROPE-DTYPE, ROPE-APPLY.
    """

    name = "rope-cache-bf16"
    clauses = {"ROPE-DTYPE", "ROPE-APPLY"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        return _apply(positions, query, key, cos_sin_cache, is_neox_style, cache_dtype=torch.bfloat16)


class AnglesInBfloat16(NativeBackend):
    """The angle p * f formed in bfloat16: 8 significant bits, off by radians past position 1000.

    Origin: cos/sin computed from positions cast to the model dtype.
    Caught by: ROPE-LONG, ROPE-COS-SIN.
    """

    name = "rope-angles-bf16"
    clauses = {"ROPE-LONG", "ROPE-COS-SIN"}

    def rope_cos_sin(self, positions, inv_freq, *, attention_factor):
        native_rope.rope_cos_sin(positions[..., :0], inv_freq, attention_factor=attention_factor)
        angles = (positions.to(torch.bfloat16)[..., None] * inv_freq.to(torch.bfloat16)).to(inv_freq.dtype)
        return torch.cat([angles.cos(), angles.sin()], dim=-1) * attention_factor


class CacheHalvesInterleaved(NativeBackend):
    """The cache row read as interleaved (cos_0, sin_0, cos_1, ...) instead of cat(cos, sin).

    Origin: a kernel written for a cache layout other than vLLM's ``cos_sin_cache[p] = cat(cos, sin)``.
    Caught by: ROPE-APPLY, ROPE-RELATIVE.
    """

    name = "rope-cache-halves-interleaved"
    clauses = {"ROPE-APPLY", "ROPE-RELATIVE"}

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        row = cos_sin_cache[positions.long()].to(torch.promote_types(query.dtype, torch.float32))
        cos, sin = row[..., 0::2], row[..., 1::2]
        return native_rope.rotate(query, cos, sin, is_neox_style), native_rope.rotate(
            key, cos, sin, is_neox_style
        )


class MropeSectionsReversed(NativeBackend):
    """mrope's sections applied in the order w, h, t.

    Origin: sections and position rows indexed from opposite ends (a port of the Qwen2-VL split).
    Caught by: ROPE-MROPE.
    """

    name = "rope-mrope-sections-reversed"
    clauses = {"ROPE-MROPE"}

    def mrope(self, positions, query, key, cos_sin_cache, *, mrope_section, is_neox_style, mrope_interleaved):
        return native_rope.mrope(
            positions.flip(0),
            query,
            key,
            cos_sin_cache,
            mrope_section=mrope_section,
            is_neox_style=is_neox_style,
            mrope_interleaved=mrope_interleaved,
        )


class FlashinferFlagMappedToNeox(NativeBackend):
    """The GPT-J request mapped to NeoX's value for flashinfer (``interleave=False``).

    Origin: the flag's polarity flips between APIs (vLLM ``is_neox_style=False`` is flashinfer
    ``interleave=True``); the same class as vllm-ascend#13631's "interleaved" for torch_npu.
    Caught by: ROPE-KERNEL-ARGS.
    """

    name = "rope-flashinfer-flag-neox"
    clauses = {"ROPE-KERNEL-ARGS"}

    def rope_kernel_args(self, is_neox_style):
        return {"vllm": {"is_neox_style": is_neox_style}, "flashinfer": {"interleave": False}}


class TorchNpuInterleavedSpelling(NativeBackend):
    """torch_npu's GPT-J mode spelled "interleaved" (the op-plugin accepts only "half"/"interleave").

    Origin: vllm-ascend#13631's documented mapping (inferred to be rejected by the op-plugin check).
    Caught by: ROPE-KERNEL-ARGS.
    """

    name = "rope-torch-npu-interleaved-spelling"
    clauses = {"ROPE-KERNEL-ARGS"}

    def rope_kernel_args(self, is_neox_style):
        return {"torch_npu.npu_mrope": {"rotary_mode": "half" if is_neox_style else "interleaved"}}


class FloatPositionsAccepted(NativeBackend):
    """Float positions accepted (truncated to integers) instead of rejected.

    Origin: positions built with torch.arange(..., dtype=float) flowing into an index kernel.
    Caught by: ROPE-ERRORS.
    """

    name = "rope-float-positions-accepted"
    clauses = {"ROPE-ERRORS"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "the field's rotary layers index their cache with whatever positions they are given"

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        if positions.is_floating_point():
            positions = positions.long()
        return native_rope.rotary_embedding(positions, query, key, cos_sin_cache, is_neox_style=is_neox_style)


class AscendAlwaysNeox(AscendBackend):
    """The Ascend adapter's rotary_embedding always hands npu_apply_rotary_pos_emb ``rotary_mode="half"``
    (NeoX pairs), whatever is_neox_style says: GPT-J-style models (GLM, GPT-J, ...) rotate the wrong pairs.

    Origin: an Ascend rope path written for the NeoX models it was first tried on; found in a field
    port (issue 36: "an Ascend rope that always rotates NeoX-style").
    Caught by: ROPE-STYLE, ROPE-APPLY.
    """

    clauses = {"ROPE-STYLE", "ROPE-APPLY"}

    def __init__(self):
        super().__init__("rope-ascend-always-neox", load_emulator, emulator_unavailable)

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        return super().rotary_embedding(positions, query, key, cos_sin_cache, is_neox_style=True)


class InPlaceWithoutCopy(AscendBackend):
    """The Ascend adapter's in-place npu_apply_rotary_pos_emb handed ``x[..., :r].contiguous()``: for a
    fully rotated head that is the caller's own tensor, which the op overwrites.

    Origin: vLLM's and torch_npu's in-place rope kernels (their tests run the reference first for
    this reason); ``.contiguous()`` copies only a non-contiguous view.
    Caught by: ROPE-PURE.
    """

    clauses = {"ROPE-PURE"}

    def __init__(self):
        super().__init__("rope-in-place-without-copy", load_emulator, emulator_unavailable)

    def rotary_embedding(self, positions, query, key, cos_sin_cache, *, is_neox_style):
        validate_rope_args(positions, query, key, cos_sin_cache, is_neox_style)
        half = cos_sin_cache.shape[-1] // 2
        rows = cos_sin_cache[positions.long()].float()
        args = self.rope_kernel_args(is_neox_style)["torch_npu.npu_apply_rotary_pos_emb"]
        r1, r2 = torch.cat([rows[..., :half]] * 2, -1), torch.cat([rows[..., half:]] * 2, -1)
        if args["rotary_mode"] == "interleave":
            r1, r2 = rows[..., :half].repeat_interleave(2, -1), rows[..., half:].repeat_interleave(2, -1)
        r = 2 * half
        q, k = query[..., :r].contiguous(), key[..., :r].contiguous()
        q, k = self.ops.npu_apply_rotary_pos_emb(q, k, r1[:, None, :], r2[:, None, :], layout=4, **args)
        return torch.cat([q, query[..., r:]], dim=-1), torch.cat([k, key[..., r:]], dim=-1)


BACKENDS = [
    StyleSwapped(),
    StyleHardCodedNeox(),
    RotaryDimIgnored(),
    LastDimsRotated(),
    PositionsAsArange(),
    KeyNotRotated(),
    CacheInBfloat16(),
    AnglesInBfloat16(),
    CacheHalvesInterleaved(),
    MropeSectionsReversed(),
    FlashinferFlagMappedToNeox(),
    TorchNpuInterleavedSpelling(),
    FloatPositionsAccepted(),
    AscendAlwaysNeox(),
    InPlaceWithoutCopy(),
    *config_readers.BACKENDS,  # ROPE-PARAMS, ROPE-FREQ*, ROPE-LAYER, ROPE-SOFTMAX-SCALE
    *model_profiles.BACKENDS,  # wrong only at a model's parameters (spec/models.md, MODEL-BACKEND)
    *ranges.BACKENDS,  # wrong only past a tile, at a width or a threshold (spec/rope.md, Ranges)
]

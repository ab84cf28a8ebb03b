"""Hypothesis strategies for the rope properties (spec/rope.md).

``RopeRecipe`` draws an application case (tokens, heads, widths, dtypes, positions, layouts) and
``make(device)`` builds positions, query, key and the cos/sin cache with the same values every
time; ``rope_configs`` draws transformers-style configs of every rope type with optional fields
left out (ROPE-PARAMS).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from hypothesis import strategies as st

from conformance.strategies import model_pins
from conformance.strategies.common import FLOAT_DTYPES, pinned_values, seeds, strided_view
from reference import rope as oracle

# ROPE-POSITIONS: how the positions of a batch are laid out. "offset": one sequence continuing at an
# extend offset; "ragged": packed sequences restarting at 0 and at offsets; "random": any order,
# repeats (decode slots of several requests).
POSITION_MODES = ("offset", "ragged", "random")
CACHE_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


@dataclass(frozen=True)
class RopeRecipe:
    tokens: int
    q_heads: int
    k_heads: int
    rotary_dim: int
    head_dim: int
    dtype: torch.dtype
    cache_dtype: torch.dtype
    positions_dtype: torch.dtype
    mode: str
    offset: int
    seed: int
    strided: bool = False  # every input every other element of a buffer (ROPE-VIEWS)
    attention_factor: float = 1.0
    qkv_split: bool = False  # q and k the column ranges of one [T, (Hq + 2 Hk) d] projection (ROPE-PURE)
    mrope: bool = False
    # ROPE-MROPE: the sections [t, h, w] and their layout (a model's own in a profile run, MODEL-RUN).
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool | None = None
    # MODEL-RUN: the cache's frequencies are a model's (its rope type and theta; None: base 10000).
    inv_freq: tuple[float, ...] | None = field(default=None, repr=False, compare=False)

    def positions(self) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        t = self.tokens
        if self.mode == "offset":
            base = self.offset + torch.arange(t)
        elif self.mode == "ragged":
            cut = max(1, t // 2)
            base = torch.cat([torch.arange(cut), self.offset + torch.arange(t - cut)])
        else:
            base = torch.randint(0, self.offset + t, (t,), generator=gen)
        if self.mrope:  # temporal = the text position, height and width a grid around it
            grid = torch.randint(0, self.offset + t, (2, t), generator=gen)
            base = torch.cat([base[None], grid])
        return base.to(self.positions_dtype)

    def make(self, device="cpu"):
        gen = torch.Generator().manual_seed(self.seed + 1)
        positions = self.positions()
        q = torch.randn(self.tokens, self.q_heads, self.head_dim, generator=gen, dtype=torch.float64)
        k = torch.randn(self.tokens, self.k_heads, self.head_dim, generator=gen, dtype=torch.float64)
        size = int(positions.max()) + 1 + self.seed % 5
        if self.inv_freq is None:
            cache = _cache(self.rotary_dim, size, self.attention_factor, self.cache_dtype)
        else:
            cache = model_pins.frequency_cache(self.inv_freq, size, self.attention_factor, self.cache_dtype)
        tensors = [positions, q.to(self.dtype), k.to(self.dtype), cache]
        tensors = [t.to(device, copy=True) for t in tensors]
        if self.strided:
            tensors = [strided_view(t) for t in tensors]
        if self.qkv_split:  # vLLM's attention layers: q, k, v = qkv.split(...), rotated as views
            q, k = tensors[1], tensors[2]
            qkv = torch.cat([q.flatten(1), k.flatten(1), torch.zeros_like(k).flatten(1)], dim=1)
            width = q.shape[1] * q.shape[2]
            tensors[1] = qkv[:, :width].unflatten(1, q.shape[1:])
            tensors[2] = qkv[:, width : width + k.shape[1] * k.shape[2]].unflatten(1, k.shape[1:])
        return tuple(tensors)

    def describe(self) -> str:
        return (
            f"T {self.tokens}, Hq {self.q_heads}, Hk {self.k_heads}, rotary_dim {self.rotary_dim} of "
            f"head_dim {self.head_dim}, {str(self.dtype)[6:]} (cache {str(self.cache_dtype)[6:]}), "
            f"positions {self.mode} from {self.offset}{', strided' if self.strided else ''}"
            f"{', q/k views of a qkv projection' if self.qkv_split else ''}"
            + (f", mrope_section {list(self.mrope_section)}" if self.mrope_section else "")
            + (
                f", the model's frequencies (attention factor {self.attention_factor:g})"
                if self.inv_freq
                else ""
            )
        )


@functools.lru_cache(maxsize=256)
def _cache(rotary_dim: int, size: int, attention_factor: float, dtype: torch.dtype) -> torch.Tensor:
    """The default-base cache rows 0 .. size - 1 (ROPE-COS-SIN) from float32 frequencies, in ``dtype``;
    cached, and cloned by ``make`` so that no property shares (or can write to) one tensor."""
    inv = (1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))).float()
    return oracle.rope_cos_sin(torch.arange(size), inv, attention_factor=attention_factor).to(dtype)


# spec/rope.md, Ranges: (rotary_dim, head_dim) of released models, non-powers of two and past
# flash-attn's 128-wide rotary tile: Phi-3-mini (96 of 96), Llama (128), Gemma 2/3 (256), Phi-2 (32 of
# 80), StableLM-2 (16 of 64). rotary_dim 64 (DeepSeek's rope part, Step-3.5) is left to the model
# profiles: mutants/_models.py shows a profile catching a kernel wrong only there (MODEL-RUN).
MODEL_WIDTHS = ((96, 96), (128, 128), (256, 256), (32, 80), (16, 64))
SMALL_WIDTHS = (2, 4, 8, 16, 32)
# spec/rope.md, Ranges: one past each token tile of 16 to 256, and 300; past 64 tokens a recipe has
# one head of a small width (the wide heads are drawn with few tokens), to stay cheap.
MANY_TOKENS = (17, 65, 257, 300)
# mrope: Qwen2-VL's and Qwen3-VL's sections over 64 frequencies, and small unequal look-alikes.
MROPE_SECTIONS = ((16, 24, 24), (24, 20, 20), (4, 1, 1), (2, 3, 1), (6, 3, 3), (2, 2, 2))


@st.composite
def _widths(draw, partial: bool | None, mrope: bool, wide: bool) -> tuple[int, int, tuple | None]:
    """(rotary_dim, head_dim, mrope sections or None): small widths, or (``wide``) a released model's."""
    if mrope:
        section = draw(st.sampled_from(MROPE_SECTIONS if wide else MROPE_SECTIONS[2:]))
        rotary_dim = 2 * sum(section)
        is_partial = draw(st.booleans()) if partial is None else partial
        return rotary_dim, rotary_dim + (draw(st.sampled_from((2, 3, 8, 16))) if is_partial else 0), section
    models = [w for w in MODEL_WIDTHS if partial is None or (w[0] < w[1]) == partial]
    if wide and models and draw(st.booleans()):
        rotary_dim, head_dim = draw(st.sampled_from(models))
        return rotary_dim, head_dim, None
    rotary_dim = draw(st.sampled_from(SMALL_WIDTHS))
    is_partial = draw(st.booleans()) if partial is None else partial
    return rotary_dim, rotary_dim + (draw(st.sampled_from((2, 3, 8, 16))) if is_partial else 0), None


@st.composite
def rope_recipes(
    draw,
    *,
    partial=None,
    dtypes=FLOAT_DTYPES + (torch.float64,),
    modes=POSITION_MODES,
    mrope=False,
    strided=False,
    qkv_split=None,
    cache_dtypes=CACHE_DTYPES,
    max_offset=600,
) -> RopeRecipe:
    tokens = draw(st.one_of(st.integers(1, 12), st.sampled_from(MANY_TOKENS)))
    rotary_dim, head_dim, section = draw(_widths(partial, mrope, wide=tokens <= 64))
    q_heads = draw(st.integers(1, 4)) if tokens <= 64 else 1
    recipe = RopeRecipe(
        tokens=tokens,
        q_heads=q_heads,
        k_heads=draw(st.sampled_from(sorted({1, q_heads, max(1, q_heads // 2)}))),
        rotary_dim=rotary_dim,
        head_dim=head_dim,
        dtype=draw(st.sampled_from(dtypes)),
        cache_dtype=draw(st.sampled_from(cache_dtypes)),
        positions_dtype=draw(st.sampled_from((torch.int64, torch.int32))),
        mode=draw(st.sampled_from(modes)),
        offset=draw(st.integers(1, max_offset)),
        seed=draw(seeds()),
        strided=strided,
        attention_factor=draw(st.sampled_from((1.0, 1.0, 1.35))),
        mrope=mrope,
        mrope_section=section,
        mrope_interleaved=draw(st.booleans()) if mrope else None,
    )
    # MODEL-RUN: one of the model's layer kinds (rotary_dim, head_dim, q heads, k heads) that the
    # property's partial flag admits; a property none fits keeps its generic draw.
    kinds = [k for k in pinned_values("rope.layer") or () if partial is None or (k[0] < k[1]) == partial]
    if kinds and not mrope:
        rotary_dim, head_dim, q_heads, k_heads = draw(st.sampled_from(kinds))
        recipe = dataclasses.replace(recipe, rotary_dim=rotary_dim, head_dim=head_dim, q_heads=q_heads,
                                     k_heads=k_heads)  # fmt: skip
    mrope_kinds = pinned_values("rope.mrope") if mrope else None
    if mrope_kinds:  # (rotary_dim, head_dim, q heads, k heads, sections, interleaved)
        rotary_dim, head_dim, q_heads, k_heads, section, interleaved = draw(st.sampled_from(mrope_kinds))
        recipe = dataclasses.replace(recipe, rotary_dim=rotary_dim, head_dim=head_dim, q_heads=q_heads,
                                     k_heads=k_heads, mrope_section=section,
                                     mrope_interleaved=interleaved)  # fmt: skip
    split = draw(st.booleans()) if qkv_split is None else qkv_split
    return model_pins.rope_frequencies(draw, dataclasses.replace(recipe, qkv_split=split and not strided))


# --- configs (ROPE-PARAMS, ROPE-FREQ, ROPE-LAYER, ROPE-SOFTMAX-SCALE) ------------------------------

LLAMA31 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _type_keys(draw, rope_type: str, half: int, longest: int) -> dict:
    optional = {}
    if rope_type in ("linear", "dynamic"):
        return {"factor": draw(st.sampled_from((2.0, 4.0, 8.0)))}
    if rope_type == "llama3":
        return dict(LLAMA31)
    if rope_type == "yarn":
        keys = {"factor": draw(st.sampled_from((4.0, 32.0, 40.0)))}
        for name, values in (
            ("beta_fast", (32, 16)),
            ("beta_slow", (1, 2)),
            ("truncate", (True, False)),
            ("mscale", (1.0, 0.707)),
            ("mscale_all_dim", (1.0, 0.0)),
            ("original_max_position_embeddings", (longest // 4,)),
        ):
            if draw(st.booleans()):
                optional[name] = draw(st.sampled_from(values))
        if draw(st.integers(0, 4)) == 0:
            optional["attention_factor"] = 1.2
        return {**keys, **optional}
    if rope_type == "longrope":
        short = [1.0 + 0.05 * i for i in range(half)]
        return {
            "short_factor": short,
            "long_factor": [2.0 * f for f in short],
            "original_max_position_embeddings": longest // 8,
        }
    if rope_type == "proportional":
        return {"partial_rotary_factor": 0.25, **({"factor": 2.0} if draw(st.booleans()) else {})}
    # spec/rope.md, Ranges: a default-type dict keeps a scaled config's keys (no switch: ignored);
    # the per-layer sliding dicts and the config.json form (rope_scaling None) have none.
    return dict(STALE_SCALING_KEYS)


# Keys of a scaled rope left in a "default" dict: ROPE-FREQ's default type and ROPE-SOFTMAX-SCALE
# ignore them (transformers' default init and yarn_apply_mscale read neither without a scaled type).
STALE_SCALING_KEYS = {"factor": 4.0, "mscale_all_dim": 1.0}


def switch_length(rope_type: str, longest: int) -> int:
    """The sequence length at which a rope type's frequencies switch: LongRoPE's original length
    (short_factor up to it, ROPE-FREQ-LONGROPE), else max_position_embeddings (dynamic NTK's
    max(seq_len, M), ROPE-FREQ-DYNAMIC; the others do not switch)."""
    return longest // 8 if rope_type == "longrope" else longest


@st.composite
def rope_configs(
    draw, *, rope_types=oracle.ROPE_TYPES, per_layer=None, layer_truncate=False, any_model_type=False
):
    """(config, seq_len, layer_type): a SimpleNamespace carrying a transformers config's rope fields,
    each optional field sometimes left out; per_layer draws Gemma3-style nested parameters, never a
    per-layer YaRN ``truncate: False`` (no model has one) unless ``layer_truncate``, which draws it
    and the full layer (spec/rope.md, ROPE-LAYER-TRUNCATE). In a profile run the model's own config
    where its rope type is one of ``rope_types`` (any with ``any_model_type``) and its form (per layer
    type or not) ``per_layer``'s."""
    model = None if layer_truncate else model_pins.rope_config(draw, rope_types, per_layer, any_model_type)
    if model is not None:
        return model
    rope_type = draw(st.sampled_from(rope_types))
    head_dim = draw(st.sampled_from((16, 64, 128)))
    prf = 1.0 if rope_type == "proportional" else draw(st.sampled_from((1.0, 1.0, 0.5)))
    longest = draw(st.sampled_from((4096, 32768, 131072)))
    half = int(head_dim * prf) // 2
    params = {"rope_type": rope_type, **_type_keys(draw, rope_type, half, longest)}
    fields = {"max_position_embeddings": longest}
    theta = draw(st.sampled_from((10000.0, 500000.0, 1e6)))
    if draw(st.booleans()):
        fields["head_dim"] = head_dim
    else:
        fields.update(hidden_size=head_dim * 4, num_attention_heads=4)
    if prf != 1.0:
        fields["partial_rotary_factor"] = prf
    nested = draw(st.booleans()) if per_layer is None else per_layer
    layer_type = None
    if nested:
        local = {"rope_type": "default", "rope_theta": 10000.0}
        full = {**params, "rope_theta": theta}
        if rope_type == "yarn" and (layer_truncate or full.get("truncate") is False):
            full["truncate"] = False if layer_truncate else True
        fields["layer_types"] = ["sliding_attention", "full_attention"]
        fields["rope_parameters"] = {"sliding_attention": local, "full_attention": full}
        layer_type = "full_attention" if layer_truncate else draw(st.sampled_from(fields["layer_types"]))
    elif draw(st.booleans()):
        fields["rope_parameters"] = {**params, **({"rope_theta": theta} if draw(st.booleans()) else {})}
    else:  # the config.json form: rope_scaling beside rope_theta (legacy "type" key)
        scaling = {("type" if draw(st.booleans()) else "rope_type"): rope_type, **params}
        scaling.pop("rope_type") if "type" in scaling else None
        fields.update(rope_scaling=None if rope_type == "default" else scaling, rope_theta=theta)
        if rope_type != "default" and "original_max_position_embeddings" in params and draw(st.booleans()):
            fields["original_max_position_embeddings"] = scaling.pop("original_max_position_embeddings")
    switch = switch_length(rope_type, longest)  # drawn at T - 1, T and T + 1 (spec/rope.md, Ranges)
    seq_len = draw(st.sampled_from((switch, switch - 1, switch + 1, None, 1, 4 * longest)))
    return SimpleNamespace(**fields), seq_len, layer_type

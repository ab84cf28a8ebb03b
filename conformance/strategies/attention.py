"""Hypothesis strategies for the attention properties (spec/attention.md): q/k/v recipes (as fresh
tensors or as strided views), softmax scales, windows inside the sequence and decode lengths
(windows and padding come from the mask strategies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, pinned_values, seeds

ATTENTION_DTYPES = FLOAT_DTYPES
HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)
GQA_RATIOS = (1, 2, 3, 4)
# spec/attention.md, Ranges: each draw one region: small head dims; the models' 80 (Phi-2) and 96
# (Phi-3) inside FlashAttention's 128-wide head tile; its widest, 256; or a length past the 128-row
# tiles (prefill) or the 512-key split-KV partitions (a decode's cache), drawn cheap (one sequence,
# one kv head, head dim 16 or 32).
REGIONS = {"small": (16, 32, 64, 128), "model": (80, 96), "wide": (256,), "long": (16, 32)}
PAST_TILES = (129, 130)
PAST_PARTITIONS = (513, 1025)
# ATTN-SCALE: the scales the field passes, as ratios to 1/sqrt(D). DeepSeek-V3's absorbed MLA decode
# attends with D = kv_lora_rank + rope = 576 at the model's 1/sqrt(nope + rope = 192); its YaRN
# scaling multiplies the scale by mscale^2, mscale = 0.1 ln(factor 40) + 1.
MLA_ABSORBED_RATIO = math.sqrt(576 / 192)
YARN_RATIO = (0.1 * math.log(40.0) + 1.0) ** 2
LAYOUTS = ("fresh", "views")  # ATTN: q/k/v as fresh tensors, or as the transposed slices of one projection
# ATTN-METADATA-VIEWS (SHOULD): q/k/v views and the mask, padding mask and decode seq_lens strided.
METADATA_VIEWS = "metadata-views"


def softmax_scales(head_dim: int, *, max_ratio: float = 2.0):
    """ATTN-SCALE: 1/sqrt(D), the MLA and YaRN scales, or any ratio in [1/4, max_ratio] of it.

    ``max_ratio`` keeps the scores in the range ATTN-TOL was measured in (spec/tolerances.md: q, k up to
    3 sigma at 1/sqrt(D), i.e. ratio x magnitude^2 <= 9)."""
    named = [r for r in (MLA_ABSORBED_RATIO, YARN_RATIO) if r <= max_ratio]
    ratios = st.one_of(st.just(1.0), st.sampled_from(named or [1.0]), st.floats(0.25, max_ratio))
    return ratios.map(lambda ratio: ratio / math.sqrt(head_dim))


def bshd_views(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The same values as views: [B, H_i, S, D] tensors of one S become the transposed head slices of
    one [B, S, sum H_i, D] buffer (q, k, v of a fused qkv projection, as HF models hand them to
    attention); tensors of different lengths (decode's one-token q beside the cache) each become
    the transposed leading heads of its own [B, S, H + 1, D] buffer (a slice of a wider projection)."""
    if len({t.shape[2] for t in tensors}) == 1 and len({t.shape[3] for t in tensors}) == 1:
        fused = torch.cat([t.transpose(1, 2) for t in tensors], dim=2)
        parts = fused.split([t.shape[1] for t in tensors], dim=2)
    else:
        wider = [torch.cat([t, t[:, :1]], dim=1).transpose(1, 2) for t in tensors]
        parts = [w[:, :, : t.shape[1]] for w, t in zip(wider, tensors, strict=True)]
    return tuple(part.transpose(1, 2) for part in parts)


@dataclass(frozen=True)
class AttentionRecipe:
    """q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] in ``dtype``, normal values times ``scale``."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype: torch.dtype
    seed: int
    scale: float = 1.0  # the magnitude of the values (not the softmax scale)
    softmax_scale: float | None = None  # ATTN-SCALE's scale; None: 1/sqrt(D)
    layout: str = "fresh"  # LAYOUTS

    @property
    def attention_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.softmax_scale is None else self.softmax_scale

    def make(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)

        def draw(heads: int, length: int) -> torch.Tensor:
            values = torch.randn(self.batch, heads, length, self.head_dim, generator=gen, dtype=torch.float64)
            return (values * self.scale).to(self.dtype).to(device)

        q = draw(self.q_heads, self.q_len)
        return self.laid_out(q, draw(self.kv_heads, self.kv_len), draw(self.kv_heads, self.kv_len))

    def laid_out(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The tensors in this recipe's layout (the same values; views for "views")."""
        return bshd_views(*tensors) if self.layout != "fresh" else tensors


@st.composite
def attention_recipes(
    draw,
    *,
    q_len=None,
    max_len: int = 96,
    dtypes=ATTENTION_DTYPES,
    scales=(0.5, 1.0, 2.0),
    same_len: bool = True,
    max_scale_ratio: float = 2.0,
    layouts=LAYOUTS,
) -> AttentionRecipe:
    """Shapes of one REGIONS region, GQA ratios 1 to 4; total size kept small; the softmax scale
    (``softmax_scales``) and the layout drawn too."""
    region = draw(st.sampled_from(("small", *REGIONS)))  # small ones in two draws of five
    cheap = region == "long"
    long = st.sampled_from(PAST_PARTITIONS if q_len == 1 else PAST_TILES)
    kv_len = draw(long if cheap else st.one_of(st.integers(1, 8), st.integers(9, max_len)))
    kv_heads = 1 if cheap else draw(st.integers(1, 2))
    head_dim = draw(st.sampled_from(REGIONS[region]))
    batch = 1 if cheap else draw(st.integers(1, 3 if head_dim <= 64 else 2))
    recipe = AttentionRecipe(
        batch=batch,
        q_heads=kv_heads * draw(st.sampled_from(GQA_RATIOS)),
        kv_heads=kv_heads,
        q_len=kv_len if same_len else (q_len or draw(st.integers(1, min(max_len, 16) if cheap else max_len))),
        kv_len=kv_len,
        head_dim=head_dim,
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds()),
        scale=draw(st.sampled_from(scales)),
        softmax_scale=draw(softmax_scales(head_dim, max_ratio=max_scale_ratio)),
        layout=draw(st.sampled_from(layouts)),
    )
    # MODEL-RUN: one of the model's attention layer kinds with Dv = Dqk (kv heads, group, D, scale).
    kinds = [k for k in pinned_values("attention.layer") or () if k[2] == k[3]]
    if kinds:
        kv, group, dim, _, scale, _ = draw(st.sampled_from(kinds))
        recipe = replace(recipe, kv_heads=kv, q_heads=kv * group, head_dim=dim, softmax_scale=scale)
    return recipe


@st.composite
def windows_inside(draw, recipe: AttentionRecipe) -> int:
    """A window W < S (1 when S = 1): one key more or less than W changes the output."""
    return draw(st.integers(1, max(1, recipe.kv_len - 1)))


@st.composite
def decode_lengths(draw, batch: int, kv_len: int) -> torch.Tensor:
    """[B] sequence lengths in 1..kv_len, kv_len itself often; int64 or int32 (ATTN-DECODE: any
    integer dtype; serving metadata is int32)."""
    return torch.tensor(
        draw(st.lists(st.one_of(st.just(kv_len), st.integers(1, kv_len)), min_size=batch, max_size=batch)),
        dtype=draw(st.sampled_from((torch.int64, torch.int32))),
    )

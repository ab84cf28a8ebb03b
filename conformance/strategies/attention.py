"""Hypothesis strategies for the attention properties (spec/attention.md): q/k/v recipes, windows
inside the sequence and decode lengths (windows and padding come from the mask strategies).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies.common import FLOAT_DTYPES, seeds

ATTENTION_DTYPES = FLOAT_DTYPES
HEAD_DIMS = (16, 32, 64, 128, 256)
GQA_RATIOS = (1, 2, 4)


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
    scale: float = 1.0

    def make(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)

        def draw(heads: int, length: int) -> torch.Tensor:
            values = torch.randn(self.batch, heads, length, self.head_dim, generator=gen, dtype=torch.float64)
            return (values * self.scale).to(self.dtype).to(device)

        return (
            draw(self.q_heads, self.q_len),
            draw(self.kv_heads, self.kv_len),
            draw(self.kv_heads, self.kv_len),
        )


@st.composite
def attention_recipes(
    draw,
    *,
    q_len=None,
    max_len: int = 96,
    dtypes=ATTENTION_DTYPES,
    scales=(0.5, 1.0, 2.0),
    same_len: bool = True,
) -> AttentionRecipe:
    """Shapes with head dims 16..256 and GQA ratios 1, 2, 4; total size kept small."""
    kv_len = draw(st.one_of(st.integers(1, 8), st.integers(9, max_len)))
    kv_heads = draw(st.integers(1, 2))
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    batch = draw(st.integers(1, 3 if head_dim <= 64 else 2))
    return AttentionRecipe(
        batch=batch,
        q_heads=kv_heads * draw(st.sampled_from(GQA_RATIOS)),
        kv_heads=kv_heads,
        q_len=kv_len if same_len else (q_len or draw(st.integers(1, max_len))),
        kv_len=kv_len,
        head_dim=head_dim,
        dtype=draw(st.sampled_from(dtypes)),
        seed=draw(seeds()),
        scale=draw(st.sampled_from(scales)),
    )


@st.composite
def windows_inside(draw, recipe: AttentionRecipe) -> int:
    """A window W < S (1 when S = 1): one key more or less than W changes the output."""
    return draw(st.integers(1, max(1, recipe.kv_len - 1)))


@st.composite
def decode_lengths(draw, batch: int, kv_len: int) -> torch.Tensor:
    """[B] sequence lengths in 1..kv_len, kv_len itself often."""
    return torch.tensor(
        draw(st.lists(st.one_of(st.just(kv_len), st.integers(1, kv_len)), min_size=batch, max_size=batch))
    )

"""Hypothesis strategies for the mask and attention properties (spec/masks.md, spec/attention.md).

Everything is drawn as a small seeded recipe (sizes, a pattern name, a seed) and materialized
on demand, so a falsifying example prints as a handful of integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

PADDING_PATTERNS = ("none", "right", "left", "holes")
ATTENTION_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128, 256)
GQA_RATIOS = (1, 2, 4)


def make_padding_mask(pattern: str, batch: int, seq_len: int, seed: int) -> torch.Tensor | None:
    """[B, S] bool, True = a real token: none (None), right / left padding, random holes.

    Right and left padding keep at least one real token per row; holes may drop any token.
    """
    if pattern == "none":
        return None
    gen = torch.Generator().manual_seed(seed)
    if pattern == "holes":
        return torch.rand(batch, seq_len, generator=gen) < 0.7
    lengths = torch.randint(1, seq_len + 1, (batch,), generator=gen)
    position = torch.arange(seq_len)[None, :]
    if pattern == "right":
        return position < lengths[:, None]
    if pattern == "left":
        return position >= (seq_len - lengths)[:, None]
    raise ValueError(f"pattern must be one of {PADDING_PATTERNS}, got {pattern!r}")


@dataclass(frozen=True)
class MaskCase:
    """An encoder-mask input: seq_len, window (None or 1..S+2), and a padding recipe."""

    seq_len: int
    sliding_window: int | None
    batch: int
    padding: str
    seed: int

    def padding_mask(self) -> torch.Tensor | None:
        return make_padding_mask(self.padding, self.batch, self.seq_len, self.seed)


def windows(seq_len: int):
    """None, W = 1, W >= S (S, S + 1, S + 2) and anything between."""
    return st.one_of(
        st.none(),
        st.sampled_from(sorted({1, seq_len, seq_len + 1, seq_len + 2})),
        st.integers(1, seq_len + 2),
    )


@st.composite
def mask_cases(draw, *, max_seq_len: int = 300, paddings=PADDING_PATTERNS) -> MaskCase:
    seq_len = draw(st.one_of(st.integers(1, 16), st.integers(17, max_seq_len)))
    return MaskCase(
        seq_len=seq_len,
        sliding_window=draw(windows(seq_len)),
        batch=draw(st.integers(1, 4)),
        padding=draw(st.sampled_from(paddings)),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@st.composite
def decode_mask_cases(draw, *, max_kv_len: int = 300) -> tuple[torch.Tensor, int, int]:
    """(seq_lens, kv_len, window): lengths 1..kv_len, including L = 1 and L = kv_len."""
    kv_len = draw(st.one_of(st.integers(1, 16), st.integers(17, max_kv_len)))
    lengths = draw(
        st.lists(st.one_of(st.just(1), st.just(kv_len), st.integers(1, kv_len)), min_size=1, max_size=4)
    )
    window = draw(st.one_of(st.sampled_from(sorted({1, kv_len, kv_len + 1})), st.integers(1, kv_len + 2)))
    return torch.tensor(lengths, dtype=torch.int64), kv_len, window


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
        seed=draw(st.integers(0, 2**31 - 1)),
        scale=draw(st.sampled_from(scales)),
    )

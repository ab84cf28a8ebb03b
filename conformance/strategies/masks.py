"""Hypothesis strategies for the mask properties (spec/masks.md): encoder-mask cases, windows,
padding patterns and decode-mask cases (the attention properties reuse the windows and padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from conformance.strategies import model_pins
from conformance.strategies.common import seeds

PADDING_PATTERNS = ("none", "right", "left", "holes")


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


# spec/masks.md, Ranges: lengths one past the 128- and 256-key tiles.
PAST_TILES = (129, 257)
# WINDOW-CONV's windows: None and sizes; 2047, 2048, 2049 around FIA's 2048 x 2048 compressed mask.
CONVERTER_WINDOWS = (None, 1, 2, 7, 512, 2047, 2048, 2049, 4096)


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
    """None, W = 1, the edge W = S - 1, S, S + 1 (and S + 2), and anything between."""
    return st.one_of(
        st.none(),
        st.sampled_from(sorted({1, max(1, seq_len - 1), seq_len, seq_len + 1, seq_len + 2})),
        st.integers(1, seq_len + 2),
    )


@st.composite
def mask_cases(draw, *, max_seq_len: int = 300, paddings=PADDING_PATTERNS) -> MaskCase:
    seq_len = draw(st.one_of(st.integers(1, 16), st.integers(17, max_seq_len), st.sampled_from(PAST_TILES)))
    return MaskCase(
        seq_len=seq_len,
        sliding_window=draw(model_pins.encoder_windows(windows(seq_len))),
        batch=draw(st.integers(1, 4)),
        padding=draw(st.sampled_from(paddings)),
        seed=draw(seeds()),
    )


@st.composite
def decode_mask_cases(draw, *, max_kv_len: int = 300) -> tuple[torch.Tensor, int, int]:
    """(seq_lens, kv_len, window): lengths 1..kv_len, including L = 1 and L = kv_len."""
    kv_len = draw(st.one_of(st.integers(1, 16), st.integers(17, max_kv_len), st.sampled_from(PAST_TILES)))
    edge = sorted({1, max(1, kv_len - 1), kv_len, kv_len + 1})  # W = L - 1, L, L + 1 for L = kv_len
    window = draw(st.one_of(st.sampled_from(edge), st.integers(1, kv_len + 2)))
    near = [n for n in (window - 1, window, window + 1) if 1 <= n <= kv_len] or [kv_len]  # the edge
    length = st.one_of(st.just(1), st.just(kv_len), st.integers(1, kv_len), st.sampled_from(near))
    lengths = near + draw(st.lists(length, min_size=0, max_size=3))
    # MASK-SWA-DECODE: any integer dtype (serving metadata is int32)
    return torch.tensor(lengths, dtype=draw(st.sampled_from((torch.int64, torch.int32)))), kv_len, window

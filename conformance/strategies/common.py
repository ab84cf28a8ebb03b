"""Pieces every family's strategies share."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

# The dtypes every family tests (inputs, attention q/k/v, scheduler model dtype).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def seeds(bits: int = 31):
    """A generator seed in 0..2**bits - 1."""
    return st.integers(0, 2**bits - 1)


def strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view: every other element of a buffer twice as long in
    the last dim (inputs may have any strides: MASK-ENC, MASK-SWA-DECODE, ATTN-LAYOUT-META,
    SERVE-LAYOUT). Made on ``t``'s device: moving a view to another device makes it contiguous."""
    return torch.stack([t, torch.zeros_like(t)], dim=-1)[..., 0]


def row_strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as the leading columns of a buffer one column wider: rows strided, the last
    dim contiguous (a block table sliced from a preallocated [max_seqs, max_blocks] one: SERVE-LAYOUT)."""
    return torch.cat([t, t[..., :1]], dim=-1)[..., : t.shape[-1]]

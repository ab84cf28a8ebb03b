"""Pieces every family's strategies share."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

# The dtypes every family tests (inputs, attention q/k/v, scheduler model dtype).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def seeds(bits: int = 31):
    """A generator seed in 0..2**bits - 1."""
    return st.integers(0, 2**bits - 1)

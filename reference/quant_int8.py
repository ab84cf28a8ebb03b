"""The per-token int8 quantizer's oracle (spec/quant.md, QUANT-INT8-SCALE and its refinements),
shared by ``reference.quant`` (which re-exports it) and ``reference.quant_moe`` (the w8a8 experts
quantize with it twice)."""

from __future__ import annotations

import torch

from reference.validation import require_floating

__all__ = ["INT8_MAX", "as_float64", "dynamic_int8_quant", "round_half_even", "validate_activation"]

INT8_MAX = 127  # QUANT-INT8-SCALE: symmetric, scale = amax / 127


def round_half_even(t: torch.Tensor) -> torch.Tensor:
    """QUANT-INT8-TIES: the nearest integer, ties to even (torch.round's rule)."""
    return torch.round(t)


def as_float64(x: torch.Tensor) -> torch.Tensor:
    """x's exact values in float64, detached (every oracle computes from them)."""
    return x.detach().to(torch.float64)


def validate_activation(x, name: str = "x") -> torch.Tensor:
    """QUANT-ERRORS: a floating tensor of rank >= 2 with a non-empty last dim."""
    require_floating(x, name)
    if x.dim() < 2 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have rank >= 2 and a non-empty last dim, got shape {tuple(x.shape)}")
    return x


def dynamic_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """QUANT-INT8-SCALE, -ROUND, -TIES, -ZERO-ROW: per-row (token) symmetric int8 quantization of
    x [..., K]: scale = amax(|x|) / 127 ([..., 1]); q = round_half_even(x / scale), 0 on a zero row."""
    validate_activation(x)
    x = as_float64(x)
    amax = x.abs().amax(-1, keepdim=True)
    scale = amax / INT8_MAX
    q = round_half_even(x * INT8_MAX / torch.where(amax > 0, amax, 1.0))
    return q.clamp(-INT8_MAX, INT8_MAX), scale

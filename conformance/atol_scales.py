"""Per-element atol scales of the rope and quantized-GEMM rows (spec/rope.md, ROPE-TOL; spec/quant.md,
QUANT-TOL): pure functions of the inputs, apart from conformance.tolerances so the table stays one
readable module; it imports and re-exports them (callers use ``conformance.tolerances``)."""

from __future__ import annotations

import torch


def pair_scale(x: torch.Tensor, cos_sin: torch.Tensor, is_neox_style: bool) -> torch.Tensor:
    """ROPE-TOL: per element of x [T, H, d], (|x_j| + |x_partner(j)|) * max(1, |c| + |s|) for the
    rotated dims (cos_sin [T, r]: each token's cache row, cat(cos, sin)), |x_j| for the rest."""
    x = x.detach().to(torch.float64).abs()
    r = cos_sin.shape[-1]
    half = r // 2
    j = torch.arange(r, device=x.device)
    partner = (j + half) % r if is_neox_style else j ^ 1
    frequency = j % half if is_neox_style else j // 2
    row = cos_sin.detach().to(x.device, torch.float64).abs()
    magnitude = (row[:, :half] + row[:, half:]).clamp(min=1.0)[:, frequency]  # [T, r]
    rotated = (x[..., :r] + x[..., partner]) * magnitude[:, None, :]
    return torch.cat([rotated, x[..., r:]], dim=-1)


def angle_scale(positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float) -> torch.Tensor:
    """ROPE-TOL: per element of rope_cos_sin's output, max(1, |attention_factor|) * (1 + p f)."""
    angles = positions.detach().to(torch.float64)[..., None] * inv_freq.detach().to(
        positions.device, torch.float64
    )
    scale = max(1.0, abs(float(attention_factor))) * (1.0 + angles.abs())
    return torch.cat([scale, scale], dim=-1)


# QUANT-TOL: the K up to which the quant row's atol (5e-4) covers a float32 sum's first-order K u32.
QUANT_SUM_K = 8192


def gemm_scale(a_deq: torch.Tensor, b_deq: torch.Tensor, *, float32_sum: bool = True) -> torch.Tensor:
    """QUANT-TOL (spec/quant.md): the GEMMs' atol scale M = |a_deq| @ |b_deq| ([M, K] and [K, N]);
    with ``float32_sum`` (the quant row) times K / QUANT_SUM_K past that K (a model's K, MODEL-QUANT)."""
    scale = a_deq.detach().cpu().double().abs() @ b_deq.detach().cpu().double().abs()
    return scale * max(1.0, a_deq.shape[-1] / QUANT_SUM_K) if float32_sum else scale

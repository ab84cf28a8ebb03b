"""The quant family's protocol (spec/quant.md), joined to ``backends.protocols``' tables there."""

from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["QuantOps"]


class QuantOps(Protocol):
    """int8 / fp8 activation quantizers and the quantized GEMMs (QUANT-*; ``reference.quant``):
    quantizers return ``(q, float32 scales)``, GEMMs ``out_dtype`` [M, N]."""

    def dynamic_int8_quant(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def int8_scaled_mm(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        scale_a: torch.Tensor,
        scale_b: torch.Tensor,
        *,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        """a int8 [M, K], b int8 [K, N], scale_a numel M or 1, scale_b numel N or 1 (float32)."""
        ...

    def fp8_quant(
        self, x: torch.Tensor, *, fp8_dtype: torch.dtype, scale: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def fp8_group_quant(
        self, x: torch.Tensor, *, group_size: int, fp8_dtype: torch.dtype, use_ue8m0: bool
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def fp8_block_scaled_mm(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        a_scales: torch.Tensor,
        b_scales: torch.Tensor,
        *,
        block_size: tuple[int, int],
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        """a [M, K], b [N, K] fp8; a_scales [M, ceil(K/bk)], b_scales [ceil(N/bn), ceil(K/bk)]."""
        ...

    def fp8_fn_to_fnuz(
        self, weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]: ...

    def w4a16_mm(
        self,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor,
        *,
        group_size: int,
        packing: str,
    ) -> torch.Tensor:
        """x [M, K] @ the int4 weight [K, N] of an AWQ or GPTQ checkpoint (int32 words), in x's dtype."""
        ...

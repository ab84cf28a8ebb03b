"""The Ascend adapter's norms (spec/norms.md through spec/ascend.md, CANN-RMS-NORM).

``npu_rms_norm`` takes gamma in x's dtype only, so the adapter casts the weight to x's dtype
(rounding a float32 weight of a bfloat16 model, one rounding NORM-TOL allows); Gemma's ``1 +
weight`` is formed in float32 from the upcast weight first (NORM-GEMMA), then cast. The fused ops
go through ``npu_add_rms_norm`` when x and residual share a dtype (its sum is formed, and
returned, in that dtype: NORM-FUSED-ADD's rounded sum); with two dtypes the adapter forms the sum in
float32, rounds it to x's dtype once and normalizes that. The ops want contiguous tensors
(inferred): views are copied first.
"""

from __future__ import annotations

import torch

from reference.norms import validate_norm_args

__all__ = ["install"]


def _gamma(weight: torch.Tensor, x: torch.Tensor, *, gemma: bool) -> torch.Tensor:
    """The op's gamma: weight (Gemma: 1 + weight, in float32) in x's dtype."""
    return ((1.0 + weight.float()) if gemma else weight).to(x.dtype).contiguous()


def _norm(self, x, weight, eps, *, gemma):
    eps = validate_norm_args(x, weight, eps)
    return self.ops.npu_rms_norm(x.contiguous(), _gamma(weight, x, gemma=gemma), eps)[0]


def _fused(self, x, residual, weight, eps, *, gemma):
    eps = validate_norm_args(x, weight, eps, residual)
    gamma = _gamma(weight, x, gemma=gemma)
    if residual.dtype == x.dtype:
        y, _, total = self.ops.npu_add_rms_norm(x.contiguous(), residual.contiguous(), gamma, eps)
        return y, total
    total = (x.float() + residual.float()).to(x.dtype)
    return self.ops.npu_rms_norm(total, gamma, eps)[0], total


def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    return _norm(self, x, weight, eps, gemma=False)


def gemma_rms_norm(self, x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    return _norm(self, x, weight, eps, gemma=True)


def fused_add_rms_norm(self, x, residual, weight, *, eps):
    return _fused(self, x, residual, weight, eps, gemma=False)


def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
    return _fused(self, x, residual, weight, eps, gemma=True)


def install(cls) -> None:
    """The four norm ops as methods of the adapter class ``cls``."""
    for op in (rms_norm, gemma_rms_norm, fused_add_rms_norm, gemma_fused_add_rms_norm):
        setattr(cls, op.__name__, op)

"""Emulated RMSNorm ops of torch_npu (spec/ascend.md, CANN-RMS-NORM): ``npu_rms_norm`` and
``npu_add_rms_norm``.

Both follow their documented restrictions, which the adapter has to meet: x float16, bfloat16 or
float32, gamma of x's dtype (the documentation: "数据类型需要和self保持一致"), gamma the trailing
dims of x. The normalization is computed in float32 and y returned in x's dtype (emulator
choice); ``npu_add_rms_norm`` forms ``x = x1 + x2`` in the inputs' dtype first, as op-plugin's
reference for the op does.
"""

from __future__ import annotations

import torch

__all__ = ["npu_add_rms_norm", "npu_rms_norm"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _require(x: torch.Tensor, gamma: torch.Tensor, name: str) -> None:
    if x.dtype not in DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {x.dtype}")
    if gamma.dtype != x.dtype:
        raise TypeError(f"gamma must have {name}'s dtype {x.dtype}, got {gamma.dtype}")
    if gamma.dim() == 0 or tuple(x.shape[x.dim() - gamma.dim() :]) != tuple(gamma.shape):
        raise ValueError(f"gamma's shape {tuple(gamma.shape)} must be the trailing dims of {tuple(x.shape)}")


def _normalize(x: torch.Tensor, gamma: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    h = x.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (h * rstd * gamma.float()).to(x.dtype), rstd


def npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(y, rstd): ``y = x * rsqrt(mean(x^2) + epsilon) * gamma`` over gamma's dims, rstd float32."""
    _require(self, gamma, "self")
    return _normalize(self, gamma, epsilon)


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(y, rstd, x): ``x = x1 + x2`` in the inputs' dtype, then npu_rms_norm(x, gamma, epsilon)."""
    _require(x1, gamma, "x1")
    if x2.dtype != x1.dtype or x2.shape != x1.shape:
        raise TypeError(f"x2 must have x1's dtype and shape, got {x2.dtype} {tuple(x2.shape)}")
    x = x1 + x2
    y, rstd = _normalize(x, gamma, epsilon)
    return y, rstd, x

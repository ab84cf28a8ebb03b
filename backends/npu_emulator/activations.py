"""Emulated ``torch_npu.npu_geglu`` and ``torch_npu.npu_swiglu`` (spec/ascend.md, CANN-GEGLU, CANN-SWIGLU).

- ``npu_geglu(x, dim=-1, approximate=1, activate_left=False) -> (y, gelu_part)``:
  approximate 0 = erf ("none"), 1 = tanh; activate_left=True gives gelu(left) * right, the
  DEFAULT False gives left * gelu(right). The split dim must be even; rank 1..8; fp32, fp16,
  bf16. Computed in fp32 and rounded once to the input dtype.
- ``npu_swiglu(x, dim=-1) = silu(left) * right``; contiguous, non-empty input only.
- ``npu_gelu(input, approximate="none")``: GELU, "none" (erf) or "tanh" (spec/ascend.md, CANN-GELU).
- ``npu_fast_gelu(input) = x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))``, i.e.
  ``x * sigmoid(1.702 x)`` (QuickGELU), NOT transformers' tanh FastGELU (spec/ascend.md,
  CANN-FAST-GELU). Both elementwise, rank up to 8, fp32/fp16/bf16, computed in fp32, one rounding.

Violations raise RuntimeError, as the real ops do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_APPROXIMATE = {0: "none", 1: "tanh"}


def _check(op: str, x: torch.Tensor, dim: int) -> int:
    if not isinstance(x, torch.Tensor):
        raise RuntimeError(f"{op}: x must be a tensor")
    if x.dtype not in SUPPORTED_DTYPES:
        raise RuntimeError(f"{op}: dtype {x.dtype} is not supported (float32, float16, bfloat16)")
    if not 1 <= x.dim() <= 8:
        raise RuntimeError(f"{op}: rank must be 1..8, got {x.dim()}")
    if dim != -1 and dim != x.dim() - 1:
        raise RuntimeError(f"{op}: this emulator supports only the last dim, got dim={dim}")
    if x.shape[-1] % 2:
        raise RuntimeError(f"{op}: the split dimension must be even, got {x.shape[-1]}")
    return x.shape[-1] // 2


def npu_geglu(x: torch.Tensor, dim: int = -1, approximate: int = 1, activate_left: bool = False):
    d = _check("npu_geglu", x, dim)
    if approximate not in _APPROXIMATE:
        raise RuntimeError(f"npu_geglu: approximate must be 0 or 1, got {approximate!r}")
    left, right = x[..., :d].float(), x[..., d:].float()
    gated, other = (left, right) if activate_left else (right, left)
    gelu_part = F.gelu(gated, approximate=_APPROXIMATE[approximate])
    return (gelu_part * other).to(x.dtype), gelu_part.to(x.dtype)


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    d = _check("npu_swiglu", x, dim)
    if x.numel() == 0:
        raise RuntimeError("npu_swiglu: empty tensors are not supported")
    if not x.is_contiguous():
        raise RuntimeError("npu_swiglu: x must be contiguous")
    return (F.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)


def _check_elementwise(op: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise RuntimeError(f"{op}: input must be a tensor")
    if x.dtype not in SUPPORTED_DTYPES:
        raise RuntimeError(f"{op}: dtype {x.dtype} is not supported (float32, float16, bfloat16)")
    if x.dim() > 8:
        raise RuntimeError(f"{op}: rank must be at most 8, got {x.dim()}")


def npu_gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:  # noqa: A002 - torch_npu's name
    _check_elementwise("npu_gelu", input)
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"npu_gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(input.float(), approximate=approximate).to(input.dtype)


def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch_npu's name
    _check_elementwise("npu_fast_gelu", input)
    v = input.float()
    magnitude = v.abs()
    return (v / (1.0 + torch.exp(-1.702 * magnitude)) * torch.exp(0.851 * (v - magnitude))).to(input.dtype)

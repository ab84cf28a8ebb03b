"""Oracles for the norm contracts (clauses NORM-*).

All oracles compute in float64 from the given input values and return float64 on the input's
device (the fused ops return a pair), whatever the inputs' dtypes and strides (NORM-MIXED,
NORM-LAYOUT). They are written from the formulas in the spec; the self-tests compare them with
explicit per-row sums and with transformers' modules as peers. ``normed_dtypes`` and
``residual_dtypes`` give the dtypes an output may have, ``normed_rounding_dtype`` the dtype whose
rounding a normalized output may carry (NORM-MIXED).
"""

from __future__ import annotations

import torch

from reference.validation import require_floating, require_positive_finite

__all__ = [
    "fused_add_rms_norm",
    "gemma_fused_add_rms_norm",
    "gemma_rms_norm",
    "normed_dtypes",
    "normed_rounding_dtype",
    "residual_dtypes",
    "rms_norm",
    "validate_norm_args",
]

NORM_OPS = ("rms_norm", "gemma_rms_norm", "fused_add_rms_norm", "gemma_fused_add_rms_norm")


def validate_norm_args(x, weight, eps, residual=None) -> float:
    """NORM-ERRORS: check a norm op's arguments and return eps as a float."""
    require_floating(x, "x")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension, got shape {tuple(x.shape)}")
    require_floating(weight, "weight")
    if tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(
            f"weight must have shape ({x.shape[-1]},) = [x.shape[-1]], got {tuple(weight.shape)}"
        )
    eps = require_positive_finite(eps, "eps")
    if residual is not None:
        require_floating(residual, "residual")
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    return eps


def _normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2, -1) + eps) in float64 (NORM-EPS: eps inside the square root)."""
    x = x.detach().to(torch.float64)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    """NORM-RMS: x * rsqrt(mean(x^2, -1) + eps) * weight; x [..., d], weight [d], eps keyword-only."""
    eps = validate_norm_args(x, weight, eps)
    return _normalized(x, eps) * weight.detach().to(x.device, torch.float64)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
    """NORM-GEMMA: x * rsqrt(mean(x^2, -1) + eps) * (1 + weight)."""
    eps = validate_norm_args(x, weight, eps)
    return _normalized(x, eps) * (1.0 + weight.detach().to(x.device, torch.float64))


def _add_then_norm(norm, x, residual, weight, eps) -> tuple[torch.Tensor, torch.Tensor]:
    """NORM-FUSED-ADD: (norm(x + residual), x + residual), the sum exact in float64."""
    validate_norm_args(x, weight, eps, residual)
    total = x.detach().to(torch.float64) + residual.detach().to(x.device, torch.float64)
    return norm(total, weight, eps=eps), total


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """NORM-FUSED-ADD: (rms_norm(x + residual), x + residual), the sum returned as the residual."""
    return _add_then_norm(rms_norm, x, residual, weight, eps)


def gemma_fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """NORM-FUSED-ADD: (gemma_rms_norm(x + residual), x + residual)."""
    return _add_then_norm(gemma_rms_norm, x, residual, weight, eps)


def _dtype(value, name: str) -> torch.dtype:
    if isinstance(value, torch.Tensor):
        value = value.dtype
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise TypeError(f"{name} must be a floating dtype or tensor, got {value!r}")
    return value


def residual_dtypes(x, residual) -> tuple[torch.dtype, ...]:
    """NORM-MIXED: the dtypes new_residual may have: x's, or the promotion of x's and residual's
    (tensors or dtypes; one entry when they agree)."""
    x_dtype, r_dtype = _dtype(x, "x"), _dtype(residual, "residual")
    return tuple(dict.fromkeys((x_dtype, torch.promote_types(x_dtype, r_dtype))))


def normed_dtypes(op: str, x, weight, residual=None) -> tuple[torch.dtype, ...]:
    """NORM-MIXED: the dtypes the normalized output of ``op`` may have.

    The Gemma forms: the dtype of their input (x, or for the fused op the sum's, one of
    ``residual_dtypes``); the LLaMA forms also that dtype promoted with weight's (the weight
    multiplied after the cast back, as transformers' LlamaRMSNorm and vLLM's forward_native do).
    """
    if op not in NORM_OPS:
        raise ValueError(f"op must be one of {NORM_OPS}, got {op!r}")
    w_dtype = _dtype(weight, "weight")
    if "fused" in op:
        if residual is None:
            raise ValueError(f"residual must be given for {op}")
        inputs = residual_dtypes(x, residual)
    else:
        inputs = (_dtype(x, "x"),)
    promoted = () if "gemma" in op else tuple(torch.promote_types(d, w_dtype) for d in inputs)
    return tuple(dict.fromkeys((*inputs, *promoted)))


def normed_rounding_dtype(op: str, x, weight) -> torch.dtype:
    """NORM-MIXED: the dtype whose roundings (NORM-TOL's count) the normalized output of ``op`` may
    carry, whatever dtype it is returned in: x's for the Gemma forms (``1 + weight`` in float32);
    for the LLaMA forms the less precise of x's and weight's (vLLM 0.33's ``x.to(weight.dtype) *
    weight`` rounds the normalized x to a narrower weight's dtype before the product)."""
    if op not in NORM_OPS:
        raise ValueError(f"op must be one of {NORM_OPS}, got {op!r}")
    x_dtype, w_dtype = _dtype(x, "x"), _dtype(weight, "weight")
    if "gemma" in op:
        return x_dtype
    return max((x_dtype, w_dtype), key=lambda dtype: torch.finfo(dtype).eps)

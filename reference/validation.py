"""Argument checks shared by the oracles, and public for backends and mutants that must raise the
same errors (same exception types and messages).

Every check names the argument and what was expected, so a user's mistake reads as one.
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = [
    "require_choice",
    "require_even_last_dim",
    "require_float_tensor",
    "require_floating",
    "require_int",
    "require_positive_finite",
    "require_positive_finite_or_none",
    "require_same_dtype",
    "require_tensor",
    "require_with_data",
]


def require_with_data(value: torch.Tensor, name: str) -> torch.Tensor:
    """A tensor that holds data: a meta tensor (shape and dtype only) is a ValueError naming ``name``."""
    if value.is_meta:
        raise ValueError(f"{name} is a meta tensor (no data to compute from); pass it on a real device")
    return value


def require_same_dtype(name: str, dtype: torch.dtype, **others: torch.Tensor) -> None:
    """ATTN-ERRORS / SERVE-ERRORS: every tensor of ``others`` has ``name``'s ``dtype``; ValueError
    naming the first that does not (PyTorch's SDPA requires q, k and v of one dtype)."""
    for other, tensor in others.items():
        if tensor.dtype != dtype:
            raise ValueError(f"{other} must have {name}'s dtype {dtype}, got {tensor.dtype}")


def require_tensor(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return require_with_data(value, name)


def require_floating(value, name: str) -> torch.Tensor:
    require_tensor(value, name)
    if not value.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {value.dtype}")
    return value


def require_float_tensor(value, name: str, rank: int) -> torch.Tensor:
    """A floating, non-empty tensor of exactly ``rank`` dimensions; ValueError naming ``name``."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise ValueError(
            f"{name} must be a floating tensor, got {getattr(value, 'dtype', type(value).__name__)}"
        )
    if value.dim() != rank or value.numel() == 0:
        raise ValueError(f"{name} must be a non-empty {rank}-D tensor, got shape {tuple(value.shape)}")
    return require_with_data(value, name)


def require_even_last_dim(x: torch.Tensor, name: str) -> int:
    """Return half the last dimension of ``x``, which must have rank >= 1 and a positive even last dim."""
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension, got a 0-dim tensor")
    last = x.shape[-1]
    if last == 0 or last % 2:
        raise ValueError(
            f"{name}.shape[-1] must be a positive even number, got {last} (shape {tuple(x.shape)})"
        )
    return last // 2


def require_int(value, name: str, *, minimum: int) -> int:
    """An integer >= ``minimum`` (bools are rejected); returned as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def require_choice(value, name: str, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def require_positive_finite(value, name: str) -> float:
    """A finite real number > 0 (bools, tensors and None are rejected)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def require_positive_finite_or_none(value, name: str) -> float | None:
    """``None``, or a finite real number > 0 (bools and tensors are rejected)."""
    if value is None:
        return None
    try:
        return require_positive_finite(value, name)
    except ValueError:
        raise ValueError(f"{name} must be None or a finite number > 0, got {value!r}") from None

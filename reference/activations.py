"""Oracles for the activation contracts: spec/activations.md.

All oracles compute in float64 from the given input values and return float64 on the input's
device. They are written from the formulas in the spec, not from ``torch.nn.functional``, so
the self-tests can compare them with it as an independent peer.
"""

from __future__ import annotations

import math

import torch

from reference.validation import (
    require_choice,
    require_even_last_dim,
    require_floating,
    require_positive_finite_or_none,
)

__all__ = [
    "APPROXIMATE_MODES",
    "gelu",
    "silu",
    "gelu_and_mul",
    "silu_and_mul",
    "swiglu_step_and_mul",
    "npu_geglu_args",
    "validate_gated_input",
]

APPROXIMATE_MODES = ("none", "tanh")


def validate_gated_input(x, name: str = "x") -> int:
    """ACT-ERRORS: check a gated-activation input and return d, half its last dimension."""
    require_floating(x, name)
    return require_even_last_dim(x, name)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU in float64. "none": x * Phi(x) with the exact erf; "tanh": the tanh approximation."""
    require_choice(approximate, "approximate", APPROXIMATE_MODES)
    x = x.to(torch.float64)
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU in float64: x * sigmoid(x). silu(-inf) is NaN, as in torch."""
    x = x.to(torch.float64)
    return x * torch.sigmoid(x)


def gelu_and_mul(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """ACT-GEGLU: gelu(x[..., :d], approximate) * x[..., d:], d = x.shape[-1] // 2 (GELU on the LEFT half)."""
    d = validate_gated_input(x)
    require_choice(approximate, "approximate", APPROXIMATE_MODES)
    x = x.detach().to(torch.float64)
    return gelu(x[..., :d], approximate) * x[..., d:]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """ACT-SWIGLU: silu(x[..., :d]) * x[..., d:]."""
    d = validate_gated_input(x)
    x = x.detach().to(torch.float64)
    return silu(x[..., :d]) * x[..., d:]


def swiglu_step_and_mul(x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
    """ACT-SWIGLU-STEP: silu(gate).clamp(max=limit) * up.clamp(-limit, limit); limit=None: no clamp.

    gate = x[..., :d], up = x[..., d:]. The gate is clamped AFTER silu and only from above.
    There is no default limit: the keyword is required. torch.clamp propagates NaN.
    """
    d = validate_gated_input(x)
    limit = require_positive_finite_or_none(limit, "limit")
    x = x.detach().to(torch.float64)
    gate, up = silu(x[..., :d]), x[..., d:]
    if limit is None:
        return gate * up
    return gate.clamp(max=limit) * up.clamp(-limit, limit)


def npu_geglu_args(approximate: str) -> dict:
    """ACT-GEGLU-NPU-ARGS: keyword arguments for ``torch_npu.npu_geglu`` that give ACT-GEGLU.

    approximate "tanh" -> 1, "none" -> 0; activate_left=True (the op's default False gates the
    RIGHT half); dim=-1.
    """
    require_choice(approximate, "approximate", APPROXIMATE_MODES)
    return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0, "activate_left": True}

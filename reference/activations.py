"""Oracles for the activation contracts (clauses ACT-*).

All oracles compute in float64 from the given input values and return float64 on the input's
device. They are written from the formulas in the spec, not from ``torch.nn.functional``, so
the self-tests can compare them with it as an independent peer.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import torch

from reference.validation import (
    require_choice,
    require_even_last_dim,
    require_floating,
    require_positive_finite,
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
    "npu_gelu_variant_args",
    "silu_clamped_and_mul",
    "swiglu_oai_and_mul",
    "swiglu_limit",
    "oai_gate_up",
    "new_gelu",
    "fast_gelu",
    "quick_gelu",
    "situ_and_mul",
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
    """ACT-GEGLU: gelu(x[..., :d], approximate) * x[..., d:], d = x.shape[-1] // 2 (GELU on the LEFT half).

    x [..., 2d] floating -> [..., d] float64; ``approximate`` "none" (erf) or "tanh", no default.
    """
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


GELU_VARIANTS = ("new_gelu", "fast_gelu", "quick_gelu")


def npu_gelu_variant_args(op: str) -> dict:
    """ACT-GELU-NPU-OPS: the ``torch_npu`` op (``"op"``) and its keyword arguments that give ``op``.

    new_gelu and fast_gelu (transformers' FastGELU is the tanh GELU) -> npu_gelu, approximate
    "tanh"; quick_gelu (x * sigmoid(1.702 x)) -> npu_fast_gelu, CANN's FastGelu, the sigmoid form.
    """
    require_choice(op, "op", GELU_VARIANTS)
    return {"op": "npu_fast_gelu"} if op == "quick_gelu" else {"op": "npu_gelu", "approximate": "tanh"}


# --- clamped look-alikes and the limit's selection -------------------------------------


def silu_clamped_and_mul(x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
    """ACT-SILU-CLAMPED: silu(gate.clamp(max=limit)) * up.clamp(-limit, limit); limit=None: no clamp.

    The gate is clamped BEFORE the SiLU (vLLM SiluAndMulWithClamp), unlike swiglu_step_and_mul.
    """
    d = validate_gated_input(x)
    limit = require_positive_finite_or_none(limit, "limit")
    x = x.detach().to(torch.float64)
    gate, up = x[..., :d], x[..., d:]
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return silu(gate) * up


def require_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def oai_gate_up(x: torch.Tensor, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """ACT-SWIGLU-OAI: (gate, up): x[..., ::2], x[..., 1::2] when interleaved, else the halves."""
    if interleaved:
        return x[..., ::2], x[..., 1::2]
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def swiglu_oai_and_mul(
    x: torch.Tensor, *, alpha: float, limit: float | None, interleaved: bool
) -> torch.Tensor:
    """ACT-SWIGLU-OAI: g * sigmoid(alpha g) * (u + 1), g = gate.clamp(max=limit), u = up.clamp(-limit, limit).

    gpt-oss: alpha 1.702, limit 7.0, interleaved=True. limit=None: no clamp. No defaults.
    """
    validate_gated_input(x)
    alpha = require_positive_finite(alpha, "alpha")
    limit = require_positive_finite_or_none(limit, "limit")
    require_bool(interleaved, "interleaved")
    gate, up = oai_gate_up(x.detach().to(torch.float64), interleaved)
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (up + 1.0)


LIMIT_KEYS = {False: "swiglu_limits", True: "swiglu_limits_shared"}


def swiglu_limit(config, layer_idx: int, *, shared: bool) -> float | None:
    """ACT-LIMIT-CONFIG(-OFF): the clamp limit of layer ``layer_idx`` from a Step-3.5-shaped config:
    a mapping (config.json) or a config object with the two list attributes (transformers'
    ``Step3p7TextConfig``).

    Reads ``swiglu_limits_shared`` for the shared expert, ``swiglu_limits`` for the routed ones.
    A missing key, a None list, a list too short, a None value or a value <= 0 gives None (no
    clamp); a value > 0, an int (a config's 3) or a float, is returned as float. A bool or a
    non-number is a ValueError naming config.
    """
    if isinstance(config, Mapping):
        lookup = config.get
    elif any(hasattr(config, key) for key in LIMIT_KEYS.values()):
        lookup = lambda key: getattr(config, key, None)  # noqa: E731 - a config object's attributes
    else:
        raise TypeError(
            f"config must be a mapping or a config object with {sorted(LIMIT_KEYS.values())}, "
            f"got {type(config).__name__}"
        )
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, numbers.Integral) or layer_idx < 0:
        raise ValueError(f"layer_idx must be an int >= 0, got {layer_idx!r}")
    key = LIMIT_KEYS[require_bool(shared, "shared")]
    limits = lookup(key)
    if limits is None or layer_idx >= len(limits):
        return None
    value = limits[layer_idx]
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or math.isnan(value)
        or math.isinf(value)
    ):
        raise ValueError(f"config[{key!r}][{layer_idx}] must be a finite number or None, got {value!r}")
    return float(value) if value > 0 else None


# --- GELU tanh-family variants (ACT-GELU-VARIANTS) ------------------------------------------------


def new_gelu(x: torch.Tensor) -> torch.Tensor:
    """ACT-GELU-VARIANTS: NewGELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    require_floating(x, "x")
    return gelu(x.detach(), "tanh")


def fast_gelu(x: torch.Tensor) -> torch.Tensor:
    """ACT-GELU-VARIANTS: FastGELU, 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2)))."""
    require_floating(x, "x")
    x = x.detach().to(torch.float64)
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * x * (1.0 + 0.044715 * x * x)))


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """ACT-GELU-VARIANTS: QuickGELU, x * sigmoid(1.702 x)."""
    require_floating(x, "x")
    x = x.detach().to(torch.float64)
    return x * torch.sigmoid(1.702 * x)


# --- SiTU, the Kimi-K3 soft-clipped SwiGLU (ACT-SITU) ------------------------------------------------


def situ_and_mul(x: torch.Tensor, *, beta: float, linear_beta: float | None) -> torch.Tensor:
    """ACT-SITU: beta tanh(gate / beta) sigmoid(gate) * linear_beta tanh(up / linear_beta); no defaults.

    The soft-clip is on the gate, before the sigmoid product; linear_beta=None: up is not soft-clipped.
    """
    d = validate_gated_input(x)
    beta = require_positive_finite(beta, "beta")
    linear_beta = require_positive_finite_or_none(linear_beta, "linear_beta")
    x = x.detach().to(torch.float64)
    gate, up = x[..., :d], x[..., d:]
    if linear_beta is not None:
        up = linear_beta * torch.tanh(up / linear_beta)
    return beta * torch.tanh(gate / beta) * torch.sigmoid(gate) * up

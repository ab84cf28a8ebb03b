"""The ``native`` backend: eager PyTorch on any device.

It validates like the oracles (same exception types) and then calls plain
``torch.nn.functional`` ops in the input's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference._validation import require_choice, require_positive_finite_or_none
from reference.activations import APPROXIMATE_MODES, validate_gated_input


def gelu_and_mul(x: torch.Tensor, *, approximate: str) -> torch.Tensor:
    d = validate_gated_input(x)
    require_choice(approximate, "approximate", APPROXIMATE_MODES)
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = validate_gated_input(x)
    return F.silu(x[..., :d]) * x[..., d:]


def swiglu_step_and_mul(x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
    d = validate_gated_input(x)
    limit = require_positive_finite_or_none(limit, "limit")
    gate, up = F.silu(x[..., :d]), x[..., d:]
    if limit is None:
        return gate * up
    return gate.clamp(max=limit) * up.clamp(-limit, limit)


class NativeBackend:
    name = "native"

    def unavailable(self, device: torch.device) -> str | None:
        return None

    gelu_and_mul = staticmethod(gelu_and_mul)
    silu_and_mul = staticmethod(silu_and_mul)
    swiglu_step_and_mul = staticmethod(swiglu_step_and_mul)


BACKEND = NativeBackend()

"""The ``compiled`` backend: ``torch.compile(dynamic=True)`` of the native activation math.

Design: validation runs eagerly (the compiled region never raises); each op flattens its
gate and up halves to 1-D before the compiled kernel, so ranks and batch shapes share one
graph; and the clamp limit travels as a 0-dim tensor, so a new limit value is an input,
not a guard. Compiles therefore depend only on dtype and mode (a handful per op), never on
the Hypothesis example. It is skipped where no compiler toolchain exists (a C++ compiler
on CPU, triton on CUDA).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from backends._toolchain import compile_unavailable
from reference.activations import APPROXIMATE_MODES, validate_gated_input
from reference.validation import require_choice, require_positive_finite_or_none


def _halves_1d(x: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x[..., :d].reshape(-1), x[..., d:].reshape(-1)


@functools.cache
def _kernels():
    compile_ = functools.partial(torch.compile, dynamic=True)

    @compile_
    def geglu(gate, up, approximate: str):
        return F.gelu(gate, approximate=approximate) * up

    @compile_
    def swiglu(gate, up):
        return F.silu(gate) * up

    @compile_
    def swiglu_step(gate, up, limit):
        return torch.minimum(F.silu(gate), limit) * torch.clamp(up, -limit, limit)

    return geglu, swiglu, swiglu_step


class CompiledBackend:
    name = "compiled"

    def unavailable(self, device: torch.device) -> str | None:
        return compile_unavailable(device)

    def gelu_and_mul(self, x: torch.Tensor, *, approximate: str) -> torch.Tensor:
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        gate, up = _halves_1d(x, d)
        return _kernels()[0](gate, up, approximate).reshape(*x.shape[:-1], d)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        d = validate_gated_input(x)
        gate, up = _halves_1d(x, d)
        return _kernels()[1](gate, up).reshape(*x.shape[:-1], d)

    def swiglu_step_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = _halves_1d(x, d)
        if limit is None:
            out = _kernels()[1](gate, up)
        else:
            out = _kernels()[2](gate, up, torch.tensor(limit, dtype=x.dtype, device=x.device))
        return out.reshape(*x.shape[:-1], d)


BACKEND = CompiledBackend()

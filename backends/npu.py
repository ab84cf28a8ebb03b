"""The Ascend adapter, as ``npu`` (real ``torch_npu`` on an NPU) and ``npu-emulated``.

Both are the same ``AscendBackend`` code; only the op module differs: ``torch_npu`` itself,
or ``backends.npu_emulator`` (pure PyTorch, runs anywhere). So the emulated backend tests
the adapter logic (argument mapping, defaults, layouts) on a CPU-only machine, and the real
one tests the kernels where an NPU is present. torch_npu is imported only inside a guard.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from reference._validation import require_choice, require_positive_finite_or_none
from reference.activations import APPROXIMATE_MODES, validate_gated_input


def import_torch_npu() -> types.ModuleType | None:
    try:
        return importlib.import_module("torch_npu")
    except Exception:  # ImportError, or a broken CANN install raising at import
        return None


def _real_ops_unavailable(device: torch.device) -> str | None:
    if device.type != "npu":
        return f"the npu backend runs only on npu devices, not {device.type}"
    if import_torch_npu() is None:
        return "torch_npu is not installed or failed to import"
    return None


def _emulated_ops_unavailable(device: torch.device) -> str | None:
    return None


class AscendBackend:
    """The adapter from the suite's ops to the Ascend fused ops."""

    def __init__(
        self,
        name: str,
        load_ops: Callable[[], types.ModuleType],
        unavailable: Callable[[torch.device], str | None],
    ):
        self.name = name
        self._load_ops = load_ops
        self._unavailable = unavailable

    def unavailable(self, device: torch.device) -> str | None:
        return self._unavailable(device)

    @property
    def ops(self) -> types.ModuleType:
        return self._load_ops()

    # ACT-GEGLU-NPU-ARGS: the whole mapping lives here, so it can be checked on its own.
    def npu_geglu_args(self, approximate: str) -> dict:
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0, "activate_left": True}

    def gelu_and_mul(self, x: torch.Tensor, *, approximate: str) -> torch.Tensor:
        validate_gated_input(x)
        y, _ = self.ops.npu_geglu(x, **self.npu_geglu_args(approximate))
        return y

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        validate_gated_input(x)
        return self.ops.npu_swiglu(x.contiguous(), dim=-1)

    def swiglu_step_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        if limit is None:
            return self.silu_and_mul(x)
        gate, up = x[..., :d], x[..., d:]
        return F.silu(gate).clamp(max=limit) * up.clamp(-limit, limit)


def _load_emulator() -> types.ModuleType:
    return importlib.import_module("backends.npu_emulator")


BACKEND = AscendBackend("npu", import_torch_npu, _real_ops_unavailable)
EMULATED = AscendBackend("npu-emulated", _load_emulator, _emulated_ops_unavailable)

"""Wrong activation backends: the field's regressions (../shared/field-notes.md, section 1)."""

from __future__ import annotations

import torch.nn.functional as F

from backends.native import NativeBackend
from backends.npu import EMULATED, AscendBackend
from reference.activations import validate_gated_input


class _WrongAscend(AscendBackend):
    def __init__(self, name: str):
        super().__init__(name, EMULATED._load_ops, EMULATED._unavailable)


class GegluFlagSwapped(_WrongAscend):
    """npu_geglu's approximate flag mapped backwards: "tanh" -> 0, "none" -> 1."""

    def npu_geglu_args(self, approximate):
        return {"dim": -1, "approximate": 0 if approximate == "tanh" else 1, "activate_left": True}


class GegluDefaultActivateLeft(_WrongAscend):
    """activate_left left at the op default (False): GELU gates the RIGHT half."""

    def npu_geglu_args(self, approximate):
        return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0}


class _WrongStep(NativeBackend):
    def step(self, gate, up, limit):
        raise NotImplementedError

    def swiglu_step_and_mul(self, x, *, limit):
        d = validate_gated_input(x)
        return self.step(x[..., :d], x[..., d:], limit)


class GateClampedBeforeSilu(_WrongStep):
    """The other model family's contract: silu(gate.clamp(max=limit))."""

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


class UpClampedOneSide(_WrongStep):
    """up clamped from above only: up.clamp(max=limit)."""

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate).clamp(max=limit) * up.clamp(max=limit)


class LimitIgnored(_WrongStep):
    """The clamp is missing altogether (the NPU path before the Step-3.5 fix)."""

    def step(self, gate, up, limit):
        return F.silu(gate) * up


class DefaultLimitSeven(_WrongStep):
    """A silent default: limit None treated as 7.0 (the NPU helper's default)."""

    def step(self, gate, up, limit):
        limit = 7.0 if limit is None else limit
        return F.silu(gate).clamp(max=limit) * up.clamp(-limit, limit)


def _named(cls, name):
    backend = cls(name) if issubclass(cls, AscendBackend) else cls()
    backend.name = name
    return backend


BACKENDS = [
    _named(GegluFlagSwapped, "wrong-geglu-flag-swapped"),
    _named(GegluDefaultActivateLeft, "wrong-geglu-default-activate-left"),
    _named(GateClampedBeforeSilu, "wrong-gate-clamped-before-silu"),
    _named(UpClampedOneSide, "wrong-up-clamped-one-side"),
    _named(LimitIgnored, "wrong-limit-ignored"),
    _named(DefaultLimitSeven, "wrong-default-limit-seven"),
]

EXPECTED = {
    "wrong-geglu-flag-swapped": {"ACT-GEGLU-MODES", "ACT-GEGLU-NPU-ARGS"},
    "wrong-geglu-default-activate-left": {"ACT-GEGLU", "ACT-GEGLU-NPU-ARGS"},
    "wrong-gate-clamped-before-silu": {"ACT-SWIGLU-STEP"},
    "wrong-up-clamped-one-side": {"ACT-SWIGLU-STEP"},
    "wrong-limit-ignored": {"ACT-SWIGLU-STEP", "ACT-SWIGLU-STEP-BOUND"},
    "wrong-default-limit-seven": {"ACT-SWIGLU-STEP-NO-LIMIT"},
}

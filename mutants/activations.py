"""Activation mutants: the field's regressions (field notes, sections 1 and 3) and their neighbours."""

from __future__ import annotations

import torch.nn.functional as F

from backends.native import NativeBackend
from backends.npu import EMULATED, AscendBackend
from reference.activations import validate_gated_input


class _WrongAscend(AscendBackend):
    def __init__(self, name: str):
        super().__init__(name, EMULATED._load_ops, EMULATED._unavailable)


class GegluFlagSwapped(_WrongAscend):
    """npu_geglu's approximate flag mapped backwards: "tanh" -> 0, "none" -> 1.

    Origin: a C header comment that states the mapping reversed (field notes, section 3).
    """

    clauses = {"ACT-GEGLU-MODES", "ACT-GEGLU-NPU-ARGS"}

    def npu_geglu_args(self, approximate):
        return {"dim": -1, "approximate": 0 if approximate == "tanh" else 1, "activate_left": True}


class GegluDefaultActivateLeft(_WrongAscend):
    """activate_left left at the op default (False): GELU gates the RIGHT half.

    Origin: npu_geglu's default is activate_left=False; the SANA port had to pass True.
    """

    clauses = {"ACT-GEGLU", "ACT-GEGLU-NPU-ARGS"}

    def npu_geglu_args(self, approximate):
        return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0}


class _WrongStep(NativeBackend):
    def step(self, gate, up, limit):
        raise NotImplementedError

    def swiglu_step_and_mul(self, x, *, limit):
        d = validate_gated_input(x)
        return self.step(x[..., :d], x[..., d:], limit)


class GateClampedBeforeSilu(_WrongStep):
    """The gate clamped BEFORE the SiLU: silu(gate.clamp(max=limit)).

    Origin: another model family's contract, copied into the wrong model.
    """

    clauses = {"ACT-SWIGLU-STEP"}

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


class UpClampedOneSide(_WrongStep):
    """up clamped from above only: up.clamp(max=limit).

    Origin: the gate's one-sided clamp pattern applied to up as well.
    """

    clauses = {"ACT-SWIGLU-STEP", "ACT-SWIGLU-STEP-BOUND"}

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate).clamp(max=limit) * up.clamp(max=limit)


class LimitIgnored(_WrongStep):
    """The clamp is missing altogether.

    Origin: the Step-3.5 NPU path before the fix (field notes, section 1).
    """

    clauses = {"ACT-SWIGLU-STEP", "ACT-SWIGLU-STEP-BOUND"}

    def step(self, gate, up, limit):
        return F.silu(gate) * up


class DefaultLimitSeven(_WrongStep):
    """A silent default: limit None treated as 7.0.

    Origin: the NPU helper's default of 7.0 (field notes, section 1).
    """

    clauses = {"ACT-SWIGLU-STEP-NO-LIMIT"}

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

"""Activation mutants: the field's regressions (spec/activations.md, Sources) and their neighbours.

Each class is one realistic bug in an otherwise correct backend (the native or the emulated
Ascend adapter); its docstring says what the bug is and where such bugs come from, and
``clauses`` lists the clauses of which at least one must fail.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from mutants import _activations_clamped as clamped
from reference.activations import APPROXIMATE_MODES, GELU_VARIANTS, validate_gated_input
from reference.validation import require_choice, require_positive_finite_or_none

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_activations", "conformance.test_activations_clamped"]


class _AscendMutant(AscendBackend):
    name = ""

    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)


class GegluFlagSwapped(_AscendMutant):
    """npu_geglu's approximate flag mapped backwards: "tanh" -> 0, "none" -> 1.

    Origin: a C header comment that states the mapping reversed (spec/ascend.md, CANN-GEGLU).
    Caught by: ACT-GEGLU-MODES, ACT-GEGLU-NPU-ARGS.
    """

    name = "geglu-flag-swapped"
    clauses = {"ACT-GEGLU-MODES", "ACT-GEGLU-NPU-ARGS"}

    def npu_geglu_args(self, approximate):
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return {"dim": -1, "approximate": 0 if approximate == "tanh" else 1, "activate_left": True}


class GegluDefaultActivateLeft(_AscendMutant):
    """activate_left left at the op default (False): GELU gates the RIGHT half.

    Origin: npu_geglu's default is activate_left=False; the SANA port had to pass True.
    Caught by: ACT-GEGLU, ACT-GEGLU-NPU-ARGS.
    """

    name = "geglu-default-activate-left"
    clauses = {"ACT-GEGLU", "ACT-GEGLU-NPU-ARGS"}

    def npu_geglu_args(self, approximate):
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return {"dim": -1, "approximate": 1 if approximate == "tanh" else 0}


class NpuFastGeluForFastGelu(_AscendMutant):
    """fast_gelu mapped onto torch_npu.npu_fast_gelu, the op of the same name: CANN's FastGelu is
    the sigmoid form x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)) = x * sigmoid(1.702 x)
    (QuickGELU), transformers' FastGELUActivation the tanh GELU (up to 0.021 apart).

    Origin: activation tables keyed by name, where "gelu_fast" reads as CANN's FastGelu
    (spec/ascend.md, CANN-FAST-GELU).
    Caught by: ACT-GELU-NPU-OPS, ACT-GELU-VARIANTS.
    """

    name = "npu-fast-gelu-for-fast-gelu"
    clauses = {"ACT-GELU-NPU-OPS", "ACT-GELU-VARIANTS"}

    def npu_gelu_variant_args(self, op):
        require_choice(op, "op", GELU_VARIANTS)
        if op in ("fast_gelu", "quick_gelu"):
            return {"op": "npu_fast_gelu"}
        return {"op": "npu_gelu", "approximate": "tanh"}


class GegluDiffusersHalf(NativeBackend):
    """GELU on the RIGHT half: ``left * gelu(right)``.

    Origin: diffusers' own GEGLU module gates the right half; code copied from it into a
    framework whose contract gates the left.
    Caught by: ACT-GEGLU.
    """

    name = "geglu-diffusers-half"
    clauses = {"ACT-GEGLU"}

    def gelu_and_mul(self, x, *, approximate):
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return x[..., :d] * F.gelu(x[..., d:], approximate=approximate)


class GegluModeIgnored(NativeBackend):
    """The approximate argument is dropped: always tanh.

    Origin: native gelu on NPU may ignore ``approximate`` and use tanh (torch_npu docs).
    Caught by: ACT-GEGLU, ACT-GEGLU-MODES.
    """

    name = "geglu-mode-ignored"
    clauses = {"ACT-GEGLU-MODES", "ACT-GEGLU"}

    def gelu_and_mul(self, x, *, approximate):
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


class GegluBf16Compute(NativeBackend):
    """GELU and product computed in bfloat16 end to end, whatever the input dtype.

    Origin: a fused kernel that only has a bf16 path, fed fp32 activations.
    Caught by: ACT-GEGLU, ACT-GEGLU-MODES.
    """

    name = "geglu-bf16-compute"
    clauses = {"ACT-GEGLU", "ACT-GEGLU-MODES"}

    def gelu_and_mul(self, x, *, approximate):
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        low = x.to(torch.bfloat16)
        return (F.gelu(low[..., :d], approximate=approximate) * low[..., d:]).to(x.dtype)


class SiluAsQuickGelu(NativeBackend):
    """SiLU replaced by ``x * sigmoid(1.702 x)`` (the quick-GELU approximation).

    Origin: activation tables keyed by name where "swish"/"quick_gelu" entries get mixed up.
    Caught by: ACT-SWIGLU.
    """

    name = "silu-as-quick-gelu"
    clauses = {"ACT-SWIGLU"}

    def silu_and_mul(self, x):
        d = validate_gated_input(x)
        gate = x[..., :d]
        return gate * torch.sigmoid(1.702 * gate) * x[..., d:]


class _StepMutant(NativeBackend):
    """Shared plumbing: validation as in the contract, then ``step(gate, up, limit)``."""

    def step(self, gate, up, limit):
        raise NotImplementedError

    def swiglu_step_and_mul(self, x, *, limit):
        d = validate_gated_input(x)
        return self.step(x[..., :d], x[..., d:], require_positive_finite_or_none(limit, "limit"))


class GateClampedBeforeSilu(_StepMutant):
    """The gate clamped BEFORE the SiLU: silu(gate.clamp(max=limit)).

    Origin: another model family's contract (vLLM SiluAndMulWithClamp, ACT-SILU-CLAMPED),
    copied into the wrong model.
    Caught by: ACT-SWIGLU-STEP, ACT-CLAMP-ORDER.
    """

    name = "gate-clamped-before-silu"
    clauses = {"ACT-SWIGLU-STEP", "ACT-CLAMP-ORDER"}

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


class GateClampSymmetric(_StepMutant):
    """The gate clamped on both sides: silu(gate).clamp(-limit, limit).

    Origin: the up clamp's pattern applied to the gate as well.
    Caught by: ACT-SWIGLU-STEP, ACT-SWIGLU-STEP-ASYM.
    """

    name = "gate-clamp-symmetric"
    clauses = {"ACT-SWIGLU-STEP-ASYM", "ACT-SWIGLU-STEP"}

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate).clamp(-limit, limit) * up.clamp(-limit, limit)


class UpClampedOneSide(_StepMutant):
    """up clamped from above only: up.clamp(max=limit).

    Origin: the gate's one-sided clamp pattern applied to up as well.
    Caught by: ACT-SWIGLU-STEP, ACT-SWIGLU-STEP-BOUND.
    """

    name = "up-clamped-one-side"
    clauses = {"ACT-SWIGLU-STEP", "ACT-SWIGLU-STEP-BOUND"}

    def step(self, gate, up, limit):
        if limit is None:
            return F.silu(gate) * up
        return F.silu(gate).clamp(max=limit) * up.clamp(max=limit)


class LimitIgnored(_StepMutant):
    """The clamp is missing altogether.

    Origin: the Step-3.5 NPU path before the fix (spec/activations.md, ACT-SWIGLU-STEP).
    Caught by: ACT-SWIGLU-STEP, ACT-SWIGLU-STEP-BOUND.
    """

    name = "limit-ignored"
    clauses = {"ACT-SWIGLU-STEP", "ACT-SWIGLU-STEP-BOUND"}

    def step(self, gate, up, limit):
        return F.silu(gate) * up


class DefaultLimitSeven(_StepMutant):
    """A silent default: limit None treated as 7.0.

    Origin: the NPU helper's default of 7.0 (spec/activations.md, ACT-SWIGLU-STEP-NO-LIMIT).
    Caught by: ACT-SWIGLU-STEP-NO-LIMIT.
    """

    name = "default-limit-seven"
    clauses = {"ACT-SWIGLU-STEP-NO-LIMIT"}

    def step(self, gate, up, limit):
        limit = 7.0 if limit is None else limit
        return F.silu(gate).clamp(max=limit) * up.clamp(-limit, limit)


class OutputUpcast(NativeBackend):
    """The output comes back in float32 whatever the input dtype.

    Origin: a kernel that accumulates in fp32 and forgets the final cast.
    Caught by: ACT-LAYOUT.
    """

    name = "output-upcast"
    clauses = {"ACT-LAYOUT"}

    def silu_and_mul(self, x):
        return super().silu_and_mul(x).float()


class AssumesContiguous(NativeBackend):
    """Reads the input's storage as if it were contiguous (ignores strides).

    Origin: a custom kernel that takes ``data_ptr()`` without calling ``.contiguous()`` (vLLM's and
    FlashInfer's act_and_mul kernels read ``token_idx * 2 * d`` too, behind callers that pass
    contiguous inputs).
    Caught by: ACT-VIEWS (SHOULD: no MUST clause draws a view of an activation input).
    """

    name = "assumes-contiguous"
    clauses = {"ACT-VIEWS"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "vLLM's and FlashInfer's act_and_mul kernels read the input densely; no caller passes a view"

    def gelu_and_mul(self, x, *, approximate):
        validate_gated_input(x)
        dense = torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())
        return super().gelu_and_mul(dense, approximate=approximate)


class WritesIntoInput(NativeBackend):
    """Computes silu in place on the gate half of its input.

    Origin: an in-place ``silu_`` used to save memory in an inference-only path.
    Caught by: ACT-PURE.
    """

    name = "writes-into-input"
    clauses = {"ACT-PURE"}

    def silu_and_mul(self, x):
        d = validate_gated_input(x)
        gate = x[..., :d]
        F.silu(gate, inplace=True)
        return gate * x[..., d:]


class NanSwallowed(NativeBackend):
    """NaN in the output replaced by zero.

    Origin: a ``nan_to_num`` added to hide an overflow elsewhere.
    Caught by: ACT-NAN.
    """

    name = "nan-swallowed"
    clauses = {"ACT-NAN"}

    def swiglu_step_and_mul(self, x, *, limit):
        return torch.nan_to_num(super().swiglu_step_and_mul(x, limit=limit), nan=0.0)


class OddWidthTruncated(NativeBackend):
    """An odd last dimension is silently truncated instead of rejected.

    Origin: ``d = x.shape[-1] // 2`` with no validation, as in many hand-written kernels.
    Caught by: ACT-ERRORS.
    """

    name = "odd-width-truncated"
    clauses = {"ACT-ERRORS"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "the field's SiluAndMul/GeluAndMul also compute d = x.shape[-1] // 2 unchecked"

    def gelu_and_mul(self, x, *, approximate):
        if x.dim() == 0 or not x.is_floating_point():
            return super().gelu_and_mul(x, approximate=approximate)
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=approximate) * x[..., d : 2 * d]


BACKENDS = [
    GegluFlagSwapped(),
    GegluDefaultActivateLeft(),
    NpuFastGeluForFastGelu(),
    GegluDiffusersHalf(),
    GegluModeIgnored(),
    GegluBf16Compute(),
    SiluAsQuickGelu(),
    GateClampedBeforeSilu(),
    GateClampSymmetric(),
    UpClampedOneSide(),
    LimitIgnored(),
    DefaultLimitSeven(),
    OutputUpcast(),
    AssumesContiguous(),
    WritesIntoInput(),
    NanSwallowed(),
    OddWidthTruncated(),
    *clamped.BACKENDS,  # ACT-SILU-CLAMPED, ACT-SWIGLU-OAI, ACT-CLAMP-NO-DEFAULT, ACT-LIMIT-CONFIG
]

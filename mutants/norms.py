"""Norm mutants: the field's RMSNorm mistakes (spec/norms.md, Sources) and their neighbours.

Each class is one realistic bug in an otherwise correct native backend; its docstring says what
the bug is and where such bugs come from, and ``clauses`` lists the clauses of which at least one
must fail.
"""

from __future__ import annotations

import torch

from backends.native import NativeBackend
from backends.npu import AscendBackend, emulator_unavailable, load_emulator
from reference.norms import validate_norm_args

# The conformance modules (under the ``conformance`` package) that must catch these mutants.
PROPERTIES = ["conformance.test_norms"]


def _normalized(h: torch.Tensor, eps: float) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


class GemmaWeightNotPlusOne(NativeBackend):
    """Gemma RMSNorm multiplied by ``weight`` instead of ``1 + weight``.

    Origin: a Gemma checkpoint run through the LLaMA RMSNorm kernel (the zero-centred stored
    weight then scales the output towards zero).
    Caught by: NORM-GEMMA.
    """

    name = "gemma-weight-not-plus-one"
    clauses = {"NORM-GEMMA"}

    def gemma_rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        return (_normalized(x.float(), eps) * weight.float()).to(x.dtype)


class RmsNormBf16Compute(NativeBackend):
    """RMSNorm computed in bfloat16 end to end (no float32 upcast), whatever the input dtype.

    Origin: a kernel with only a bf16 path, or a port that dropped ``.to(torch.float32)``.
    Caught by: NORM-RMS, NORM-DTYPE.
    """

    name = "rms-norm-bf16-compute"
    clauses = {"NORM-RMS", "NORM-DTYPE"}

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        low = x.to(torch.bfloat16)
        return (_normalized(low, eps) * weight.to(torch.bfloat16)).to(x.dtype)


class RmsNormInputDtypeCompute(NativeBackend):
    """RMSNorm computed in the input dtype: in float16 the squares overflow above |x| = 256.

    Origin: ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)`` without the upcast.
    Caught by: NORM-DTYPE.
    """

    name = "rms-norm-input-dtype-compute"
    clauses = {"NORM-DTYPE"}

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        return _normalized(x, eps) * weight.to(x.dtype)


class EpsOutsideSqrt(NativeBackend):
    """eps added after the square root: ``x / (sqrt(mean(x^2)) + eps)``.

    Origin: the LayerNorm-style ``x / (std + eps)`` habit, or a kernel that adds eps to the norm.
    Caught by: NORM-EPS.
    """

    name = "eps-outside-sqrt"
    clauses = {"NORM-EPS"}

    def rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        h = x.float()
        out = h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps)
        return out.to(x.dtype) * weight.to(x.dtype)


class FusedReturnsOldResidual(NativeBackend):
    """The fused op returns the residual that came in, not the sum ``x + residual``.

    Origin: a wrapper around an in-place kernel that returns its saved copy of the argument.
    Caught by: NORM-FUSED-ADD.
    """

    name = "fused-returns-old-residual"
    clauses = {"NORM-FUSED-ADD"}

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        normed, _ = super().fused_add_rms_norm(x, residual, weight, eps=eps)
        return normed, residual


class FusedPairSwapped(NativeBackend):
    """The fused Gemma op returns ``(new_residual, normed)``: the pair in the wrong order.

    Origin: kernels disagree on the order of their outputs; a caller unpacking the other way.
    Caught by: NORM-FUSED-ADD.
    """

    name = "fused-pair-swapped"
    clauses = {"NORM-FUSED-ADD"}

    def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
        normed, total = super().gemma_fused_add_rms_norm(x, residual, weight, eps=eps)
        return total, normed


class WeightLengthUnchecked(NativeBackend):
    """A weight of the wrong length is broadcast or truncated instead of rejected.

    Origin: kernels that read ``d`` from the input and index the weight without a check.
    Caught by: NORM-ERRORS.
    """

    name = "weight-length-unchecked"
    clauses = {"NORM-ERRORS"}
    # Reclassified: a robustness mistake only a SHOULD clause sees (spec/README.md, Levels).
    level = "SHOULD"
    why = "the field's RMSNorm layers multiply by their weight without checking its length"

    def rms_norm(self, x, weight, *, eps):
        if isinstance(weight, torch.Tensor) and weight.dim() >= 1 and weight.shape[-1] != x.shape[-1]:
            weight = weight.reshape(-1)[: x.shape[-1]].expand(x.shape[-1])
        return super().rms_norm(x, weight, eps=eps)


def _contiguous_read(t: torch.Tensor) -> torch.Tensor:
    """t's storage read as contiguous rows from its offset (its strides ignored)."""
    return torch.as_strided(t, t.shape, torch.empty(t.shape).stride(), t.storage_offset())


class AssumesContiguousRows(NativeBackend):
    """Reads x (rms_norm) and residual (fused_add_rms_norm) as contiguous rows of its storage.

    Origin: a kernel indexing ``row * hidden_size + i`` from ``data_ptr()``, as vLLM's fused
    kernel does for the residual, without the contiguity check (spec/norms.md, Sources).
    Caught by: NORM-LAYOUT (rms_norm on row-strided x), NORM-VIEWS (the residual view: SHOULD only).
    """

    name = "norm-assumes-contiguous-rows"
    clauses = {"NORM-LAYOUT", "NORM-VIEWS"}

    def rms_norm(self, x, weight, *, eps):
        validate_norm_args(x, weight, eps)
        return super().rms_norm(_contiguous_read(x), weight, eps=eps)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        validate_norm_args(x, weight, eps, residual)
        return super().fused_add_rms_norm(x, _contiguous_read(residual), weight, eps=eps)


class GemmaCastBeforeWeight(NativeBackend):
    """Gemma RMSNorm in the LLaMA order: cast back to x's dtype, then multiply by ``1 + weight``,
    so a float32 weight makes the output float32.

    Origin: a Gemma norm derived from a LLaMA kernel by adding 1 to the weight (transformers'
    comment "Llama does x.to(float16) * w whilst Gemma is (x * w).to(float16)", spec/norms.md).
    Caught by: NORM-MIXED.
    """

    name = "gemma-cast-before-weight"
    clauses = {"NORM-MIXED"}

    def gemma_rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        return _normalized(x.float(), eps).to(x.dtype) * (1.0 + weight)


class ResidualRoundedToInputDtype(NativeBackend):
    """The fused op rounds a float32 residual to x's dtype, adds in x's dtype, and writes the
    rounded sum back into a float32 residual: the stream loses its precision.

    Origin: an adapter around a one-dtype in-place kernel (vLLM's ``fused_add_rms_norm`` reads
    every tensor as ``scalar_t``) that casts the residual in and copies it back out.
    Caught by: NORM-MIXED.
    """

    name = "residual-rounded-to-input-dtype"
    clauses = {"NORM-MIXED"}

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        eps = validate_norm_args(x, weight, eps, residual)
        total = x + residual.to(x.dtype)
        normed = super().rms_norm(total, weight, eps=eps)
        return normed, total.to(torch.promote_types(x.dtype, residual.dtype))


class EpsilonKeyword(NativeBackend):
    """RMSNorm taking ``epsilon=1e-6`` (a keyword the protocol does not have) instead of the
    keyword-only ``eps``: every call the suite makes would raise ``unexpected keyword argument``.

    Origin: a kernel binding that keeps its kernel's own parameter name (``epsilon``) and
    default instead of the contract's keyword-only ``eps``.
    The load-time signature check (conformance/signatures.py) fails its rms_norm cases with one
    line naming ``eps``.
    Caught by: NORM-RMS, NORM-EPS.
    """

    name = "rms-norm-epsilon-keyword"
    clauses = {"NORM-RMS", "NORM-EPS"}

    def rms_norm(self, x, weight, epsilon=1e-6):
        return super().rms_norm(x, weight, eps=epsilon)


class NpuGemmaPlusOneInWeightDtype(AscendBackend):
    """The Ascend adapter's Gemma norm forms ``1 + weight`` in the weight's dtype (bfloat16) before
    npu_rms_norm: a float32 model with bfloat16 norm weights loses the weight's low bits (2^-9
    relative), where NORM-GEMMA forms 1 + weight in float32.

    Origin: a framework's NPU norm path that hands npu_rms_norm ``1 + w`` as computed in the
    weight's dtype (spec/ascend.md, CANN-RMS-NORM).
    Caught by: NORM-MIXED, NORM-GEMMA.
    """

    name = "npu-gemma-plus-one-in-weight-dtype"
    clauses = {"NORM-MIXED", "NORM-GEMMA"}

    def __init__(self):
        super().__init__(self.name, load_emulator, emulator_unavailable)

    def gemma_rms_norm(self, x, weight, *, eps):
        eps = validate_norm_args(x, weight, eps)
        gamma = (1.0 + weight).to(x.dtype).contiguous()  # the sum rounded in weight's dtype first
        return self.ops.npu_rms_norm(x.contiguous(), gamma, eps)[0]


BACKENDS = [
    GemmaWeightNotPlusOne(),
    RmsNormBf16Compute(),
    RmsNormInputDtypeCompute(),
    EpsOutsideSqrt(),
    FusedReturnsOldResidual(),
    FusedPairSwapped(),
    WeightLengthUnchecked(),
    AssumesContiguousRows(),
    GemmaCastBeforeWeight(),
    ResidualRoundedToInputDtype(),
    EpsilonKeyword(),
    NpuGemmaPlusOneInWeightDtype(),
]

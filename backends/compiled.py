"""The ``compiled`` backend: ``torch.compile(dynamic=True)`` of the native activation math.

Design: validation runs eagerly (the compiled region never raises); each op flattens its
gate and up halves to contiguous 1-D tensors of at least two elements before the compiled
kernel, so ranks, batch shapes and views share one graph; and the clamp limit travels as a
0-dim tensor, so a new limit value is an input, not a guard. Compiles therefore depend only
on dtype and mode (a handful per op), never on the Hypothesis example. It is skipped where no
compiler toolchain exists (a C++ compiler on CPU, triton on CUDA).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from backends import native
from backends._toolchain import compile_unavailable
from reference.activations import (
    APPROXIMATE_MODES,
    oai_gate_up,
    require_bool,
    swiglu_limit,
    validate_gated_input,
)
from reference.norms import validate_norm_args
from reference.validation import (
    require_choice,
    require_floating,
    require_positive_finite,
    require_positive_finite_or_none,
)


def _halves_1d(x: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x's gate and up halves as ``_flat`` tensors (a kernel's result is read as ``out[: numel // 2]``)."""
    return _flat(x[..., :d]), _flat(x[..., d:])


@functools.cache
def _kernels():
    compile_ = functools.partial(torch.compile, dynamic=True)

    # One function per GELU mode: a mode is a guard, and 2 modes x 4 dtypes filled dynamo's
    # recompile limit (8), past which the op ran eagerly.
    @compile_
    def geglu_erf(gate, up):
        return F.gelu(gate) * up

    @compile_
    def geglu_tanh(gate, up):
        return F.gelu(gate, approximate="tanh") * up

    @compile_
    def swiglu(gate, up):
        return F.silu(gate) * up

    @compile_
    def swiglu_step(gate, up, limit):
        return torch.minimum(F.silu(gate), limit) * torch.clamp(up, -limit, limit)

    return {"none": geglu_erf, "tanh": geglu_tanh}, swiglu, swiglu_step


@functools.cache
def _clamped_kernels():
    """ACT-SILU-CLAMPED and ACT-SWIGLU-OAI; limit None travels as inf (the clamps are then identities)."""
    compile_ = functools.partial(torch.compile, dynamic=True)

    @compile_
    def silu_clamped(gate, up, limit):
        return F.silu(torch.minimum(gate, limit)) * torch.clamp(up, -limit, limit)

    @compile_
    def swiglu_oai(gate, up, alpha, limit):
        gate = torch.minimum(gate.to(limit.dtype), limit)
        up = torch.clamp(up.to(limit.dtype), -limit, limit)
        return gate * torch.sigmoid(alpha * gate) * (up + 1)

    return silu_clamped, swiglu_oai


@functools.cache
def _gelu_variant_kernels():
    """ACT-GELU-VARIANTS, on x flattened to 1-D: float32 inside (float64 stays), one rounding."""
    compile_ = functools.partial(torch.compile, dynamic=True)

    def widened(x):
        return x if x.dtype == torch.float64 else x.float()

    @compile_
    def new_gelu(x):
        return F.gelu(widened(x), approximate="tanh").to(x.dtype)

    @compile_
    def fast_gelu(x):
        v = widened(x)
        return (0.5 * v * (1.0 + torch.tanh(0.7978845608 * v * (1.0 + 0.044715 * v * v)))).to(x.dtype)

    @compile_
    def quick_gelu(x):
        v = widened(x)
        return (v * torch.sigmoid(1.702 * v)).to(x.dtype)

    return {"new_gelu": new_gelu, "fast_gelu": fast_gelu, "quick_gelu": quick_gelu}


@functools.cache
def _situ_kernels():
    """ACT-SITU; beta and linear_beta travel as 0-dim tensors of the compute dtype (inputs, not
    guards). linear_beta None is a kernel of its own (no soft-clip on up), not an infinite beta."""
    compile_ = functools.partial(torch.compile, dynamic=True)

    def activation(gate, beta):
        gate = gate.to(beta.dtype)
        return beta * torch.tanh(gate / beta) * torch.sigmoid(gate)

    @compile_
    def situ(gate, up, beta):
        return (activation(gate, beta) * up.to(beta.dtype)).to(gate.dtype)

    @compile_
    def situ_linear(gate, up, beta, linear_beta):
        up = up.to(beta.dtype)
        return (activation(gate, beta) * (linear_beta * torch.tanh(up / linear_beta))).to(gate.dtype)

    return situ, situ_linear


def _flat(x: torch.Tensor) -> torch.Tensor:
    """x as a detached, contiguous 1-D tensor of at least 2 elements (a zero appended to a single
    one, its result discarded): dynamo specializes size 1 and guards on a view's base rank and
    stride (a strided half recompiled, until the recompile limit left the op eager)."""
    flat = x.reshape(-1).detach()
    if flat.storage_offset() or not flat.is_contiguous():  # a half's offset is a guard too (0, 1, 2+)
        flat = flat.clone(memory_format=torch.contiguous_format)
    return torch.cat([flat, flat.new_zeros(1)]) if flat.numel() == 1 else flat


def _limit_tensor(limit: float | None, x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(float("inf") if limit is None else limit, dtype=x.dtype, device=x.device)


# --- norms kernels (spec/norms.md) --------------------------------------------------------------
# Validation runs eagerly; each op flattens x to [rows, d] and passes eps as a 0-dim float32
# tensor, so new shapes and eps values are inputs, not guards. Dynamo specializes sizes 0 and 1,
# so a single row is padded with a zero row (its own norm, discarded) and d == 1 (a degenerate
# norm) runs natively: each kernel compiles once, never per example or dtype.


@functools.cache
def _norm_kernels():
    compile_ = functools.partial(torch.compile, dynamic=True)

    def normalized(h, eps):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)

    # Every kernel takes float32 tensors (the casts are eager, _float), so each compiles once,
    # whatever the dtypes of x, weight and residual (NORM-MIXED).
    @compile_
    def rms(x, weight, eps):
        # NORM-RMS with the weight product in float32, cast once by the caller (sglang's order).
        return normalized(x, eps) * weight

    @compile_
    def gemma(x, weight, eps):
        # NORM-GEMMA: the product with (1 + weight) in float32, cast once by the caller.
        return normalized(x, eps) * (1.0 + weight)

    @compile_
    def fused_rms(x, residual, weight, eps):
        total = x + residual
        return normalized(total, eps) * weight, total

    @compile_
    def fused_gemma(x, residual, weight, eps):
        total = x + residual
        return normalized(total, eps) * (1.0 + weight), total

    return {"rms": rms, "gemma": gemma, "fused_rms": fused_rms, "fused_gemma": fused_gemma}


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as contiguous [rows, d] with rows >= 2 (a zero row appended to a single row). Detached
    and contiguous, so the kernel never sees a view (NORM-LAYOUT: a strided view is copied):
    dynamo guards on a view's base and strides, which vary (a recompile)."""
    rows = x.reshape(-1, x.shape[-1]).detach().contiguous()
    return torch.cat([rows, rows.new_zeros(1, rows.shape[1])]) if rows.shape[0] == 1 else rows


def _native_only(x: torch.Tensor) -> bool:
    """float64 (NORM-DTYPE: float32 or better, so it stays in float64) and d == 1 run natively."""
    return x.dtype == torch.float64 or x.shape[-1] == 1


def _float(t: torch.Tensor) -> torch.Tensor:
    """t in float32, contiguous (exact for the half types): the kernels take every tensor in one
    dtype whatever the caller's (NORM-MIXED), so a new dtype or mix is no recompile."""
    return t.detach().to(torch.float32).contiguous()


def _eps(eps: float, device) -> torch.Tensor:
    return torch.tensor(eps, dtype=torch.float32, device=device)


def _single(kernel: str, fallback, x, weight, eps):
    eps = validate_norm_args(x, weight, eps)
    if _native_only(x):
        return fallback(x, weight, eps=eps)
    out = _norm_kernels()[kernel](_float(_rows(x)), _float(weight), _eps(eps, x.device))
    return out[: x.numel() // x.shape[-1]].reshape(x.shape).to(x.dtype)


def _pair(kernel: str, fallback, x, residual, weight, eps):
    eps = validate_norm_args(x, weight, eps, residual)
    if _native_only(x):
        return fallback(x, residual, weight, eps=eps)
    normed, total = _norm_kernels()[kernel](
        _float(_rows(x)), _float(_rows(residual)), _float(weight), _eps(eps, x.device)
    )
    rows = x.numel() // x.shape[-1]
    return normed[:rows].reshape(x.shape).to(x.dtype), total[:rows].reshape(x.shape).to(x.dtype)


class CompiledBackend:
    name = "compiled"

    def unavailable(self, device: torch.device) -> str | None:
        return compile_unavailable(device)

    def gelu_and_mul(self, x: torch.Tensor, *, approximate: str) -> torch.Tensor:
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        gate, up = _halves_1d(x, d)
        return _kernels()[0][approximate](gate, up)[: x.numel() // 2].reshape(*x.shape[:-1], d)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        d = validate_gated_input(x)
        gate, up = _halves_1d(x, d)
        return _kernels()[1](gate, up)[: x.numel() // 2].reshape(*x.shape[:-1], d)

    def swiglu_step_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = _halves_1d(x, d)
        if limit is None:
            out = _kernels()[1](gate, up)
        else:
            out = _kernels()[2](gate, up, torch.tensor(limit, dtype=x.dtype, device=x.device))
        return out[: x.numel() // 2].reshape(*x.shape[:-1], d)

    def silu_clamped_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = _halves_1d(x, d)
        out = _clamped_kernels()[0](gate, up, _limit_tensor(limit, x))
        return out[: x.numel() // 2].reshape(*x.shape[:-1], d)

    def swiglu_oai_and_mul(self, x: torch.Tensor, *, alpha: float, limit: float | None, interleaved: bool):
        d = validate_gated_input(x)
        alpha = require_positive_finite(alpha, "alpha")
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = (_flat(v) for v in oai_gate_up(x, require_bool(interleaved, "interleaved")))
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        scalars = [torch.tensor(v, dtype=compute, device=x.device) for v in (alpha, limit or float("inf"))]
        out = _clamped_kernels()[1](gate, up, *scalars)
        return out[: x.numel() // 2].to(x.dtype).reshape(*x.shape[:-1], d)

    # ACT-LIMIT-CONFIG: config parsing, nothing to compile.
    swiglu_limit = staticmethod(swiglu_limit)

    # ACT-GELU-VARIANTS: elementwise, on x flattened to 1-D (one graph per dtype, any shape).
    def _gelu_variant(self, op: str, x: torch.Tensor) -> torch.Tensor:
        require_floating(x, "x")
        if x.numel() == 0:
            return getattr(native.BACKEND, op)(x)
        return _gelu_variant_kernels()[op](_flat(x))[: x.numel()].reshape(x.shape)

    def new_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("new_gelu", x)

    def fast_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("fast_gelu", x)

    def quick_gelu(self, x: torch.Tensor) -> torch.Tensor:
        return self._gelu_variant("quick_gelu", x)

    def situ_and_mul(self, x: torch.Tensor, *, beta: float, linear_beta: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        beta = require_positive_finite(beta, "beta")
        linear_beta = require_positive_finite_or_none(linear_beta, "linear_beta")
        if x.numel() == 0:
            return native.situ_and_mul(x, beta=beta, linear_beta=linear_beta)
        gate, up = _halves_1d(x, d)
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        given = (beta,) if linear_beta is None else (beta, linear_beta)
        scalars = [torch.tensor(v, dtype=compute, device=x.device) for v in given]
        out = _situ_kernels()[len(scalars) - 1](gate, up, *scalars)
        return out[: x.numel() // 2].reshape(*x.shape[:-1], d)

    # --- norms (spec/norms.md) ---------------------------------------------------------------

    def rms_norm(self, x, weight, *, eps):
        return _single("rms", native.rms_norm, x, weight, eps)

    def gemma_rms_norm(self, x, weight, *, eps):
        return _single("gemma", native.gemma_rms_norm, x, weight, eps)

    def fused_add_rms_norm(self, x, residual, weight, *, eps):
        return _pair("fused_rms", native.fused_add_rms_norm, x, residual, weight, eps)

    def gemma_fused_add_rms_norm(self, x, residual, weight, *, eps):
        return _pair("fused_gemma", native.gemma_fused_add_rms_norm, x, residual, weight, eps)

    # --- rotary embeddings (spec/rope.md): native's ops, uncompiled ------------------------------
    # A gather and a few elementwise ops per call: compiling them per dtype, style and rank cost
    # seconds of the suite's budget for no kernel of its own, so compiled shares native's.
    rope_inv_freq = staticmethod(native.NativeBackend.rope_inv_freq)
    rope_softmax_scale = staticmethod(native.NativeBackend.rope_softmax_scale)
    rope_cos_sin = staticmethod(native.NativeBackend.rope_cos_sin)
    rotary_embedding = staticmethod(native.NativeBackend.rotary_embedding)
    mrope = staticmethod(native.NativeBackend.mrope)
    rope_kernel_args = staticmethod(native.NativeBackend.rope_kernel_args)


BACKEND = CompiledBackend()

"""The ``native`` backend: eager PyTorch on any device.

It validates like the oracles (same exception types, through their shared checks) and then
calls plain ``torch.nn.functional`` ops in the input's dtype. The ops are static methods;
each is also a module-level function (``from backends.native import encoder_attention_mask``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends import kv_cache, native_moe, native_quant, paged
from backends import rope as _rope
from reference import activations as _act
from reference.activations import APPROXIMATE_MODES, validate_gated_input
from reference.attention import require_scale, validate_decode_args, validate_prefill_args, validate_qkv
from reference.masks import validate_encoder_mask_args, validate_swa_decode_args
from reference.norms import validate_norm_args
from reference.quant_config import quant_scheme
from reference.validation import require_choice, require_positive_finite, require_positive_finite_or_none


def require_attention_mask(allowed, q):
    """ATTN-FLOAT-MASK(-REJECT): a bool mask, or an additive float mask in q's dtype; else TypeError."""
    if not isinstance(allowed, torch.Tensor):
        raise TypeError(f"allowed must be a tensor, got {type(allowed).__name__}")
    if allowed.dtype != torch.bool and allowed.dtype != q.dtype:
        raise TypeError(
            f"allowed must be bool or an additive mask in q's dtype {q.dtype}, got {allowed.dtype}"
        )
    return allowed


# --- norms helpers (spec/norms.md): float32 (or better) compute, the casts exactly where the
# field's reference code has them.


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """NORM-DTYPE: float32, or the input's dtype when it is wider."""
    return torch.promote_types(dtype, torch.float32)


def _normalized(h: torch.Tensor, eps: float) -> torch.Tensor:
    """h * rsqrt(mean(h^2, -1) + eps) in h's dtype (NORM-EPS: eps inside the root)."""
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def _rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """NORM-RMS, LlamaRMSNorm's order: cast to the input dtype, THEN multiply by weight, in the
    promotion of dtype and weight's (NORM-MIXED: a float32 weight gives a float32 output)."""
    return _normalized(h, eps).to(dtype) * weight


def _gemma_rms_norm(h: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """NORM-GEMMA: (normalized * (1 + weight)) in the compute dtype, cast to the input dtype once."""
    return (_normalized(h, eps) * (1.0 + weight.to(h.dtype))).to(dtype)


def _fused(norm, x, residual, weight, eps):
    """NORM-FUSED-ADD as vLLM's forward_native: the sum in float32, rounded once to x's dtype for
    the residual output (NORM-MIXED: whatever residual's dtype); the norm of the float32 sum.
    Returns (normed, new_residual). Views are read through their strides (NORM-LAYOUT)."""
    eps = validate_norm_args(x, weight, eps, residual)
    compute = _compute_dtype(torch.promote_types(x.dtype, residual.dtype))
    total = x.to(compute) + residual.to(compute)
    return norm(total, weight, eps, x.dtype), total.to(x.dtype)


class NativeBackend:
    name = "native"

    def unavailable(self, device: torch.device) -> str | None:
        return None

    # --- activations (spec/activations.md) ---------------------------------------------------

    @staticmethod
    def gelu_and_mul(x: torch.Tensor, *, approximate: str) -> torch.Tensor:
        d = validate_gated_input(x)
        require_choice(approximate, "approximate", APPROXIMATE_MODES)
        return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        d = validate_gated_input(x)
        return F.silu(x[..., :d]) * x[..., d:]

    @staticmethod
    def swiglu_step_and_mul(x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = F.silu(x[..., :d]), x[..., d:]
        if limit is None:
            return gate * up
        return gate.clamp(max=limit) * up.clamp(-limit, limit)

    # --- clamped look-alikes, the limit's selection (ACT-SILU-CLAMPED, ACT-SWIGLU-OAI, ACT-LIMIT-CONFIG)

    @staticmethod
    def silu_clamped_and_mul(x: torch.Tensor, *, limit: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        limit = require_positive_finite_or_none(limit, "limit")
        gate, up = x[..., :d], x[..., d:]
        if limit is not None:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        return F.silu(gate) * up

    @staticmethod
    def swiglu_oai_and_mul(x: torch.Tensor, *, alpha: float, limit: float | None, interleaved: bool):
        """In float32 (as vLLM's swigluoai_and_mul CUDA kernel), one rounding to x's dtype."""
        validate_gated_input(x)
        alpha = require_positive_finite(alpha, "alpha")
        limit = require_positive_finite_or_none(limit, "limit")
        _act.require_bool(interleaved, "interleaved")
        gate, up = _act.oai_gate_up(x.float() if x.dtype != torch.float64 else x, interleaved)
        if limit is not None:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        return (gate * torch.sigmoid(alpha * gate) * (up + 1)).to(x.dtype)

    # ACT-LIMIT-CONFIG: config parsing only, no tensors: the oracle's logic is the op.
    swiglu_limit = staticmethod(_act.swiglu_limit)

    # --- GELU tanh-family variants (ACT-GELU-VARIANTS): float32 inside, one rounding to x's dtype

    @staticmethod
    def new_gelu(x: torch.Tensor) -> torch.Tensor:
        _act.require_floating(x, "x")
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def fast_gelu(x: torch.Tensor) -> torch.Tensor:
        _act.require_floating(x, "x")
        v = x if x.dtype == torch.float64 else x.float()
        return (0.5 * v * (1.0 + torch.tanh(0.7978845608 * v * (1.0 + 0.044715 * v * v)))).to(x.dtype)

    @staticmethod
    def quick_gelu(x: torch.Tensor) -> torch.Tensor:
        _act.require_floating(x, "x")
        v = x if x.dtype == torch.float64 else x.float()
        return (v * torch.sigmoid(1.702 * v)).to(x.dtype)

    # --- SiTU (ACT-SITU): float32 inside (as the upstream SituAndMul), one rounding to x's dtype

    @staticmethod
    def situ_and_mul(x: torch.Tensor, *, beta: float, linear_beta: float | None) -> torch.Tensor:
        d = validate_gated_input(x)
        beta = require_positive_finite(beta, "beta")
        linear_beta = require_positive_finite_or_none(linear_beta, "linear_beta")
        v = x if x.dtype == torch.float64 else x.float()
        gate, up = v[..., :d], v[..., d:]
        if linear_beta is not None:
            up = linear_beta * torch.tanh(up / linear_beta)
        return (beta * torch.tanh(gate / beta) * torch.sigmoid(gate) * up).to(x.dtype)

    # --- masks and attention (spec/masks.md, spec/attention.md) ------------------------------

    @staticmethod
    def encoder_attention_mask(seq_len, *, sliding_window=None, padding_mask=None, device=None):
        """MASK-ENC by boolean ops: a lower triangle, a window band, a key-padding column mask."""
        seq_len, sliding_window, padding_mask, device = validate_encoder_mask_args(
            seq_len, sliding_window, padding_mask, device
        )
        ones = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
        allowed = ones.tril()
        if sliding_window is not None:
            allowed &= ones.triu(-(sliding_window - 1))
        if padding_mask is None:
            return allowed
        return allowed[None, None] & padding_mask.to(allowed.device)[:, None, None, :]

    @staticmethod
    def swa_decode_mask(seq_lens, kv_len, *, window):
        """MASK-SWA-DECODE: True = masked, visible keys max(0, L - window) <= j <= L - 1."""
        seq_lens, kv_len, window = validate_swa_decode_args(seq_lens, kv_len, window)
        position = torch.arange(kv_len, device=seq_lens.device)
        visible = (position >= (seq_lens - window).clamp_min(0)[:, None]) & (position < seq_lens[:, None])
        return ~visible[:, None, :]

    @staticmethod
    def attention(q, k, v, *, allowed, scale):
        """ATTN via F.scaled_dot_product_attention (enable_gqa); empty rows are set to zero explicitly."""
        batch, q_heads, _, q_len, kv_len, _ = validate_qkv(q, k, v)
        scale = require_scale(scale)
        allowed = require_attention_mask(allowed, q)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
        bool_mask = allowed if allowed.dtype == torch.bool else allowed != float("-inf")
        empty = ~bool_mask.expand(batch, q_heads, q_len, kv_len).any(-1, keepdim=True)
        return out.masked_fill(empty, 0.0)

    @staticmethod
    def prefill_attention(q, k, v, *, sliding_window, padding_mask, scale):
        """ATTN-PREFILL: the native encoder mask handed to SDPA."""
        _, q_len, sliding_window, padding_mask = validate_prefill_args(
            q, k, v, sliding_window=sliding_window, padding_mask=padding_mask
        )
        allowed = encoder_attention_mask(
            q_len, sliding_window=sliding_window, padding_mask=padding_mask, device=q.device
        )
        return attention(q, k, v, allowed=allowed, scale=scale)

    @staticmethod
    def decode_attention(q, k_cache, v_cache, seq_lens, *, sliding_window, scale):
        """ATTN-DECODE: the decode mask (inverted to SDPA polarity); stale cache rows zeroed first."""
        seq_lens, sliding_window = validate_decode_args(
            q, k_cache, v_cache, seq_lens, sliding_window=sliding_window
        )
        kv_len = k_cache.shape[2]
        window = kv_len if sliding_window is None else sliding_window
        seq_lens = seq_lens.to(q.device)
        allowed = ~swa_decode_mask(seq_lens, kv_len, window=window)[:, :, None, :]  # [B, 1, 1, kv_len]
        # SDPA adds -inf to masked scores, and NaN + -inf is NaN: stale rows must be cleared.
        in_sequence = (torch.arange(kv_len, device=q.device) < seq_lens[:, None])[:, None, :, None]
        k_cache = k_cache.masked_fill(~in_sequence, 0.0)
        v_cache = v_cache.masked_fill(~in_sequence, 0.0)
        return attention(q, k_cache, v_cache, allowed=allowed, scale=scale)

    # --- serving attention (spec/serving.md): backends/paged.py ---------------------------------

    paged_attention = staticmethod(paged.paged_attention)
    layer_windows = staticmethod(paged.layer_windows)
    window_kernel_args = staticmethod(paged.window_kernel_args)

    # --- norms (spec/norms.md) ---------------------------------------------------------------

    @staticmethod
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
        eps = validate_norm_args(x, weight, eps)
        return _rms_norm(x.to(_compute_dtype(x.dtype)), weight, eps, x.dtype)

    @staticmethod
    def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor:
        eps = validate_norm_args(x, weight, eps)
        return _gemma_rms_norm(x.to(_compute_dtype(x.dtype)), weight, eps, x.dtype)

    @staticmethod
    def fused_add_rms_norm(x, residual, weight, *, eps):
        return _fused(_rms_norm, x, residual, weight, eps)

    @staticmethod
    def gemma_fused_add_rms_norm(x, residual, weight, *, eps):
        return _fused(_gemma_rms_norm, x, residual, weight, eps)

    # --- MoE routing and the expert computation (spec/moe.md): backends/native_moe.py -----------

    select_experts = staticmethod(native_moe.select_experts)
    append_shared_experts = staticmethod(native_moe.append_shared_experts)
    fused_moe = staticmethod(native_moe.fused_moe)
    moe_router_config = staticmethod(native_moe.moe_router_config)

    # --- quantized linear layers (spec/quant.md): backends/native_quant.py ----------------------

    dynamic_int8_quant = staticmethod(native_quant.dynamic_int8_quant)
    int8_scaled_mm = staticmethod(native_quant.int8_scaled_mm)
    fp8_quant = staticmethod(native_quant.fp8_quant)
    fp8_group_quant = staticmethod(native_quant.fp8_group_quant)
    fp8_block_scaled_mm = staticmethod(native_quant.fp8_block_scaled_mm)
    fp8_fn_to_fnuz = staticmethod(native_quant.fp8_fn_to_fnuz)
    w4a16_mm = staticmethod(native_quant.w4a16_mm)
    w8a8_fused_moe = staticmethod(native_quant.w8a8_fused_moe)
    quant_scheme = staticmethod(quant_scheme)  # the project's reader (QUANT-CONFIG), as moe_router_config

    # --- rotary embeddings (spec/rope.md): backends/rope.py ----------------------------------

    rope_inv_freq = staticmethod(_rope.rope_inv_freq)
    rope_softmax_scale = staticmethod(_rope.rope_softmax_scale)
    rope_cos_sin = staticmethod(_rope.rope_cos_sin)
    rotary_embedding = staticmethod(_rope.rotary_embedding)
    mrope = staticmethod(_rope.mrope)
    rope_kernel_args = staticmethod(_rope.rope_kernel_args)

    # --- KV-cache write (spec/kv_cache.md): backends/kv_cache.py ----------------------------------

    write_kv_cache = staticmethod(kv_cache.write_kv_cache)


BACKEND = NativeBackend()
# vLLM's padded step (spec/padding.md, PAD-SERVE-EMPTY): requests of zero queries and length 0.
# Declared on the instance: a subclass that replaces paged_attention (a mutant, a user's backend
# built on native) does not inherit the promise.
BACKEND.empty_requests = ("paged_attention",)

# The ops as plain functions, for other backends, benchmarks and mutants that build on them.
gelu_and_mul = NativeBackend.gelu_and_mul
silu_and_mul = NativeBackend.silu_and_mul
swiglu_step_and_mul = NativeBackend.swiglu_step_and_mul
silu_clamped_and_mul = NativeBackend.silu_clamped_and_mul
swiglu_oai_and_mul = NativeBackend.swiglu_oai_and_mul
situ_and_mul = NativeBackend.situ_and_mul
encoder_attention_mask = NativeBackend.encoder_attention_mask
swa_decode_mask = NativeBackend.swa_decode_mask
attention = NativeBackend.attention
prefill_attention = NativeBackend.prefill_attention
decode_attention = NativeBackend.decode_attention
rms_norm = NativeBackend.rms_norm
gemma_rms_norm = NativeBackend.gemma_rms_norm
fused_add_rms_norm = NativeBackend.fused_add_rms_norm
gemma_fused_add_rms_norm = NativeBackend.gemma_fused_add_rms_norm

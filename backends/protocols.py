"""The op methods a backend may implement: one ``typing.Protocol`` per contract family, and
``OPS``, the one table of op names (op name -> family).

A backend implements any subset of ``OPS``; each op takes the oracle's parameter names (the
oracle of the same name in ``reference/``, where one exists) with the same keyword-only
options. The protocols state the exact signatures for readers and type checkers; the suite
calls ops by name, and ``@pytest.mark.op`` marks must name an op of ``OPS`` (checked at
collection). tests/test_backends_registry.py checks that ``OPS``, the protocols, the oracles
and the built-in backends agree.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

__all__ = [
    "FAMILIES",
    "OPS",
    "ActivationOps",
    "AttentionOps",
    "DPMScheduler",
    "MaskOps",
    "SchedulerOps",
    "protocol_ops",
]


class ActivationOps(Protocol):
    """The activation ops (ACT-* clauses; oracles in ``reference.activations``): x [..., 2d] ->
    [..., d] for the gated ops (gate = the left half), [...] -> [...] for the elementwise GELUs."""

    def gelu_and_mul(self, x: torch.Tensor, *, approximate: str) -> torch.Tensor: ...

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor: ...

    def swiglu_step_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor: ...

    def npu_geglu_args(self, approximate: str) -> dict:
        """Ascend adapters: the ``torch_npu.npu_geglu`` keyword arguments that give gelu_and_mul."""
        ...

    # Clamped look-alikes and the limit's selection (ACT-SILU-CLAMPED, ACT-SWIGLU-OAI, ACT-LIMIT-CONFIG).
    def silu_clamped_and_mul(self, x: torch.Tensor, *, limit: float | None) -> torch.Tensor: ...

    def swiglu_oai_and_mul(
        self, x: torch.Tensor, *, alpha: float, limit: float | None, interleaved: bool
    ) -> torch.Tensor: ...

    def swiglu_limit(self, config: Any, layer_idx: int, *, shared: bool) -> float | None: ...

    def npu_gelu_variant_args(self, op: str) -> dict:
        """Ascend adapters: the ``torch_npu`` op and keyword arguments that give a GELU variant."""
        ...

    # GELU tanh-family variants (ACT-GELU-VARIANTS), elementwise.
    def new_gelu(self, x: torch.Tensor) -> torch.Tensor: ...

    def fast_gelu(self, x: torch.Tensor) -> torch.Tensor: ...

    def quick_gelu(self, x: torch.Tensor) -> torch.Tensor: ...

    # SiTU, the Kimi-K3 soft-clipped SwiGLU (ACT-SITU).
    def situ_and_mul(self, x: torch.Tensor, *, beta: float, linear_beta: float | None) -> torch.Tensor: ...


class MaskOps(Protocol):
    """Boolean masks and the window converters (MASK-*, WINDOW-CONV; ``reference.masks``): the
    encoder mask [S, S] or [B, 1, S, S] (True = attend), the decode mask [B, 1, kv_len] (True = masked)."""

    def encoder_attention_mask(
        self,
        seq_len: int,
        *,
        sliding_window: int | None = None,
        padding_mask: torch.Tensor | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor: ...

    def swa_decode_mask(self, seq_lens: torch.Tensor, kv_len: int, *, window: int) -> torch.Tensor: ...

    def flash_attention_window(self, sliding_window: int | None) -> tuple[int, int]: ...

    def cann_prefill_tokens(self, sliding_window: int | None) -> dict: ...

    def decode_mask_window(self, sliding_window: int) -> int: ...


class AttentionOps(Protocol):
    """Dense attention (ATTN-*; ``reference.attention``): q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]
    (BNSD, one dtype, GQA), returning [B, Hq, Sq, D] in q's dtype; decode q is [B, Hq, 1, D]."""

    def attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, allowed: torch.Tensor, scale: float
    ) -> torch.Tensor: ...

    def prefill_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        sliding_window: int | None,
        padding_mask: torch.Tensor | None,
        scale: float,
    ) -> torch.Tensor: ...

    def decode_attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        seq_lens: torch.Tensor,
        *,
        sliding_window: int | None,
        scale: float,
    ) -> torch.Tensor: ...


class DPMScheduler(Protocol):
    """What ``dpm_scheduler(**config)`` returns (DPM-*; ``reference.scheduler.DPMSolverMultistep``)."""

    timesteps: torch.Tensor
    sigmas: torch.Tensor

    def set_timesteps(self, num_inference_steps: int, device: torch.device | str | None = None) -> None: ...

    def step(
        self,
        model_output: torch.Tensor,
        timestep: Any,
        sample: torch.Tensor,
        generator: torch.Generator | None = None,
        variance_noise: torch.Tensor | None = None,
        return_dict: bool = True,
    ) -> Any: ...


class SchedulerOps(Protocol):
    """The scheduler op (DPM-*): the diffusers ``DPMSolverMultistepScheduler`` configuration keywords."""

    def dpm_scheduler(self, **config: Any) -> DPMScheduler: ...


# family -> the Protocol listing its ops.
FAMILIES: dict[str, type] = {
    "activations": ActivationOps,
    "masks": MaskOps,
    "attention": AttentionOps,
    "scheduler": SchedulerOps,
}

# The one table of op names: op -> family. @pytest.mark.op must name one of these.
OPS: dict[str, str] = {
    "gelu_and_mul": "activations",
    "silu_and_mul": "activations",
    "swiglu_step_and_mul": "activations",
    "npu_geglu_args": "activations",
    "npu_gelu_variant_args": "activations",
    "silu_clamped_and_mul": "activations",
    "swiglu_oai_and_mul": "activations",
    "swiglu_limit": "activations",
    "new_gelu": "activations",
    "fast_gelu": "activations",
    "quick_gelu": "activations",
    "situ_and_mul": "activations",
    "encoder_attention_mask": "masks",
    "swa_decode_mask": "masks",
    "flash_attention_window": "masks",
    "cann_prefill_tokens": "masks",
    "decode_mask_window": "masks",
    "attention": "attention",
    "prefill_attention": "attention",
    "decode_attention": "attention",
    "dpm_scheduler": "scheduler",
}


def protocol_ops(protocol: type) -> list[str]:
    """The op method names a family protocol declares, in definition order."""
    return [name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")]


# --- norms (spec/norms.md), in its own block -------------------------------------------------


class NormOps(Protocol):
    """RMSNorm ops (NORM-*; ``reference.norms``): x [..., d], weight [d], residual x's shape."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor: ...

    def gemma_rms_norm(self, x: torch.Tensor, weight: torch.Tensor, *, eps: float) -> torch.Tensor: ...

    def fused_add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (normed, new_residual) with new_residual = x + residual."""
        ...

    def gemma_fused_add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, *, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


__all__ += ["NormOps"]
FAMILIES["norms"] = NormOps
OPS.update({op: "norms" for op in protocol_ops(NormOps)})


# --- serving attention (spec/serving.md), in its own block -------------------------------------


class ServingOps(Protocol):
    """Paged, ragged, extend attention and window selection (SERVE-*; ``reference.serving``)."""

    def paged_attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        *,
        block_table: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        seq_lens: torch.Tensor,
        sliding_window: int | None,
        softcap: float | None,
        sinks: torch.Tensor | None,
        scale: float,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q [T, Hq, Dqk], caches [num_blocks, block_size, Hkv, D*]; returns [T, Hq, Dv]. fp8 caches
        come with their dequantization scales (KV-FP8-READ)."""
        ...

    def layer_windows(self, config: Any) -> list[int | None]:
        """Per layer of a transformers-style config: its sliding window, or None for full attention."""
        ...

    def window_kernel_args(self, sliding_window: int | None) -> dict:
        """{"prefill": {...}, "decode": {...}}: the raw window arguments each kernel receives."""
        ...


__all__ += ["ServingOps"]
FAMILIES["serving"] = ServingOps
OPS.update({op: "serving" for op in protocol_ops(ServingOps)})


# --- MoE routing and the expert computation (spec/moe.md), in its own block --------------------


class MoeOps(Protocol):
    """Expert routing, shared-expert slots, the fused expert MLP and the config reader (MOE-*;
    ``reference.moe``): logits [T, E] -> (weights float32 [T, k], ids [T, k]); x [T, H] -> [T, H]."""

    def select_experts(
        self,
        router_logits: torch.Tensor,
        *,
        top_k: int,
        scoring: str,
        renormalize: bool,
        correction_bias: torch.Tensor | None,
        num_groups: int,
        topk_group: int,
        group_score: str,
        routed_scaling_factor: float,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def append_shared_experts(
        self,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        *,
        shared_ids: tuple[int, ...],
        rsf_on_output: bool,
        routed_scaling_factor: float,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def fused_moe(
        self,
        x: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        *,
        activation: str,
        limit: float | None,
        apply_router_weight_on_input: bool,
        output_scale: float,
    ) -> torch.Tensor: ...

    def moe_router_config(self, config: Any) -> dict: ...


__all__ += ["MoeOps"]
FAMILIES["moe"] = MoeOps
OPS.update({op: "moe" for op in protocol_ops(MoeOps)})
# --- rotary position embeddings (spec/rope.md), in its own block ------------------------------


class RopeOps(Protocol):
    """Rotary embeddings (ROPE-*; ``reference.rope``): the frequencies a config gives, the cos/sin
    rows, and their application to q [T, Hq, d] and k [T, Hk, dk] at integer positions."""

    def rope_inv_freq(
        self, config: Any, *, seq_len: int | None, layer_type: str | None
    ) -> tuple[torch.Tensor, float]:
        """(inv_freq [rotary_dim / 2], attention_factor) of the config's rope type."""
        ...

    def rope_softmax_scale(self, config: Any, *, scale: float) -> float: ...

    def rope_cos_sin(
        self, positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_factor: float
    ) -> torch.Tensor:
        """[*positions.shape, rotary_dim] = cat(cos, sin)(positions * inv_freq) * attention_factor."""
        ...

    def rotary_embedding(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        *,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def mrope(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        *,
        mrope_section: Any,
        is_neox_style: bool,
        mrope_interleaved: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rope_kernel_args(self, is_neox_style: bool) -> dict:
        """{api: {flag: value}}: the style arguments of every rope kernel the backend calls."""
        ...


__all__ += ["RopeOps"]
FAMILIES["rope"] = RopeOps
OPS.update({op: "rope" for op in protocol_ops(RopeOps)})
# --- KV-cache write (spec/kv_cache.md), in its own block ------------------------------------------


class KVCacheOps(Protocol):
    """The paged cache's write side (KV-*; ``reference.kv_cache``): in place, returns None."""

    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor | None,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor | None,
        slot_mapping: torch.Tensor,
        *,
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> None:
        """key [T, H, Dk], value [T, H, Dv] or None, caches [num_blocks, bs, H, D*] (any strides),
        slot_mapping [T'] int32/int64, T' <= T (negative, and rows past T': padding); fp8 caches take
        float32 scales."""
        ...


__all__ += ["KVCacheOps"]
FAMILIES["kv_cache"] = KVCacheOps
OPS.update({op: "kv_cache" for op in protocol_ops(KVCacheOps)})
# --- Quantized linear layers (spec/quant.md): the protocol in backends/protocols_quant.py -----------

from backends.protocols_quant import QuantOps  # noqa: E402 - after the tables it joins

__all__ += ["QuantOps"]
FAMILIES["quant"] = QuantOps
OPS.update({op: "quant" for op in protocol_ops(QuantOps)})

"""The field's correct code that the suite once failed (issue 36), as backends a user would load with
``--backend-module field_conventions``; tests/test_field_conventions.py runs them through the suite.

Each class re-states the arithmetic (or the signature, or the arguments) of the upstream code its
docstring cites; the ``Wrong*`` twins change one thing, to prove that the clause still fails a bug.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference import serving
from reference.serving import validate_paged_args

# The properties tests/test_field_conventions.py judges these backends on, and their clauses: the shared run
# (tests/convention_runs.py, --focus-declared-clauses) gives them only the properties checking one of them.
PROPERTIES = [
    "conformance/test_activations_clamped.py::test_silu_clamped_matches_oracle",
    "conformance/test_activations_clamped.py::test_clamp_order",
    "conformance/test_activations_clamped.py::test_clamped_op_without_limit_does_not_clamp",
    "conformance/test_activations.py::test_geglu_matches_oracle",
    "conformance/test_activations.py::test_gated_nan_propagates",
    "conformance/test_activations.py::test_should_accept_views",
    "conformance/test_kv_cache.py::test_write_matches_oracle",
    "conformance/test_kv_cache.py::test_padded_tokens_are_skipped",
    "conformance/test_kv_cache.py::test_other_slots_keep_their_bits",
    "conformance/test_kv_cache.py::test_every_page_size",
    "conformance/test_kv_cache.py::test_should_reject_bad_input",
    "conformance/test_rope.py::test_kernel_args_select_the_style",
    "conformance/test_rope_config.py::test_gemma3_config_json",
    "conformance/test_serving_windows.py::test_prefill_and_decode_keep_the_same_window",
    "conformance/test_padding.py::test_empty_padded_requests_leave_real_rows",
]
CLAUSES = frozenset({
    "ACT-CLAMP-NO-DEFAULT", "ACT-CLAMP-ORDER", "ACT-GEGLU", "ACT-NAN", "ACT-SILU-CLAMPED", "ACT-VIEWS",
    "KV-ERRORS", "KV-KEEP", "KV-PAD", "KV-PAGE-SIZE", "KV-WRITE", "ROPE-KERNEL-ARGS", "ROPE-LAYER",
    "SERVE-WINDOW-ARGS", "PAD-SERVE-EMPTY",
})  # fmt: skip


class _Backend:
    clauses = CLAUSES

    def unavailable(self, device):
        return None if device.type == "cpu" else "these transcriptions run on cpu"


class DocsPagedAdapter(_Backend):
    """docs/paged-kv.md's adapter: paged_attention without k_scale / v_scale (no fp8 caches). The
    kernel it wraps (vllm_flash_attn) needs CUDA, so the oracle stands in for it; what matters here
    is the signature (spec/kv_cache.md, KV-ERRORS: the fp8-read records are not implemented)."""

    name = "docs-paged-no-scales"
    empty_requests = ("paged_attention",)  # as the doc's adapter declares (PAD-SERVE-EMPTY)

    def paged_attention(self, q, k_cache, v_cache, *, block_table, cu_seqlens_q, seq_lens, sliding_window,
                        softcap, sinks, scale):  # fmt: skip
        validate_paged_args(q, k_cache, v_cache, block_table=block_table, cu_seqlens_q=cu_seqlens_q,
                            seq_lens=seq_lens, sliding_window=sliding_window, softcap=softcap, sinks=sinks,
                            scale=scale, empty_requests=True)  # fmt: skip
        real = seq_lens > 0  # the kernel skips a zero-length request; the oracle is given none
        starts = torch.cat([cu_seqlens_q[:1], cu_seqlens_q[1:][real]])
        out = serving.paged_attention(q, k_cache, v_cache, block_table=block_table[real], cu_seqlens_q=starts,
                                      seq_lens=seq_lens[real], sliding_window=sliding_window, softcap=softcap,
                                      sinks=sinks, scale=scale)  # fmt: skip
        return out.to(q.dtype)


class VllmSiluAndMulWithClamp(_Backend):
    """vLLM 0.33.0 vllm/model_executor/layers/activation.py, SiluAndMulWithClamp.forward_native with
    its defaults alpha=1.0, beta=0.0: every op in x's dtype (spec/activations.md, ACT-TOL-ROUNDED)."""

    name = "vllm-silu-and-mul-with-clamp"
    alpha, beta = 1.0, 0.0

    def silu_clamped_and_mul(self, x, *, limit):
        limit = float("inf") if limit is None else float(limit)  # the module always clamps; inf: no clamp
        d = x.shape[-1] // 2
        gate = torch.clamp(x[..., :d], max=limit)
        up = torch.clamp(x[..., d:], min=-limit, max=limit)
        return gate * torch.sigmoid(self.alpha * gate) * (up + self.beta)


class WrongSiluClampedAfter(VllmSiluAndMulWithClamp):
    """WRONG: the gate clamped after the SiLU (the Step-3.5 op's order), in the same op-by-op style."""

    name = "wrong-silu-clamped-after"

    def silu_clamped_and_mul(self, x, *, limit):
        limit = float("inf") if limit is None else float(limit)
        d = x.shape[-1] // 2
        gate = x[..., :d]
        up = torch.clamp(x[..., d:], min=-limit, max=limit)
        return torch.clamp(gate * torch.sigmoid(gate), max=limit) * up


class VllmGeluAndMulDispatch(_Backend):
    """vLLM 0.33.0 GeluAndMul: a contiguous input to the fused kernel (csrc act_and_mul_kernel: the
    float32 gelu of x times y, one rounding), any other to forward_native (``F.gelu(x[..., :d],
    approximate) * x[..., d:]``, two roundings in x's dtype). Both are correct; a view and its copy
    then differ by both sides' rounding (spec/tolerances.md, TOL-TABLE; measured up to 0.97 of one
    side's allowance, so this passes either way: tests/test_tolerances.py holds the case that did not)."""

    name = "vllm-gelu-and-mul-dispatch"

    def gelu_and_mul(self, x, *, approximate):
        d = x.shape[-1] // 2
        if not x.is_contiguous():
            return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]
        wide = x.float()
        return (F.gelu(wide[..., :d], approximate=approximate) * wide[..., d:]).to(x.dtype)


class FieldRopeKernelArgs(_Backend):
    """The style flag as the field passes it: vLLM 0.33.0 RotaryEmbedding.forward_cuda hands
    flashinfer's apply_rope_with_cos_sin_cache_inplace ``is_neox=self.is_neox_style``
    (rotary_embedding/common.py, _flashinfer_rotary_embedding); sglang 0.5.23's rotary embedding its
    own kernel of that name with ``is_neox=self.is_neox_style`` (srt/layers/rotary_embedding/base.py)."""

    name = "field-rope-kernel-args"

    def rope_kernel_args(self, is_neox_style):
        return {
            "vllm": {"is_neox_style": is_neox_style},
            "flashinfer.apply_rope_with_cos_sin_cache_inplace": {"is_neox": is_neox_style},
            "sglang.apply_rope_with_cos_sin_cache_inplace": {"is_neox": is_neox_style},
        }


class WrongIsNeoxInverted(FieldRopeKernelArgs):
    """WRONG: flashinfer's is_neox given interleave's polarity (True for GPT-J)."""

    name = "wrong-is-neox-inverted"

    def rope_kernel_args(self, is_neox_style):
        return {"flashinfer.apply_rope_with_cos_sin_cache_inplace": {"is_neox": not is_neox_style}}


class UnknownApis(_Backend):
    """Kernels whose spelling the suite's tables do not know: TensorRT-LLM's rope flag and sglang's
    RadixAttention ``sliding_window_size`` (W - 1, -1 for none): not judged, never failed."""

    name = "unknown-apis"

    def rope_kernel_args(self, is_neox_style):
        return {"tensorrt_llm": {"rotary_embedding_style": "gpt_neox" if is_neox_style else "gptj"}}

    def window_kernel_args(self, sliding_window):
        size = -1 if sliding_window is None else sliding_window - 1
        return {"prefill": {"sliding_window_size": size}, "decode": {"sliding_window_size": size}}


class VllmTritonReshapeAndCache(_Backend):
    """vLLM 0.33.0 vllm/v1/attention/ops/triton_reshape_and_cache_flash.py, triton_reshape_and_cache_flash
    and reshape_and_cache_kernel_flash on an NHD-strided cache (not fp8): one program per entry of
    slot_mapping, which it reads densely (``slot_mapping_ptr + token_idx``); ``slot_idx < 0`` returns;
    the key read at ``token_idx * key_stride + tile_pos`` (heads and dims dense within a token) and both
    caches written at ``block_idx * block_stride + block_offset * page_stride + head * head_stride +
    dim`` with the KEY cache's strides (spec/kv_cache.md, KV-WRITE, KV-PAD, KV-LAYOUT)."""

    name = "vllm-triton-reshape-and-cache"

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        if k_scale is not None or v_scale is not None or value is None:
            raise NotImplementedError("the transcription covers the non-fp8 key-and-value write")
        tokens = slot_mapping.shape[0]  # the launch grid: slot_mapping.shape[0] programs
        num_heads, head_size = key.shape[1], key.shape[2]
        slots = torch.as_strided(slot_mapping, (tokens,), (1,), slot_mapping.storage_offset())
        block_size = k_cache.shape[1]
        strides = (k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), 1)
        shape = (k_cache.shape[0], block_size, num_heads, head_size)
        for source, cache in ((key, k_cache), (value, v_cache)):
            rows = torch.as_strided(source, (source.shape[0], num_heads, head_size),
                                    (source.stride(0), head_size, 1), source.storage_offset())  # fmt: skip
            target = torch.as_strided(cache, shape, strides, cache.storage_offset())
            for token_idx in range(tokens):
                slot_idx = int(slots[token_idx])
                if slot_idx < 0:  # padding token that should be ignored
                    continue
                target[slot_idx // block_size, slot_idx % block_size] = rows[token_idx]


class WrongMinusOneIsLastSlot(VllmTritonReshapeAndCache):
    """WRONG: without the ``slot_idx < 0`` return, -1 indexes the cache's last slot."""

    name = "wrong-minus-one-is-last-slot"

    def write_kv_cache(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        slots = slot_mapping % (k_cache.shape[0] * k_cache.shape[1])
        super().write_kv_cache(key, value, k_cache, v_cache, slots)


class Gemma3ConfigRope(_Backend):
    """transformers 5.24 models/gemma3/configuration_gemma3.py: Gemma3TextConfig.default_theta =
    {"global": 1e6, "local": 1e4} and convert_rope_params_to_dict (both layer types start at
    {"rope_type": "default"}, rope_scaling updates full_attention only, rope_theta defaults to the
    rope_theta kwarg else global, the sliding one to rope_local_base_freq else local), then
    compute_default_rope_parameters' float32 frequencies (linear: divided by factor), on a config.json
    given as a dict or an object (spec/rope.md, ROPE-PARAMS, ROPE-LAYER)."""

    name = "gemma3-config-rope"
    default_theta = {"global": 1_000_000.0, "local": 10_000.0}

    def rope_inv_freq(self, config, *, seq_len, layer_type):
        field = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
        params = {"sliding_attention": {"rope_type": "default"}, "full_attention": {"rope_type": "default"}}
        if field("rope_scaling") is not None:
            params["full_attention"].update(field("rope_scaling"))
        params["full_attention"].setdefault("rope_theta", field("rope_theta") or self.default_theta["global"])
        local = field("rope_local_base_freq") or self.default_theta["local"]
        params["sliding_attention"].setdefault("rope_theta", local)
        chosen = params[layer_type]
        dim = field("head_dim")
        inv = 1.0 / (chosen["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        if chosen["rope_type"] == "linear":
            inv = inv / chosen["factor"]
        return inv, 1.0


BACKEND = [
    DocsPagedAdapter(),
    VllmSiluAndMulWithClamp(),
    WrongSiluClampedAfter(),
    VllmGeluAndMulDispatch(),
    FieldRopeKernelArgs(),
    WrongIsNeoxInverted(),
    UnknownApis(),
    VllmTritonReshapeAndCache(),
    WrongMinusOneIsLastSlot(),
    Gemma3ConfigRope(),
]
